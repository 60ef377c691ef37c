"""Reads whose copy out of the shared buffer is split over the copy pool
(_store.copy_bytes, _store._copy_records) return the same bytes as the copy on
the calling thread alone, as new writable arrays, in a forked child too. These
tests take the copy path (a result too small for the one-pass path, or one the
pool cannot serve, and every ``out=``) by raising the one-pass threshold;
test_read_one_pass.py tests the other."""

import os

import numpy as np
import pytest

from loaderx import _results, _store
from loaderx.dataset import DenseDataset, RaggedDataset

from conftest import in_forked_child

REC = 100_003            # odd record size: no read splits evenly in slabs or pages
N = 100                  # 10 MB of records in all: above the default threshold


def source(n=N, rec=REC, seed=7):
    return np.random.default_rng(seed).integers(0, 256, size=(n, rec), dtype=np.uint8)


def read_with(ds, idx, threads):
    old = _store.COPY_THREADS
    _store.COPY_THREADS = threads
    try:
        return ds[idx]
    finally:
        _store.COPY_THREADS = old


def check_new_array(a, shape, dtype):
    assert isinstance(a, np.ndarray)
    assert a.shape == shape and a.dtype == dtype
    assert a.flags.writeable and a.flags.owndata and a.flags.c_contiguous
    assert a.base is None


@pytest.fixture(autouse=True)
def copy_path(monkeypatch):
    monkeypatch.setattr(_results, "ONE_PASS_MIN", 1 << 62)


@pytest.fixture
def pool_runs(monkeypatch):
    """The slab count of every job the copy pool ran (read it after the calls)."""
    runs = []
    real = _store._CopyPool.run

    def counted(self, fn, n):
        runs.append(n)
        return real(self, fn, n)

    monkeypatch.setattr(_store._CopyPool, "run", counted)
    return runs


@pytest.fixture
def small_slabs(monkeypatch):
    """Split from 256 KiB in slabs of 3 pages, so that small test reads take the
    pool's path with many uneven slabs."""
    monkeypatch.setattr(_store, "PARALLEL_MIN_BYTES", 256 << 10)
    monkeypatch.setattr(_store, "SLAB_MIN_BYTES", 3 * 4096)
    monkeypatch.setattr(_store, "SLAB_MAX_BYTES", 3 * 4096)
    monkeypatch.setattr(_store, "RAGGED_PARALLEL_MIN_RECORD", 1)


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 4097, 3 * 4096 + 1, (1 << 20) + 17, 5_000_003])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_copy_bytes_covers_every_byte(small_slabs, n, threads, monkeypatch):
    monkeypatch.setattr(_store, "COPY_THREADS", threads)
    src = np.random.default_rng(n).integers(0, 256, size=n, dtype=np.uint8)
    dst = np.full(n, 0xAA, np.uint8) if n else np.empty(0, np.uint8)
    _store.copy_bytes(dst, src)
    assert np.array_equal(dst, src)
    per, count = _store._slabs(n, threads)
    assert per * count >= n and (count == 1 or per * (count - 1) < n)


def test_default_threshold_splits_large_reads_only():
    assert _store.PARALLEL_MIN_BYTES >= 1 << 20
    assert _store._slabs(_store.PARALLEL_MIN_BYTES - 1, 8)[1] == 1
    per, count = _store._slabs(64 << 20, 2)
    assert count > 1 and per % 4096 == 0 and per * count >= 64 << 20
    assert _store._slabs(64 << 20, 1) == (64 << 20, 1)


@pytest.mark.parametrize("idx,split", [
    ([], False),                                  # 0-length
    ([3], False),                                 # one record, below the threshold
    (list(range(2)), False),                      # below the default threshold
    (list(range(N)), True),                       # every record: 10 MB, above it
    ([5] * 95, True),                             # the same record repeated
    ([99, 0, 99, 41, 0, 2, 2, 2, 63] * 11, True),  # repeats, unsorted, 99 records
    ([-1, -100, 17], False),                      # negative indices
])
def test_dense_parallel_equals_single_thread(idx, split, pool_runs):
    src = source()
    ds = DenseDataset("d", dtype=np.uint8, item_shape=(REC,), codec="raw")
    ds.append(src)
    one = read_with(ds, idx, 1)
    assert pool_runs == []
    many = read_with(ds, idx, 4)
    assert bool(pool_runs) == split
    auto = read_with(ds, idx, None)
    want = src[np.array(idx, dtype=np.int64)] if idx else src[:0]
    for a in (one, many, auto):
        check_new_array(a, (len(idx), REC), np.dtype(np.uint8))
        assert a.tobytes() == want.tobytes()
    many[...] = 0                           # writable, and not shared with the next read
    again = read_with(ds, idx, 4)
    assert again.tobytes() == want.tobytes()


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_dense_small_slabs_odd_dtype(small_slabs, codec):
    # int16 records of 3 x 7 x 1193 (odd shape, 50106 bytes), the copy split in
    # 12 KiB slabs that cut records (and elements) anywhere
    rng = np.random.default_rng(3)
    src = rng.integers(-30000, 30000, size=(40, 3, 7, 1193), dtype=np.int16)
    ds = DenseDataset("d16", dtype=np.int16, item_shape=(3, 7, 1193), codec=codec)
    ds.append(src)
    for idx in ([], [0], list(range(40)), [39] * 25, list(rng.integers(0, 40, 33))):
        one = read_with(ds, idx, 1)
        for t in (2, 5):
            many = read_with(ds, idx, t)
            check_new_array(many, (len(idx), 3, 7, 1193), np.dtype(np.int16))
            assert many.tobytes() == one.tobytes()
            assert np.array_equal(many, src[np.array(idx, dtype=np.int64)])


def test_dense_scalar_records_and_big_pieces(small_slabs, monkeypatch):
    # float64 scalars; pieces smaller than the read so every piece is copied on its own
    monkeypatch.setattr(_store, "READ_PIECE_BYTES", 300_001)
    src = np.random.default_rng(5).standard_normal(200_000)
    ds = DenseDataset("f", dtype=np.float64, item_shape=(), codec="raw")
    ds.append(src)
    idx = np.random.default_rng(6).integers(0, len(src), 150_001)
    one = read_with(ds, idx, 1)
    many = read_with(ds, idx, 3)
    check_new_array(many, (150_001,), np.dtype(np.float64))
    assert many.tobytes() == one.tobytes() == src[idx].tobytes()


def test_ragged_parallel_equals_single_thread(small_slabs):
    rng = np.random.default_rng(11)
    recs = [rng.integers(0, 256, size=(int(h), int(w)), dtype=np.uint8)
            for h, w in zip(rng.integers(1, 300, 60), rng.integers(1, 700, 60))]
    recs[7] = np.zeros((1, 1), np.uint8)           # a record of one byte
    ds = RaggedDataset("r", dtype=np.uint8, codec="raw", ndim=2)
    ds.append(recs)
    for idx in ([], [7], list(range(60)), [3] * 20, [59, 7, 0, 7, 31, 31]):
        one = read_with(ds, idx, 1)
        many = read_with(ds, idx, 4)
        assert len(one) == len(many) == len(idx)
        for j, i in enumerate(idx):
            check_new_array(many[j], recs[i].shape, np.dtype(np.uint8))
            assert many[j].tobytes() == one[j].tobytes() == recs[i].tobytes()
        if many:
            many[0][...] = 1 if many[0].size else 0  # writable, its own memory
            assert read_with(ds, idx, 4)[0].tobytes() == recs[idx[0]].tobytes()


def test_ragged_large_records_default_threshold(pool_runs):
    rng = np.random.default_rng(12)
    recs = [rng.standard_normal((int(n), 3)).astype(np.float32)
            for n in rng.integers(20_000, 40_000, 40)]
    ds = RaggedDataset("rf", dtype=np.float32, codec="raw", ndim=2)
    ds.append(recs)
    idx = list(range(40)) + [0, 39, 5]      # ~15 MB
    one = read_with(ds, idx, 1)
    assert pool_runs == []
    many = read_with(ds, idx, 4)
    assert len(pool_runs) == 1
    for j, i in enumerate(idx):
        check_new_array(many[j], recs[i].shape, np.dtype(np.float32))
        assert many[j].tobytes() == one[j].tobytes() == recs[i].tobytes()


def test_a_failing_slab_raises_and_the_pool_goes_on(small_slabs, monkeypatch):
    monkeypatch.setattr(_store, "COPY_THREADS", 3)
    src = np.arange(1 << 20, dtype=np.uint8)
    with pytest.raises(ValueError):
        _store.copy_bytes(np.empty(1 << 20, np.uint8), src[:-5])   # shorter source
    dst = np.empty(1 << 20, np.uint8)
    _store.copy_bytes(dst, src)
    assert np.array_equal(dst, src)


def test_forked_child_after_the_parent_used_the_pool(small_slabs, monkeypatch):
    monkeypatch.setattr(_store, "COPY_THREADS", 3)
    src = source()
    ds = DenseDataset("d", dtype=np.uint8, item_shape=(REC,), codec="raw")
    ds.append(src)
    idx = [9, 1, 1, 70, 33] * 10
    assert read_with(ds, idx, 3).tobytes() == src[idx].tobytes()
    parent_pool = _store._pool
    assert parent_pool is not None and parent_pool.pid == os.getpid()

    def child():   # the parent's pool has no threads here; a fresh one is made
        out = {"inherited": _store._pool is not None}
        a = ds[idx]
        b = ds[list(range(N))]
        rag = RaggedDataset("rc", dtype=np.uint8, codec="raw", ndim=1)
        rag.append(list(src[:12]))
        c = rag[[11, 0, 11]]
        out["ok"] = (a.tobytes() == src[idx].tobytes() and b.tobytes() == src.tobytes()
                     and all(x.tobytes() == src[i].tobytes() for x, i in zip(c, [11, 0, 11])))
        out["writable"] = bool(a.flags.writeable and a.flags.owndata)
        p = _store._pool
        out["own_pool"] = p is not None and p is not parent_pool and p.pid == os.getpid()
        return out

    out, status = in_forked_child(child)
    assert "error" not in out, out.get("error")
    assert os.waitstatus_to_exitcode(status) == 0
    assert out == {"inherited": False, "ok": True, "writable": True, "own_pool": True}
    # the parent's pool still works after the fork
    assert _store._pool is parent_pool
    assert read_with(ds, list(range(N)), 3).tobytes() == src.tobytes()


@pytest.mark.no_daemon
def test_sigint_as_the_copy_lock_is_taken():
    """Ctrl-C during a copy the calling thread takes part in: the SIGINT taken
    the moment it gets its job's lock. Through threading.Condition.__enter__ (a
    Python function) the KeyboardInterrupt left the lock held, and the job's
    cancel() then waited for it forever. Now the interrupt comes out of the read
    and the pool goes on (run in a child, bounded; the SIGINT placed by
    interrupt_writer.sigint_at_lock)."""
    import subprocess
    import sys
    import textwrap
    from conftest import PKG
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"""
        import sys
        sys.path.insert(0, {PKG!r})
        sys.path.insert(0, {here!r})
        import interrupt_writer as iw
        from loaderx import _store
        plain = _store._Job

        class Job(plain):
            def __init__(self, fn, n):
                super().__init__(fn, n)
                iw.sigint_at_lock(self._cv._lock, "work")

        pool = _store._CopyPool(0)          # the calling thread alone: it takes the lock
        done = []
        _store._Job = Job
        try:
            pool.run(done.append, 4)
        except KeyboardInterrupt:
            print("interrupted", done, flush=True)
        _store._Job = plain
        pool.run(done.append, 4)
        print("then", done, flush=True)
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the read did not stop within 30 s of the SIGINT; stdout {out!r}, "
                    f"stderr:\n{err[-3000:]}")
    assert p.returncode == 0, (p.returncode, out, err[-3000:])
    assert out == "interrupted []\nthen [0, 1, 2, 3]\n", (out, err[-3000:])
