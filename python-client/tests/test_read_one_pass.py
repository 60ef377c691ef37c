"""One-pass reads (loaderx/_results.py): a large ``ds[idx]`` is written once, by the
daemon, into a pool buffer the returned array maps privately. The results are
writable and never change when later reads reuse the memory; the pool reuses a
buffer only when the last array over it is gone (and never one a forked child
still maps); ``out=`` checks what it is given; a client that dies holding
results leaves the daemon's descriptors and shared memory where they were."""

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loaderx import _conn, _results
from loaderx.dataset import DenseDataset, RaggedDataset

from conftest import in_forked_child

N, REC = 512, 4096 + 24          # a record size that is not a page multiple
B = 96                           # 395 KiB per result: above ONE_PASS_MIN


@pytest.fixture(autouse=True)
def empty_pool(request):
    """Each test starts with no free buffer in the default connection's pool."""
    if "no_daemon" not in request.keywords:
        p = _results.pool(_conn.default())
        p._drain()
        p.clear()


@pytest.fixture
def store():
    src = np.random.default_rng(3).integers(0, 256, size=(N, REC), dtype=np.uint8)
    ds = DenseDataset("d", dtype=np.uint8, item_shape=(REC,), codec="raw")
    ds.append(src)
    return ds, src


def batch_indices(k):
    return np.random.default_rng(100 + k).integers(0, N, size=B)


def buffer_opens(monkeypatch):
    """Counts BUFFER_OPEN requests on the default connection."""
    conn = _conn.default()
    calls = []
    real = conn.request

    def counted(kind, *a, **kw):
        if kind == "buffer_open":
            calls.append(kind)
        return real(kind, *a, **kw)

    monkeypatch.setattr(conn, "request", counted)
    return calls


def test_result_is_the_daemons_buffer_and_writable(store):
    ds, src = store
    idx = batch_indices(0)
    a = ds[idx]
    assert B * REC >= _results.ONE_PASS_MIN
    assert isinstance(a.base, np.ndarray) and not a.flags.owndata, "expected a mapped result"
    assert a.flags.writeable and a.flags.c_contiguous and a.shape == (B, REC)
    assert np.array_equal(a, src[idx])
    a[:] = 7                                  # copy on write: the store is untouched
    assert np.array_equal(ds[idx], src[idx])


def test_hundred_results_survive_reuse(store, monkeypatch):
    ds, src = store
    opens = buffer_opens(monkeypatch)
    held = [(k, ds[batch_indices(k)]) for k in range(100)]
    assert len(opens) == 100                  # all alive: nothing to reuse
    held[10][1][:5] = 0xEE                    # a user's write stays in its own result
    for k in range(100, 300):                 # reads that reuse freed buffers
        r = ds[batch_indices(k)]
        assert np.array_equal(r, src[batch_indices(k)])
        del r
    assert len(opens) <= 101, "the freed buffer was not reused"
    for k, a in held:
        want = src[batch_indices(k)].copy()
        if k == 10:
            want[:5] = 0xEE
        assert np.array_equal(a, want), f"result {k} changed under its owner"


def test_reused_buffer_drops_what_the_user_wrote(store, monkeypatch):
    ds, src = store
    opens = buffer_opens(monkeypatch)
    a = ds[batch_indices(0)]
    a[::7] = 0xEE                             # private copies of some pages, not all
    a[-1, -1] = 0xEE                          # and the last byte
    del a
    b = ds[batch_indices(1)]                  # the same buffer, the same mapping
    assert len(opens) == 1, "the freed buffer was not reused"
    assert np.array_equal(b, src[batch_indices(1)])
    b[:] = 0x11                               # every page written
    del b
    c = ds[batch_indices(2)]
    assert len(opens) == 1 and np.array_equal(c, src[batch_indices(2)])


@pytest.mark.no_daemon
def test_page_map_entries_that_are_the_users():
    """Which pages a reused buffer must drop, from their page-map entries (bit 63
    present, 62 swapped or migrating, 61 the file's page): the user's private copies,
    present or swapped out; never the memfd's own pages, nor pages not mapped."""
    def entry(present=False, swapped=False, file=False):
        return struct.pack("<Q", present << 63 | swapped << 62 | file << 61 | 12345)
    pages = [entry(),                              # 10: never touched
             entry(present=True, file=True),       # 11: the memfd's page, read
             entry(present=True),                  # 12: a copy the user wrote
             entry(swapped=True),                  # 13: such a copy, swapped out
             entry(present=True),                  # 14: another copy
             entry(swapped=True, file=True),       # 15: the memfd's page, migrating
             entry(present=True)]                  # 16: a copy at the end
    assert _results._own_runs(b"".join(pages), 10) == [(12, 15), (16, 17)]


def test_views_keep_the_buffer(store, monkeypatch):
    ds, src = store
    idx = batch_indices(1)
    view = ds[idx][40:50, 100:]               # the result itself is gone, a view lives
    for k in range(20):
        ds[batch_indices(200 + k)]
    assert np.array_equal(view, src[idx][40:50, 100:])


def test_pool_budget_closes_what_it_does_not_keep(store, monkeypatch):
    ds, _ = store
    monkeypatch.setenv("LOADERX_READ_POOL", "0")
    opens = buffer_opens(monkeypatch)
    for k in range(5):
        ds[batch_indices(k)]
    assert len(opens) == 5                    # a pool of 0 bytes keeps nothing
    p = _results.pool(_conn.default())
    p._drain()
    assert p.free_bytes == 0


def test_pool_budget_from_the_daemon(own_daemon, workdir, monkeypatch):
    own_daemon("--read-pool=0")
    monkeypatch.delenv("LOADERX_READ_POOL", raising=False)
    conn = _conn.default()
    st = conn.request("status")
    assert conn.limits["read_pool_max"] == 0 == st["budgets"]["read_pool"]["bytes"]
    assert st["budgets"]["read_pool"]["source"] == "setting"
    src = np.arange(N * REC, dtype=np.uint8).reshape(N, REC)
    ds = DenseDataset("d", dtype=np.uint8, item_shape=(REC,), codec="raw")
    ds.append(src)
    opens = buffer_opens(monkeypatch)
    for k in range(3):
        assert np.array_equal(ds[np.arange(k, k + B)], src[k:k + B])
    assert len(opens) == 3                    # the daemon's budget of 0: nothing kept
    monkeypatch.setenv("LOADERX_READ_POOL", str(64 << 20))
    for k in range(3):
        ds[np.arange(k, k + B)]
    assert len(opens) == 3                    # the client's own setting wins: reused


def test_ragged_one_pass(monkeypatch):
    rng = np.random.default_rng(5)
    recs = [rng.integers(0, 1 << 20, size=(int(rng.integers(1, 64)), 33)).astype(np.int32)
            for _ in range(600)]
    ds = RaggedDataset("r", dtype=np.int32, ndim=2, codec="zstd")
    ds.append(recs)
    idx = list(range(0, 600, 2))
    first = ds[idx]                           # sizes the next read
    second = ds[idx]
    assert not second[0].flags.owndata and second[0].base is not None
    assert all(s.flags.writeable for s in second)
    for a, b in ((first, second),):
        for j, i in enumerate(idx):
            assert np.array_equal(a[j], recs[i]) and np.array_equal(b[j], recs[i])
    second[3][:] = -1
    del first
    for _ in range(5):
        ds[idx]
    for j, i in enumerate(idx):
        if j != 3:
            assert np.array_equal(second[j], recs[i])
    assert (second[3] == -1).all()


def test_out_checks_and_reads(store):
    ds, src = store
    idx = batch_indices(2)
    out = np.empty((B, REC), np.uint8)
    assert ds.read(idx, out=out) is out and np.array_equal(out, src[idx])
    one = np.empty(REC, np.uint8)
    assert np.array_equal(ds.read(7, out=one), src[7])
    with pytest.raises(ValueError, match="dtype"):
        ds.read(idx, out=np.empty((B, REC), np.int8))
    with pytest.raises(ValueError, match="shape"):
        ds.read(idx, out=np.empty((B - 1, REC), np.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        ds.read(idx, out=np.empty((B, 2 * REC), np.uint8)[:, ::2])
    ro = np.empty((B, REC), np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ds.read(idx, out=ro)
    with pytest.raises(TypeError, match="numpy array"):
        ds.read(idx, out=bytearray(B * REC))
    r = RaggedDataset("r", dtype=np.uint8, ndim=1, codec="raw")
    r.append([np.zeros(3, np.uint8)])
    with pytest.raises(TypeError, match="own shape"):
        r.read([0], out=np.empty(3, np.uint8))


def reads_into(monkeypatch):
    """The buffer handle each READ on the default connection names."""
    conn = _conn.default()
    named = []
    real = conn.request

    def spy(kind, fields=None, *a, **kw):
        if kind == "read":
            named.append(fields["buffer"])
        return real(kind, fields, *a, **kw)

    monkeypatch.setattr(conn, "request", spy)
    return named


def test_out_a_result_is_written_in_place(store, monkeypatch):
    ds, src = store
    out = ds[batch_indices(0)]
    out[3:9] = 0xEE                           # the user's writes: dropped by the read
    view = out[10:20]                         # a view sees the new records too
    buf = out.base.base._buf if out.base.base is not None else None
    opens = buffer_opens(monkeypatch)
    named = reads_into(monkeypatch)
    for k in range(1, 4):
        assert ds.read(batch_indices(k), out=out) is out
        assert np.array_equal(out, src[batch_indices(k)])
        assert np.array_equal(view, src[batch_indices(k)][10:20])
    assert opens == [] and len(named) == 3, "out= should READ into the result's own buffer"
    if buf is not None:
        assert set(named) == {buf.handle}
    del out, view
    assert np.array_equal(ds[batch_indices(5)], src[batch_indices(5)])   # the buffer is clean


def test_out_part_of_a_result(monkeypatch):
    src = np.random.default_rng(4).integers(0, 256, size=(300, 4096), dtype=np.uint8)
    ds = DenseDataset("p", dtype=np.uint8, item_shape=(4096,), codec="raw")
    ds.append(src)
    big = ds[np.arange(200)]                  # page-sized records
    whole = big.reshape(-1)
    named = reads_into(monkeypatch)
    # whole pages of the result: in place; a region that starts inside a page: copied
    assert np.array_equal(ds.read([7, 8], out=big[1:3]), src[[7, 8]])
    odd = whole[100:100 + 2 * 4096].reshape(2, 4096)
    before = whole[:100].copy()
    assert np.array_equal(ds.read([9, 10], out=odd), src[[9, 10]])
    assert np.array_equal(whole[:100], before), "bytes outside out changed"
    assert np.array_equal(big[3:], src[3:200])
    assert len(named) == 2 and named[0] != named[1], "only the page-aligned out is in place"


@contextlib.contextmanager
def child_checks_later(check):
    """Forks a child that runs check() once the body of the with block is done
    (the parent has read again meanwhile); fails if check() failed there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(w)
            os.read(r, 1)
            check()
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(r)
    try:
        yield
    finally:
        os.write(w, b"x")
        os.close(w)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's check failed"


def test_out_a_result_a_child_maps_is_copied_into(store, monkeypatch):
    ds, src = store
    out = ds[batch_indices(0)]

    def child():
        assert np.array_equal(out, src[batch_indices(0)]), "the child's array changed"

    with child_checks_later(child):
        named = reads_into(monkeypatch)
        ds.read(batch_indices(1), out=out)
        assert np.array_equal(out, src[batch_indices(1)])
        assert named and named[0] != out.base.base._buf.handle


def test_forked_child_keeps_its_results(store):
    ds, src = store
    idx = batch_indices(3)
    held = ds[idx]

    def child():
        assert np.array_equal(held, src[idx]), "the child's result changed"

    with child_checks_later(child):
        del held                              # the parent reuses the buffers
        for k in range(10):
            assert np.array_equal(ds[batch_indices(50 + k)], src[batch_indices(50 + k)])


def test_copy_path_when_the_daemon_refuses(own_daemon, workdir):
    own_daemon("--max-shm=1M")
    src = np.arange(N * REC, dtype=np.uint8).reshape(N, REC)
    ds = DenseDataset("d", dtype=np.uint8, item_shape=(REC,), codec="raw")
    ds.append(src)
    held = [ds[np.arange(k, k + 200)] for k in range(3)]   # 800 KiB each, over 1M together
    for k, a in enumerate(held):
        assert np.array_equal(a, src[k:k + 200])
    assert any(a.flags.owndata for a in held), "the pool should have run out"


def daemon_pid(conn):
    cred = conn._fs.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return struct.unpack("3i", cred)[0]


@pytest.mark.no_daemon
def test_dead_client_leaks_nothing(own_daemon, workdir):
    sock = own_daemon()
    conn = _conn.default()
    pid = daemon_pid(conn)
    src = np.random.default_rng(9).integers(0, 256, size=(N, REC), dtype=np.uint8)
    ds = DenseDataset("d", dtype=np.uint8, item_shape=(REC,), codec="raw")
    ds.append(src)                            # open throughout: the store's files too

    def shm_and_fds():
        st = conn.request("status")
        return st["shm_bytes"], len(os.listdir(f"/proc/{pid}/fd"))

    base = shm_and_fds()
    script = textwrap.dedent("""
        import os, sys, numpy as np
        from loaderx.dataset import DenseDataset
        ds = DenseDataset("d")
        held = [ds[np.arange(k, k + 96)] for k in range(100)]
        assert not held[0].flags.owndata
        sys.stdout.write("holding\\n"); sys.stdout.flush()
        os.read(0, 1)
    """)
    env = dict(os.environ, ZRECORD_SOCKET=sock,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout.readline() == b"holding\n"
        shm, fds = shm_and_fds()
        assert shm >= base[0] + 100 * 96 * REC    # the child's results are daemon buffers
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # The daemon sees the connection end when the kernel closes the socket: one
    # STATUS after the close is answered after the daemon handled it (one loop).
    for _ in range(1000):
        if shm_and_fds() == base:
            break
    assert shm_and_fds() == base
