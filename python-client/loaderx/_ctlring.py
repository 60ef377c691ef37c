"""A loader's control memory: the completion queues shared with zrecordd
(proto/PROTOCOL.md section 10, "Control memory").

One page the daemon makes and this side maps read-write. The daemon writes its
announcements (step, ring, slot: what a BATCH would say) and their count
`published`; this side writes its releases (ring, slot, taken_ns, wait_ns) and
their count `released`. Two flags say who must be told over the socket: this
side's `waiting` (set before it blocks on its socket: the daemon then sends
WAKE after it publishes) and the daemon's `wants` (set before it stops for lack
of a free slot: this side then sends DOORBELL after it releases).

Stores from Python are plain stores; the page is used only where they keep
their program order (x86-64's TSO: `usable()`). Where a store must be seen
before a load (the flag, then the other side's count), a lock's acquire and
release in between is the fence (a locked instruction on x86-64).
"""

import mmap
import os
import platform
import struct
import threading

MAGIC = 0x5143525A
VERSION = 1
# word indices (u64: Q, u32: I) of the page's fields (PROTOCOL.md)
_Q_PUBLISHED, _Q_CONSUMED, _Q_RELEASED = 8, 16, 24
_I_WAITING, _I_WANTS = 64, 80
_Q_ANN = 64           # announcements: 16 bytes each (u64 step, u32 ring, u32 slot)
_Q_REL = 192          # releases: 32 bytes each (u32 ring, u32 slot, u64 taken, u64 wait, u64)
NO_WAIT = (1 << 64) - 1   # a release that tells no wait


def usable():
    """True where this client may use control memory (plain stores in order)."""
    return platform.machine().lower() in ("x86_64", "amd64")


class CtlRing:
    """This side of a loader's control memory. Takes `fd` and closes it."""

    def __init__(self, fd, nbytes, entries):
        try:
            if os.fstat(fd).st_size < nbytes or nbytes < 4096:
                raise ValueError(f"control memory of {nbytes} bytes")
            self.mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED,
                                prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        magic, version, n = struct.unpack_from("<III", self.mm, 0)
        if magic != MAGIC or version != VERSION or n != entries or not 1 <= n <= 64:
            raise ValueError(f"control memory of magic {magic:#x}, version {version}, "
                             f"{n} entries (expected {entries})")
        self.n = n
        self.q = memoryview(self.mm).cast("Q")
        self.i = memoryview(self.mm).cast("I")
        self.head = 0          # announcements taken
        self.released = 0      # releases written
        self.rung = 0          # `released` at the last DOORBELL
        self._fence = threading.Lock()
        self.lock = threading.Lock()   # one writer of the release queue at a time

    def close(self):
        q, i, self.q, self.i = self.q, self.i, None, None
        if q is not None:
            q.release()
            i.release()
            self.mm.close()

    def fence(self):
        with self._fence:
            pass

    # ------------------------------------------------------------ announcements
    def ready(self):
        """True if an announcement is published and not yet taken."""
        return self.q[_Q_PUBLISHED] != self.head

    def peek(self):
        """The next announcement (step, ring, slot), or None."""
        if self.q[_Q_PUBLISHED] == self.head:
            return None
        k = _Q_ANN + 2 * (self.head % self.n)
        return self.q[k], self.i[2 * k + 2], self.i[2 * k + 3]

    # ------------------------------------------------------------ releases
    def release(self, ring, slot, taken_ns, wait_ns):
        """Writes one release and publishes it (caller holds `lock`)."""
        k = _Q_REL + 4 * (self.released % self.n)
        self.i[2 * k] = ring
        self.i[2 * k + 1] = slot
        self.q[k + 1] = taken_ns
        self.q[k + 2] = wait_ns
        self.released += 1
        self.q[_Q_RELEASED] = self.released

    def doorbell_due(self, batch, always=False):
        """True if the daemon stopped for lack of a slot and this side wrote
        releases since its last DOORBELL: at least `batch` of them not yet taken
        (0: any); with `always`, if any is not taken, whatever the daemon said.
        Call after release() and a fence."""
        if always:
            return self.released != self.q[_Q_CONSUMED]
        if self.released == self.rung or not self.i[_I_WANTS]:
            return False
        return self.released - self.q[_Q_CONSUMED] >= batch

    def set_waiting(self, on):
        self.i[_I_WAITING] = 1 if on else 0
        if on:
            self.fence()
