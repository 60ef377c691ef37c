"""Shared memory: sealed memfds the client fills, daemon buffers it maps.

PROTOCOL.md section 7: data passed to the daemon travels in a memfd sealed
against write, shrink and grow; buffers and rings the daemon creates are mapped
read-only.
"""

import fcntl
import mmap
import os
import sys

import numpy as np

_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_IOV_MAX = 1024


class SealedMemfd:
    """A memfd filled from byte-like pieces and sealed; close() after sending."""

    def __init__(self, pieces, name="loaderx", fill=None):
        """``fill(fd)``, when given, writes the memfd's bytes instead of ``pieces``
        (from a file by ``os.sendfile``, without a buffer in this process)."""
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            if fill is not None:
                fill(self.fd)
                self.size = os.fstat(self.fd).st_size
            else:
                self.size = _write_all(self.fd, pieces)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
        except BaseException:
            os.close(self.fd)
            raise

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _as_bytes_view(p):
    if isinstance(p, np.ndarray):
        p = np.ascontiguousarray(p)
        return memoryview(p.reshape(-1).view(np.uint8)) if p.size else memoryview(b"")
    return memoryview(p).cast("B")


def _write_all(fd, pieces):
    views = [v for v in (_as_bytes_view(p) for p in pieces) if len(v)]
    total = sum(len(v) for v in views)
    i = 0
    while i < len(views):
        batch = views[i:i + _IOV_MAX]
        n = os.writev(fd, batch)
        # advance over what was written (writev on a memfd writes it all, but be exact)
        while n > 0:
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i] = views[i][n:]
                n = 0
    return total


# Python 3.13+ can map without keeping a duplicate of the descriptor (an mmap object
# otherwise holds one, for size() and resize(), until it is deallocated).
_MMAP_KW = {"trackfd": False} if sys.version_info >= (3, 13) else {}


class MappedBuffer:
    """A daemon-created memfd mapped read-only (a read buffer or a loader ring).

    Takes ``fd`` and closes it. Arrays made from ``mm`` (or ``array``) keep the
    mapping alive; it is unmapped when the last reference goes, never closed here.
    """

    def __init__(self, fd, nbytes):
        try:
            self.mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ,
                                **_MMAP_KW)
        finally:
            os.close(fd)
        self.nbytes = nbytes
        self.array = np.frombuffer(self.mm, dtype=np.uint8)
        self.address = self.array.ctypes.data

    def unmap(self):
        # Views handed out keep the mapping alive; it goes when the last one does.
        self.array = None
        self.mm = None


class View:
    """A numpy array interface over mapped memory (``np.asarray(View(...))``).
    The array's base is the View, which keeps `owner` (whoever must know when
    the last array over the memory is gone) and `mm` (the mapping stays mapped
    while an array lives, whatever happens to its MappedBuffer)."""

    __slots__ = ("owner", "mm", "__array_interface__")

    def __init__(self, owner, mm, address, shape, dtype, readonly=True, strides=None):
        self.owner = owner
        self.mm = mm
        self.__array_interface__ = View.interface(address, shape, dtype, readonly, strides)

    @staticmethod
    def interface(address, shape, dtype, readonly=True, strides=None):
        """The array interface of a View (numpy reads it, never changes it: one
        may serve many Views, over())."""
        dtype = np.dtype(dtype)
        return {"data": (address, readonly), "shape": tuple(shape), "typestr": dtype.str,
                "descr": dtype.descr, "strides": None if strides is None else tuple(strides),
                "version": 3}

    @classmethod
    def over(cls, owner, mm, interface):
        """A View of an interface made before (interface())."""
        v = cls.__new__(cls)
        v.owner = owner
        v.mm = mm
        v.__array_interface__ = interface
        return v


class ViewTemplate:
    """The array interface of views of one shape and dtype, made once: a loader's
    stream gives every batch the same shape, so only the address changes
    (``np.asarray(t.view(owner, mm, address))`` costs about half of a View
    made from its arguments)."""

    __slots__ = ("shape", "typestr", "descr")

    def __init__(self, shape, dtype):
        dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.typestr = dtype.str
        self.descr = dtype.descr

    def view(self, owner, mm, address):
        return View.over(owner, mm, {"data": (address, True), "shape": self.shape,
                                     "typestr": self.typestr, "descr": self.descr,
                                     "strides": None, "version": 3})


class PackedTemplate:
    """The views of a packed stream's batch (its tokens, segment ids and
    positions: three (B, L) arrays at fixed offsets in the region), made from
    interfaces kept per region address: a loader's slots are few, so after
    the first batch of each slot a batch's three arrays cost one View (tokens
    of 4 bytes: one (3, B, L) array of which the three are rows) or three,
    without an interface made (about a sixth of the three Views made from
    their arguments, per batch, on the client's path)."""

    __slots__ = ("shape", "dtype", "seg", "pos", "joint", "cache")

    CACHE_MAX = 1024        # addresses kept (a loader's slots; rings passed by RING)

    def __init__(self, shape, dtype, seg, pos):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.seg = seg
        self.pos = pos
        # tokens of int32 (the common case) and the three regions equally apart
        # (pack.h: each at the next multiple of 64 after the one before)
        self.joint = self.dtype.str == "<i4" and pos == 2 * seg
        self.cache = {}

    def _interfaces(self, address):
        if self.joint:
            item = self.dtype.itemsize
            ifs = (View.interface(address, (3,) + self.shape, "<i4",
                                  strides=(self.seg, self.shape[1] * item, item)),)
        else:
            ifs = (View.interface(address, self.shape, self.dtype),
                   View.interface(address + self.seg, self.shape, "<i4"),
                   View.interface(address + self.pos, self.shape, "<i4"))
        if len(self.cache) >= self.CACHE_MAX:
            self.cache.clear()
        self.cache[address] = ifs
        return ifs

    def views(self, owner, mm, address):
        """(tokens, segment ids, positions): read-only arrays over the region at
        `address`, each keeping `owner` and `mm` in its base."""
        ifs = self.cache.get(address)
        if ifs is None:
            ifs = self._interfaces(address)
        if self.joint:
            a = np.asarray(View.over(owner, mm, ifs[0]))
            return a[0], a[1], a[2]
        return [np.asarray(View.over(owner, mm, i)) for i in ifs]


class Owner:
    """Calls ``gone(key)`` when it is garbage (any thread, any time; errors are
    swallowed): the base that views of shared memory keep, so whoever lent the
    memory (a ring slot, an arena buffer) learns when the last view is gone."""

    __slots__ = ("gone", "key", "__weakref__")

    def __init__(self, gone, key):
        self.gone = gone
        self.key = key

    def __del__(self):
        try:
            self.gone(self.key)
        except Exception:
            pass
