"""One store, several daemons: reading never takes a writer's lock.

The report first: a DataLoader in one process and one from a process with another
XDG_RUNTIME_DIR, each on the private daemon it starts, over one store both could
write: the same batches, two daemons.

Two zrecordd of one box (each its own runtime directory, as two users' embedded
daemons or two jobs' are) open one store that their clients could write (its
owner's, mode as created) at once: datasets, a multi-stream set and loaders,
whose batches equal a lone daemon's bit for bit. A write (APPEND, through a
dataset or the set) while the other daemon reads is refused with ZR_E_LOCKED
naming that daemon's pid, and changes nothing; once the reader is gone the write
goes through, and then the writer keeps every other daemon out, named in turn.
A delete a crash left half done (delete.zr) is not finished while another process
holds the store (a writer may be alive), and is finished, under the writer's
lock, by the first open once nobody holds it.
One daemon, two clients: a set opens, and tells its length, while another client
appends to it through the set (never "streams differ in length"), and a loader
opens over its streams meanwhile.
"""

import contextlib
import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

from loaderx import _conn
from loaderx.utils import from_numpy

from conftest import (HERE, binary_for_auto_start, daemon_binary, restore_connection,
                      start_daemon, stop_daemon)

N, FEATURES = 64, 6
CLIENT = os.path.join(HERE, "store_client.py")


class Client:
    """A process of its own on one daemon (store_client.py): the one at `sock`, or
    with `env`, the one its environment finds or starts."""

    def __init__(self, sock=None, env=None):
        if env is None:
            env = dict(os.environ, ZRECORD_SOCKET=sock)
            env.pop("ZRECORD_IDLE_EXIT", None)
        self.proc = subprocess.Popen([sys.executable, CLIENT], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def call(self, op, **kw):
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the client of {op} exited with {self.proc.wait(timeout=30)}"
        return json.loads(line)

    def ok(self, op, **kw):
        r = self.call(op, **kw)
        assert "ok" in r, (op, r)
        return r["ok"]

    def end(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


class Daemon:
    def __init__(self, root, name):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.proc, self.sock = start_daemon(self.dir)
        self.pid = self.proc.pid
        self.clients = []

    def client(self):
        c = Client(self.sock)
        self.clients.append(c)
        return c

    def stop(self):
        for c in self.clients:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
        assert stop_daemon(self.proc) == 0


@pytest.fixture
def daemons(tmp_path):
    if not daemon_binary():
        pytest.skip("no zrecordd binary: set ZRECORDD")
    started = []

    def start(name):
        d = Daemon(str(tmp_path), name)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def stores(tmp_path, monkeypatch):
    """A set of two dense streams (x, y), written by a daemon that then exits and
    lets them go; the files keep the modes they were made with."""
    saved = _conn._default
    _conn._default = None
    run = tmp_path / "writer"
    run.mkdir()
    proc, sock = start_daemon(str(run))
    try:
        monkeypatch.setenv("ZRECORD_SOCKET", sock)
        root = str(tmp_path / "set")
        rng = np.random.default_rng(5)
        from_numpy(os.path.join(root, "x"), rng.standard_normal((N, FEATURES), dtype=np.float32))
        from_numpy(os.path.join(root, "y"), rng.standard_normal((N, 1), dtype=np.float32))
        restore_connection(saved)
    finally:
        assert stop_daemon(proc) == 0
    return root


def modes(root):
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mode
            for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.no_daemon
def test_two_daemons_read_one_writable_store(daemons, stores):
    x, y = os.path.join(stores, "x"), os.path.join(stores, "y")
    before = modes(stores)
    a, b = daemons("a"), daemons("b")
    ask = dict(paths={"x": x, "y": y}, batch=8, seed=3, steps=6)

    # a lone daemon's batches
    lone = a.client()
    lone.ok("open", path=x)
    lone.ok("open", path=y)
    want = lone.ok("loader", **ask)
    lone.ok("close")

    # both daemons at once: datasets, loaders and the set, each client able to write
    ca, cb = a.client(), b.client()
    for c in (ca, cb):
        assert c.ok("open", path=x) == {"writable": True, "length": N}
        assert c.ok("open", path=y) == {"writable": True, "length": N}
    assert ca.ok("loader", **ask) == want
    assert cb.ok("loader", **ask) == want
    for c in (ca, cb):
        assert c.ok("msset", path=stores) == {"names": ["x", "y"], "length": N}
        assert c.ok("loader", set=stores, batch=8, seed=3, steps=6) == want
    assert not os.path.exists(os.path.join(x, "writer.zr"))

    # a write while the other daemon reads: refused, naming it, and nothing changes
    data = cb.ok("read", path=x)
    for how in ({"path": x}, {"set": stores}):
        r = ca.call("append", value=7.0, **how)
        assert r.get("error") == "ZR_E_LOCKED", r
        assert f"read by pid {b.pid} (zrecordd" in r["message"], r
        assert "a writer needs it to itself" in r["message"], r
    assert cb.ok("read", path=x) == data
    assert ca.ok("loader", **ask) == want

    # the reader goes: the write goes through, and the writer keeps the other out
    cb.ok("close")
    assert ca.ok("append", path=x, value=7.0) == N + 1
    with open(os.path.join(x, "writer.zr")) as f:
        assert f.read().startswith(f"pid={a.pid} host=")
    r = cb.call("open", path=x)
    assert r.get("error") == "ZR_E_LOCKED", r
    assert f"written by pid {a.pid} (zrecordd" in r["message"], r
    assert cb.ok("open", path=y)["length"] == N     # the other stream is not written
    ca.ok("close")      # answered once the store is let go (PROTOCOL.md, CLOSE)
    assert not os.path.exists(os.path.join(x, "writer.zr"))
    assert cb.ok("open", path=x) == {"writable": True, "length": N + 1}
    assert modes(stores).items() >= before.items()   # no file changed its rights


@pytest.mark.no_daemon
def test_two_users_embedded_daemons_read_one_store(tmp_path, stores):
    """The report: a DataLoader in one process and one over the same store from a
    process with another XDG_RUNTIME_DIR, each on the private daemon it starts."""
    binary = binary_for_auto_start()
    x = os.path.join(stores, "x")
    runs, clients = [], []
    try:
        for name in ("a", "b"):
            run = tmp_path / f"xdg-{name}"
            run.mkdir(mode=0o700)
            runs.append(str(run))
            env = dict(os.environ, XDG_RUNTIME_DIR=str(run), ZRECORDD=binary,
                       ZRECORD_IDLE_EXIT="30")
            env.pop("ZRECORD_SOCKET", None)
            clients.append(Client(env=env))
        ask = dict(paths={"x": x}, batch=8, seed=9, steps=4)
        got = []
        for c in clients:                       # a holds its loader while b opens
            assert c.ok("open", path=x)["writable"] is True
            got.append(c.ok("loader", **ask))
        assert got[0] == got[1]
        pids = [int(open(os.path.join(r, "zrecord", "zrecordd.pid")).read()) for r in runs]
        assert pids[0] != pids[1]               # two daemons, one store
        for c in clients:
            c.ok("close")
            c.end()
    finally:
        for c in clients:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
        for r in runs:
            stop_private(r)


def stop_private(run):
    """Stops the private daemon that started in runtime directory `run`: SIGTERM,
    then its pidfd awaited, bounded."""
    try:
        pid = int(open(os.path.join(run, "zrecord", "zrecordd.pid")).read())
        fd = os.pidfd_open(pid)
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
        select.select([fd], [], [], 20)
    finally:
        os.close(fd)


def journal(store, n):
    """delete.zr of a swap-last delete of record 0 from n records (docs/FORMAT.md),
    complete but not applied: what a crash after the journal leaves."""
    with open(os.path.join(store, "0.loc"), "rb") as f:
        f.seek((n - 1) * 16)
        last = f.read(16)
    body = b"ZRDJ" + struct.pack("<IQQQ", 1, n, n - 1, 1) + struct.pack("<Q", 0) + last
    h = 0xcbf29ce484222325
    for c in body:
        h = ((h ^ c) * 0x100000001b3) & (2**64 - 1)
    return body + struct.pack("<Q", h)


@pytest.mark.no_daemon
def test_a_crashed_delete_waits_for_the_writer_lock(daemons, stores):
    x = os.path.join(stores, "x")
    a = daemons("a")
    c = a.client()
    c.ok("open", path=x)
    rows = bytes.fromhex(c.ok("read", path=x))
    c.ok("close")
    with open(os.path.join(x, "delete.zr"), "wb") as f:
        f.write(journal(x, N))
    with open(os.path.join(x, "meta.zr"), "rb") as f:
        header = f.read()

    # a process holds the store (a writer may be alive): the journal is left alone
    holder = os.open(os.path.join(x, "meta.zr"), os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        r = c.call("open", path=x)
        assert r.get("error") == "ZR_E_LOCKED", r
        assert f"written by pid {os.getpid()} (" in r["message"], r
        assert os.path.exists(os.path.join(x, "delete.zr"))
        with open(os.path.join(x, "meta.zr"), "rb") as f:
            assert f.read() == header
    finally:
        os.close(holder)

    # nobody holds it: the first open finishes the delete, then reads
    assert c.ok("open", path=x) == {"writable": True, "length": N - 1}
    assert not os.path.exists(os.path.join(x, "delete.zr"))
    row = FEATURES * 4
    got = bytes.fromhex(c.ok("read", path=x))
    assert got == rows[(N - 1) * row:] + rows[row:(N - 1) * row]


def set_length(store, n):
    """meta.zr's length, rewritten in place as a writer that takes no lock would
    (loaderx 1.5.7's delete ends so)."""
    with open(os.path.join(store, "meta.zr"), "r+b") as f:
        f.seek(14)
        f.write(struct.pack("<Q", n))


@pytest.mark.no_daemon
def test_a_store_changed_under_its_readers_is_stale(daemons, stores):
    x, y = os.path.join(stores, "x"), os.path.join(stores, "y")
    a = daemons("a")
    c = a.client()
    c.ok("open", path=x)
    c.ok("open", path=y)
    first = c.ok("loader", paths={"x": x}, batch=4, seed=1, steps=1)

    # changed on disk by a program that ignores the lock: never served as it was
    set_length(x, N - 1)
    r = c.call("loader", paths={"x": x}, batch=4, seed=1, steps=1)
    assert r.get("error") == "ZR_E_STALE", r
    assert "changed on disk since this process opened it (64 records then" in r["message"], r
    r = c.call("read", path=x)
    assert r.get("error") == "ZR_E_STALE", r
    r = c.call("append", path=x, value=1.0)       # not written on a view out of date
    assert r.get("error") == "ZR_E_STALE", r
    with open(os.path.join(x, "meta.zr"), "rb") as f:
        assert struct.unpack_from("<Q", f.read(), 14)[0] == N - 1
    assert c.ok("loader", paths={"y": y}, batch=4, seed=1, steps=1)   # y is unchanged

    # a new opener gets a new instance, with what the disk says now; it writes
    # once the old instance, whose lock it keeps, is closed
    c2 = a.client()
    assert c2.ok("open", path=x) == {"writable": True, "length": N - 1}
    r = c2.call("append", path=x, value=1.0)
    assert r.get("error") == "ZR_E_LOCKED", r
    assert f"read by this process (pid {a.pid})" in r["message"], r
    c.ok("close")
    assert c2.ok("append", path=x, value=1.0) == N
    assert first                                   # the first loader had its batch


@pytest.mark.no_daemon
def test_a_running_loader_ends_when_its_store_changes(tmp_path, stores):
    if not daemon_binary():
        pytest.skip("no zrecordd binary: set ZRECORDD")
    x = os.path.join(stores, "x")
    run = tmp_path / "timer"
    run.mkdir()
    proc, sock = start_daemon(str(run), "--sync-interval=1")
    saved = _conn._default
    _conn._default = None
    try:
        os.environ["ZRECORD_SOCKET"] = sock
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import open_dataset
        from loaderx._errors import ZrecordError
        loader = DataLoader({"x": open_dataset(x)}, batch_size=4, sampler="iid", seed=2)
        next(loader)
        set_length(x, N - 1)
        # the daemon's timer finds the change (within a second): the loader ends
        with pytest.raises(ZrecordError) as e:
            for _ in range(10_000_000):
                next(loader)
        assert e.value.name == "ZR_E_STALE", e.value
        loader.close()
    finally:
        os.environ.pop("ZRECORD_SOCKET", None)
        restore_connection(saved)
        assert stop_daemon(proc) == 0


APPENDER = """
import select, sys
import numpy as np
from loaderx.dataset import MSDataset
root, names, count, size, appends = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
ms = MSDataset(root)
x = np.ones((count, size), np.uint8)
print("go", flush=True)
i = 0
while i < appends if appends else not select.select([sys.stdin], [], [], 0)[0]:
    ms.append({n: x for n in names})
    i += 1
ms.close()
"""


@contextlib.contextmanager
def appender(root, names, count, size, appends=0):
    """A process of its own appending `appends` batches of `count` records of
    `size` bytes through an MSDataset of root's streams `names` (0: until its
    stdin closes), once it said "go"; killed if still there at the end."""
    p = subprocess.Popen([sys.executable, "-c", APPENDER, root, names, str(count), str(size),
                          str(appends)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(HERE)))
    try:
        assert p.stdout.readline() == "go\n"
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_set_opens_while_another_client_appends_to_it(tmp_path):
    # An APPEND through a set writes its streams one after the other; an
    # MSSET_OPEN meanwhile compares their lengths under their locks, so it
    # never sees one stream appended to and the other not yet (before: 267 of
    # 1019 opens refused "streams differ in length", ZR_E_MISALIGNED).
    from loaderx.dataset import MSDataset
    root = str(tmp_path / "set")
    for name in ("a", "b"):
        from_numpy(os.path.join(root, name), np.zeros((4, 1 << 16), np.uint8))
    appends = 60
    with appender(root, "ab", 16, 1 << 16, appends) as p:
        opens, lengths = 0, set()
        while p.poll() is None or opens == 0:
            with MSDataset(root) as ms:
                n = len(ms)
                assert len(ms["a"]) >= n and len(ms["b"]) >= n
                lengths.add(n)
                opens += 1
        assert p.wait(timeout=120) == 0
    with MSDataset(root) as ms:
        assert len(ms) == 4 + 16 * appends
    assert all((n - 4) % 16 == 0 for n in lengths), lengths   # whole appends only


def test_a_loader_opens_over_a_set_while_another_client_appends_to_it(tmp_path):
    # LOADER_OPEN reads the lengths of a source's streams under all their locks
    # (before: one after the other, each under its own; 19 of 1789 opens were
    # ZR_E_MISALIGNED, "the streams differ in length (a: 66, b: 66, c: 66, d:
    # 66)", the lengths in the message read again after the append).
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import MSDataset
    root = str(tmp_path / "set")
    for name in "abcd":
        from_numpy(os.path.join(root, name), np.zeros((64, 4096), np.uint8))
    with appender(root, "abcd", 1, 4096) as p, MSDataset(root) as ms:
        for _ in range(1000):
            DataLoader(ms.streams, batch_size=4, sampler="iid", seed=1).close()
        p.stdin.close()
        assert p.wait(timeout=120) == 0
    with MSDataset(root) as ms:
        assert len(ms) > 64
