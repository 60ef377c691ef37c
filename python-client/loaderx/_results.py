"""One-pass reads: the result of ``ds[idx]`` is written once, by the daemon, into
memory the returned array owns.

A read of at least ``ONE_PASS_MIN`` bytes takes a daemon read buffer (BUFFER_OPEN,
PROTOCOL.md section 7) from the connection's pool, READs into it, and maps it
``MAP_PRIVATE``: the array sees the daemon's pages with no copy, and a write by the
user copies only the page written (the kernel's copy on write), so the result is a
writable ndarray that never changes under the user. The buffer goes back to the
pool when the last array over its mapping dies (the mapping is gone by then), and
the next read of that size class reuses it: its pages are resident already, so the
steady state pays neither a first touch nor a copy. The daemon writes into a
buffer only while it executes a READ that names it, and a buffer is named only
while no mapping of it is alive.

The pool keeps at most ``pool_bytes()`` of free buffers (``LOADERX_READ_POOL``,
bytes, default 256 MiB); the ones beyond are closed. Every buffer, free or behind
a live result, is shared memory of the connection and counts against the daemon's
budgets (``max-shm`` per connection, STATUS ``users`` ``shm_bytes``). The pool's
buffers, live and free, stay under half of the connection's ``shm_bytes_max``
(HELLO's limits), so that the shared read buffer of the copy path always has
room; beyond that, or when the daemon refuses a buffer (its per-uid or total
budgets), or descriptors run out, the read falls back to the copy path (one
shared buffer, copied into a new array). A live result holds one descriptor (the memfd,
to map it again when the buffer is reused).
"""

import collections
import ctypes
import errno
import mmap
import os
import weakref

import numpy as np

from ._errors import ZrecordError

# Below this the copy path is cheaper than a mapping of its own (mmap, munmap and
# a page-table fill per result); bench/suite/gather_breakdown.py measures both.
ONE_PASS_MIN = 256 << 10
POOL_BYTES_DEFAULT = 256 << 20
_GRAIN_MIN = 64 << 10
_MADV_POPULATE_READ = 22            # Linux 5.14: fill the page tables, no copy on write

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


def pool_bytes():
    v = os.environ.get("LOADERX_READ_POOL")
    if v is None or v == "":
        return POOL_BYTES_DEFAULT
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"LOADERX_READ_POOL={v!r}: expected a number of bytes") from None
    if n < 0:
        raise ValueError(f"LOADERX_READ_POOL={v!r}: expected a number of bytes >= 0")
    return n


def size_class(nbytes):
    """The buffer size for a result of nbytes: rounded up to an eighth of its power
    of two (at most 12.5 % more; the daemon's buffers are resident in full)."""
    g = max(_GRAIN_MIN, 1 << max(0, nbytes.bit_length() - 4))
    return -(-nbytes // g) * g


class Buffer:
    """A daemon read buffer of the pool: its handle and memfd."""
    __slots__ = ("handle", "fd", "nbytes", "pool", "forked")

    def __init__(self, handle, fd, nbytes, pool):
        self.handle, self.fd, self.nbytes, self.pool = handle, fd, nbytes, pool
        self.forked = False     # a child has a mapping of it: never written again

    def drop(self, tell):
        """Closes it: the memfd here, and (tell) the handle in the daemon."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if tell:
            self.pool.conn.request_nowait("close", {"handle": self.handle})


class _Mapping:
    """A private mapping of one buffer, the base of the result's arrays; unmapped,
    and its buffer given back to the pool, when the last array goes."""
    __slots__ = ("__array_interface__", "_addr", "_buf", "__weakref__")

    def __init__(self, buf, nbytes):
        addr = _libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE,
                          buf.fd, 0)
        if addr is None or addr == _MAP_FAILED:
            e = ctypes.get_errno()
            raise OSError(e, f"mapping a read result of {nbytes} bytes: {os.strerror(e)}")
        _libc.madvise(addr, nbytes, _MADV_POPULATE_READ)   # best effort (EINVAL < 5.14)
        self._addr = addr
        self._buf = buf
        _live.add(self)
        self.__array_interface__ = {"data": (addr, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}

    def __del__(self):
        i = self.__array_interface__
        _libc.munmap(self._addr, i["shape"][0])
        self._buf.pool.give_back(self._buf)


class Pool:
    """A connection's free read buffers, by size class."""

    def __init__(self, conn):
        self.conn = conn
        self.free = collections.defaultdict(list)   # size class -> [Buffer]
        self.free_bytes = 0
        self.bytes = 0                              # live and free buffers, all
        self.returned = collections.deque()         # given back by finalizers, no lock
        self.closed = False
        shm_max = int(conn.limits.get("shm_bytes_max", 0)) if conn.limits else 0
        self.max_bytes = shm_max // 2 if shm_max else None

    def _drain(self):
        limit = pool_bytes()
        while self.returned:
            b = self.returned.popleft()
            if self.closed or not self.conn.usable or b.forked or \
                    self.free_bytes + b.nbytes > limit:
                b.drop(tell=not self.closed and self.conn.usable)
                self.bytes -= b.nbytes
            else:
                self.free[b.nbytes].append(b)
                self.free_bytes += b.nbytes

    def give_back(self, buf):
        """From a finalizer (any thread, any lock held): only a deque append."""
        self.returned.append(buf)

    def take(self, nbytes):
        """A buffer of nbytes' size class, or None when the daemon (or the process's
        descriptors) will not give one: the caller copies instead. Caller holds the
        connection's buffer_lock."""
        self._drain()
        cls = size_class(nbytes)
        got = self.free.get(cls)
        if got:
            self.free_bytes -= cls
            return got.pop()
        if self.max_bytes is not None and self.bytes + cls > self.max_bytes:
            if self.bytes - self.free_bytes + cls > self.max_bytes:
                return None                 # live results hold the pool's share
            self.clear()
        for attempt in range(2):
            try:
                r = self.conn.request("buffer_open", {"bytes": cls})
            except ZrecordError as e:
                if e.name == "ZR_E_LIMIT" and attempt == 0 and self.free_bytes:
                    self.clear()            # other classes' free buffers, then retry
                    continue
                if e.name == "ZR_E_LIMIT" or e.code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                    return None
                raise
            (fd,) = r["_fds"]
            b = Buffer(r["buffer"], fd, int(r["bytes"]), self)
            self.bytes += b.nbytes
            return b
        return None

    def clear(self):
        """Closes the free buffers (their shared memory back to the budget)."""
        for bufs in self.free.values():
            for b in bufs:
                b.drop(tell=self.conn.usable)
        self.free.clear()
        self.bytes -= self.free_bytes
        self.free_bytes = 0

    def close(self):
        """The connection closes: free buffers go; live results keep their mapping
        and close their memfd when they die."""
        self.closed = True
        self._drain()
        for bufs in self.free.values():
            for b in bufs:
                b.drop(tell=False)
        self.free.clear()
        self.free_bytes = 0


# The mappings alive now. A forked child inherits them (private mappings of the
# memfds): their buffers must not be written again, or the child's arrays would
# change, so at a fork each is marked and is closed instead of reused.
_live = weakref.WeakSet()


def _after_fork_in_parent():
    for m in list(_live):
        m._buf.forked = True


os.register_at_fork(after_in_parent=_after_fork_in_parent)


def pool(conn):
    p = getattr(conn, "result_pool", None)
    if p is None:
        p = conn.result_pool = Pool(conn)
    return p


def map_result(buf, nbytes):
    """The bytes [0, nbytes) of buf as a writable uint8 array that owns a private
    mapping of them (at least one page)."""
    m = _Mapping(buf, max(nbytes, 1))
    return np.asarray(m)[:nbytes]
