"""Conversions all or nothing: :func:`conversion`, the helper every writer builds on.

A conversion writes records into the store (or the multi-stream set) at a path.
Whatever stops it (an exception, Ctrl-C, a second Ctrl-C, the process killed),
the path shows either all of it or none of it, and running the same conversion
again gives the intended result (docs/DATASETS.md, "Conversions: all or nothing"):

- **A new store** (the path missing, or an empty directory) is built in
  ``.<name>.partial-<random>/<name>``, beside the path, and renamed onto the path
  once it is complete and durable (synced, then the rename, then the parent
  directory fsynced). Until then nothing is at the path. The conversion holds an
  ``flock`` on the ``.partial`` directory while it runs (not on the store's own,
  which the daemon locks while it creates a store there); one left by a process
  that died (no lock) is removed by the next conversion into the same path.
- **An existing store or set** is appended to in place. Before a store's first
  append its length is recorded, durably, in ``<path>/append.undo`` (docs/FORMAT.md),
  which the conversion holds an ``flock`` on. On a failure it cuts every store it
  appended to back to that length (deleting the tail indices by swap-last moves no
  other record) and removes the file; on success it removes the file, the commit.
  If the process dies before either, the file stays: the next conversion into the
  path (or ``with conversion(path): pass``) cuts the stores back first, once the
  daemon runs no request of the dead process any more, and opening such a store
  for reading warns.

Ctrl-C: while a conversion runs in the main thread, a ``KeyboardInterrupt`` never
cuts a frame on the connection (_interrupt.py), so the undo runs on the same
connection right after the request that was under way; the undo itself holds
further interrupts, and a second one while it is held stops it at once, leaving
``append.undo`` (or the temporary directory) for the next conversion. A request
that may run long (CONVERT, TRAIN_DICT) is abandoned at once instead: its
connection is broken and the undo runs on a fresh one, which is safe since those
requests change no store the undo cuts back.

The space an undone append wrote stays in the store as reclaimable bytes, as after
any delete (``stats()['reclaimable']``; ``compact()`` frees it).

Not covered: another writer appending to the same store during the conversion (its
records past the recorded length are cut back too, as loaderx 1.5.7 assumes one
writer); a new store whose path is an empty directory in a directory the user may
not write, or a mount point (it is built in place: a failure removes what was
written, a killed process leaves it); a dictionary installed into an existing empty
``zstd_dict`` store stays (no request removes one; running again uses it).
"""

import errno
import fcntl
import os
import secrets
import shutil
import socket
import time
import warnings

import numpy as np

from . import _conn, _interrupt, _store
from ._errors import ZrecordError, ZrecordFileExistsError, ZrecordValueError

__all__ = ["conversion", "Conversion", "UNDO_FILE", "check_undo"]

UNDO_FILE = "append.undo"
UNDO_MAGIC = "zrecord append undo 1"
UNDO_MAX = 64 << 10         # a store line per stream of a set: far below this
PARTIAL = ".partial-"       # .<name>.partial-<random>
RMTREE_TRIES = 5            # a directory the daemon still writes in may refill once or twice
# How long an undo of a dead conversion waits until the daemon runs no request of
# the dead process (_released()): an APPEND of it may still be running. One of
# 32 MiB takes well under a second; other work of the user's that keeps the daemon
# busy all along makes the undo go ahead when this runs out.
RELEASE_WAIT = 10.0
# Requests that change a store: on a connection that broke with one in flight,
# the daemon may still be running it, so the undo waits for the next conversion.
MUTATING = frozenset({"append", "delete", "compact", "install_dict", "dataset_create"})


def conversion(path):
    """A context manager for a writer: ``with conversion(path) as c:`` write into
    ``c.path`` and ``c.add()`` every dataset written to, before its first append.

    ``c.new`` says whether a new store (or set) is being made: ``c.path`` is then a
    temporary sibling of ``path``, renamed onto it when the block ends without an
    exception, and removed otherwise. Otherwise ``c.path`` is ``path``, and every
    dataset added is cut back to its length at ``add()`` if the block raises.
    Datasets added are synced and closed when the block ends."""
    return Conversion(path)


class Conversion:
    """One conversion into ``target`` (see the module's documentation)."""

    def __init__(self, path):
        self.target = os.path.realpath(os.fspath(path))
        self.path = None
        self.new = None
        self.in_place = False       # a new store built at the path itself (see above)
        self._stores = []           # (dataset, store directory, length at add())
        self._closers = []          # what add() was given, closed at the end
        self._undo = None           # the open append.undo, locked
        self._tmp = None            # the .partial directory, open and locked
        self._staging = None        # its path
        self._made = []             # parent directories made, removed on a failure
        self._before = None         # in place: the names the directory held
        self._committed = False     # past the point of no return

    # ------------------------------------------------------------------ begin
    def __enter__(self):
        self._deferring = _interrupt.deferring()
        self._deferring.__enter__()
        try:
            self._begin()
        except BaseException as e:
            self._end_deferring(e)
            raise
        return self

    def _begin(self):
        t = self.target
        if os.path.lexists(t) and not os.path.isdir(t):
            raise ZrecordFileExistsError(f"{t!r} exists and is not a store directory",
                                         code=errno.EEXIST)
        parent, name = os.path.split(t)
        if os.path.isdir(parent):
            sweep(parent, name)
        if os.path.isdir(t) and (os.listdir(t) or _store.is_store(t)):
            self.new = False
            self.path = t
            repair(t)
            return
        self.new = True
        if not os.path.isdir(parent):
            self._makedirs(parent)
        if os.path.isdir(t):
            st = os.stat(t)
            if st.st_uid != os.geteuid() and os.geteuid() != 0:
                raise ZrecordError(
                    f"{t} is an empty directory of {_conn.uid_text(st.st_uid)}, not yours "
                    f"({_conn.uid_text(os.geteuid())}): a store is created in a directory "
                    "of your own", code=errno.EACCES, name="EACCES")
            if st.st_dev != os.stat(parent).st_dev:
                return self._in_place(t)            # a mount point: cannot be renamed over
        else:
            st = None
        try:
            self._tmp, self._staging, self.path = _make_partial(parent, name, st)
        except PermissionError:
            if st is None:
                raise
            return self._in_place(t)                # the parent is not ours to write

    def _in_place(self, t):
        self.in_place = True
        self.path = t
        self._before = set(os.listdir(t))

    def _makedirs(self, d):
        parent = os.path.dirname(d)
        if parent != d and not os.path.isdir(parent):
            self._makedirs(parent)
        try:
            os.mkdir(d)
        except FileExistsError:
            return
        self._made.append(d)

    # -------------------------------------------------------------------- add
    def add(self, ds):
        """Registers a dataset the conversion writes to (DenseDataset,
        RaggedDataset, Zrecord or MSDataset) before its first append; returns it.
        For an existing store its length now is what a failure cuts it back to."""
        self._closers.append(ds)
        for d in _datasets(ds):
            store = os.path.realpath(os.fspath(d.path))
            rel = os.path.relpath(store, self.path)
            if rel.startswith(os.pardir):
                raise ZrecordValueError(f"conversion into {self.target}: {store} is not "
                                        "inside it")
            length = len(d)
            if not self.new:
                self._record(rel, length)
            self._stores.append((d, store, length))
        return ds

    def _record(self, rel, length):
        """Appends a store's line to append.undo (made and locked on first use),
        durably, before anything is appended to that store."""
        if self._undo is None:
            try:
                self._undo = _create_undo(self.path)
            except FileExistsError:
                repair(self.path)           # one that died since _begin(), or refuses
                self._undo = _create_undo(self.path)
        line = f"store {length} {rel}\n".encode()
        os.write(self._undo, line)
        os.fsync(self._undo)

    # -------------------------------------------------------------------- end
    def __exit__(self, typ, exc, tb):
        try:
            if exc is None:
                try:
                    self._commit()
                except BaseException as e:
                    if not self._committed:
                        self._abort(e)
                    raise
            else:
                self._abort(exc)
        finally:
            self._end_deferring(exc)
        return False

    def _end_deferring(self, exc):
        d, self._deferring = getattr(self, "_deferring", None), None
        if d is not None:
            d.__exit__(None, None, None)

    def _commit(self):
        for d, _, _ in self._stores:
            d._store.sync()
        self._close_all()
        with _interrupt.holding():          # the point of no return, then the rest
            if self.new and not self.in_place:
                os.fsync(self._tmp)
                try:
                    os.rename(self.path, self.target)
                except OSError as e:
                    if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise ZrecordFileExistsError(
                            f"{self.target!r} was made by someone else while this conversion "
                            "ran; the conversion is undone", code=e.errno) from None
                    raise
                self._committed = True
                self.path = self.target
                _fsync_dir(os.path.dirname(self.target))
                try:
                    os.rmdir(self._staging)
                except OSError:
                    pass                        # the next conversion's sweep() takes it
                self._close_tmp()
            elif self._undo is not None:
                os.unlink(os.path.join(self.path, UNDO_FILE))
                self._committed = True
                os.close(self._undo)
                self._undo = None
                _fsync_dir(self.path)
            else:
                self._committed = True

    def _abort(self, exc):
        """Undoes what the conversion did; notes on exc what it could not."""
        with _interrupt.holding():
            try:
                left = self._undo_all()
            except BaseException as e:      # a second Ctrl-C (delivered at once), or a failure
                self._close_quietly()
                if isinstance(e, Exception):
                    try:
                        self._close_all()
                    except Exception:
                        pass
                left = f"the undo was stopped ({type(e).__name__}: {e})"
                self._leave(left, exc)
                if not isinstance(e, Exception):
                    self._leave(left, e)
                    raise
                return                      # the first error is the one to report
            if left:
                self._leave(left, exc)

    def _close_quietly(self):
        for fd in (self._undo, self._tmp):
            if fd is not None:
                os.close(fd)
        self._undo = self._tmp = None

    def _leave(self, why, exc):
        if self.new and not self.in_place:
            what = (f"the temporary directory {self._staging} stays; the next conversion "
                    f"into {self.target} removes it")
        elif self.new:
            what = f"{self.target} may hold an incomplete store: remove what it holds"
        else:
            what = (f"{self.target} may keep records this conversion appended: the next "
                    f"conversion into it cuts them back ({UNDO_FILE})")
        note = f"{why}: {what}"
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:
            warnings.warn(note, RuntimeWarning, stacklevel=4)

    def _undo_all(self):
        """Returns None, or why something is left."""
        conn_ok = all(_usable(d) for d, _, _ in self._stores)
        if self.new:
            self._close_all()
            if self.in_place:
                for name in set(os.listdir(self.path)) - self._before:
                    p = os.path.join(self.path, name)
                    shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)
            elif not _rmtree(self._staging):
                return "the temporary directory could not be removed"
            self._close_tmp()
            for d in reversed(self._made):
                try:
                    os.rmdir(d)
                except OSError:
                    break
            return None
        why = None
        if self._stores:
            if conn_ok:
                for d, store, length in self._stores:
                    if d._h.closed:
                        # closed by the commit an interrupt cut short: its close
                        # answers once the daemon let the store go, so it opens again
                        cut_back_store(store, length)
                    else:
                        _cut_back(d._h, length)
            else:
                bad = sorted({k for d, _, _ in self._stores if not _usable(d)
                              for k in d._h.conn.in_flight() if k in MUTATING})
                if bad:
                    why = (f"the connection to zrecordd broke with {', '.join(bad)} in flight, "
                           "which the daemon may still apply")
                else:
                    for _, store, length in self._stores:
                        cut_back_store(store, length)
        self._close_all()
        if why is None and self._undo is not None:
            os.unlink(os.path.join(self.path, UNDO_FILE))
            _fsync_dir(self.path)
        if self._undo is not None:
            os.close(self._undo)
            self._undo = None
        return why

    def _close_all(self):
        for ds in self._closers:
            try:
                ds.close()
            except ZrecordError:
                pass
        self._closers = []

    def _close_tmp(self):
        if self._tmp is not None:
            os.close(self._tmp)
            self._tmp = None

    def __del__(self):
        for fd in (getattr(self, "_undo", None), getattr(self, "_tmp", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


# --------------------------------------------------------------- datasets
def _datasets(ds):
    """The datasets (each one store) that ds writes: a dataset, a Zrecord's, a set's."""
    if hasattr(ds, "_streams"):
        return list(ds._streams.values())
    if hasattr(ds, "_h"):
        return [ds]
    if hasattr(ds, "_ds"):
        return [ds._ds]
    raise TypeError(f"conversion.add: not a dataset: {type(ds).__name__}")


def _usable(d):
    c = d._h.conn
    return c.usable


def _cut_back(h, length):
    """Cuts the store of handle h back to length records: deletes the tail, in
    pieces a frame holds, from the top (swap-last moves no other record)."""
    per = max(1, (h.conn.frame_max - 4096) // 8)
    while True:
        n = int(h.info()["length"])
        if n <= length:
            return
        lo = max(length, n - per)
        h.request("delete", {"indices": np.arange(n - 1, lo - 1, -1, dtype="<u8").tobytes()})


def _released(store, bound):
    """Waits (at most bound seconds) until no APPEND of a dead process can still
    land in the store at ``store``: until the daemon runs no job of this uid
    (STATUS ``users``; an undo file is honoured only when it is this uid's, so the
    dead process was this uid, and a request holds its job until it is answered).
    A daemon that does not say: until none holds the store for writing (the
    exclusive ``flock`` on meta.zr a writing instance holds while it lives,
    docs/FORMAT.md "Ownership"). True once so; False when bound ran out (other
    work of the user's kept the daemon busy)."""
    try:
        fd = os.open(os.path.join(store, "meta.zr"), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    deadline = time.monotonic() + bound
    delay = 0.001
    try:
        while True:
            jobs = _uid_jobs()
            if jobs == 0:
                return True
            if jobs is None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return True
                except BlockingIOError:
                    pass
                except OSError:
                    return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    finally:
        os.close(fd)


def _uid_jobs():
    """The daemon's jobs of this uid, queued or running; None if it does not say."""
    try:
        r = _conn.default().request("status")
    except ZrecordError:
        return None
    me = os.geteuid()
    for u in r.get("users") or ():
        if u.get("uid") == me:
            return int(u.get("jobs", 0))
    return None


def cut_back_store(store, length, settle=0.0):
    """Opens the store at ``store`` for writing on the default connection, cuts it
    back to ``length`` records and syncs it; returns the records removed. settle:
    how long to wait first for the daemon to let the store go (:func:`_released`)."""
    if settle:
        _released(store, settle)
    h = _store.Handle(store, writable=True, warn=False)
    try:
        n = int(h.length)
        _cut_back(h, length)
        h.request("sync")
        return max(0, n - length)
    finally:
        h.close()


# ----------------------------------------------------------- append.undo
def _create_undo(path):
    fd = os.open(os.path.join(path, UNDO_FILE),
                 os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        _lock(fd, blocking=False)
        os.write(fd, (f"{UNDO_MAGIC}\npid {os.getpid()} host {socket.gethostname()} "
                      f"started {int(time.time())}\n").encode())
        os.fsync(fd)
        _fsync_dir(path)
    except BaseException:
        os.close(fd)
        os.unlink(os.path.join(path, UNDO_FILE))
        raise
    return fd


def _lock(fd, blocking):
    """flock LOCK_EX; False where the file system has no flock (the undo is then
    not protected against a second conversion, and never taken for stale)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except OSError as e:
        if e.errno in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            return False
        raise


def parse_undo(data, path):
    """(header fields, [(length, relative path)]) of an append.undo's bytes. A line
    cut short by a crash (no newline) is ignored; anything else malformed raises."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")[:-1]           # the last piece has no newline
    if not lines or lines[0] != UNDO_MAGIC:
        raise ZrecordValueError(f"{path} is not an append.undo of this version: remove it if "
                                "no conversion is running", name="ZR_E_CORRUPT")
    info, stores = {}, []
    if len(lines) > 1:
        words = lines[1].split()
        info = dict(zip(words[::2], words[1::2]))
    for line in lines[2:]:
        parts = line.split(" ", 2)
        rel = parts[2] if len(parts) == 3 else ""
        comps = rel.split("/")
        if (parts[0] != "store" or not parts[1].isdigit() or not rel
                or rel.startswith("/") or any(c in ("", "..") for c in comps)
                or (rel != "." and "." in comps)):
            raise ZrecordValueError(f"{path}: malformed line {line!r}: remove the file if no "
                                    "conversion is running", name="ZR_E_CORRUPT")
        stores.append((int(parts[1]), rel))
    return info, stores


def _describe(info):
    what = f"pid {info.get('pid', '?')} on {info.get('host', '?')}"
    if info.get("started", "").isdigit():
        what += ", started " + time.strftime("%Y-%m-%d %H:%M:%S",
                                             time.localtime(int(info["started"])))
    return what


def _maybe_alive(info):
    """Whether the process an undo file names may still run: on this host, by its
    pid; on another, who can tell."""
    if info.get("host") != socket.gethostname() or not info.get("pid", "").isdigit():
        return True
    try:
        os.kill(int(info["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def check_undo(path):
    """For a reader: a line about the append.undo in the store (or set) directory
    ``path`` that no live process holds, or None (no such file, or its conversion
    still runs on this host)."""
    p = os.path.join(path, UNDO_FILE)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _is_reg(st):
            return None
        owner = st.st_uid
        data = os.read(fd, UNDO_MAX)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        info, stores = parse_undo(data, p)
    except ZrecordValueError as e:
        return e.message
    if info.get("host") == socket.gethostname() and _maybe_alive(info):
        return None                     # it may still run
    lengths = ", ".join(str(n) if rel == "." else f"{n} in {rel}" for n, rel in stores)
    who = ("the next conversion into it cuts them back first (or run "
           f"`with loaderx.utils.conversion({path!r}): pass`)" if owner == os.geteuid() else
           f"the file is {_conn.uid_text(owner)}'s, whose next conversion into it cuts "
           "them back")
    return (f"{path}: a conversion into it ({_describe(info)}) was interrupted and left "
            f"{UNDO_FILE}: the records past {lengths or 'the lengths it recorded'} are its "
            f"partial append; {who}")


def repair(path):
    """Undoes the append of a conversion into ``path`` that died (its append.undo,
    not held by a live conversion): every store it names is cut back to the length
    it recorded, then the file is removed. Warns what it did."""
    p = os.path.join(path, UNDO_FILE)
    me = os.geteuid()
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        st = os.fstat(fd)
    except FileNotFoundError:
        return
    except OSError as e:
        try:
            st = os.lstat(p)
        except OSError:
            raise ZrecordError(f"{p}: {e.strerror}", code=e.errno) from None
        fd = None
    try:
        if fd is not None and not os.path.samestat(st, os.lstat(p)):
            return                              # removed meanwhile: done by someone else
        if fd is None or st.st_uid != me or st.st_mode & 0o022 or not _is_reg(st):
            raise ZrecordError(
                f"{p} is not a file of yours that only you may write (owner "
                f"{_conn.uid_text(st.st_uid)}, mode {st.st_mode & 0o7777:04o}): it is not acted "
                f"on; if a conversion into {path} by its owner was interrupted, its owner's next "
                "conversion undoes it; else remove the file", code=errno.EPERM, name="EPERM")
        info, stores = parse_undo(os.read(fd, UNDO_MAX), p)
        busy = ZrecordError(f"another conversion ({_describe(info)}) is appending to {path}: "
                            "wait for it to end", code=errno.EBUSY, name="ZR_E_LOCKED")
        try:
            locked = _lock(fd, blocking=False)
        except BlockingIOError:
            raise busy from None
        if not locked and _maybe_alive(info):
            raise busy
        if not os.path.samestat(st, os.lstat(p)):
            return                              # undone and removed before the lock was ours
        removed = []
        for length, rel in stores:
            store = os.path.realpath(os.path.join(path, rel))
            if os.path.relpath(store, path).startswith(os.pardir):
                raise ZrecordValueError(f"{p}: {rel} is not inside {path}", name="ZR_E_CORRUPT")
            if _store.is_store(store):
                n = cut_back_store(store, length, settle=RELEASE_WAIT)
                removed.append(f"{n} records past {length}" + ("" if rel == "." else f" in {rel}"))
        os.unlink(p)
        _fsync_dir(path)
        warnings.warn(f"{path}: undid the append of an interrupted conversion "
                      f"({_describe(info)}): removed {', '.join(removed) or 'nothing'}",
                      RuntimeWarning, stacklevel=4)
    finally:
        if fd is not None:
            os.close(fd)


def _is_reg(st):
    import stat
    return stat.S_ISREG(st.st_mode)


# -------------------------------------------------- temporary directories
def _make_partial(parent, name, like):
    """A new directory .<name>.partial-<random> in parent, open and locked, and in
    it an empty directory <name> for the new store: (fd, the .partial directory,
    the store's). like: the stat of the empty directory the store will replace,
    whose mode and group it takes (None: what mkdir gives)."""
    while True:
        tmp = os.path.join(parent, f".{name}{PARTIAL}{secrets.token_hex(6)}")
        try:
            os.mkdir(tmp, 0o700)
        except FileExistsError:
            continue
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue                            # swept before it was locked: another name
        _lock(fd, blocking=True)
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(tmp))
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        inner = os.path.join(tmp, name)
        try:
            os.mkdir(inner, 0o777 if like is None else 0o700)
            if like is not None:
                try:
                    os.chown(inner, -1, like.st_gid)
                except PermissionError:
                    pass                        # not a group of ours: the parent's
                os.chmod(inner, like.st_mode & 0o7777)
        except BaseException:
            _rmtree(tmp)
            os.close(fd)
            raise
        return fd, tmp, inner


def sweep(parent, name):
    """Removes the temporary directories of conversions into parent/name that
    died: ours, and not locked by a live one. Warns about those it cannot tell."""
    prefix = f".{name}{PARTIAL}"
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix)]
    except OSError:
        return
    me = os.geteuid()
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
            if not e.is_dir(follow_symlinks=False) or st.st_uid != me:
                continue
            fd = os.open(e.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                locked = _lock(fd, blocking=False)
            except BlockingIOError:
                continue                        # a live conversion's
            if not locked:
                warnings.warn(f"{e.path} may be left by an interrupted conversion into "
                              f"{os.path.join(parent, name)}; this file system cannot tell: "
                              "remove it if none runs", RuntimeWarning, stacklevel=4)
                continue
            if os.path.samestat(os.fstat(fd), os.lstat(e.path)):
                _rmtree(e.path)
        except OSError:
            pass
        finally:
            os.close(fd)


def _rmtree(path):
    """Removes path; True once it is gone. The daemon may still be finishing a
    request in it (a connection given up under CONVERT), so try a few times."""
    for _ in range(RMTREE_TRIES):
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        if not os.path.lexists(path):
            return True
    return not os.path.lexists(path)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
