"""Control memory (PROTOCOL.md section 10, "Control memory"): a dense or packed
loader's batches announced, and its slots released, through a page shared with
the daemon instead of BATCH and RELEASE frames. The batches and their order are
those of the socket path, resume holds, the path is taken (STATUS), and a client
that writes garbage or lies into the page ends only its own loader."""

import mmap
import os
import struct

import numpy as np
import pytest

from loaderx import _conn, _ctlring, _store
from loaderx._errors import ZrecordError
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator

pytestmark = pytest.mark.skipif(not _ctlring.usable(), reason="control memory: x86-64 only")


def status():
    return _conn.default().request("status")


def ctl_batches():
    return int(status().get("ctl_batches", 0))


def take(dl, k):
    it = iter(dl)
    return [{key: np.array(v) for key, v in next(it).items()} for _ in range(k)]


def socket_path(monkeypatch, fn):
    monkeypatch.setenv("LOADERX_CTLRING", "0")
    try:
        return fn()
    finally:
        monkeypatch.delenv("LOADERX_CTLRING")


@pytest.fixture
def small(workdir):
    rng = np.random.default_rng(7)
    arr = rng.integers(0, 256, (1000, 8, 8, 3), dtype=np.uint8)
    ds = DenseDataset("small", dtype=np.uint8, item_shape=(8, 8, 3), codec="raw")
    ds.append(arr)
    ds.close()
    return arr


@pytest.mark.parametrize("sampler", ["sequential", "iid", "cyclic"])
def test_batches_and_order_as_the_socket_path(small, monkeypatch, sampler):
    def run():
        with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler=sampler, seed=3,
                        num_workers=0, with_indices=False) as dl:
            return take(dl, 300), dl._session.ctl is not None
    before = ctl_batches()
    got, on = run()
    assert on
    assert ctl_batches() - before >= 300          # the path was taken
    before = ctl_batches()
    want, on = socket_path(monkeypatch, run)
    assert not on and ctl_batches() == before
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g["x"], w["x"])
    if sampler == "sequential":
        np.testing.assert_array_equal(got[0]["x"], small[:16])
        np.testing.assert_array_equal(got[61]["x"], small[976:992])


def test_resume_and_stride(small, monkeypatch):
    with DataLoader({"x": DenseDataset("small")}, batch_size=8, sampler="iid", seed=11,
                    num_workers=0) as dl:
        ref = take(dl, 60)
    with DataLoader({"x": DenseDataset("small")}, batch_size=8, sampler="iid", seed=11,
                    num_workers=0) as dl:
        take(dl, 25)
        state = dl.state_dict()
    with DataLoader({"x": DenseDataset("small")}, batch_size=8, sampler="iid", seed=11,
                    num_workers=0) as dl:
        dl.load_state_dict(state)
        assert dl._session.ctl is not None
        rest = take(dl, 35)
    for g, w in zip(rest, ref[25:]):
        np.testing.assert_array_equal(g["x"], w["x"])
    # every other step, from step 1: the reference's odd batches
    with DataLoader({"x": DenseDataset("small")}, batch_size=8, sampler="iid", seed=11,
                    num_workers=0, start_step=1, step_stride=2) as dl:
        assert dl._session.ctl is not None
        odd = take(dl, 20)
    for g, w in zip(odd, ref[1::2]):
        np.testing.assert_array_equal(g["x"], w["x"])


def test_held_batches_stay_intact_and_stats(small):
    """Views live while referenced (the slot is not refilled under them), are
    released when garbage, and stats() sees the waits told through the page."""
    with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="sequential",
                    seed=0, num_workers=0, prefetch_size=4) as dl:
        it = iter(dl)
        kept = [next(it) for _ in range(3)]          # 3 of 4 slots held
        copies = [np.array(b["x"]) for b in kept]
        for _ in range(200):
            next(it)
        for b, c in zip(kept, copies):
            np.testing.assert_array_equal(b["x"], c)
        assert len(dl._session.held) >= 3
        del kept, b
        for _ in range(20):
            next(it)
        assert len(dl._session.held) <= 2
        st = dl.stats()
        assert st["local"]["batches"] == 223
        assert st["batches"] >= 223


def test_group_members_and_a_member_that_leaves(small):
    """Two same-seed loaders share their group's rings (RING events on the
    socket, batches in control memory) and gather each step about once, the
    releases of the member that fills nothing taken too; when the first leaves,
    its ring retires under the other, which goes on exactly."""
    def make():
        return DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="iid", seed=21,
                          num_workers=0)
    with make() as dl:
        want = take(dl, 120)
    a, b = make(), make()
    ia, ib = iter(a), iter(b)
    assert a._session.ctl is not None and b._session.ctl is not None
    got_b = []
    g0 = int(status()["gathers"])
    for k in range(40):
        np.testing.assert_array_equal(np.array(next(ia)["x"]), want[k]["x"])
        got_b.append(np.array(next(ib)["x"]))
    gathers = int(status()["gathers"]) - g0
    assert gathers < 1.5 * 40, gathers              # each member on its own: 80
    a.close()
    for k in range(80):
        got_b.append(np.array(next(ib)["x"]))
    for g, w in zip(got_b, want):
        np.testing.assert_array_equal(g, w["x"])
    b.close()


def test_transform_threads(small):
    """Worker threads (not processes) read through the page too."""
    with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="iid", seed=4,
                    num_workers=2, transform=lambda b: {"x": b["x"].astype(np.int16)}) as dl:
        got = take(dl, 100)
        assert dl._session.ctl is not None
    with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="iid", seed=4,
                    num_workers=0) as dl:
        want = take(dl, 100)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g["x"], w["x"].astype(np.int16))


def test_packed(workdir):
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 1000, int(rng.integers(1, 40)), dtype=np.int32) for _ in range(300)]
    from_iterator("docs", docs, np.int32, codec="raw")

    def run():
        with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=4, sampler="cyclic",
                        seed=2, pack={"tokens": 32}, num_workers=0) as dl:
            return take(dl, 100), dl._session.ctl is not None
    before = ctl_batches()
    got, on = run()
    assert on and ctl_batches() - before >= 100
    os.environ["LOADERX_CTLRING"] = "0"
    try:
        want, on = run()
    finally:
        del os.environ["LOADERX_CTLRING"]
    assert not on
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            np.testing.assert_array_equal(g[k], w[k])


def test_not_asked_keeps_the_socket_path(small):
    """A loader with indices (its BATCH says more than where) is not given it."""
    with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="iid", seed=1,
                    num_workers=0, with_indices=True) as dl:
        b = next(iter(dl))
        assert dl._session.ctl is None
        assert "__index__" in b


# ---- a hostile client ------------------------------------------------------------

def raw_open(conn, handle, prefetch=4):
    r = conn.request("loader_open", {"streams": [{"handle": handle}], "sampler": "sequential",
                                     "batch_size": 16, "seed": 0, "start_step": 0,
                                     "prefetch": prefetch, "ctlring": True})
    fds = list(r["_fds"])
    assert len(fds) == 2 and r["ctlring"] == {"bytes": 4096, "entries": 64}
    os.close(fds[0])
    mm = mmap.mmap(fds[1], 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fds[1])
    return r, mm


def published(mm, k, timeout=10.0):
    """Waits until the daemon announced k batches (WAKEs are not asked for)."""
    import time
    end = time.monotonic() + timeout
    while struct.unpack_from("<Q", mm, 64)[0] < k:
        assert time.monotonic() < end, "the daemon announced nothing"
        time.sleep(0.001)


def end_event(conn, loader):
    while True:
        msg, fds = conn.wait_event(loader)
        for fd in fds:
            os.close(fd)
        if msg["kind"] == "loader_end":
            return msg


LIES = {
    # a count far ahead of what was taken
    "count-ahead": lambda mm: struct.pack_into("<Q", mm, 192, 1 << 40),
    # one more than a queue ahead
    "count-over-queue": lambda mm: struct.pack_into("<Q", mm, 192, 65),
    # a release of a slot it does not hold
    "slot-not-held": lambda mm: (struct.pack_into("<IIQQ", mm, 1536, 0xffff, 3, 0, 0),
                                 struct.pack_into("<Q", mm, 192, 1)),
    # the same slot twice
    "slot-twice": lambda mm: (struct.pack_into("<IIQQ", mm, 1536, *struct.unpack_from(
                                  "<II", mm, 512 + 8), 0, 0),
                              struct.pack_into("<IIQQ", mm, 1568, *struct.unpack_from(
                                  "<II", mm, 512 + 8), 0, 0),
                              struct.pack_into("<Q", mm, 192, 2)),
    # garbage over the whole page, the daemon's words too
    "garbage": lambda mm: mm.__setitem__(slice(0, 4096), os.urandom(4096)),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_client_ends_only_its_loader(small, lie):
    good = DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="sequential",
                      seed=0, num_workers=0)
    it = iter(good)
    first = np.array(next(it)["x"])
    faults = int(status().get("ctl_faults", 0))
    conn = _conn.Connection()
    try:
        hd = _store.Handle("small", conn=conn)     # kept: its handle lives with it
        h = hd.handle
        r, mm = raw_open(conn, h)
        published(mm, 2)
        LIES[lie](mm)
        # whatever it wrote, the doorbell makes the daemon read it
        conn.send_notification("doorbell", {"loader": r["loader"]})
        if lie == "garbage":
            # a count that happens to be in bounds and name held slots is not a lie
            # the daemon can see; one out of bounds (almost every draw) is
            released = struct.unpack_from("<Q", mm, 192)[0]
            if released <= 64:
                return
        end = end_event(conn, r["loader"])
        assert end["name"] == "ZR_E_PROTO", end
        assert "control memory" in end["message"]
        # a doorbell after the end does nothing, and the connection lives on
        conn.send_notification("doorbell", {"loader": r["loader"]})
        conn.request("loader_close", {"loader": r["loader"]})
        assert int(conn.request("status").get("ctl_faults", 0)) == faults + 1
        mm.close()
    finally:
        conn.close()
    # the other client's loader goes on, exactly
    for _ in range(100):
        next(it)
    with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="sequential",
                    seed=0, num_workers=0) as dl:
        np.testing.assert_array_equal(np.array(next(iter(dl))["x"]), first)
    good.close()


def test_daemon_without_the_feature(small, monkeypatch):
    """A client that does not ask (an older one, or libzrc's) gets no second
    descriptor and BATCH frames, and one that asks a daemon without the feature
    is not given it: the loader works either way."""
    conn = _conn.Connection()
    try:
        hd = _store.Handle("small", conn=conn)     # kept: its handle lives with it
        h = hd.handle
        r = conn.request("loader_open", {"streams": [{"handle": h}], "sampler": "sequential",
                                         "batch_size": 16, "seed": 0, "start_step": 0})
        assert len(r["_fds"]) == 1 and "ctlring" not in r
        for fd in r["_fds"]:
            os.close(fd)
        msg, fds = conn.wait_event(r["loader"])
        assert msg["kind"] == "batch" and msg["step"] == 0
        conn.request("loader_close", {"loader": r["loader"]})
    finally:
        conn.close()
    monkeypatch.setattr(_conn, "WANTED_FEATURES",
                        [f for f in _conn.WANTED_FEATURES if f != "ctlring"])
    # a DataLoader whose connection has no "ctlring" in force reads BATCH frames
    saved, _conn._default = _conn._default, None
    try:
        with DataLoader({"x": DenseDataset("small")}, batch_size=16, sampler="sequential",
                        seed=0, num_workers=0) as dl:
            got = take(dl, 70)
            assert dl._session.ctl is None
        np.testing.assert_array_equal(got[0]["x"], small[:16])
        np.testing.assert_array_equal(got[62]["x"][:8], small[992:1000])
    finally:
        if _conn._default is not None:
            _conn._default.close()
        _conn._default = saved
    conn = _conn.Connection()
    try:
        assert not conn.has_feature("ctlring")
        hd = _store.Handle("small", conn=conn)     # kept: its handle lives with it
        h = hd.handle
        with pytest.raises(ZrecordError):
            conn.request("loader_open", {"streams": [{"handle": h}], "sampler": "sequential",
                                         "batch_size": 16, "seed": 0, "start_step": 0,
                                         "ctlring": True})
    finally:
        conn.close()


def test_group_members_of_large_slots_gather_once(workdir):
    """Same-seed members whose slots are large (the client does not look at the
    page before it blocks) still gather each step about once."""
    rng = np.random.default_rng(1)
    ds = DenseDataset("big", dtype=np.uint8, item_shape=(256, 1024), codec="raw")
    ds.append(rng.integers(0, 256, (256, 256, 1024), dtype=np.uint8))
    ds.close()

    def make():
        return DataLoader({"x": DenseDataset("big")}, batch_size=8, sampler="iid", seed=5,
                          num_workers=0)
    a, b = make(), make()
    ia, ib = iter(a), iter(b)
    g0 = int(status()["gathers"])
    for k in range(60):
        xa, xb = next(ia)["x"], next(ib)["x"]
        assert np.array_equal(xa, xb)
        del xa, xb
    gathers = int(status()["gathers"]) - g0
    a.close()
    b.close()
    assert gathers < 1.5 * 60, gathers
