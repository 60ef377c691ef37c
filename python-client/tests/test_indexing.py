"""Every index form against numpy on the same data (dense, ragged, raw records)."""

import numpy as np

from loaderx import ZrecordError
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
    recs = [bytes([k]) * (k * 3 + 1) for k in range(12)]
    assert z.append(recs) == 0
    assert len(z) == 12
    assert z[5] == recs[5] and z[0] == b"\0"
    assert z[1, 11, -1] == [recs[1], recs[11], recs[11]]
    assert z[2:5] == recs[2:5]
    with pytest.raises(ZrecordError) as ei:     # loaderx 1.5.7 stores no empty record
        z.append([b"x", b""])
    assert ei.value.code == -4 and len(z) == 12
    z.close()
    assert Zrecord("raw")[7] == recs[7]


def test_raw_records_lx157_api():
    """loaderx 1.5.7's byte-record API: append(flat, offsets), lengths, gather at
    explicit offsets into any buffer, delete with repeats, stats, sync, and its
    error codes."""
    blobs = [bytes([i % 251]) * (10 + i * 7) for i in range(30)]
    flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    lens = np.array([len(b) for b in blobs], dtype=np.uint32)
    offs = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.uint64)
    with Zrecord("lx", "raw") as z:
        assert z.codec == "raw"
        assert z.append(flat, offs) == 0
        assert z.append(flat[:5], np.zeros(1, np.uint64)) == 30
        lengths = z.lengths(np.arange(31))
        assert lengths.dtype == np.uint32 and lengths[:30].tolist() == lens.tolist()
        assert lengths[30] == 5
        out = np.zeros(int(lens.sum()) + 64, dtype=np.uint8)
        where = (offs[::-1] + 64).astype(np.uint64)             # any layout
        z.gather(np.arange(30)[::-1], out, where)
        for k, i in enumerate(range(29, -1, -1)):
            assert out[int(where[k]):int(where[k]) + lens[i]].tobytes() == blobs[i]
        with pytest.raises(ZrecordError) as ei:
            z.gather([0], np.zeros(3, np.uint8), [0])
        assert ei.value.code == -6
        with pytest.raises(ZrecordError) as ei:
            z.lengths([31])
        assert ei.value.code == -3
        with pytest.raises(ValueError):
            z.gather([0], np.zeros((8, 8), np.uint8)[:, ::2], [0])  # not C-contiguous
        z.delete([30, 30, 0])
        assert len(z) == 29 and z[0] == blobs[29]
        st = z.stats()
        assert st["records"] == 29 and st["reclaimable"] == st["chunk_bytes"] - st["live_bytes"]
        z.sync()
        assert not z.has_dict()
    with pytest.raises(ValueError):
        Zrecord("lx", "lz4")
    assert Zrecord("lx", "zstd").codec == "raw"       # an existing store keeps its codec


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
