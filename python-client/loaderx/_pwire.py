"""The wire between a DataLoader and its worker processes, and how a
transform's output crosses it.

**Messages.** A socketpair of ``SOCK_SEQPACKET`` per worker carries pickled
dicts (both ends are the same user's processes, started by the loader); a
message keeps its boundaries, and its descriptors (a ring's memfd, an arena
buffer's) ride on its first packet. A message larger than one packet (64 KiB)
is its first packet, which says its length, then packets of the rest.
:class:`Channel` never blocks on a send while its peer is blocked sending too:
the loader's end is non-blocking and reads what the worker sends meanwhile.

**Outputs.** :class:`Encoder` pickles what a transform returns with every
numpy array of at least :data:`SMALL` bytes (and every CPU torch tensor of a
numpy dtype), at any depth of any structure, replaced by a reference: the
arrays are then written once, side by side at 64-byte offsets, into an arena
buffer (``_arena``), and :class:`Decoder` turns each reference back into an
array over that memory in the loader's process. An array that is a view of
the batch the transform was given (the transform passed it on, or a slice of
it) is not written: it comes back as the same view of the ring in the
loader's process, read-only as the batch was, and holds the slot until it is
garbage, as a batch's arrays do without a transform. Smaller arrays and everything
else travel pickled in the message. An object that must not cross processes
(a tensor on a device, a JAX or TensorFlow array: a transform that copies to a
device belongs in the training process) raises :class:`Unshippable`.
"""

import array
import errno
import io
import os
import pickle
import select
import socket
import sys

import numpy as np

from ._wire import fds_of

__all__ = ["Channel", "Encoder", "Decoder", "Unshippable", "SMALL", "ALIGN", "layout", "encode",
           "write"]

PACKET = 64 << 10          # payload of one packet (the socket's buffer holds several)
_FDS_MAX = 4               # descriptors one message may carry
_ANC = socket.CMSG_SPACE(_FDS_MAX * array.array("i").itemsize)
# Arrays below this travel pickled: in the arena, a kept label array would keep
# a whole batch's buffer alive.
SMALL = 64 << 10
ALIGN = 64
_DEVICE_MODULES = ("jax", "jaxlib", "tensorflow", "cupy", "keras")


class Channel:
    """One end of a loader-worker socketpair: send(obj, fds) and recv() ->
    (obj, fds); EOFError when the peer is gone. `nonblocking` for the loader's
    end (see the module's paragraph)."""

    def __init__(self, sock, nonblocking=False):
        self.sock = sock
        self.nonblocking = nonblocking
        self.inbox = []            # (obj, fds) read while a send waited
        self.sent_bytes = 0        # of messages sent (stats())
        sock.setblocking(not nonblocking)

    def fileno(self):
        return self.sock.fileno()

    def close(self):
        for _, fds in self.inbox:
            for fd in fds:
                os.close(fd)
        self.inbox = []
        try:
            self.sock.close()
        except OSError:
            pass

    # ------------------------------------------------------------ sending
    def send(self, obj, fds=()):
        data = pickle.dumps(obj, protocol=5)
        n = len(data)
        self.sent_bytes += n
        if n + 1 <= PACKET:
            packets = [b"\0" + data]
        else:
            first = PACKET - 9
            packets = [b"\1" + n.to_bytes(8, "little") + data[:first]]
            packets += [data[i:i + PACKET] for i in range(first, n, PACKET)]
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        for p in packets:
            self._send_packet(p, anc)
            anc = []

    def _send_packet(self, p, anc):
        while True:
            try:
                self.sock.sendmsg([p], anc)
                return
            except BlockingIOError:
                pass
            except InterruptedError:
                continue
            r, w, _ = select.select([self.sock], [self.sock], [])
            if r and not w:
                self.inbox.append(self._recv_one())

    # ------------------------------------------------------------ receiving
    def ready(self):
        """True if a message was read ahead (recv() returns it at once)."""
        return bool(self.inbox)

    def recv(self):
        if self.inbox:
            return self.inbox.pop(0)
        return self._recv_one()

    def _packet(self, first):
        reset = False
        while True:
            try:
                if first:
                    data, anc, flags, _ = self.sock.recvmsg(PACKET + 16, _ANC,
                                                            socket.MSG_CMSG_CLOEXEC)
                else:
                    data, anc, flags = self.sock.recv(PACKET + 16), [], 0
                break
            except BlockingIOError:
                select.select([self.sock], [], [])
            except InterruptedError:
                continue
            except ConnectionResetError:
                # A peer that closed with messages of ours unread reports that
                # first; what it sent before it closed is still there to read.
                if reset:
                    raise EOFError("the peer closed the channel") from None
                reset = True
        fds = fds_of(anc)
        if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            for fd in fds:
                os.close(fd)
            raise OSError(errno.EPROTO, "a worker message was truncated")
        if not data:
            for fd in fds:
                os.close(fd)
            raise EOFError("the peer closed the channel")
        return data, fds

    def _recv_one(self):
        data, fds = self._packet(True)
        try:
            if data[0] == 0:
                payload = data[1:]
            else:
                n = int.from_bytes(data[1:9], "little")
                buf = bytearray(data[9:])
                while len(buf) < n:
                    more, _ = self._packet(False)
                    buf += more
                payload = buf
            return pickle.loads(payload), fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise


class Unshippable(Exception):
    """The output holds an object that must stay in the process that made it."""


def _torch():
    return sys.modules.get("torch")


try:
    _byte_bounds = np.lib.array_utils.byte_bounds
except AttributeError:          # numpy < 2
    _byte_bounds = np.byte_bounds


class Encoder(pickle.Pickler):
    """Pickles an output with its large arrays set aside: `arrays` gets
    (array, kind) pairs, kind 'np' or 'torch', to write into the arena; `refs`
    gets (offset, dtype, shape, strides) of the arrays that are views of the
    batch's own ring slot (`ring`: (lo, hi, base) addresses of the slot's bytes
    and of the ring's mapping), which cross as they are, copied 0 times."""

    def __init__(self, f, small=SMALL, ring=None):
        super().__init__(f, protocol=5)
        self.small = small
        self.ring = ring
        self.arrays = []
        self.refs = []

    def persistent_id(self, obj):
        t = type(obj)
        if t is np.ndarray or t is np.memmap:
            if obj.dtype.hasobject or obj.nbytes < self.small:
                return None
            if self.ring is not None and obj.base is not None:   # else it owns its memory
                lo, hi = _byte_bounds(obj)
                if self.ring[0] <= lo and hi <= self.ring[1]:
                    self.refs.append((obj.ctypes.data - self.ring[2], obj.dtype, obj.shape,
                                      obj.strides))
                    return ("r", len(self.refs) - 1)
            self.arrays.append((obj, "np"))
            return len(self.arrays) - 1
        torch = _torch()
        if torch is not None and isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu":
                raise Unshippable(f"a torch tensor on {obj.device}")
            if obj.layout != torch.strided or obj.nbytes < self.small:
                return None
            try:
                a = obj.detach().numpy()
            except (TypeError, RuntimeError):    # a dtype numpy does not have
                return None
            self.arrays.append((a, "torch"))
            return len(self.arrays) - 1
        mod = getattr(t, "__module__", None) or ""
        if mod.split(".", 1)[0] in _DEVICE_MODULES and not isinstance(obj, type):
            raise Unshippable(f"a {mod}.{t.__qualname__}")
        return None


def encode(obj, small=SMALL, ring=None):
    """(pickle bytes, [(array, kind)] for the arena, [ring reference]) of a
    transform's output (Encoder)."""
    f = io.BytesIO()
    enc = Encoder(f, small, ring)
    enc.dump(obj)
    return f.getvalue(), enc.arrays, enc.refs


def layout(arrays):
    """Offsets of `arrays` side by side at ALIGN-byte boundaries, and the total."""
    offs = []
    at = 0
    for a, _ in arrays:
        offs.append(at)
        at += (a.nbytes + ALIGN - 1) // ALIGN * ALIGN
    return offs, at


def write(arrays, offs, mm):
    """Copies each array to its offset of the writable mapping `mm`, once."""
    specs = []
    for (a, kind), off in zip(arrays, offs):
        dst = np.ndarray(a.shape, a.dtype, buffer=mm, offset=off)
        np.copyto(dst, a, casting="no")
        specs.append((off, a.dtype, a.shape, kind))
    return specs


class Decoder(pickle.Unpickler):
    """Unpickles an output; a reference i becomes views[i], ("r", j) refs[j]."""

    def __init__(self, data, views, refs=()):
        super().__init__(io.BytesIO(data))
        self.views = views
        self.refs = refs

    def persistent_load(self, pid):
        if isinstance(pid, tuple):
            return self.refs[pid[1]]
        return self.views[pid]
