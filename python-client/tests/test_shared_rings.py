"""Rings shared by a loader group (PROTOCOL.md section 10): RING and RING_CLOSE
events, batches named by (ring, slot), RELEASE of (ring, slot); two identical
loaders in two processes read the same gathers, bit for bit."""

import gc
import inspect
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from loaderx import _conn
from loaderx._errors import ZrecordRuntimeError
from loaderx import _shm
from loaderx._session import Layout, LoaderSession
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy

from conftest import PKG

SLOT = 4096


# Descriptors, for leak checks in this process and the child. A memfd descriptor is
# accounted for if it belongs to an event still queued, or (before Python 3.13, whose
# mmap objects keep a duplicate of the descriptor they map) it is the one duplicate of
# a memfd mapped in the process. Every other memfd descriptor is a leak. (The child
# runs these two functions too.)
def fd_report(queued=()):
    import os, sys
    mapped = set()
    for line in open("/proc/self/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/memfd:"):
            mapped.add(int(parts[4]))
    per_inode, other = {}, 0
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + n)
            ino = os.stat("/proc/self/fd/" + n).st_ino
        except OSError:
            continue                    # the directory listing's own descriptor
        if not target.startswith("/memfd:"):
            other += 1
        elif int(n) not in queued:
            per_inode[ino] = per_inode.get(ino, 0) + 1
    dup = 1 if sys.version_info < (3, 13) else 0
    stray = sum(c if ino not in mapped else max(0, c - dup) for ino, c in per_inode.items())
    return {"other": other, "stray": stray}


def queued_fds(conn):
    return {fd for q in list(conn._events.values()) for _, fds in list(q) for fd in fds}


def memfd(nbytes, fill=None):
    fd = os.memfd_create("test-ring", os.MFD_CLOEXEC)
    os.ftruncate(fd, nbytes)
    if fill is not None:
        os.pwrite(fd, fill, 0)
    return fd


def fd_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


class _FakeConn:
    """What a LoaderSession uses of a connection to release slots."""

    def __init__(self):
        self.sent = []
        self.broken = None

    def send_notifications(self, next_msg, blocking=True):
        msg = next_msg()
        while msg is not None:
            self.sent.append(dict(msg))
            msg = next_msg()
        return True


def bare_session(slots=2, ring_id=7, layout=None):
    """A session of loader 3 whose own ring is ring_id, without a daemon."""
    conn = _FakeConn()
    mapped = _shm.MappedBuffer(memfd(slots * SLOT), slots * SLOT)
    return LoaderSession(conn, 3, ring_id, mapped, slots, SLOT, layout)


def ring_event(ring_id, slots, slot_bytes=SLOT, ring_bytes=None):
    return {"kind": "ring", "loader": 3, "ring": ring_id, "slots": slots,
            "slot_bytes": slot_bytes,
            "ring_bytes": slots * slot_bytes if ring_bytes is None else ring_bytes}


@pytest.mark.no_daemon
def test_ring_event_is_checked_and_its_fd_closed():
    session = bare_session()
    # ring_bytes is not slots * slot_bytes
    fd = memfd(4 * SLOT)
    with pytest.raises(ZrecordRuntimeError, match="ZR_E_PROTO|protocol"):
        session.add_ring(ring_event(8, 2, ring_bytes=3 * SLOT), [fd])
    assert not fd_open(fd)
    # a slot size other than the loader's
    fd = memfd(4 * SLOT)
    with pytest.raises(ZrecordRuntimeError, match="protocol"):
        session.add_ring(ring_event(8, 2, slot_bytes=2 * SLOT), [fd])
    assert not fd_open(fd)
    # a memfd shorter than ring_bytes
    fd = memfd(SLOT)
    with pytest.raises(ZrecordRuntimeError, match="holds 4096 bytes"):
        session.add_ring(ring_event(8, 2), [fd])
    assert not fd_open(fd)
    # no descriptor, two descriptors
    with pytest.raises(ZrecordRuntimeError, match="0 descriptors"):
        session.add_ring(ring_event(8, 2), [])
    fds = [memfd(2 * SLOT), memfd(2 * SLOT)]
    with pytest.raises(ZrecordRuntimeError, match="2 descriptors"):
        session.add_ring(ring_event(8, 2), fds)
    assert not any(fd_open(fd) for fd in fds)
    assert set(session.rings) == {7}
    # a good one: mapped, its descriptor closed
    fd = memfd(3 * SLOT)
    session.add_ring(ring_event(8, 3), [fd])
    assert not fd_open(fd)
    assert set(session.rings) == {7, 8} and session.rings[8][1] == 3
    assert session.rings[8][0].nbytes == 3 * SLOT
    # the same ring twice
    fd = memfd(3 * SLOT)
    with pytest.raises(ZrecordRuntimeError, match="already"):
        session.add_ring(ring_event(8, 3), [fd])
    assert not fd_open(fd)
    # RING_CLOSE: of the loader's own ring, of an unknown ring, of a known one
    with pytest.raises(ZrecordRuntimeError, match="RING_CLOSE"):
        session.close_ring({"kind": "ring_close", "loader": 3, "ring": 7})
    with pytest.raises(ZrecordRuntimeError, match="RING_CLOSE"):
        session.close_ring({"kind": "ring_close", "loader": 3, "ring": 9})
    session.close_ring({"kind": "ring_close", "loader": 3, "ring": 8})
    assert set(session.rings) == {7}


def releases(sent):
    """The releases sent, without the telemetry a release carries (wait_ns, taken_ns)."""
    return [{k: v for k, v in m.items() if k not in ("wait_ns", "taken_ns")} for m in sent]


@pytest.mark.no_daemon
def test_batch_from_a_group_ring_and_release_names_it():
    session = bare_session(slots=2, ring_id=7,
                    layout=Layout(("x",), ((np.dtype(np.int32), (2,), None),), 4, False))
    conn = session.conn
    # ring 8: 3 slots; slot 1 holds 4 int32 rows of 2 at region offset 64
    rows = np.arange(8, dtype=np.int32).reshape(4, 2)
    content = bytearray(3 * SLOT)
    content[SLOT + 64:SLOT + 64 + rows.nbytes] = rows.tobytes()
    session.add_ring(ring_event(8, 3), [memfd(3 * SLOT, bytes(content))])

    def batch_event(rid, slot, step, offset):
        return {"kind": "batch", "loader": 3, "ring": rid, "slot": slot, "step": step,
                "streams": [{"offset": offset, "bytes": rows.nbytes}]}

    b = session.batch(batch_event(8, 1, 0, SLOT + 64))
    np.testing.assert_array_equal(b["x"], rows)
    assert not b["x"].flags.writeable
    lo = session.rings[8][0].address
    assert lo <= b["x"].ctypes.data < lo + 3 * SLOT      # a view of ring 8, no copy
    assert session.held == {(8, 1)}
    # the same (ring, slot) again while held, an unknown ring, a slot out of range
    with pytest.raises(ZrecordRuntimeError, match="holds"):
        session.batch(batch_event(8, 1, 1, SLOT + 64))
    with pytest.raises(ZrecordRuntimeError, match="ring 9"):
        session.batch(batch_event(9, 0, 1, 64))
    with pytest.raises(ZrecordRuntimeError, match="slot 3"):
        session.batch(batch_event(8, 3, 1, 64))
    with pytest.raises(ZrecordRuntimeError, match="past the end"):
        session.batch(batch_event(8, 2, 1, 3 * SLOT - 8))
    # a batch in the loader's own ring, in the same loader: both held at once
    b2 = session.batch(batch_event(7, 0, 1, 64))
    assert session.held == {(8, 1), (7, 0)}
    # RING_CLOSE while a view is alive: the mapping stays until the view goes
    x = b["x"][1:3]
    del b
    gc.collect()
    assert {"kind": "release", "loader": 3, "ring": 8, "slot": 1} not in releases(conn.sent)
    session.close_ring({"kind": "ring_close", "loader": 3, "ring": 8})
    gc.collect()
    np.testing.assert_array_equal(x, rows[1:3])
    del x
    gc.collect()
    assert releases(conn.sent) == [{"kind": "release", "loader": 3, "ring": 8, "slot": 1}]
    assert session.held == {(7, 0)}
    del b2
    gc.collect()
    assert releases(conn.sent)[-1] == {"kind": "release", "loader": 3, "ring": 7, "slot": 0}
    # each release says when its batch was taken (telemetry)
    assert all(m["taken_ns"] > 0 for m in conn.sent)
    assert session.held == set()


@pytest.mark.no_daemon
def test_closed_loader_drops_queued_descriptors():
    """Events queued for a loader that is closed, or on a connection that closes,
    have their descriptors closed."""
    c = _conn.Connection.__new__(_conn.Connection)
    import collections
    c._lock = threading.Lock()
    c._cv = threading.Condition(c._lock)
    c._events = collections.defaultdict(collections.deque)
    c._replies = {}
    c._discard = set()
    c._pending = collections.deque()
    c._sweep = collections.deque()
    c.dead_loaders = set()
    c.faults = []
    fds = [memfd(SLOT) for _ in range(5)]
    c._dispatch(ring_event(8, 1), [fds[0]])
    c._dispatch({"kind": "ring_close", "loader": 3, "ring": 8}, [])
    c._dispatch(dict(ring_event(9, 1), loader=4), [fds[1]])
    assert [m["kind"] for m, _ in c._events[3]] == ["ring", "ring_close"]
    c.drop_events(3)                                      # LOADER_CLOSE answered
    assert not fd_open(fds[0]) and fd_open(fds[1])
    c._dispatch(ring_event(10, 1), [fds[2]])              # in flight: dropped on arrival
    assert not fd_open(fds[2]) and 3 not in c._events
    c.mark_dead(4)                                        # a finalizer closed loader 4
    assert fd_open(fds[1])
    c._dispatch({"kind": "fault", "code": 1100, "message": "x"}, [])
    assert not fd_open(fds[1])
    c._dispatch(dict(ring_event(11, 1), loader=5), [fds[3]])
    c._replies[12] = ({"kind": "ok", "id": 12}, [fds[4]])
    with c._lock:
        c._close_queued()                                 # the connection closes
    assert not fd_open(fds[3]) and not fd_open(fds[4])


# ------------------------------------------------------------------ daemon

N = 96
DATA = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
SEQS = [np.arange(k % 5 + 1, dtype=np.int32) + 100 * k for k in range(N)]
PARAMS = dict(batch_size=8, sampler="iid", seed=13, prefetch=4)

# The other process: a loader with PARAMS over the same stores, driven step by step
# over stdin ("next", "join <step>", "close", "end") so that the two loaders stay in
# step; it answers one JSON line per command.
CHILD = inspect.getsource(fd_report) + inspect.getsource(queued_fds) + textwrap.dedent("""
    import gc, json, os, sys
    import numpy as np
    from loaderx import _conn
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset, RaggedDataset
    params = json.loads(sys.argv[1])
    streams = {"x": DenseDataset("x"), "t": RaggedDataset("t")}
    conn = _conn.default()
    conn.request("status")
    fds0 = fd_report()
    def leaked():
        now = fd_report(queued_fds(conn))
        return {"other": now["other"] - fds0["other"], "stray": now["stray"]}
    loader = DataLoader(streams, **params)
    got, foreign, seen_rings = [], 0, 0
    def say(**kw):
        sys.stdout.write(json.dumps(kw) + "\\n")
        sys.stdout.flush()
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "next":
            r = loader._session
            b = next(loader)
            foreign += any(k[0] != r.own for k in r.held)
            seen_rings = max(seen_rings, len(r.rings))
            got.append({"x": np.array(b["x"]), "t": [np.array(v) for v in b["t"]]})
            del b
            say(step=loader.step)
        elif cmd[0] == "join":
            # a second identical loader joins at the group's step and closes unread:
            # the RING descriptors queued for it are closed
            extra = DataLoader(streams, start_step=int(cmd[1]), **params)
            conn.request("status")
            queued = [m["kind"] for m, _ in conn._events.get(extra._session.loader, ())]
            extra.close()
            third = DataLoader(streams, start_step=int(cmd[1]), **params)
            conn.request("status")
            queued += [m["kind"] for m, _ in conn._events.get(third._session.loader, ())]
            del third
            gc.collect()
            conn.request("status")
            conn.request("status")
            say(queued=queued, fds=leaked())
        elif cmd[0] == "close":
            loader.close()
            say(closed=True)
        elif cmd[0] == "end":
            rings = sorted(loader._session.rings) if loader._session else []
            own = loader._session.own if loader._session else None
            loader.close()
            del loader
            gc.collect()
            conn.request("status")
            np.savez(sys.argv[2], x=np.stack([g["x"] for g in got]),
                     t=np.concatenate([np.concatenate(g["t"]) for g in got]),
                     tl=np.array([len(r) for g in got for r in g["t"]]))
            say(fds=leaked(), foreign=foreign,
                seen_rings=seen_rings, rings=rings, own=own, steps=len(got))
            break
""")


class Child:
    def __init__(self, params, out):
        env = dict(os.environ)
        env["PYTHONPATH"] = PKG + os.pathsep + env.get("PYTHONPATH", "")
        self.p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(params), out],
                                  env=env, cwd=os.getcwd(), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pid = self.p.pid

    def ask(self, cmd, timeout=60):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = [None]

        def read():
            line[0] = self.p.stdout.readline()
        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if not line[0]:
            self.p.kill()
            _, err = self.p.communicate()
            pytest.fail(f"the child did not answer {cmd!r}:\n{err}")
        return json.loads(line[0])

    def finish(self):
        self.p.stdin.close()
        rc = self.p.wait(timeout=60)
        err = self.p.stderr.read()
        self.p.stdout.close()
        self.p.stderr.close()
        assert rc == 0, err


def snap(batch):
    return {"x": np.array(batch["x"]), "t": [np.array(v) for v in batch["t"]]}


def pack(got):
    return {"x": np.stack([g["x"] for g in got]),
            "t": np.concatenate([np.concatenate(g["t"]) for g in got]),
            "tl": np.array([len(r) for g in got for r in g["t"]])}


def assert_same(a, b):
    for k in ("x", "t", "tl"):
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k         # bit-identical


@pytest.fixture
def stores(workdir, loader_feature):
    from_numpy("x", DATA)
    from_iterator("t", SEQS, np.int32)
    return {"x": DenseDataset("x"), "t": RaggedDataset("t")}


@pytest.mark.parametrize("stopper", ["first", "second"])
def test_identical_loaders_in_two_processes_share_gathers(stores, conn, tmp_path, stopper):
    """Two identical loaders, this process's opened first and the child's second,
    run in step: same batches, bit for bit; the daemon gathers each step about once
    (STATUS: `shared`, `gathers`). Then one closes and the other runs on to the end,
    still bit-identical; neither process leaks a descriptor."""
    together, alone = 24, 40
    base = conn.request("status")
    fds0 = fd_report(queued_fds(conn))
    mine = DataLoader(stores, **PARAMS)
    b0 = snap(next(mine))                        # our loader is ahead: its ring is full
    child = Child(PARAMS, str(tmp_path / "child.npz"))
    try:
        got, foreign = [b0], [0]

        def take():
            b = next(mine)
            foreign[0] += any(key[0] != mine._session.own for key in mine._session.held)
            got.append(snap(b))

        for k in range(together):
            if k:
                take()
            assert child.ask("next") == {"step": k + 1}
            for b in got[-1:]:
                np.testing.assert_array_equal(b["x"], DATA[[int(r[0]) // 100 for r in b["t"]]])
        st = conn.request("status")
        pl = [p for p in st.get("per_loader", []) if p.get("pid") == child.pid or
              (p.get("pid") == os.getpid() and p.get("loader") == mine._session.loader)]
        assert len(pl) == 2, (os.getpid(), child.pid, st.get("per_loader"))
        assert sum(p["shared"] for p in pl) > 0, pl
        gathers = st["gathers"] - base["gathers"]
        assert gathers < 1.5 * together, (gathers, pl)      # unshared it would be 2x
        # another identical loader joins the child's process at the group's step and
        # closes unread; a third is dropped without close(): no descriptor stays
        j = child.ask(f"join {together}")
        assert j["fds"] == {"other": 0, "stray": 0}, j
        if stopper == "first":
            mine.close()                               # the child reads our ring: it goes on
            for k in range(together, together + alone):
                assert child.ask("next") == {"step": k + 1}
        else:
            assert child.ask("close") == {"closed": True}
            for k in range(together, together + alone):
                take()
            # the child's ring went with RING_CLOSE once we let go of its slots
            assert set(mine._session.rings) == {mine._session.own}
            mine.close()
        end = child.ask("end")
        child.finish()
    except BaseException:
        child.p.kill()
        raise
    assert end["fds"] == {"other": 0, "stray": 0}, end     # the child leaked none
    if stopper == "first":
        assert end["steps"] == together + alone
        # our ring went with RING_CLOSE once the child let go of its slots
        assert end["rings"] == [end["own"]], end
    assert end["foreign"] + foreign[0] > 0, end           # someone read the other's ring
    theirs = dict(np.load(tmp_path / "child.npz"))
    # the reference: a loader opened alone, gathering everything itself
    ref_loader = DataLoader(stores, **PARAMS)
    ref = [snap(next(ref_loader)) for _ in range(together + alone)]
    ref_loader.close()
    assert_same(pack(got), pack(ref[:len(got)]))
    assert_same(theirs, pack(ref[:end["steps"]]))
    got = ref = b0 = None
    gc.collect()
    conn.request("status")
    assert fd_report(queued_fds(conn)) == fds0         # no descriptor leaked here either
    assert not conn.faults

