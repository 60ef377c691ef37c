"""The arena: shared memory a DataLoader owns, into which its worker processes
write the arrays their transforms return.

A buffer is a memfd, mapped read-write here (the loader's process) and by each
worker that has written into it; its descriptor crosses to a worker once. A
worker writes a result's arrays into the buffer the loader assigned to its
task, or, when none fits, into a buffer it creates within the bytes the task
may add (`grant`), whose descriptor it passes back: the loader adopts it. The
arrays the training loop gets are views of the buffer; when the last of a
result's arrays is garbage the buffer is free again, for any worker's next
task. So in the steady state a result costs one write of its arrays and no
system call, mapping or page fault.

The buffers, free and live, stay within a budget (``arena_bytes``, default
:func:`default_budget`): a task is assigned a free buffer at least as large as
the recent results, and may add a buffer only within the budget left over by
the buffers and the grants of tasks in flight; free buffers are dropped to make
room. A result that finds no room travels pickled through the socket instead
(a copy more; ``stats()`` counts it).

Every method runs on the loader's thread but the results' owners
(``_shm.Owner``), which may run on any thread and only append to a deque.
"""

import collections
import itertools
import mmap
import os

import numpy as np

from ._shm import Owner, View

__all__ = ["Arena", "default_budget", "size_class"]

_MIB = 1 << 20
BUDGET_MIN = 256 * _MIB
BUDGET_MAX = 16 << 30
_RECENT = 8                 # results whose sizes set the size of buffers assigned


def _memory_limit():
    """Physical memory, or the memory cgroup's limit when lower."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        mem = 8 << 30
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    path = "/sys/fs/cgroup" + line[3:].strip()
                    with open(os.path.join(path, "memory.max")) as m:
                        v = m.read().strip()
                    if v.isdigit():
                        mem = min(mem, int(v))
    except OSError:
        pass
    return mem


def default_budget():
    """``$LOADERX_ARENA`` (bytes), else an eighth of the memory the process may
    use, within 256 MiB .. 16 GiB."""
    env = os.environ.get("LOADERX_ARENA")
    if env:
        try:
            v = int(env)
            if v >= 0:
                return v
        except ValueError:
            pass
        raise ValueError(f"LOADERX_ARENA must be a number of bytes, got {env!r}")
    return min(max(_memory_limit() // 8, BUDGET_MIN), BUDGET_MAX)


def size_class(n):
    """The size of a buffer made for `n` bytes: at most an eighth more, in
    pages."""
    n = max(int(n), 1 << 16)
    step = max((1 << (n - 1).bit_length()) // 16, mmap.PAGESIZE)
    return -(-n // step) * step


class Buffer:
    __slots__ = ("id", "fd", "size", "mm", "array", "address", "state")

    def __init__(self, bid, fd, size):
        self.id, self.fd, self.size = bid, fd, size
        self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                            prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.array = np.frombuffer(self.mm, np.uint8)
        self.address = self.array.ctypes.data
        self.state = "free"       # "free", "task" (assigned to a task in flight), "live"


class Arena:
    def __init__(self, budget):
        self.budget = int(budget)
        self.bufs = {}              # id -> Buffer
        self.total = 0              # bytes of every buffer
        self.reserved = 0           # grants of tasks in flight
        self.freed = collections.deque()   # buffers whose results died (any thread)
        self.dropped = []           # ids dropped since the workers were told
        self._ids = itertools.count(1)
        self._sizes = collections.deque(maxlen=_RECENT)
        # stats()
        self.results = 0            # results with arrays written here
        self.inline = 0             # results that found no room (pickled)
        self.written = 0            # bytes written into buffers
        self.made = 0               # buffers adopted
        self.peak = 0               # most bytes of buffers at once

    def new_id(self):
        return next(self._ids)

    def collect(self):
        """Frees the buffers whose results died."""
        while self.freed:
            b = self.freed.popleft()
            if self.bufs.get(b.id) is b and b.state == "live":
                b.state = "free"

    def expected(self):
        return max(self._sizes) if self._sizes else 0

    def _unreserved(self):
        return self.budget - self.total - self.reserved

    def assign(self, window):
        """A buffer for a task (or None) and the bytes it may add (its grant,
        reserved until settle() or unassign())."""
        self.collect()
        need = self.expected()
        buf = None
        if need:            # the smallest free buffer that fits (no list made a task)
            for b in self.bufs.values():
                if b.state == "free" and b.size >= need and (buf is None or b.size < buf.size):
                    buf = b
            if buf is not None:
                buf.state = "task"
        want = size_class(need) if need else 0
        if want and self._unreserved() < want:
            self._trim(want - self._unreserved())
        left = max(0, self._unreserved())
        grant = min(left, want) if need else left // max(1, window)
        self.reserved += grant
        return buf, grant

    def _trim(self, nbytes):
        """Drops free buffers, the smallest first, until `nbytes` are given back
        or none is left."""
        for b in sorted((b for b in self.bufs.values() if b.state == "free"),
                        key=lambda b: b.size):
            if nbytes <= 0:
                break
            nbytes -= b.size
            self.drop(b)

    def drop(self, b):
        del self.bufs[b.id]
        self.total -= b.size
        self.dropped.append(b.id)
        os.close(b.fd)
        b.array = None
        try:
            b.mm.close()
        except BufferError:        # a view still maps it: it goes with the view
            pass

    def unassign(self, buf, grant):
        """A task that will not report (its worker died, the loader stops)."""
        self.reserved -= grant
        if buf is not None and buf.state == "task":
            buf.state = "free"

    def settle(self, buf, grant, new_id, new_fd, new_size, used, nbytes):
        """A task's result: `used` is the id of the buffer its arrays are in (the
        assigned one, or new_id for one the worker made, passed as new_fd), or
        None. Returns that buffer, live, or None."""
        self.reserved -= grant
        out = None
        if new_fd is not None:
            try:
                b = Buffer(new_id, new_fd, new_size)
            except BaseException:
                os.close(new_fd)
                raise
            self.bufs[b.id] = b
            self.total += b.size
            self.made += 1
            self.peak = max(self.peak, self.total)
            if used == new_id:
                out = b
        if buf is not None:
            if used == buf.id:
                out = buf
            elif buf.state == "task":
                buf.state = "free"
        if nbytes:
            self._sizes.append(nbytes)
        if out is not None:
            out.state = "live"
            self.results += 1
            self.written += nbytes
        return out

    def views(self, b, specs, ifaces=None):
        """Arrays over buffer b, one per (offset, dtype, shape, kind) spec; the
        buffer is free again when all of them are garbage. `ifaces`: a dict
        (buffer id -> the arrays' interfaces) kept by the caller for these
        specs, so that the next result of the same specs in the same buffer
        makes its arrays from them (numpy arrays only)."""
        owner = Owner(self.freed.append, b)
        if ifaces is not None:
            got = ifaces.get(b.id)
            if got is None:
                if len(ifaces) >= 64:         # buffers dropped since
                    ifaces.clear()
                got = ifaces[b.id] = [View.interface(b.address + off, shape, dtype, False)
                                      for off, dtype, shape, kind in specs]
            mm = b.mm
            return [np.asarray(View.over(owner, mm, i)) for i in got]
        out = []
        for off, dtype, shape, kind in specs:
            dtype = np.dtype(dtype)
            a = np.asarray(View(owner, b.mm, b.address + off, shape, dtype, readonly=False))
            if kind == "torch":
                import torch
                a = torch.from_numpy(a)
            out.append(a)
        return out

    def stats(self):
        self.collect()
        states = collections.Counter(b.state for b in self.bufs.values())
        return {"budget": self.budget, "bytes": self.total, "peak_bytes": self.peak,
                "buffers": len(self.bufs), "free": states["free"],
                "live": states["live"] + states["task"], "made": self.made,
                "results": self.results, "over_budget": self.inline,
                "written_bytes": self.written}

    def close(self):
        """Forgets every buffer: free ones are unmapped now, live ones when their
        last array dies."""
        for b in list(self.bufs.values()):
            if b.state == "free":
                self.drop(b)
            else:
                del self.bufs[b.id]
                os.close(b.fd)
        self.total = 0
        self.dropped = []
