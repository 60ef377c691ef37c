"""Interop with PyPI loaderx 1.5.7 itself, installed in a venv of its own (its import
name is ours): $ZR_LX157_PYTHON names that venv's python (scripts/loaderx157-suite.sh
makes it). Skipped without it, failed instead with ZR_LX157_REQUIRED=1.

- stores loaderx 1.5.7 wrote (tests/compat/make_loaderx_stores.py) open in this
  client: dense ones of every codec read record by record and take appends; its
  ragged layout is refused with a message that says what it is;
- this client's dense stores of every codec open in loaderx 1.5.7, which reads
  them record by record and appends (tests/compat/check_loaderx_stores.py), and
  this client reads loaderx's appends;
- a DataLoader's cyclic (mode 2) and sequential (mode 0) batches equal loaderx
  1.5.7's Sampler's at steps 0, 1 and a far step (tests/compat/lx157_batches.py),
  and so do loaderx.sampler.Sampler's.
Record contents are tests/compat/lxdata.py's formulas.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from loaderx.dataloader import INDEX_KEY, DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.sampler import Sampler
from loaderx.utils import from_numpy

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


def test_its_ragged_layout_is_named(lx_stores):
    with pytest.raises(ValueError, match="loaderx 1.5.7 ragged store"):
        RaggedDataset(os.path.join(lx_stores, "ragged-zstd"))


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
