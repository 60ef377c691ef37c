"""Gathers large enough that the daemon copies them with streaming stores
(daemon/util/copy.h: a READ's batch, or a loader's ring, of at least half the
largest cache) give the same bytes as small ones: ``ds[idx]`` in one pass, in
place with ``out=``, through the copy path, and a loader's batches. Records are
not a multiple of 16 bytes, so most of them start off the copy's alignment."""

import glob

import numpy as np
import pytest

from loaderx import _results
from loaderx.dataloader import INDEX_KEY, DataLoader
from loaderx.dataset import DenseDataset

REC = (256 << 10) + 24
LIMIT = 96 << 20                 # larger thresholds would make this test heavy


def stream_min():
    """The daemon's threshold, computed as daemon/util/copy.c does: half the
    largest cache of cpu0 in sysfs, else 16 MiB (sysconf is not read here: a
    machine whose sysfs says nothing gets the larger sizes below, which stream
    as well)."""
    best = 0
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        with open(path) as f:
            text = f.read().strip()
        mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best // 2 if best else 16 << 20


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    m = stream_min()
    if m > LIMIT:
        pytest.skip(f"the streaming threshold here is {m >> 20} MiB: too large for a test")
    batch = -(-m // REC) + 3                       # one batch past the threshold
    n = batch + 17
    src = np.random.default_rng(11).integers(0, 256, size=(n, REC), dtype=np.uint8)
    path = str(tmp_path_factory.mktemp("streamed") / "d")
    ds = DenseDataset(path, dtype=np.uint8, item_shape=(REC,), codec="raw")
    for s in range(0, n, 16):
        ds.append(src[s:s + 16])
    return ds, src, batch


def test_read_past_the_threshold(big):
    ds, src, batch = big
    rng = np.random.default_rng(5)
    idx = rng.integers(0, len(src), size=batch)
    assert batch * REC >= stream_min()
    a = ds[idx]
    assert np.array_equal(a, src[idx])
    again = rng.integers(0, len(src), size=batch)
    out = ds.read(again, out=a)                    # in place: one pass into a result
    assert out is a and np.array_equal(a, src[again])
    old = _results.ONE_PASS_MIN
    _results.ONE_PASS_MIN = 1 << 62                # the copy path: the shared buffer
    try:
        assert np.array_equal(ds[idx], src[idx])
    finally:
        _results.ONE_PASS_MIN = old


def test_loader_ring_past_the_threshold(big):
    """Batches of just over a quarter of the threshold: each alone would not
    stream, a ring of four of them does."""
    ds, src, _ = big
    per = -(-stream_min() // 4 // REC) + 1        # four slots alone pass the threshold
    with DataLoader({"x": ds}, batch_size=per, sampler="iid", seed=9, prefetch=4,
                    with_indices=True) as dl:
        for _ in range(12):
            b = next(dl)
            assert np.array_equal(b["x"], src[b[INDEX_KEY]])
