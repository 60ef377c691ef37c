"""One-pass reads: the result of ``ds[idx]`` is written once, by the daemon, into
memory the returned array owns.

A read of at least ``ONE_PASS_MIN`` bytes takes a daemon read buffer (BUFFER_OPEN,
PROTOCOL.md section 7) from the connection's pool and READs into it. The client
maps each buffer once, ``MAP_PRIVATE``, when the daemon gives it, and keeps the
mapping for the buffer's life: the array sees the daemon's pages with no copy, a
write by the user copies only the page written (the kernel's copy on write), so
the result is a writable ndarray that never changes under the user. The buffer
goes back to the pool when the last array over it dies, and the next read of that
size class reuses it, mapping and all: a private mapping shows the memfd's own
pages wherever nobody wrote, so before the reuse only the pages the user wrote
(found in /proc/self/pagemap) are dropped (``MADV_DONTNEED``). The steady state
pays no first touch, no mmap and no page-table fill, and no copy. The daemon
writes into a buffer only while it executes a READ that names it, and a buffer is
named only while no result over it is alive (or by ``ds.read(idx, out=a)`` where
``a`` is such a result: the caller's own memory).

The pool keeps at most ``pool_bytes()`` of free buffers (``LOADERX_READ_POOL``,
bytes, else the daemon's ``read-pool`` budget, STATUS ``budgets`` ``read_pool``);
the ones beyond are closed. Every buffer, free or behind
a live result, is shared memory of the connection and counts against the daemon's
budgets (``max-shm`` per connection, STATUS ``users`` ``shm_bytes``). The pool's
buffers, live and free, stay under half of the connection's ``shm_bytes_max``
(HELLO's limits), so that the shared read buffer of the copy path always has
room; beyond that, or when the daemon refuses a buffer (its per-uid or total
budgets), or descriptors run out, the read falls back to the copy path (one
shared buffer, copied into a new array). A buffer holds one descriptor (its memfd)
and one mapping.
"""

import collections
import ctypes
import errno
import mmap
import os
import weakref
from typing import Any

import numpy as np

from ._errors import ZrecordError

# Below this the copy path is as fast or faster: a one-pass result pays a fixed
# cost (the pool, the page-map scan of the buffer it reuses, the array over it)
# that a short copy into reused heap memory does not. bench/suite/
# gather_breakdown.py's size sweep, three runs on 2 cores (load 10-17): the copy
# path 4-17 % faster at 256 KiB and below, one pass 2-8 % faster at 384 and
# 512 KiB, 22-53 % at 1-4 MiB, 2x at 64 MiB (bench/README.md). A result also
# holds a descriptor while it lives, so small ones must not each take a buffer.
ONE_PASS_MIN = 384 << 10
POOL_BYTES_DEFAULT = 256 << 20
_GRAIN_MIN = 64 << 10
_MADV_POPULATE_READ = 22            # Linux 5.14: fill the page tables, no copy on write
_MADV_DONTNEED = 4

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


def pool_bytes(conn=None):
    """The free buffers a pool keeps, in bytes: ``LOADERX_READ_POOL`` when set,
    else the daemon's ``read-pool`` budget (HELLO's ``read_pool_max``), else
    256 MiB."""
    v = os.environ.get("LOADERX_READ_POOL")
    if v is None or v == "":
        lim = getattr(conn, "limits", None) or {}
        return int(lim.get("read_pool_max", POOL_BYTES_DEFAULT))
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
    """A daemon read buffer of the pool: its handle, its memfd, and this process's
    private mapping of it (made at the first take, kept until the buffer is closed:
    a buffer that is reused is not mapped again)."""
    __slots__ = ("handle", "fd", "nbytes", "pool", "forked", "addr", "used")

    def __init__(self, handle, fd, nbytes, pool):
        self.handle, self.fd, self.nbytes, self.pool = handle, fd, nbytes, pool
        self.forked = False     # a child has a mapping of it: never written again
        self.addr = None
        self.used = 0           # bytes of the last result over it: what a user could write

    def map(self):
        """Maps it (once): private, readable and writable, page tables filled."""
        if self.addr is not None:
            return
        addr = _libc.mmap(None, self.nbytes, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_PRIVATE, self.fd, 0)
        if addr is None or addr == _MAP_FAILED:
            e = ctypes.get_errno()
            raise OSError(e, f"mapping a read buffer of {self.nbytes} bytes: {os.strerror(e)}")
        _libc.madvise(addr, self.nbytes, _MADV_POPULATE_READ)   # best effort (EINVAL < 5.14)
        self.addr = addr

    def clean(self, lo=0, hi=None):
        """Makes the mapping show the buffer again over [lo, hi) (default: what
        the last result spanned): the pages a user wrote (private copies the kernel
        made on write) are dropped, so the next access sees what the daemon wrote.
        Other pages already do: a private mapping shares every page nobody wrote
        with the memfd."""
        hi = self.used if hi is None else hi
        if self.addr is None or hi <= lo:
            return
        for a, b in _written_runs(self.addr + lo, hi - lo):
            _libc.madvise(a, b - a, _MADV_DONTNEED)

    def settle(self):
        """Before a new result over it: drops the pages the user wrote into the
        last one (safe while the daemon writes: the memfd's pages are not
        touched), and forgets that result."""
        self.clean()
        self.used = 0

    def drop(self, tell):
        """Closes it: the mapping and the memfd here, and (tell) the handle in the
        daemon."""
        if self.addr is not None:
            _libc.munmap(self.addr, self.nbytes)
            self.addr = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if tell:
            self.pool.conn.request_nowait("close", {"handle": self.handle})


class _Result:
    """The base of one result's arrays: bytes [0, nbytes) of a pool buffer's
    mapping. When the last array over it goes, the buffer goes back to the pool."""
    __slots__ = ("__array_interface__", "_buf", "__weakref__")

    def __init__(self, buf, nbytes):
        self._buf = buf
        buf.used = max(buf.used, nbytes)
        _live.add(self)
        self.__array_interface__ = {"data": (buf.addr, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}

    def __del__(self):
        self._buf.pool.give_back(self._buf)


# /proc/self/pagemap: 8 bytes per virtual page; bit 63 present, bit 62 swapped (or
# being migrated), bit 61 a page of a file (here: the memfd's own page) rather than
# a private copy.
_PAGE = mmap.PAGESIZE
_pagemap = None             # (pid, fd)


def _pagemap_fd():
    global _pagemap
    if _pagemap is None or _pagemap[0] != os.getpid():
        try:
            fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        _pagemap = (os.getpid(), fd)
    return _pagemap[1]


def _written_runs(addr, nbytes):
    """Runs [a, b) of the pages of [addr, addr + nbytes) that hold a private copy
    (a user wrote there); all of them when the page map cannot be read."""
    first = addr // _PAGE
    last = (addr + nbytes + _PAGE - 1) // _PAGE
    fd = _pagemap_fd()
    try:
        raw = os.pread(fd, (last - first) * 8, first * 8) if fd >= 0 else b""
    except OSError:
        raw = b""
    if len(raw) != (last - first) * 8:
        return [(first * _PAGE, last * _PAGE)]
    return [(a * _PAGE, b * _PAGE) for a, b in _own_runs(raw, first)]


def _own_runs(raw, first):
    """Runs [a, b) of page numbers, from `first` on, whose pagemap entries in `raw`
    are private copies: present or swapped out, and not the file's (the memfd's)
    page."""
    # each entry's top byte, 1 where it is a private copy: all in C
    own = raw[7::8].translate(_OWN_PAGE)
    runs = []
    i = own.find(1)
    while i >= 0:
        j = own.find(0, i)
        j = len(own) if j < 0 else j
        runs.append((first + i, first + j))
        i = own.find(1, j)
    return runs


# pagemap bits 63 (present), 62 (swapped) and 61 (a file's page), seen in an
# entry's top byte: a copy the user made is present or swapped, never the file's
# (a swapped-out copy is as written as a present one)
_OWN_PAGE = bytes(1 if b & 0xC0 and not b & 0x20 else 0 for b in range(256))


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
        limit = pool_bytes(self.conn)
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
        """From a finalizer (any thread, any lock held): only a deque append (or,
        once the connection is closed, the buffer's own close)."""
        if self.closed:
            buf.drop(tell=False)
        else:
            self.returned.append(buf)

    def take(self, nbytes):
        """A buffer of nbytes' size class, or None when the daemon (or the process's
        descriptors) will not give one: the caller copies instead. The caller
        settles it (Buffer.settle) before it maps a result over it, best while the
        daemon READs into it, and holds the connection's buffer_lock."""
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
            try:
                b.map()
            except OSError:
                b.drop(tell=True)
                return None
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
        and close it and their memfd when they die."""
        self.closed = True
        self._drain()
        for bufs in self.free.values():
            for b in bufs:
                b.drop(tell=False)
        self.free.clear()
        self.free_bytes = 0


# The results alive now. A forked child inherits their mappings (private mappings
# of the memfds): their buffers must not be written again, or the child's arrays
# would change, so at a fork each is marked and is closed instead of reused.
_live: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _after_fork_in_parent():
    for m in list(_live):
        m._buf.forked = True


os.register_at_fork(after_in_parent=_after_fork_in_parent)


def pool(conn):
    p = getattr(conn, "result_pool", None)
    if p is None:
        p = conn.result_pool = Pool(conn)
    return p


def result_region(a, conn):
    """(buffer, offset) when the array a lies in a live one-pass result of conn's
    pool over whole pages (or up to the result's end), so that a READ may write
    its bytes in place; else None. A buffer a forked child may still map is
    never written again."""
    b = a
    while isinstance(b, np.ndarray):
        b = b.base
    if not isinstance(b, _Result):
        return None
    buf = b._buf
    if buf.pool is not getattr(conn, "result_pool", None) or buf.forked or buf.fd < 0 \
            or buf.addr is None or not conn.usable:
        return None
    start = a.__array_interface__["data"][0] - buf.addr
    end = start + a.nbytes
    if start < 0 or end > b.__array_interface__["shape"][0] or start % _PAGE or \
            (end % _PAGE and end != b.__array_interface__["shape"][0]):
        return None
    return buf, start


def map_result(buf, nbytes):
    """The bytes [0, nbytes) of buf as a writable uint8 array over its private
    mapping; buf goes back to the pool when the last array over it dies."""
    return np.asarray(_Result(buf, max(nbytes, 1)))[:nbytes]
