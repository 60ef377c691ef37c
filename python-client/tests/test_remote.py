"""Stores in object storage (docs/REMOTE.md), read through the daemon from a real
S3 server (SeaweedFS on loopback): datasets and loaders over s3:// give the very
bytes of the local store, for every sampler, with resume and mixtures; a remote
store is read-only; the server's refusals reach the user with its code and
message; the disk cache survives the daemon."""

import os
import subprocess

import numpy as np
import pytest

from conftest import restore_connection, start_daemon, stop_daemon, tool_binary
from loaderx import ZrecordError
from loaderx._conn import default as default_conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_numpy

BUCKET = "zr-test"
SAMPLERS = ("sequential", "iid", "cyclic", "cyclic-lx157")


def push(s3, local, url, env=None):
    tool = tool_binary()
    if not tool:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    r = subprocess.run([tool, "push", str(local), url], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, **(env or s3.env())))
    assert r.returncode == 0, r.stderr


@pytest.fixture
def s3env(s3, monkeypatch):
    """The S3 variables of the admin identity, as a user's shell would have them."""
    s3.make_bucket(BUCKET)
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(k, raising=False)
    return s3


@pytest.fixture
def stores(s3env, tmp_path, request):
    """A dense zstd store, a ragged raw one and a dense zstd_dict one, local and pushed."""
    rng = np.random.default_rng(7)
    prefix = f"s3://{BUCKET}/{request.node.name[:40]}"
    dense = rng.integers(0, 1 << 16, (1500, 24), dtype=np.uint16)
    d = DenseDataset(str(tmp_path / "dense"), dtype="<u2", item_shape=(24,), codec="zstd")
    d.append(dense)
    d.close()
    rec = [rng.standard_normal(int(n)).astype(np.float32) for n in rng.integers(1, 300, 700)]
    r = RaggedDataset(str(tmp_path / "ragged"), dtype="<f4", ndim=1, codec="raw")
    r.append(rec)
    r.close()
    from_numpy(str(tmp_path / "dict"), np.tile(np.arange(64, dtype=np.uint8), (900, 1)) +
               rng.integers(0, 3, (900, 64), dtype=np.uint8), codec="zstd_dict")
    out = {}
    for name in ("dense", "ragged", "dict"):
        push(s3env, tmp_path / name, f"{prefix}/{name}")
        out[name] = (str(tmp_path / name), f"{prefix}/{name}")
    return out


def batches(loader, n):
    out = []
    for _ in range(n):
        b = next(loader)
        out.append({k: ([np.array(x) for x in v] if isinstance(v, list) else np.array(v))
                    for k, v in b.items()})
    return out


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], list):
                assert len(x[k]) == len(y[k]) and all(np.array_equal(p, q)
                                                      for p, q in zip(x[k], y[k]))
            else:
                assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k])


def test_datasets_read_as_local(stores):
    for name, kind in (("dense", DenseDataset), ("dict", DenseDataset),
                       ("ragged", RaggedDataset)):
        local, url = stores[name]
        a, b = kind(local), kind(url)
        assert len(a) == len(b) and b.dtype == a.dtype and b.path == url
        assert not b.writable
        idx = np.random.default_rng(3).integers(0, len(a), 200)
        if kind is DenseDataset:
            assert np.array_equal(b[idx], a[idx])
            assert np.array_equal(b[:], a[:])
        else:
            assert all(np.array_equal(x, y) for x, y in zip(b[idx], a[idx]))
        a.close()
        b.close()


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_loader_batches_bit_for_bit(stores, sampler):
    """Every sampler, two streams (a dense and a zstd_dict store of other lengths are
    no set: each its own loader), resume from state_dict() at step 7."""
    for name in ("dense", "ragged"):
        local, url = stores[name]
        kind = DenseDataset if name == "dense" else RaggedDataset
        kw = dict(batch_size=32, sampler=sampler, seed=11)
        want = batches(DataLoader({"x": kind(local)}, **kw), 14)
        remote = DataLoader({"x": kind(url)}, **kw)
        got = batches(remote, 7)
        state = remote.state_dict()
        remote.close()
        again = DataLoader({"x": kind(url)}, **kw)
        again.load_state_dict(state)
        got += batches(again, 7)
        again.close()
        same(got, want)


def test_mixture_of_local_and_remote(stores):
    local, url = stores["dense"]
    dlocal, durl = stores["dict"]
    del dlocal, durl
    kw = dict(batch_size=16, seed=3)
    want = batches(DataLoader([({"x": DenseDataset(local)}, 2, "iid"),
                               ({"x": DenseDataset(local)}, 1, "cyclic")], **kw), 10)
    got = batches(DataLoader([({"x": DenseDataset(url)}, 2, "iid"),
                              ({"x": DenseDataset(local)}, 1, "cyclic")], **kw), 10)
    same(got, want)


def test_read_only_and_refusals(stores, s3env, monkeypatch):
    local, url = stores["dense"]
    ds = DenseDataset(url)
    with pytest.raises(ZrecordError) as e:
        ds.append(np.zeros((1, 24), np.uint16))
    assert e.value.name == "ZR_E_READONLY"
    with pytest.raises(ZrecordError) as e:
        DenseDataset(url.rsplit("/", 1)[0] + "/nothing")
    assert "404" in str(e.value) and "NoSuchKey" in str(e.value)
    with pytest.raises(ZrecordError) as e:
        DenseDataset("s3://zr-no-such-bucket/x")
    assert "NoSuchBucket" in str(e.value)
    with pytest.raises(ZrecordError) as e:
        DenseDataset("s3://Not_A_Bucket/x")
    assert "not a bucket name" in str(e.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(ZrecordError) as e:
        DenseDataset(url)
    assert "403" in str(e.value) and "SignatureDoesNotMatch" in str(e.value)
    # the open handle goes on reading: its credentials were accepted at its open
    assert np.array_equal(ds[[0, 1]], DenseDataset(local)[[0, 1]])


def test_tool_reads_remote(stores, s3env):
    local, url = stores["ragged"]
    tool = tool_binary()
    env = dict(os.environ)
    def run(*a):
        r = subprocess.run([tool, *a], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout
    assert run("info", url) .replace(url, "P") == run("info", local).replace(local, "P")
    assert run("cat", url, "0", "5") == run("cat", local, "0", "5")
    assert "0 bad" in run("verify", url)
    args = ("--sampler", "iid", "--seed", "2", "--batch", "8")
    assert run("batch", url, "--step", "4", "--values", *args) == \
        run("batch", local, "--step", "4", "--values", *args)
    assert run("where", url, "3", "--range", "0:50", *args) == \
        run("where", local, "3", "--range", "0:50", *args)


@pytest.mark.no_daemon
def test_disk_cache_survives_the_daemon(stores, tmp_path, monkeypatch):
    """A second daemon on the same disk cache reads every record without a fetch."""
    from loaderx import _conn
    local, url = stores["dense"]
    want = DenseDataset(local)[:]
    saved = _conn._default
    cache = tmp_path / "cache"
    fetched = []
    for run in range(2):
        d = tmp_path / f"run{run}"
        d.mkdir()
        proc, sock = start_daemon(str(d), f"--remote-cache-dir={cache}")
        try:
            _conn._default = None
            monkeypatch.setenv("ZRECORD_SOCKET", sock)
            ds = DenseDataset(url)
            assert np.array_equal(ds[:], want)
            st = default_conn().request("status")["remote"]
            fetched.append((st["fetched_bytes"], st["needed_bytes"], st["misses"], st["hits"]))
            ds.close()
        finally:
            restore_connection(None)
            assert stop_daemon(proc) == 0
    restore_connection(saved)
    assert fetched[0][0] > 0 and fetched[0][1] > 0
    assert fetched[1][0] == 0 and fetched[1][2] == 0 and fetched[1][3] >= len(want), fetched


def test_set_in_object_storage(s3env, tmp_path):
    """A multi-stream set pushed whole opens as one, its streams aligned, and a
    loader over it gives the local set's batches."""
    from loaderx.dataset import MSDataset
    root = tmp_path / "set"
    root.mkdir()
    rng = np.random.default_rng(5)
    x = rng.integers(0, 255, (300, 16), dtype=np.uint8)
    y = [rng.standard_normal(int(n)).astype(np.float32) for n in rng.integers(1, 40, 300)]
    for ds, recs in ((DenseDataset(str(root / "x"), dtype="u1", item_shape=(16,), codec="raw"), x),
                     (RaggedDataset(str(root / "y"), dtype="<f4", ndim=1, codec="zstd"), y)):
        ds.append(recs)
        ds.close()
    url = f"s3://{BUCKET}/sets/one"
    push(s3env, root, url)
    remote = MSDataset(url)
    assert remote.names == ["x", "y"] and len(remote) == 300
    assert np.array_equal(remote["x"][:], x)
    kw = dict(batch_size=20, sampler="cyclic", seed=9)
    same(batches(DataLoader(remote, **kw), 8), batches(DataLoader(MSDataset(str(root)), **kw), 8))
    tool = tool_binary()
    r = subprocess.run([tool, "info", url], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "set of 2 streams, length 300" in r.stdout, r.stderr
    only = MSDataset(url, names=["y"])
    assert only.names == ["y"]


@pytest.mark.no_daemon
def test_closed_mirrors_leave_within_the_budget(stores, tmp_path, monkeypatch):
    """A store read whole and closed stays on disk (the next open reads it), until
    another store's open needs the room: mirrors nobody has open go first."""
    from loaderx import _conn
    dense_local, dense_url = stores["dense"]
    ragged_local, ragged_url = stores["ragged"]
    saved = _conn._default
    cache = tmp_path / "cache"
    d = tmp_path / "d"
    d.mkdir()
    # room for about one of the two stores' records
    proc, sock = start_daemon(str(d), f"--remote-cache-dir={cache}", "--remote-cache=80K")
    try:
        _conn._default = None
        monkeypatch.setenv("ZRECORD_SOCKET", sock)
        a = DenseDataset(dense_url)
        a[:]
        a.close()
        remote = cache / "remote"
        mirrors = lambda: sorted(p.name for s in remote.iterdir() for p in s.iterdir())  # noqa
        assert len(mirrors()) == 1
        b = RaggedDataset(ragged_url)
        b[np.arange(len(b))]
        assert len(mirrors()) == 1      # the closed one made room
        b.close()
    finally:
        restore_connection(saved)
        assert stop_daemon(proc) == 0
