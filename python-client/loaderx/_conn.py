"""A connection to zrecordd: discovery, HELLO, requests and events.

One connection per process is shared by every dataset and loader of that process
(:func:`default`). It is thread safe: a send lock keeps frames whole, and whichever
thread waits for something reads the socket for everybody, handing each reply to
the request that waits for it (replies come in request order) and each event to
the loader it names, with the descriptors it carries (a RING event's memfd). An
event nobody will take (its loader was closed, or the connection is closed) has
its descriptors closed. It is fork safe: a connection remembers the pid that opened
it, and in a child process :func:`default` opens a fresh one.

It survives Ctrl-C (_interrupt.py): a ``KeyboardInterrupt`` while a request waits for
its reply leaves the connection whole (the reply is dropped when it comes); one that
cuts a frame being sent, or a reply being taken off the socket, breaks it, and the
next request opens a fresh one. A request that may run long (``abandon=True``:
CONVERT, TRAIN_DICT) breaks the connection when interrupted, so that nothing this
process sends next waits behind it (the daemon runs a connection's requests in
order).

Nothing is sent to a socket before two checks (PROTOCOL.md section 1, "Whom a
client trusts"): its directory, which must be writable by its owner only and owned
by the user (per-user paths) or by root or the service user ``zrecord``
(``/run/zrecord``); and the daemon's uid (``SO_PEERCRED``): the user's own for a
per-user path, root's or the service user's for ``/run/zrecord``. An explicit path
(an argument or ``$ZRECORD_SOCKET``) names a daemon the user chose: its directory
may belong to anyone, who may then also be the daemon's uid besides the user, root
and the service user. A refusal is a :class:`ZrecordConnectionError` (``EPERM``)
naming the path and the owner found.
"""

import atexit
import collections
import errno
import os
import pwd
import select
import socket
import stat
import struct
import threading
import time

from . import _errors, _interrupt, _wire
from ._errors import ZrecordConnectionError

__all__ = ["Connection", "default", "socket_candidates"]

CLIENT_NAME = "loaderx 0.1.0"
WANTED_FEATURES = ["loader", "msset", "dict", "verify", "convert", "mixture", "steps_of", "stride",
                   "remote", "pack", "image", "append_lengths", "ctlring"]
# Events queued for the loader they name, in arrival order (PROTOCOL.md section 10).
LOADER_EVENTS = ("batch", "ring", "ring_close", "loader_end", "wake")


SERVICE_USER = "zrecord"            # the system service's user (systemd/sysusers.conf)
SYSTEM_SOCKET = "/run/zrecord/zrecordd.sock"
# Whom a socket path may lead to.
TRUST_USER = "user"                  # $XDG_RUNTIME_DIR/zrecord/, /tmp/zrecord-<uid>/
TRUST_SYSTEM = "system"              # /run/zrecord/
TRUST_EXPLICIT = "explicit"          # a path the caller or $ZRECORD_SOCKET named


def socket_candidates():
    """The default socket paths of PROTOCOL.md section 1, after the explicit ones."""
    return [p for p, _ in _default_candidates()]


def _default_candidates():
    """(path, trust) of each default path, in order."""
    paths = []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        paths.append((os.path.join(xdg, "zrecord", "zrecordd.sock"), TRUST_USER))
    paths.append((SYSTEM_SOCKET, TRUST_SYSTEM))
    paths.append((f"/tmp/zrecord-{os.getuid()}/zrecordd.sock", TRUST_USER))
    return paths


# Requests that change nothing in the daemon: sent twice, they answer as once.
IDEMPOTENT = frozenset({"hello", "status", "dataset_open", "msset_open", "info", "buffer_open",
                        "read", "stats", "verify"})


class ConnectionLost(ZrecordConnectionError):
    """The connection broke under a request (a daemon that restarted or exited).
    ``sent`` is False when the request never left this process (its send failed),
    so the daemon cannot have acted on it."""

    def __init__(self, message, sent, code=None):
        super().__init__(message, code=code)
        self.sent = sent

    def may_retry(self, kind):
        """Whether ``kind`` may be sent again on a fresh connection: once, when the
        daemon cannot have acted on it, or when acting twice is acting once."""
        return not self.sent or kind in IDEMPOTENT


class SocketRefused(ZrecordConnectionError):
    """A socket refused by the checks above; nothing was sent to it."""

    def __init__(self, message):
        super().__init__(message, code=errno.EPERM, name="EPERM")


def uid_text(uid):
    """``uid 1003 (alice)``, or ``uid 1003`` for a uid without a name."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _service_uid():
    try:
        return pwd.getpwnam(SERVICE_USER).pw_uid
    except KeyError:
        return None


def _root_or_service(uid):
    return uid == 0 or uid == _service_uid()


def check_dir(path, trust):
    """Checks the directory of socket ``path`` before connecting; returns its owner's
    uid. Raises SocketRefused, or OSError when it cannot be examined (missing)."""
    d = os.path.dirname(path) or "."
    # a default path's directory is taken as it is, never through a symlink
    st = os.stat(d) if trust == TRUST_EXPLICIT else os.lstat(d)
    me = os.geteuid()
    owner = uid_text(st.st_uid)
    if not stat.S_ISDIR(st.st_mode):
        raise SocketRefused(f"refusing {path}: {d} is not a directory (owner {owner})")
    if trust == TRUST_USER and st.st_uid != me:
        raise SocketRefused(
            f"refusing {path}: its directory {d} is owned by {owner}, not by you "
            f"({uid_text(me)})")
    if trust == TRUST_SYSTEM and not _root_or_service(st.st_uid):
        raise SocketRefused(
            f"refusing {path}: its directory {d} is owned by {owner}, not by root or the "
            f"service user {SERVICE_USER}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SocketRefused(
            f"refusing {path}: its directory {d} (owner {owner}, mode "
            f"{stat.S_IMODE(st.st_mode):04o}) is writable by others than its owner, who "
            "could have put the socket there")
    return st.st_uid


def check_peer(sock, path, trust, dir_owner):
    """Checks the connected peer's SO_PEERCRED uid; raises SocketRefused."""
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    struct.calcsize("3i")))
    uid &= 0xFFFFFFFF
    me = os.geteuid()
    if trust == TRUST_USER:
        if uid != me:
            raise SocketRefused(f"refusing {path}: the daemon there runs as {uid_text(uid)}, "
                                f"not as you ({uid_text(me)})")
    elif trust == TRUST_SYSTEM:
        if not _root_or_service(uid):
            raise SocketRefused(f"refusing {path}: the daemon there runs as {uid_text(uid)}, "
                                f"not as root or the service user {SERVICE_USER}")
    elif not (uid == me or uid == dir_owner or _root_or_service(uid)):
        raise SocketRefused(
            f"refusing {path}: the daemon there runs as {uid_text(uid)}, not as you, root, "
            f"the service user {SERVICE_USER} or the directory's owner "
            f"({uid_text(dir_owner)})")


def connect_trusted(path, trust):
    """A connected socket to ``path`` once both checks pass. Raises SocketRefused
    (nothing was sent), or OSError where no daemon answers."""
    owner = check_dir(path, trust)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.connect(path)
        check_peer(s, path, trust, owner)
    except BaseException:
        s.close()
        raise
    return s


class Connection:
    """One HELLO'd connection to zrecordd."""

    def __init__(self, path=None, autostart=True):
        self.pid = os.getpid()
        self.path = None
        sock = None
        explicit = path or os.environ.get("ZRECORD_SOCKET") or None
        if explicit:
            try:
                sock = connect_trusted(explicit, TRUST_EXPLICIT)
            except SocketRefused as e:
                raise SocketRefused(e.message + ("" if path else " (from $ZRECORD_SOCKET)")) \
                    from None
            except OSError as e:
                raise ZrecordConnectionError(
                    f"no zrecordd answers at {explicit}: {e.strerror or e}"
                    + ("" if path else " (from $ZRECORD_SOCKET)"), code=e.errno) from None
            self.path = explicit
        else:
            errors = []
            refused = []
            # A refused candidate is passed over (nothing was sent to it); if no
            # other answers, the refusal is the error.
            for p, trust in _default_candidates():
                try:
                    sock = connect_trusted(p, trust)
                    self.path = p
                    break
                except SocketRefused as e:
                    refused.append(e)
                except OSError as e:
                    errors.append(f"{p}: {e.strerror or e}")
            if sock is None:
                if not autostart:
                    if refused:
                        raise refused[0]
                    raise ZrecordConnectionError(
                        "no zrecordd answers (" + "; ".join(errors) + ")")
                from . import _daemon
                self.path = _daemon.ensure_private_daemon()
                try:
                    sock = connect_trusted(self.path, TRUST_USER)
                except OSError as e:
                    raise ZrecordConnectionError(
                        f"no zrecordd answers at {self.path}: {e.strerror or e}",
                        code=e.errno) from None
        self._fs = _wire.FrameSocket(sock)
        self._send_lock = threading.Lock()
        # The lock of the state below. Sections under it are entered with ``with
        # self._lock``, never ``with self._cv``: Condition.__enter__ and __exit__
        # are Python functions, and a KeyboardInterrupt raised in one of them
        # after the acquire (or before the release) leaves the lock held for
        # good, so this thread's next request waited for it forever. A ``with``
        # of the lock itself runs no Python code between the acquire and the
        # block (Python 3.10 and later). The condition is for wait and notify.
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._reading = None                  # the thread that reads the socket now
        self._next_id = 1
        self._pending = collections.deque()   # ids of requests sent, not answered
        self._kinds = {}                      # id -> kind, of those
        self._replies = {}                    # id -> (msg, fds)
        self._discard = set()                 # ids whose replies nobody waits for
        self.dead_loaders = set()             # loaders closed: their events are dropped
        self._sweep = collections.deque()     # dead loaders whose queue is still to drop
        self._events = collections.defaultdict(collections.deque)  # loader -> (msg, fds)
        self._broken = None
        self.faults = []
        self.closed = False
        self.buffer_lock = threading.Lock()   # the shared read buffer (dataset reads)
        self.read_buffer = None
        self.result_pool = None               # one-pass read buffers (_results)
        hello = self.request("hello", {
            "min_version": 1, "max_version": 1,
            "features": WANTED_FEATURES, "client": CLIENT_NAME})
        self.version = hello["version"]
        self.features = set(hello.get("features", []))
        self.daemon = hello.get("daemon", "")
        self.limits = dict(hello.get("limits", {}))
        self._fs.frame_max = int(self.limits.get("frame_max", _wire.FRAME_MAX_DEFAULT))

    # ------------------------------------------------------------------ basics
    @property
    def frame_max(self):
        return self._fs.frame_max

    def has_feature(self, name):
        return name in self.features

    @property
    def broken(self):
        """Why the connection broke (a string), or None while it works."""
        return self._broken

    @property
    def usable(self):
        """True if this process may send on the connection: opened here, not
        closed, not broken."""
        return self.pid == os.getpid() and not self.closed and self._broken is None

    def peer_closed(self):
        """True if the daemon has closed its end: a connection it closed while idle
        (``idle-timeout``, PROTOCOL.md section 12), or a daemon that exited. One
        poll() that never blocks; the FAULT that came before the close is kept in
        ``faults`` and the connection is marked broken."""
        if self._broken is not None or self.closed:
            return self._broken is not None
        p = select.poll()
        p.register(self._fs.sock.fileno(), select.POLLIN | select.POLLRDHUP)
        ev = p.poll(0)
        if not ev or not ev[0][1] & (select.POLLHUP | select.POLLRDHUP | select.POLLERR):
            return False
        reason = "the daemon closed the connection"
        with self._lock:
            if self._reading is not None or self._pending:
                self.mark_broken(reason)    # a reader is on it and will see the rest
                self._cv.notify_all()
                return True
            self._reading = threading.get_ident()
        # Nobody else reads it now: take what came before the close (the FAULT).
        try:
            while True:
                msg, fds = self._fs.recv()
                with self._lock:
                    self._dispatch(msg, fds)
        except (OSError, _wire.ProtocolError, ValueError, EOFError):
            pass
        finally:
            with self._lock:
                self._reading = None
                if self.faults:
                    reason += f" ({self.faults[-1].get('message')})"
                self.mark_broken(reason)
                self._cv.notify_all()
        return True

    def mark_broken(self, reason):
        """Marks the connection broken (if it is not yet), so that every later
        call fails at once with ``reason``."""
        if self._broken is None:
            self._broken = reason

    def _break(self, reason):
        """Marks the connection broken and shuts it down: the daemon sees it close
        and reclaims what it held (the stream is useless to this side)."""
        self.mark_broken(reason)
        if os.getpid() == self.pid:
            try:
                self._fs.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.result_pool is not None:
            self.result_pool.close()
        if self.read_buffer is not None:
            self.read_buffer.unmap()
            self.read_buffer = None
        if os.getpid() == self.pid:
            try:
                self._fs.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._fs.close()
        with self._lock:
            self._close_queued()
            self._cv.notify_all()

    def _close_queued(self):
        """Closes the descriptors of every event and reply nobody took (the caller
        holds the lock, or is the only thread: a forked child)."""
        queues, self._events = self._events, collections.defaultdict(collections.deque)
        replies, self._replies = self._replies, {}
        self._sweep.clear()
        for q in queues.values():
            for _, fds in q:
                _close_fds(fds)
        for _, fds in replies.values():
            _close_fds(fds)

    def _check(self):
        if self.closed:
            raise ZrecordConnectionError("the connection to zrecordd is closed")
        if self._broken is not None:
            raise ZrecordConnectionError(f"the connection to zrecordd broke: {self._broken}")
        if os.getpid() != self.pid:
            raise ZrecordConnectionError(
                "this connection belongs to the parent process; use loaderx's default "
                "connection in a child (datasets and loaders reconnect by themselves)")

    # --------------------------------------------------------------- requests
    def send_notification(self, kind, fields):
        """A message without reply (RELEASE)."""
        self._check()
        msg = {"kind": kind}
        msg.update(fields)
        with self._send_lock:
            self._fs.send(msg)

    def send_notifications(self, next_msg, blocking=True):
        """Sends the messages ``next_msg()`` returns until it returns None, in one
        hold of the send lock and one write (RELEASEs of freed slots). Without ``blocking``,
        returns False at once if the lock is busy (a finalizer may run while this
        very thread holds it). A failed send breaks the connection and raises the
        OSError."""
        if not self._send_lock.acquire(blocking):
            return False
        try:
            # one write for them all: a send wakes the daemon's loop, which then
            # reads every frame at once
            frames = []
            msg = next_msg()
            while msg is not None:
                frames.append(_wire.encode(msg))
                msg = next_msg()
            if frames:
                try:
                    self._fs.send_frames(frames)
                except OSError as e:
                    self.mark_broken(str(e))
                    raise
        finally:
            self._send_lock.release()
        return True

    def request(self, kind, fields=None, fds=(), context=None, during=None, abandon=False):
        """Sends a request and waits for its reply: the ok fields, or raises.

        Descriptors that came with the reply are in ``reply['_fds']``. ``during``,
        if given, is called once the request is sent, while the daemon works.
        ``abandon``: a request that may run long; interrupted while it waits, the
        connection is broken (the daemon sees it close) rather than left busy.
        """
        self._check()
        msg = {"kind": kind, "id": 0}
        if fields:
            msg.update(fields)
        rid = None
        try:
            with self._send_lock:
                rid = self._next_id
                self._next_id += 1
                msg["id"] = rid
                with self._lock:
                    self._pending.append(rid)
                    self._kinds[rid] = kind
                _interrupt.enter()
                try:
                    self._fs.send(msg, fds)
                except OSError as e:
                    with self._lock:
                        self._forget(rid)
                    rid = None
                    self._broken = str(e)
                    raise ConnectionLost(f"sending {kind} to zrecordd failed: {e}", sent=False,
                                         code=e.errno) from None
                except BaseException:
                    # cut in the middle of a frame (KeyboardInterrupt): the daemon may
                    # hold part of it
                    self._break(f"sending {kind} was interrupted: the connection's place in "
                                "the stream is lost")
                    raise
                finally:
                    _interrupt.leave()
            if during is not None:
                during()
            reply, rfds = self._wait(lambda: self._replies.pop(rid, None))
        except BaseException:
            if rid is not None:
                self._drop_reply(rid, kind, abandon)
            raise
        if reply.get("kind") == "error":
            for fd in rfds:
                os.close(fd)
            raise _errors.from_reply(reply, context)
        reply["_fds"] = rfds
        return reply

    def _forget(self, rid):
        """rid is answered or will never be (the caller holds the lock)."""
        self._kinds.pop(rid, None)
        if self._pending and self._pending[0] == rid:
            self._pending.popleft()
        elif rid in self._pending:
            self._pending.remove(rid)

    def _drop_reply(self, rid, kind, abandon):
        """The caller of request rid stopped waiting (an interrupt): its reply, come
        or to come, is dropped; an abandoned request breaks the connection."""
        with self._lock:
            got = self._replies.pop(rid, None)
            if got is not None:
                _close_fds(got[1])
            elif rid in self._pending:
                self._discard.add(rid)
            if abandon and got is None and self._broken is None and rid in self._pending:
                self._break(f"{kind} was abandoned while the daemon ran it")
            self._cv.notify_all()

    def in_flight(self):
        """The kinds of the requests sent and not answered."""
        with self._lock:
            return [self._kinds.get(rid) for rid in self._pending]

    def request_nowait(self, kind, fields):
        """Sends a request whose reply is dropped, without ever blocking (for
        finalizers, which may run while this very thread holds the send lock).
        Returns False if it could not be sent now."""
        if self.closed or self._broken is not None or os.getpid() != self.pid:
            return False
        if not self._send_lock.acquire(blocking=False):
            return False
        try:
            msg = {"kind": kind}
            msg.update(fields)
            rid = self._next_id
            self._next_id += 1
            msg["id"] = rid
            if not self._lock.acquire(blocking=False):
                return False
            try:
                self._pending.append(rid)
                self._kinds[rid] = kind
                self._discard.add(rid)
            finally:
                self._lock.release()
            try:
                self._fs.send(msg)
            except OSError as e:
                self._broken = str(e)
                return False
            return True
        finally:
            self._send_lock.release()

    def wait_event(self, loader, timeout=None):
        """The next event of a loader: (msg, fds). The caller owns the descriptors.
        With a `timeout` (seconds), None if none came in that time."""
        with self._lock:
            q = self._events[loader]
        return self._wait(lambda: q.popleft() if q else None, timeout)

    def poll_event(self, loader):
        with self._lock:
            q = self._events.get(loader)
            return q.popleft() if q else None

    @property
    def reading(self):
        """True while a thread reads the socket (it hands out what it reads)."""
        return self._reading is not None

    def fileno(self):
        """The socket's descriptor, to wait on beside others (then pump())."""
        return self._fs.sock.fileno()

    def pump(self):
        """Reads and hands out what the daemon has already sent, without blocking
        for more: nothing if another thread is reading (it hands out everything it
        reads). A frame begun is read whole."""
        if self._broken is not None or self.closed or self.pid != os.getpid():
            return
        with self._lock:
            if self._reading is not None:
                return
            self._reading = threading.get_ident()
        poller = select.poll()
        poller.register(self._fs.sock.fileno(), select.POLLIN)
        self._dispatch_read(lambda: self._fs.has_frame() or poller.poll(0))

    def _dispatch_read(self, more):
        """Called as the reader (self._reading set): receives and dispatches
        frames while more() is true, then gives up the reader's place."""
        _interrupt.enter()
        try:
            while more():
                msg, fds = self._fs.recv()
                with self._lock:
                    self._dispatch(msg, fds)
        except (OSError, _wire.ProtocolError, ValueError) as e:
            with self._lock:
                self._broken = str(e) or type(e).__name__
        except BaseException:
            # KeyboardInterrupt while taking frames off the socket: their place is lost
            self._break("a read was interrupted: the connection's place in the stream is lost")
            raise
        finally:
            with self._lock:
                self._reading = None
                self._cv.notify_all()
            _interrupt.leave()

    def dispatch_buffered(self):
        """Hands out the frames already read whole, without a system call (a read
        of the socket takes up to 256 KiB: several BATCH events at once); nothing
        if another thread is reading."""
        if not self._fs.has_frame() or self._broken is not None or self.closed:
            return
        with self._lock:
            if self._reading is not None:
                return
            self._reading = threading.get_ident()
        self._dispatch_read(self._fs.has_frame)

    def drop_events(self, loader):
        """The loader is closed: its queued events go (their descriptors closed),
        and so will any that still arrive."""
        with self._lock:
            self.dead_loaders.add(loader)
            self._drop_queue(loader)

    def mark_dead(self, loader):
        """drop_events() for finalizers: takes no lock (the finalizer may run while
        this thread holds it); the queue is dropped at the next message read."""
        self.dead_loaders.add(loader)
        self._sweep.append(loader)

    def _drop_queue(self, loader):
        q = self._events.pop(loader, None)
        if q:
            for _, fds in q:
                _close_fds(fds)

    def unpoll_event(self, loader, ev):
        """Puts an event taken by poll_event() or wait_event() back in front."""
        with self._lock:
            self._events[loader].appendleft(ev)

    def _wait(self, take, timeout=None):
        me = threading.get_ident()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                while True:
                    got = take()
                    if got is not None:
                        return got
                    if self._broken is not None:
                        raise ConnectionLost(
                            f"the connection to zrecordd broke: {self._broken}", sent=True)
                    # a mark of this very thread is one an interrupt left behind
                    if self._reading is None or self._reading == me:
                        self._reading = me
                        break
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return None
                        self._cv.wait(left)
                    else:
                        self._cv.wait()
            # This thread reads for everybody until it has handed a frame over.
            taking = False
            try:
                if deadline is not None and not self._fs.wait_readable(
                        max(0.0, deadline - time.monotonic())):
                    with self._lock:
                        self._reading = None
                        self._cv.notify_all()
                    return None
                self._fs.wait_readable()        # takes nothing: an interrupt costs nothing
                _interrupt.enter()
                try:
                    taking = True
                    try:
                        msg, fds = self._fs.recv()
                    except (OSError, _wire.ProtocolError, ValueError) as e:
                        with self._lock:
                            self._reading = None
                            taking = False
                            self._broken = str(e) or type(e).__name__
                            if self.faults:
                                self._broken += (" (after a fault from the daemon: "
                                                 f"{self.faults[-1].get('message')})")
                            self._cv.notify_all()
                        continue
                    with self._lock:
                        self._dispatch(msg, fds)
                        self._reading = None
                        taking = False
                        self._cv.notify_all()
                finally:
                    _interrupt.leave()          # an interrupt held meanwhile raises here
            except BaseException:
                # KeyboardInterrupt: give the socket up; if it came while bytes were
                # being taken off it, where the next frame starts is unknown
                with self._lock:
                    if self._reading == me:
                        self._reading = None
                    if taking:
                        self._break("a reply was interrupted while it was being read: the "
                                    "connection's place in the stream is lost")
                    self._cv.notify_all()
                raise

    def _dispatch(self, msg, fds):
        while self._sweep:
            self._drop_queue(self._sweep.popleft())
        kind = msg.get("kind")
        if kind in ("ok", "error"):
            rid = msg.get("id")
            self._forget(rid)
            if rid in self._discard:
                self._discard.discard(rid)
                _close_fds(fds)
            else:
                self._replies[rid] = (msg, fds)
        elif kind in LOADER_EVENTS:
            if msg.get("loader") in self.dead_loaders:
                _close_fds(fds)
            else:
                self._events[msg.get("loader")].append((msg, fds))
        elif kind == "fault":
            self.faults.append(msg)
            _close_fds(fds)
        else:  # an event kind this client does not know: ignored (section 13)
            _close_fds(fds)


def _close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


_default = None
_default_lock = threading.Lock()


def default():
    """The process's shared connection (a fresh one in a forked child)."""
    global _default
    c = _default
    if c is not None and c.usable and not c.peer_closed():
        return c
    with _default_lock:
        c = _default
        if c is not None and c.usable and not c.peer_closed():
            return c
        if c is not None and c.pid == os.getpid() and not c.closed:
            c.close()               # broken: let its descriptors go
        _default = Connection()
        return _default


def reconnect(timeout=5.0):
    """The default connection after the old one broke (a daemon restart): retries
    for up to ``timeout`` seconds while no daemon answers yet."""
    import time
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            return default()
        except ZrecordConnectionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


# This process's id, kept here (os.getpid() is a system call, asked several
# times a batch): set again in a child by the fork hook below.
_pid = os.getpid()


def current_pid():
    return _pid


def _after_fork_in_child():
    global _default, _default_lock, _pid
    _pid = os.getpid()
    _default_lock = threading.Lock()
    old, _default = _default, None
    if old is not None:
        # Close the child's copy of the descriptor; the parent's connection is
        # untouched (no shutdown: the socket is shared with the parent).
        try:
            old._fs.sock.close()
        except OSError:
            pass
        old.closed = True
        if old.result_pool is not None:     # the child's copies of its memfds
            try:
                old.result_pool.close()
            except Exception:
                pass
        # The child's copies of descriptors queued in the parent (RING memfds):
        # nobody here will take them. No lock: it may have been held at the fork.
        try:
            old._close_queued()
        except Exception:
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)


def _close_at_exit():
    """Closes this process's default connection as it exits (registered first,
    so it runs after the other exit handlers, which may still talk to the
    daemon): the daemon sees the close at once, and Python does not warn of an
    unclosed socket."""
    c = _default
    if c is not None and c.pid == os.getpid() and not c.closed:
        try:
            c.close()
        except Exception:
            pass


atexit.register(_close_at_exit)
