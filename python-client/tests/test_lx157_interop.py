"""Interop with PyPI loaderx 1.5.7 itself, installed in a venv of its own (its import
name is ours): $ZR_LX157_PYTHON names that venv's python (scripts/loaderx157-suite.sh
makes it). Skipped without it, failed instead with ZR_LX157_REQUIRED=1.

- stores loaderx 1.5.7 wrote (tests/compat/make_loaderx_stores.py) open in this
  client: dense ones of every codec read record by record and take appends; its
  ragged ones of every codec (records of differing ndim, shapes in
  schema.msgpack) and its byte stores without schema of every codec read bit-exact,
  take appends, deletes and a compaction in place, and loaderx 1.5.7 then reads
  each back bit-exact (and appends, which this client reads); both convert to
  zrecord's layout and back;
- this client's byte stores (Zrecord) open in loaderx 1.5.7's Zrecord;
- a DataLoader over loaderx 1.5.7's ragged store gives the batches loaderx 1.5.7's
  own DataLoader gives (tests/compat/lx157_ragged_batches.py), sequential and
  cyclic, at steps 0, 1 and a far step;
- its ragged schema with malformed or lying shapes is a clear error, never a
  crash or a misread;
- this client's dense stores of every codec open in loaderx 1.5.7, which reads
  them record by record and appends (tests/compat/check_loaderx_stores.py), and
  this client reads loaderx's appends;
- a DataLoader's cyclic (mode 2) and sequential (mode 0) batches equal loaderx
  1.5.7's Sampler's at steps 0, 1 and a far step (tests/compat/lx157_batches.py),
  and so do loaderx.sampler.Sampler's;
- a store closed here, its files cut to its data (docs/FORMAT.md, "Apparent
  size"), is read and appended to by loaderx 1.5.7, appended to here and cut
  again, and read back there bit for bit.
Record contents are tests/compat/lxdata.py's formulas.
"""

import json
import os
import subprocess
import sys

import msgpack

import numpy as np
import pytest

from loaderx.dataloader import INDEX_KEY, DataLoader
from loaderx._errors import ZrecordError
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.sampler import Sampler
from loaderx.utils import convert, from_numpy
from loaderx.zrecord import Zrecord

from conftest import REPO

COMPAT = os.path.join(REPO, "tests", "compat")
sys.path.insert(0, COMPAT)
import lxdata as D  # noqa: E402


def lx_python():
    py = os.environ.get("ZR_LX157_PYTHON")
    if py and os.access(py, os.X_OK):
        return py
    if os.environ.get("ZR_LX157_REQUIRED") == "1":
        pytest.fail("ZR_LX157_REQUIRED=1 but $ZR_LX157_PYTHON names no python")
    pytest.skip("set ZR_LX157_PYTHON to the python of a venv with loaderx==1.5.7 "
                "(scripts/loaderx157-suite.sh)")


def lx_run(script, *args):
    """Runs a tests/compat script under loaderx 1.5.7; its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ZRECORD_SOCKET")}
    r = subprocess.run([lx_python(), os.path.join(COMPAT, script), *args], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{script} {args}: {r.stderr[-2000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def lx_stores(tmp_path_factory):
    out = tmp_path_factory.mktemp("lx157-stores")
    lx_run("make_loaderx_stores.py", str(out))
    return out


@pytest.mark.parametrize("codec", D.CODECS)
def test_its_dense_stores_open_here(lx_stores, codec):
    path = os.path.join(lx_stores, "dense-" + codec)
    ds = DenseDataset(path)
    assert len(ds) == D.DENSE_N and ds.codec == codec and ds.item_shape == D.DENSE_SHAPE
    np.testing.assert_array_equal(ds[:], D.dense_array(range(D.DENSE_N)))
    idx = [2999, 0, 1500, 7, 7]
    np.testing.assert_array_equal(ds.__getitems__(idx), D.dense_array(idx))
    new = list(range(D.DENSE_N, D.DENSE_N + 10))
    assert ds.append(D.dense_array(new)) == D.DENSE_N
    np.testing.assert_array_equal(ds[D.DENSE_N:], D.dense_array(new))
    ds.close()


def test_its_deleted_store_reads_as_swap_last(lx_stores):
    ds = DenseDataset(os.path.join(lx_stores, "dense-deleted"))
    np.testing.assert_array_equal(ds[:], D.dense_array(D.ids_of(f"lx:{D.DENSE_N}")))
    ds.close()


def copy_of(lx_stores, name, workdir):
    """A private copy of a fixture store (tests change their stores), sparse as the
    original: loaderx 1.5.7 makes chunk 0 a 4 GiB sparse file, which a plain copy
    would fill."""
    dst = os.path.join(workdir, name)
    subprocess.run(["cp", "-a", "--sparse=always", os.path.join(lx_stores, name), dst],
                   check=True)
    return dst


def ragged_expect(ds, ids):
    assert len(ds) == len(ids)
    got = ds[np.arange(len(ids))[::-1]][::-1]      # backwards, across the table
    for i, (g, want) in enumerate(zip(got, ids)):
        w = D.ragged_record(want)
        assert g.shape == w.shape and g.dtype == w.dtype, (i, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("codec", D.CODECS)
def test_its_ragged_stores_work_here(lx_stores, workdir, codec):
    path = copy_of(lx_stores, "ragged-" + codec, workdir)
    ds = RaggedDataset(path)
    assert ds.schema["layout"] == "loaderx-1.5.7" and ds.ndim is None and ds.codec == codec
    ragged_expect(ds, list(range(D.RAGGED_N)))
    assert {r.ndim for r in ds[:5]} == {1, 2, 3}       # records of differing ndim
    new = list(range(D.RAGGED_N, D.RAGGED_N + D.APPEND_RAGGED))
    assert ds.append([D.ragged_record(i) for i in new]) == D.RAGGED_N
    ds.delete(np.array(D.DELETE))                       # a repeat included
    ds.compact()
    assert ds.stats()["reclaimable"] == 0
    assert ds._store.verify()["ok"]
    ids = D.ids_of(f"zr-ragged:{D.RAGGED_N}")
    ragged_expect(ds, ids)
    ds.close()
    with RaggedDataset(path) as again:                  # still loaderx's layout
        assert again.schema["layout"] == "loaderx-1.5.7"
    lx_run("check_loaderx_stores.py", "ragged", path, f"zr-ragged:{D.RAGGED_N}")
    ds = RaggedDataset(path)                            # and loaderx's appends read here
    ragged_expect(ds, ids + list(range(D.LX_APPEND_FIRST, D.LX_APPEND_FIRST + D.LX_APPEND)))
    ds.close()


def bytes_expect(z, ids):
    assert len(z) == len(ids)
    assert z[:] == [D.bytes_record(i) for i in ids]
    lens = z.lengths(np.arange(len(ids)))
    assert lens.tolist() == [len(D.bytes_record(i)) for i in ids]


@pytest.mark.parametrize("codec", D.CODECS)
def test_its_byte_stores_work_here(lx_stores, workdir, codec):
    path = copy_of(lx_stores, "bytes-" + codec, workdir)
    with Zrecord(path) as z:
        assert z.codec == codec and z._ds.schema["layout"] == "bytes"
        bytes_expect(z, list(range(D.BYTES_N)))
        new = [D.bytes_record(i) for i in range(D.BYTES_N, D.BYTES_N + D.APPEND_BYTES)]
        flat = np.frombuffer(b"".join(new), dtype=np.uint8)
        offs = np.cumsum([0] + [len(b) for b in new[:-1]]).astype(np.uint64)
        assert z.append(flat, offs) == D.BYTES_N
        z.delete(D.DELETE_BYTES)
        z.compact()
        ids = D.ids_of(f"zr-bytes:{D.BYTES_N}")
        bytes_expect(z, ids)
    assert not os.path.exists(os.path.join(path, "schema.msgpack"))
    lx_run("check_loaderx_stores.py", "bytes", path, f"zr-bytes:{D.BYTES_N}")
    with Zrecord(path) as z:
        bytes_expect(z, ids + list(range(D.LX_APPEND_FIRST, D.LX_APPEND_FIRST + D.LX_APPEND)))


def test_our_byte_stores_open_there(workdir):
    path = os.path.join(workdir, "ours-bytes")
    with Zrecord(path, "zstd") as z:
        z.append([D.bytes_record(i) for i in range(50)])
    assert not os.path.exists(os.path.join(path, "schema.msgpack"))
    lx_run("check_loaderx_stores.py", "bytes", path, "plain:50")
    with Zrecord(path) as z:
        bytes_expect(z, list(range(50)) + list(range(D.LX_APPEND_FIRST,
                                                      D.LX_APPEND_FIRST + D.LX_APPEND)))


def test_its_ragged_store_converts_both_ways(lx_stores, workdir):
    src = os.path.join(lx_stores, "ragged-zstd_dict")
    ours = os.path.join(workdir, "ours")
    assert convert(src, ours) == D.RAGGED_N
    ds = RaggedDataset(ours)
    assert "layout" not in ds.schema and ds.ndim is None and ds.has_dict()
    ragged_expect(ds, list(range(D.RAGGED_N)))
    ds.append([D.ragged_record(i) for i in range(D.RAGGED_N, D.RAGGED_N + 3)])
    ds.close()
    back = os.path.join(workdir, "back")
    assert convert(ours, back, to="loaderx-1.5.7") == D.RAGGED_N + 3
    lx_run("check_loaderx_stores.py", "ragged", back, f"plain:{D.RAGGED_N + 3}")
    with pytest.raises(ValueError, match="already in"):
        convert(src, os.path.join(workdir, "again"), to="loaderx-1.5.7")


def lx_batches(path, b, mode, seed, steps):
    out = lx_run("lx157_ragged_batches.py", path, str(b), str(mode), str(seed),
                 *[str(s) for s in steps])
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("mode", [0, 2])
def test_loader_over_its_ragged_store_equals_its_loader(lx_stores, loader_feature, mode):
    path = os.path.join(lx_stores, "ragged-zstd")
    b, seed, steps = 16, 7, [0, 1, 123_456_789_012]
    want = lx_batches(path, b, mode, seed, steps)
    ds = RaggedDataset(path)
    for s, w in zip(steps, want):
        loader = DataLoader({"x": ds}, batch_size=b, mode=mode, seed=seed, start_step=s)
        got = next(loader)["x"]
        assert [[list(r.shape), r.reshape(-1).tolist()] for r in got] == w, (mode, s)
        loader.close()
    ds.close()


def rewrite_schema(path, change):
    with open(os.path.join(path, "schema.msgpack"), "rb") as f:
        s = msgpack.unpackb(f.read(), raw=False)
    change(s)
    with open(os.path.join(path, "schema.msgpack"), "wb") as f:
        f.write(msgpack.packb(s, use_bin_type=True))


@pytest.mark.parametrize("what,change,match", [
    ("no dims", lambda s: s["shapes"].__setitem__(3, []), "dimensions"),
    ("33 dims", lambda s: s["shapes"].__setitem__(3, [1] * 33), "dimensions"),
    ("negative", lambda s: s["shapes"].__setitem__(3, [-2, 4]), "integer"),
    ("a string", lambda s: s["shapes"].__setitem__(3, "2x4"), "array"),
    ("not a list", lambda s: s.__setitem__("shapes", 7), "array"),
    ("too large", lambda s: s["shapes"].__setitem__(3, [2 ** 40, 2 ** 40]), "larger"),
    ("too many", lambda s: s["shapes"].append([1]), "shapes"),
])
def test_its_malformed_shapes_are_refused(lx_stores, workdir, what, change, match):
    path = copy_of(lx_stores, "ragged-raw", workdir)
    rewrite_schema(path, change)
    with pytest.raises((ValueError, ZrecordError), match=match):
        RaggedDataset(path)


def test_its_lying_shapes_are_caught(lx_stores, workdir):
    path = copy_of(lx_stores, "ragged-zstd", workdir)
    # record 2 is (3, 3, 3): a schema that says (3, 3) for it lies about its size;
    # records 0 and 1 swap shapes of different sizes
    def change(s):
        s["shapes"][2] = [3, 3]
        s["shapes"][0], s["shapes"][1] = s["shapes"][1], s["shapes"][0]
    rewrite_schema(path, change)
    ds = RaggedDataset(path)
    for i in (0, 1, 2):
        with pytest.raises(ZrecordError, match=f"record {i} is .* bytes, its shape"):
            ds[i]
    np.testing.assert_array_equal(ds[3], D.ragged_record(3))
    v = ds._store.verify()
    assert not v["ok"] and v["bad"] == 3 and sorted(v["bad_indices"]) == [0, 1, 2]
    ds.close()


@pytest.mark.parametrize("codec", D.CODECS)
def test_our_dense_stores_open_there(workdir, codec):
    ids = list(range(500))
    path = os.path.join(workdir, "ours-" + codec)
    assert from_numpy(path, D.dense_array(ids), codec=codec) == len(ids)
    lx_run("check_loaderx_stores.py", "dense", path, "plain:500")
    ds = DenseDataset(path)          # and loaderx's appends read here
    assert len(ds) == 500 + D.LX_APPEND
    np.testing.assert_array_equal(
        ds[500:], D.dense_array(range(D.LX_APPEND_FIRST, D.LX_APPEND_FIRST + D.LX_APPEND)))
    ds.close()


@pytest.mark.parametrize("mode", [0, 2])
@pytest.mark.parametrize("n,b,seed", [(1000, 32, 42), (97, 10, 7), (5000, 256, 2 ** 63 + 5)])
def test_batches_equal_its_sampler(workdir, loader_feature, mode, n, b, seed):
    far = 123_456_789_012
    steps = [0, 1, far]
    want = [json.loads(line) for line in
            lx_run("lx157_batches.py", *[f"{n} {b} {mode} {seed} {s}" for s in steps]).splitlines()]
    from_numpy("x", np.arange(n, dtype=np.int64))
    ds = DenseDataset("x")
    for s, w in zip(steps, want):
        loader = DataLoader({"x": ds}, batch_size=b, mode=mode, seed=seed, start_step=s,
                            with_indices=True)
        got = next(loader)
        assert got[INDEX_KEY].tolist() == w, (mode, s)
        assert np.array(got["x"]).tolist() == w           # the records are those indices
        loader.close()
        ours = Sampler(n, b, mode, seed)
        ours.seek(s)
        assert ours.next().tolist() == w


def file_sizes(path):
    return {f: os.stat(os.path.join(path, f)).st_size for f in os.listdir(path)}


def lx_digest(path):
    """sha256 of every record of a dense store, as loaderx 1.5.7 reads them."""
    code = ("import hashlib, sys, numpy as np\n"
            "from loaderx.dataset import DenseDataset\n"
            "with DenseDataset(sys.argv[1]) as ds:\n"
            "    a = ds[np.arange(len(ds))]\n"
            "    print(len(ds), hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ZRECORD_SOCKET")}
    r = subprocess.run([lx_python(), "-c", code, path], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    n, digest = r.stdout.split()
    return int(n), digest


def test_closed_stores_hold_their_data_and_interchange(workdir):
    """A closed store's files end at their data (docs/FORMAT.md, "Apparent size"):
    loaderx 1.5.7 reads and appends to such files, and this client to its."""
    import hashlib
    path = os.path.join(workdir, "cut")
    assert from_numpy(path, D.dense_array(range(500)), codec="zstd") == 500
    sizes = file_sizes(path)
    header = open(os.path.join(path, "meta.zr"), "rb").read()
    assert sizes["0.chunk"] == int.from_bytes(header[10:14], "little")   # tail_offset
    assert sizes["0.loc"] == 500 * 16
    assert sum(sizes.values()) < 1 << 20, sizes                          # not 8 GiB
    lx_run("check_loaderx_stores.py", "dense", path, "plain:500")       # + its appends
    ds = DenseDataset(path)
    n = len(ds)
    assert n == 500 + D.LX_APPEND
    ds.append(D.dense_array(range(900, 910)))
    got = hashlib.sha256(np.ascontiguousarray(ds[:]).tobytes()).hexdigest()
    ds.close()
    assert sum(file_sizes(path).values()) < 1 << 20
    assert lx_digest(path) == (n + 10, got)                              # the same bytes
