"""Every index form against numpy on the same data (dense, ragged, raw records)."""

import numpy as np
import pytest

from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy
from loaderx.zrecord import Zrecord

N = 23
DATA = np.arange(N * 6, dtype=np.float64).reshape(N, 2, 3) * 1.5
SEQS = [np.arange(k % 5 + 1, dtype=np.int16) * (k + 1) for k in range(N)]
MASK = (np.arange(N) % 3) == 1

KEYS = [
    0, 5, -1, -N, N - 1, np.int64(7), np.uint8(3),
    slice(None), slice(2, 9), slice(None, None, 3), slice(-5, None), slice(10, 2, -2),
    slice(100, 200), slice(None, None, -1),
    [0, 5, 2], [4, 4, 4], [], np.array([1, -2, 3]), np.array([22, 0], dtype=np.uint64),
    MASK, list(MASK),
    (0, 5, 2), (1, -1), (),
]


def _expected(key):
    if isinstance(key, tuple):
        return DATA[list(key)] if key else DATA[:0]
    if isinstance(key, list) and not key:
        return DATA[:0]
    return DATA[key]


@pytest.fixture
def dense():
    from_numpy("d", DATA, codec="raw")
    return DenseDataset("d")


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_dense_index_forms(dense, key):
    got = dense[key]
    exp = _expected(key)
    assert got.shape == exp.shape and got.dtype == exp.dtype
    np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_ragged_index_forms(key):
    from_iterator("r", SEQS, np.int16)
    rs = RaggedDataset("r")
    got = rs[key]
    idx = np.arange(N)
    sel = idx[list(key)] if isinstance(key, tuple) else (idx[key] if not (isinstance(key, list) and not key) else [])
    if np.ndim(sel) == 0:
        np.testing.assert_array_equal(got, SEQS[int(sel)])
        return
    assert isinstance(got, list) and len(got) == len(sel)
    for g, i in zip(got, sel):
        assert g.dtype == np.int16
        np.testing.assert_array_equal(g, SEQS[int(i)])


def test_raw_records():
    z = Zrecord("raw")
    recs = [bytes([k]) * (k * 3) for k in range(12)]
    assert z.append(recs) == 0
    assert len(z) == 12
    assert z[5] == recs[5] and z[0] == b""
    assert z[1, 11, -1] == [recs[1], recs[11], recs[11]]
    assert z[2:5] == recs[2:5]
    z.close()
    assert Zrecord("raw")[7] == recs[7]


def test_large_read_spans_pieces(monkeypatch):
    from loaderx import _store
    monkeypatch.setattr(_store, "READ_PIECE_BYTES", 4096)
    big = np.arange(3000 * 10, dtype=np.int32).reshape(3000, 10)
    from_numpy("big", big)
    ds = DenseDataset("big")
    idx = np.random.default_rng(0).integers(0, 3000, 2500)
    np.testing.assert_array_equal(ds[idx], big[idx])


def test_read_results_survive_later_reads(dense):
    a = dense[0, 1, 2]
    keep = a.copy()
    for _ in range(3):
        dense[5:20]
    np.testing.assert_array_equal(a, keep)
    assert a.flags.writeable


def test_ragged_buffer_grows():
    seqs = [np.full(200_000 + k, k, dtype=np.int64) for k in range(6)]   # ~1.6 MB each
    from_iterator("long", seqs, np.int64, codec="raw")
    got = RaggedDataset("long")[:]
    assert [len(g) for g in got] == [len(s) for s in seqs]
    assert all((g == k).all() for k, g in enumerate(got))


def test_iterate_dataset(dense):
    rows = list(dense)
    assert len(rows) == N
    np.testing.assert_array_equal(np.stack(rows), DATA)
