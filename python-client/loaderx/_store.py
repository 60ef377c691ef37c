"""Store handles: opening and creating stores by path, reads, appends.

The client opens a store's directory and its ``meta.zr`` itself and passes the
descriptors (PROTOCOL.md section 6), so the daemon acts with the caller's rights.
A handle remembers its path: in a forked child (or after a reconnect) it opens the
store again on the child's own connection.

A read of at least ``_results.ONE_PASS_MIN`` bytes lands once, written by the
daemon, in a buffer of the connection's pool that the returned array maps
privately (``_results``); ``out=`` such a result (whole pages of it) is written in
place, in one pass. Smaller reads, reads the pool cannot serve, and ``out=`` of
other memory copy the records out of the connection's shared read buffer into a
new array (or the caller's ``out``). Large copies (``PARALLEL_MIN_BYTES`` and up) are split in slabs over a
small pool of threads (numpy releases the GIL while it copies), so the first
touch of the new array's pages and the copy run on every core; smaller ones
stay on the calling thread.
"""

import errno
import os
import queue
import threading
import warnings

import numpy as np

from . import _conn, _results, _s3, _shm, _wire
from ._errors import (ZrecordError, ZrecordFileExistsError, ZrecordFileNotFoundError,
                      ZrecordTypeError, ZrecordValueError)

CODECS = ("raw", "zstd", "zstd_dict")
SCHEMA_FILE = "schema.msgpack"
SCHEMA_FILE_MAX = 64 << 10          # docs/DATASETS.md: the daemon reads no larger schema
MAX_RECORD_LEN = 1 << 31            # a record's bytes at most (docs/FORMAT.md)
NDIM_MAX = 32
_REFUSED_KINDS = {"O": "Python objects", "S": "byte strings", "U": "unicode strings",
                  "V": "void/structured records", "M": "datetimes", "m": "timedeltas"}
READ_PIECE_BYTES = 64 << 20
BUFFER_MIN = 1 << 20
# Copies out of the read buffer of at least this many bytes are split over the copy
# pool. Measured on 2 cores (bench/README.md): a 64 MiB batch lands in a freshly
# mapped array (numpy allocates it with mmap), whose first touch and copy together
# took 1.3-1.9x less time on 2 threads than on 1 when the second core was free; below
# 8 MiB the new array is reused heap memory, the copy is short, and handing half of
# it to another thread did not pay.
PARALLEL_MIN_BYTES = 8 << 20
# Threads copying one read, the calling thread included: the CPUs this process may
# run on, at most this many. None: that count; an int overrides it (1: never split).
COPY_THREADS = None
COPY_THREADS_MAX = 8
# A slab is the unit a thread claims (read size / (2 x threads), within these
# bounds): large enough to amortize a claim and its GIL hand-off, small enough
# that a helper slowed down by other load (a core shared with another process)
# leaves the rest to the calling thread, which only ever waits for the slab a
# helper is in the middle of. On 2 shared cores, 16 MiB slabs made about one 64 MiB
# read in four 4x slower while another process kept a core busy; 4-8 MiB ones
# bounded that to ~2x, and 8 MiB ones copy ~10% faster than 4 MiB ones when idle.
SLAB_MIN_BYTES = 1 << 20
SLAB_MAX_BYTES = 8 << 20
# Ragged reads copy record by record (Python work under the GIL per record): they
# are split only when their records average at least this many bytes.
RAGGED_PARALLEL_MIN_RECORD = 64 << 10


def check_codec(codec):
    if codec not in CODECS:
        raise ZrecordValueError(
            f"unknown codec {codec!r}: expected one of {', '.join(repr(c) for c in CODECS)}",
            name="ZR_E_BAD_CODEC")
    return codec


def canonical_dtype(dtype):
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ZrecordTypeError(f"not a numpy dtype: {dtype!r} ({e})") from None
    if dt.kind in _REFUSED_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise ZrecordTypeError(
            f"dtype {dt} ({_REFUSED_KINDS.get(dt.kind, 'structured')}) cannot be stored: "
            "use booleans, integers, floats or complex numbers, or raw byte records (Zrecord)")
    if dt.kind == "f" and dt.itemsize > 8 or dt.kind == "c" and dt.itemsize > 16:
        raise ZrecordTypeError(f"dtype {dt} (extended precision) cannot be stored portably")
    return dt.str


def _open_dir(path):
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ZrecordFileNotFoundError(f"no zrecord store at {path!r}: no such directory",
                                       code=errno.ENOENT) from None
    except NotADirectoryError:
        raise ZrecordFileNotFoundError(f"no zrecord store at {path!r}: not a directory",
                                       code=errno.ENOTDIR) from None


def open_meta(dirfd, path, writable):
    """(the meta.zr proof descriptor, whether it is writable)."""
    if writable is None:
        try:
            return os.open("meta.zr", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dirfd), True
        except PermissionError:
            writable = False
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES):
                writable = False
            elif e.errno == errno.ENOENT:
                raise ZrecordFileNotFoundError(
                    f"no zrecord store at {path!r}: the directory has no meta.zr",
                    name="ZR_E_NOT_STORE") from None
            else:
                raise
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open("meta.zr", flags, dir_fd=dirfd), writable
    except FileNotFoundError:
        raise ZrecordFileNotFoundError(
            f"no zrecord store at {path!r}: the directory has no meta.zr",
            name="ZR_E_NOT_STORE") from None


def convert(conn, src, dst, to, shown=None):
    """CONVERT: the ragged dataset at src into a new one at dst (made if missing);
    errors name the destination ``shown`` (default dst)."""
    src, dst = os.path.abspath(src), os.path.abspath(dst)
    dirfd = _open_dir(src)
    try:
        meta, _ = open_meta(dirfd, src, False)
        try:
            os.makedirs(dst, exist_ok=True)
            out = _open_dir(dst)
            try:
                r = conn.request("convert", {"to": to}, fds=(dirfd, meta, out),
                                 context=f"converting {src} to {shown or dst}", abandon=True)
            finally:
                os.close(out)
        finally:
            os.close(meta)
    finally:
        os.close(dirfd)
    return int(r["count"])


def is_store(path):
    if _s3.is_url(path):
        return True   # the daemon says what is there
    return os.path.isfile(os.path.join(path, "meta.zr"))


def _warn_interrupted(path, parent=True):
    """Warns when an interrupted conversion left records in the store at path (or in
    the set it is a stream of, with parent): its append.undo is there, and no live
    process holds it (_conversion.py)."""
    from ._conversion import check_undo
    for d in (path, os.path.dirname(path)) if parent else (path,):
        msg = check_undo(d)
        if msg:
            warnings.warn(msg, RuntimeWarning, stacklevel=4)


class Handle:
    """A dataset handle on a connection, reopened after a fork."""

    def __init__(self, path, conn=None, writable=None, create=None, dict_bytes=None,
                 reply=None, handle=None, warn=True):
        self.path = path if _s3.is_url(path) else os.path.abspath(os.fspath(path))
        self._warn = warn
        self.closed = False
        self.ragged_rate = 0.0         # bytes per record of the last ragged read
        if reply is not None:          # a stream handle from MSSET_OPEN
            self.conn = conn
            self.handle = handle
            self._take(reply)
            return
        self.conn = conn or _conn.default()
        if create is not None:
            self._create(create, dict_bytes)
        else:
            self._open(writable)

    def _take(self, reply):
        self.schema = reply["schema"]
        self.length = reply.get("length", 0)
        self.has_dict = bool(reply.get("has_dict", False))
        self.writable = bool(reply.get("writable", False))

    def _open(self, writable=None):
        if _s3.is_url(self.path):
            # a store in object storage: no descriptors, the credentials instead;
            # read-only (docs/REMOTE.md)
            if writable:
                raise ZrecordValueError(f"{self.path} is in object storage: read-only",
                                        name="ZR_E_READONLY")
            r = self.conn.request("dataset_open", {"remote": _s3.remote_field(self.path)},
                                  context=f"opening {self.path}")
            self.handle = r["handle"]
            self._take(r)
            return
        dirfd = _open_dir(self.path)
        try:
            meta, w = open_meta(dirfd, self.path, writable)
            try:
                r = self.conn.request("dataset_open", {"writable": w}, fds=(dirfd, meta),
                                      context=f"opening {self.path}")
            finally:
                os.close(meta)
        finally:
            os.close(dirfd)
        self.handle = r["handle"]
        self._take(r)
        if self._warn:
            _warn_interrupted(self.path)

    def _create(self, schema, dict_bytes):
        try:
            os.makedirs(self.path, exist_ok=True)
        except FileExistsError:
            raise ZrecordFileExistsError(f"{self.path!r} exists and is not a directory",
                                         code=errno.EEXIST) from None
        if is_store(self.path):
            raise ZrecordFileExistsError(
                f"a store already exists at {self.path!r}: open it without dtype/item_shape, "
                "or choose a new path", name="ZR_E_EXISTS")
        dirfd = _open_dir(self.path)
        fds = [dirfd]
        fields = {"schema": schema}
        mfd = None
        try:
            if dict_bytes is not None:
                mfd = _shm.SealedMemfd([bytes(dict_bytes)], "loaderx-dict")
                fds.append(mfd.fd)
                fields["dict_bytes"] = mfd.size
            r = self.conn.request("dataset_create", fields, fds=fds,
                                  context=f"creating {self.path}")
        finally:
            os.close(dirfd)
            if mfd:
                mfd.close()
        self.handle = r["handle"]
        self._take(r)

    # ----------------------------------------------------------------- basics
    def h(self):
        """The handle number on the current process's connection."""
        if self.closed:
            raise ZrecordValueError(f"the dataset {self.path!r} is closed")
        c = self.conn
        if not c.usable or c.peer_closed():
            # a forked child, or the daemon went away (a restart; a connection it
            # closed while idle): open again on a fresh connection
            self.conn = _conn.default() if c.pid != os.getpid() else _conn.reconnect()
            self._open(self.writable)
        return self.handle

    def retry_lost(self, kind, fn):
        """``fn()``, which sends ``kind`` requests on this handle; once more, on a
        fresh connection, when the connection was lost under it (the daemon closed
        it between h()'s look and the send) and the retry cannot act twice
        (``ConnectionLost.may_retry``)."""
        try:
            return fn()
        except _conn.ConnectionLost as e:
            if not e.may_retry(kind):
                raise
        return fn()

    def request(self, kind, fields=None, fds=(), context=None, abandon=False, during=None):
        def send():
            f = {"handle": self.h()}
            if fields:
                f.update(fields)
            return self.conn.request(kind, f, fds=fds, context=context or self.path,
                                     abandon=abandon, during=during)
        return self.retry_lost(kind, send)

    def info(self):
        r = self.request("info")
        self._take(r)
        return r

    def __del__(self):
        # A dataset dropped without close(): give the handle back without blocking
        # (a finalizer may run in the middle of this thread's own request).
        try:
            if not self.closed and getattr(self, "handle", None) is not None:
                self.closed = True
                self.conn.request_nowait("close", {"handle": self.handle})
        except Exception:
            pass

    def close(self):
        if self.closed:
            return
        self.closed = True
        c = self.conn
        if c.usable:
            try:
                c.request("close", {"handle": self.handle})
            except ZrecordError:
                pass


# ------------------------------------------------------------------- reading
def _buffer(conn, nbytes):
    """The connection's read buffer, at least nbytes (caller holds buffer_lock)."""
    b = conn.read_buffer
    if b is not None and b.nbytes >= nbytes:
        return b
    size = max(BUFFER_MIN, 1 << (max(nbytes, 1) - 1).bit_length())
    if b is not None:
        conn.read_buffer = None
        b.unmap()
        try:
            conn.request("close", {"handle": b.handle})
        except ZrecordError:
            pass
    try:
        r = conn.request("buffer_open", {"bytes": size})
    except ZrecordError as e:
        if e.name != "ZR_E_LIMIT":
            raise
        # The budget is short: free the one-pass pool's spare buffers, and ask
        # for no more than this read needs.
        if conn.result_pool is not None:
            conn.result_pool._drain()
            conn.result_pool.clear()
        r = conn.request("buffer_open", {"bytes": max(nbytes, 1)})
    (fd,) = r["_fds"]
    nb = _shm.MappedBuffer(fd, r["bytes"])
    nb.handle = r["buffer"]
    conn.read_buffer = nb
    return nb


# ------------------------------------------------------------- the copy pool
class _Job:
    """``fn(i)`` for i in range(n), claimed one at a time by whoever takes part."""

    def __init__(self, fn, n):
        self.fn = fn
        self.n = n
        self._next = 0
        self._done = 0
        self._cancelled = False
        self.error = None
        # entered by a with of the lock itself: a KeyboardInterrupt in
        # Condition.__enter__ or __exit__ (Python functions) left the lock held,
        # and cancel() then waited for it forever (_conn.Connection's lock too)
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)

    def work(self):
        lock, cv = self._lock, self._cv
        while True:
            with lock:
                i = self._next
                if i >= self.n or self._cancelled:
                    return
                self._next = i + 1
            try:
                self.fn(i)
            except BaseException as e:  # handed to the caller, which re-raises it
                with lock:
                    if self.error is None:
                        self.error = e
                    self._cancelled = True
            finally:
                with lock:
                    self._done += 1
                    if self._done == self._next and (self._done == self.n or self._cancelled):
                        cv.notify_all()

    def wait(self):
        """Until every claimed slab is copied (a helper that never came claims nothing)."""
        with self._lock:
            while not (self._done == self._next and (self._done == self.n or self._cancelled)):
                self._cv.wait()

    def cancel(self):
        with self._lock:
            self._cancelled = True


class _CopyPool:
    """Daemon threads that take part in the jobs put on their queue."""

    def __init__(self, helpers):
        self.pid = os.getpid()
        self.helpers = helpers
        self._q = queue.SimpleQueue()
        for i in range(helpers):
            threading.Thread(target=self._run, name=f"loaderx-copy-{i}", daemon=True).start()

    def _run(self):
        q = self._q
        while True:
            job = q.get()
            if job is None:
                return
            job.work()
            del job

    def stop(self):
        for _ in range(self.helpers):
            self._q.put(None)

    def run(self, fn, n):
        """fn(i) for i in range(n) on the helpers and the calling thread; returns
        when all are done, raising the first exception one of them raised."""
        job = _Job(fn, n)
        for _ in range(min(self.helpers, n - 1)):
            self._q.put(job)
        try:
            job.work()
            job.wait()
        except BaseException:
            job.cancel()            # e.g. KeyboardInterrupt: no slab is started after this
            raise
        if job.error is not None:
            raise job.error


_pool = None
_pool_lock = threading.Lock()


def copy_threads():
    """Threads that copy one large read, the calling thread included."""
    if COPY_THREADS is not None:
        return max(1, int(COPY_THREADS))
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, COPY_THREADS_MAX))


def _copy_pool(threads):
    """This process's copy pool with at least threads - 1 helpers (created lazily;
    a pool inherited through fork has no threads in the child and is never used)."""
    global _pool
    p = _pool
    if p is not None and p.pid == os.getpid() and p.helpers >= threads - 1:
        return p
    with _pool_lock:
        p = _pool
        if p is None or p.pid != os.getpid() or p.helpers < threads - 1:
            if p is not None and p.pid == os.getpid():
                p.stop()            # COPY_THREADS grew: its threads end when idle
            p = _pool = _CopyPool(threads - 1)
        return p


def _after_fork_in_child():
    global _pool, _pool_lock
    _pool_lock = threading.Lock()
    _pool = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _slabs(nbytes, threads, align=4096):
    """Slab size and count for copying nbytes on threads threads."""
    if threads <= 1 or nbytes < max(PARALLEL_MIN_BYTES, 2 * align):
        return nbytes, 1
    per = min(SLAB_MAX_BYTES, max(SLAB_MIN_BYTES, -(-nbytes // (2 * threads))))
    per = -(-per // align) * align
    return per, -(-nbytes // per)


def copy_bytes(dst, src):
    """dst[:] = src for two 1-D uint8 arrays of one length, split over the copy
    pool when large (each thread first-touches the part of dst it writes)."""
    n = len(dst)
    threads = copy_threads() if n >= PARALLEL_MIN_BYTES else 1
    per, count = _slabs(n, threads)
    if count <= 1:
        dst[:] = src
        return

    def slab(i):
        a = i * per
        b = min(n, a + per)
        dst[a:b] = src[a:b]

    _copy_pool(threads).run(slab, count)


def _index_pieces(idx, per_piece):
    for s in range(0, len(idx), per_piece):
        yield s, idx[s:s + per_piece]


def _read_dense_one_pass(handle, idx, rec):
    """The records idx (rec bytes each) as a uint8 array over a pool buffer the
    daemon wrote, or None when the pool has none to give."""
    h = handle.h()
    conn = handle.conn
    nbytes = rec * len(idx)
    per = max(8, (conn.frame_max - 256) // 8 // 8 * 8)    # offsets stay 8-aligned
    with conn.buffer_lock:
        buf = _results.pool(conn).take(nbytes)
        if buf is None:
            return None
        settle = buf.settle                 # while the daemon gathers the first piece
        try:
            for s, piece in _index_pieces(idx, per):
                conn.request("read", {"handle": h, "buffer": buf.handle, "offset": s * rec,
                                      "indices": _wire.u64s(piece)}, context=handle.path,
                             during=settle)
                settle = None
        except BaseException:
            buf.pool.give_back(buf)
            raise
    try:
        return _results.map_result(buf, nbytes)
    except OSError:
        buf.pool.give_back(buf)
        return None


def _read_dense_in_place(handle, idx, rec, out):
    """out= a one-pass result (or whole pages of one): the daemon writes the
    records straight into its buffer, one pass. False when out is other memory."""
    h = handle.h()
    conn = handle.conn
    with conn.buffer_lock:
        where = _results.result_region(out, conn)
        if where is None:
            return False
        buf, at = where
        # the pages the user wrote show the buffer again (while the daemon gathers)
        clean = lambda: buf.clean(at, at + out.nbytes)  # noqa: E731
        per = max(8, (conn.frame_max - 256) // 8 // 8 * 8)
        for s, piece in _index_pieces(idx, per):
            conn.request("read", {"handle": h, "buffer": buf.handle, "offset": at + s * rec,
                                  "indices": _wire.u64s(piece)}, context=handle.path,
                         during=clean)
            clean = None
    return True


def check_out(out, shape, dtype):
    """out= of a dense read: a writable C-contiguous array of the result's shape and
    dtype, else ValueError (TypeError for what is not an ndarray) naming the
    difference."""
    if not isinstance(out, np.ndarray):
        raise ZrecordTypeError(f"out: expected a numpy array, got {type(out).__name__}")
    if out.dtype != dtype:
        raise ZrecordValueError(f"out has dtype {out.dtype}, the records are {dtype}")
    if out.shape != shape:
        raise ZrecordValueError(f"out has shape {out.shape}, the records need {shape}")
    if not out.flags.c_contiguous:
        raise ZrecordValueError("out is not C-contiguous (use np.ascontiguousarray, or an "
                                "array of its own)")
    if not out.flags.writeable:
        raise ZrecordValueError("out is read-only")


def read_dense(handle, idx, dtype, item_shape, out=None):
    """Records idx as a (len(idx), *item_shape) array: one the daemon wrote (one
    pass), or a new one (or ``out``) copied out of the shared buffer."""
    return handle.retry_lost("read", lambda: _read_dense(handle, idx, dtype, item_shape, out))


def _read_dense(handle, idx, dtype, item_shape, out):
    dt = np.dtype(dtype)
    rec = dt.itemsize * int(np.prod(item_shape, dtype=np.int64))
    shape = (len(idx),) + tuple(item_shape)
    if out is not None:
        check_out(out, shape, dt)
        if len(idx) and rec and _read_dense_in_place(handle, idx, rec, out):
            return out
    elif rec * len(idx) >= _results.ONE_PASS_MIN:
        a = _read_dense_one_pass(handle, idx, rec)
        if a is not None:
            return a.view(dt).reshape(shape)
    if out is None:
        out = np.empty(shape, dtype=dt)
    if len(idx) == 0:
        return out
    conn_frame = handle.conn.frame_max
    per = max(1, min(READ_PIECE_BYTES // max(rec, 1), (conn_frame - 256) // 8))
    flat = out.reshape(len(idx), -1).view(np.uint8) if rec else None
    for s, piece in _index_pieces(idx, per):
        h = handle.h()
        conn = handle.conn
        with conn.buffer_lock:
            buf = _buffer(conn, max(rec * len(piece), 1))
            r = conn.request("read", {"handle": h, "buffer": buf.handle, "offset": 0,
                                      "indices": _wire.u64s(piece)}, context=handle.path)
            n = r["count"] * rec
            if rec:
                copy_bytes(flat[s:s + len(piece)].reshape(-1), buf.array[:n])
    return out


def shape_list(words, count, ndim):
    """The shapes of count records from a READ's or BATCH's ``shapes`` (u64s): ndim
    dims each, or for a store of any ndim (ndim 0) each record's ndim, then its dims."""
    if ndim:
        return [tuple(s) for s in words[:count * ndim].reshape(-1, ndim).tolist()]
    w = words.tolist()
    out, at = [], 0
    for _ in range(count):
        k = w[at]
        out.append(tuple(w[at + 1:at + 1 + k]))
        at += 1 + k
    return out


def _ragged_per_read(conn, ndim):
    per = max(1, (conn.frame_max - 512) // (8 * (2 + (ndim or 1 + NDIM_MAX))) - 16)
    return min(per, 65536)


def _read_ragged_one_pass(handle, idx, dt, ndim):
    """The records idx as arrays over one pool buffer the daemon wrote (one READ),
    or None when the pool has none to give. The buffer is sized from the bytes per
    record of this handle's last read, and grown to the daemon's `needed`."""
    h = handle.h()
    conn = handle.conn
    need = int(handle.ragged_rate * len(idx) * 1.25) + 4096
    with conn.buffer_lock:
        p = _results.pool(conn)
        for _ in range(4):
            buf = p.take(need)
            if buf is None:
                return None
            try:
                r = conn.request("read", {"handle": h, "buffer": buf.handle, "offset": 0,
                                          "indices": _wire.u64s(idx)}, context=handle.path,
                                 during=buf.settle)
                break
            except ZrecordError as e:
                buf.pool.give_back(buf)
                if e.name == "ZR_E_BUFFER" and int(e.extra.get("needed", 0)) > buf.nbytes:
                    need = int(e.extra["needed"])
                    continue
                raise
            except BaseException:
                buf.pool.give_back(buf)
                raise
        else:
            return None
    count, nbytes = r["count"], int(r["bytes"])
    handle.ragged_rate = nbytes / max(count, 1)
    offs = _wire.from_u64s(r.get("offsets"))[:count].tolist()
    lens = _wire.from_u64s(r.get("lengths"))[:count].tolist()
    shapes = shape_list(_wire.from_u64s(r.get("shapes")), count, ndim)
    try:
        base = _results.map_result(buf, nbytes)
    except OSError:
        buf.pool.give_back(buf)
        return None
    return [base[o:o + ln].view(dt).reshape(sh) for o, ln, sh in zip(offs, lens, shapes)]


def read_ragged(handle, idx, dtype, ndim):
    """Records idx as a list of arrays of their own shapes; ndim 0: a store whose
    records each have their own ndim."""
    return handle.retry_lost("read", lambda: _read_ragged(handle, idx, dtype, ndim))


def _read_ragged(handle, idx, dtype, ndim):
    dt = np.dtype(dtype)
    conn = handle.conn
    per = _ragged_per_read(conn, ndim)
    if 0 < len(idx) <= per and handle.ragged_rate * len(idx) >= _results.ONE_PASS_MIN:
        recs = _read_ragged_one_pass(handle, idx, dt, ndim)
        if recs is not None:
            return recs
    out = []
    for _, piece in _index_pieces(idx, per):
        need = 0
        while True:
            h = handle.h()
            conn = handle.conn
            with conn.buffer_lock:
                buf = _buffer(conn, need or (conn.read_buffer.nbytes if conn.read_buffer else BUFFER_MIN))
                try:
                    r = conn.request("read", {"handle": h, "buffer": buf.handle, "offset": 0,
                                              "indices": _wire.u64s(piece)}, context=handle.path)
                except ZrecordError as e:
                    if e.name == "ZR_E_BUFFER" and "needed" in e.extra and e.extra["needed"] > buf.nbytes:
                        need = int(e.extra["needed"])
                        continue
                    raise
                offs = _wire.from_u64s(r.get("offsets"))
                lens = _wire.from_u64s(r.get("lengths"))
                shapes = shape_list(_wire.from_u64s(r.get("shapes")), r["count"], ndim)
                handle.ragged_rate = int(r["bytes"]) / max(r["count"], 1)
                out.extend(_copy_records(buf.array, offs, lens, shapes, r["count"], dt))
            break
    return out


def _copy_records(a, offs, lens, shapes, count, dt):
    """count records out of the buffer a, each a new array of its shape (shapes, a
    list of tuples); split
    over the copy pool when they are large (the per-record Python work holds the
    GIL, so small records stay on the calling thread). In the split path the
    calling thread allocates every record and the pool only copies: memory comes
    from the caller's malloc arena as in the single-thread path (a helper's arena
    would hand back fresh pages to fault in on every read)."""
    offs = offs[:count].tolist()
    lens = lens[:count].tolist()
    recs = [None] * count
    total = sum(lens)
    threads = copy_threads() if total >= PARALLEL_MIN_BYTES else 1

    def span(lo, hi):
        for j in range(lo, hi):
            o = offs[j]
            recs[j] = a[o:o + lens[j]].view(dt).reshape(shapes[j]).copy()

    if threads <= 1 or count < 2 or total < PARALLEL_MIN_BYTES \
            or total < RAGGED_PARALLEL_MIN_RECORD * count:
        span(0, count)
        return recs
    for j in range(count):
        recs[j] = np.empty(shapes[j], dt)

    def copy_span(lo, hi):
        for j in range(lo, hi):
            o = offs[j]
            recs[j].reshape(-1).view(np.uint8)[:] = a[o:o + lens[j]]

    per, _ = _slabs(total, threads)
    cuts = [0]                  # runs of records of about per bytes each
    acc = 0
    for j, ln in enumerate(lens):
        acc += ln
        if acc >= per and j + 1 < count:
            cuts.append(j + 1)
            acc = 0
    cuts.append(count)
    _copy_pool(threads).run(lambda i: copy_span(cuts[i], cuts[i + 1]), len(cuts) - 1)
    return recs


# ------------------------------------------------------------------ appending
LEVEL_MIN, LEVEL_MAX = 1, 19        # compression levels, zstd's scale (PROTOCOL.md, APPEND)


def level_fields(level, codec):
    """The APPEND fields for a compression level: {} for None (the codec's default,
    docs/DATASETS.md "Levels"), else {"level": level}, checked."""
    if level is None:
        return {}
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)):
        raise ZrecordTypeError(f"level must be an int from {LEVEL_MIN} to {LEVEL_MAX} "
                               f"(zstd's scale), got {type(level).__name__}")
    if not LEVEL_MIN <= level <= LEVEL_MAX:
        raise ZrecordValueError(f"level {level}: a level is {LEVEL_MIN} to {LEVEL_MAX} "
                                "(zstd's scale; higher is smaller and slower)")
    if codec == "raw":
        raise ZrecordValueError(f"level {level} given for a raw store, which is not "
                                "compressed: use codec 'zstd' or 'zstd_dict'")
    return {"level": int(level)}


def ragged_header(ndim, shape):
    return np.array((ndim,) + tuple(shape), dtype="<u8")


def dense_fields(schema, arr):
    return {"dtype": schema["dtype"], "count": int(arr.shape[0]),
            "record_bytes": int(arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))),
            "item_shape": [int(x) for x in arr.shape[1:]]}


def ragged_pieces(records):
    """(pieces to write, sizes) for records already validated."""
    pieces, sizes = [], []
    for r in records:
        hdr = ragged_header(r.ndim, r.shape)
        pieces.append(hdr)
        pieces.append(r)
        sizes.append(hdr.nbytes + r.nbytes)
    return pieces, sizes
