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
import struct
import sys
import time

import numpy as np

from ._wire import fds_of

__all__ = ["Channel", "Encoder", "Decoder", "Unshippable", "SMALL", "ALIGN", "DONE", "TASK",
           "DONE_FAST", "layout", "encode", "decode", "specs", "write", "form"]

PACKET = 64 << 10          # payload of one packet (the socket's buffer holds several)
# The fields of a worker's "done" when it is pickled: a tuple in this order (a
# tuple pickles and unpickles in less time than a dict). `sid`, when not None,
# names the output's form (its data and specs) for the DONE_FAST answers after.
DONE = ("t", "step", "data", "specs", "refs", "buf", "new_size", "nbytes", "inline", "times",
        "sid")
# The messages of the steady state, fixed structs sent raw (send_raw()): a task
# whose slot's views the worker made before (TASK: step, the views' template id,
# the arena buffer assigned or -1, the bytes it may add, the id of a buffer it
# makes), and its answer when the output has a form sent before (DONE_FAST:
# step, the form's id, the buffer its arrays are in, the size of a buffer the
# worker made or 0, the bytes written; when it took the task, began and ended the
# transform, ended encoding, began the write, and sent the answer).
TASK = struct.Struct("<qqqqq")
DONE_FAST = struct.Struct("<qqqqq6Q")
_FDS_MAX = 4               # descriptors one message may carry
_STAMPS_MAX = 4            # stamps one message may carry
_HEAD = 2 + 8 * _STAMPS_MAX    # the most a first packet's tag and stamps take
_ANC = socket.CMSG_SPACE(_FDS_MAX * array.array("i").itemsize)
# Arrays below this travel pickled: in the arena, a kept label array would keep
# a whole batch's buffer alive.
SMALL = 64 << 10
ALIGN = 64
_DEVICE_MODULES = ("jax", "jaxlib", "tensorflow", "cupy", "keras")


class Channel:
    """One end of a loader-worker socketpair: send(obj, fds) and recv() ->
    (obj, fds); EOFError when the peer is gone. `nonblocking` for the loader's
    end (see the module's paragraph): its sends never wait, and try_recv()
    reads a message only if one is there; recv() waits in the kernel (one
    system call, no select() first).

    A message may carry stamps (send(..., stamps=(...)), or prepare() then
    send_prepared()): the sender's CLOCK_MONOTONIC nanoseconds given, then
    the one when the packet left, which recv() leaves in `stamps` (a tuple,
    empty for a message without); `arrived` is when this side's system call
    returned the message's first packet. A message pickled ahead
    (prepare()) is sent later with nothing but its stamps and the system
    call: a worker prepares its answer before it writes the output, so what
    follows that write, on caches the write left cold, is one sendmsg().

    A raw message (send_raw()) is bytes as they are, one packet, not
    pickled (the fixed structs of the steady state: TASK, DONE_FAST):
    recv() returns it as bytes."""

    def __init__(self, sock, nonblocking=False):
        self.sock = sock
        self.nonblocking = nonblocking
        self._flags = socket.MSG_DONTWAIT if nonblocking else 0
        self.inbox = []            # (obj, fds, stamps, arrived) read while a send waited
        self.sent_bytes = 0        # of messages sent (stats())
        self.stamps = ()           # of the last message received
        self.arrived = 0           # when the last message's first packet was read
        sock.setblocking(True)     # per call: MSG_DONTWAIT where this end must not wait

    def fileno(self):
        return self.sock.fileno()

    def close(self):
        for _, fds, _, _ in self.inbox:
            for fd in fds:
                os.close(fd)
        self.inbox = []
        try:
            self.sock.close()
        except OSError:
            pass

    # ------------------------------------------------------------ sending
    def prepare(self, obj):
        """The packets of `obj`, for send_prepared()."""
        data = pickle.dumps(obj, protocol=5)
        n = len(data)
        if n + _HEAD <= PACKET:
            return n, [data]
        first = PACKET - _HEAD - 8
        return n, [n.to_bytes(8, "little") + data[:first]] + \
            [data[i:i + PACKET] for i in range(first, n, PACKET)]

    def send_raw(self, data, fds=()):
        """Sends bytes `data` (at most a packet) as they are, in one sendmsg()."""
        self.sent_bytes += len(data)
        self._send_packet([b"\x04", data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                               array.array("i", fds))] if fds else [])

    def send(self, obj, fds=(), stamps=None):
        self.send_prepared(self.prepare(obj), fds, stamps)

    def send_prepared(self, prepared, fds=(), stamps=None):
        n, packets = prepared
        self.sent_bytes += n
        # the first packet: a tag (bit 0: more packets follow, its length
        # first; bit 1: stamps follow the tag, a count byte then as many u64)
        tag = (1 if len(packets) > 1 else 0) | (2 if stamps is not None else 0)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        head = bytes((tag,))
        if stamps is not None:
            stamps = tuple(stamps) + (time.monotonic_ns(),)
            assert len(stamps) <= _STAMPS_MAX
            head += bytes((len(stamps),)) + b"".join(v.to_bytes(8, "little") for v in stamps)
        self._send_packet([head, packets[0]], anc)
        for p in packets[1:]:
            self._send_packet([p], [])

    def _send_packet(self, parts, anc):
        while True:
            try:
                self.sock.sendmsg(parts, anc, self._flags)
                return
            except BlockingIOError:
                pass
            except InterruptedError:
                continue
            r, w, _ = select.select([self.sock], [self.sock], [])
            if r and not w:
                self.inbox.append(self._recv_one(True) + (self.stamps, self.arrived))

    # ------------------------------------------------------------ receiving
    def ready(self):
        """True if a message was read ahead (recv() returns it at once)."""
        return bool(self.inbox)

    def recv(self):
        """The next message, waiting for it."""
        if self.inbox:
            return self._from_inbox()
        return self._recv_one(True)

    def try_recv(self):
        """The next message if one is there, else None (never waits for a
        first packet)."""
        if self.inbox:
            return self._from_inbox()
        return self._recv_one(False)

    def _from_inbox(self):
        obj, fds, self.stamps, self.arrived = self.inbox.pop(0)
        return obj, fds

    def _packet(self, first, wait):
        reset = False
        while True:
            try:
                if first:
                    data, anc, flags, _ = self.sock.recvmsg(
                        PACKET + 16, _ANC, socket.MSG_CMSG_CLOEXEC | (0 if wait else self._flags))
                else:
                    data, anc, flags = self.sock.recv(PACKET + 16), [], 0
                break
            except BlockingIOError:
                if not wait:
                    return None, ()
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

    def _recv_one(self, wait):
        data, fds = self._packet(True, wait)
        if data is None:
            return None
        self.arrived = time.monotonic_ns()
        tag = data[0]
        if tag == 4:                   # raw
            self.stamps = ()
            return data[1:], fds
        try:
            at = 1
            self.stamps = ()
            if tag & 2:
                c = data[1]
                self.stamps = tuple(int.from_bytes(data[2 + 8 * i:10 + 8 * i], "little")
                                    for i in range(c))
                at = 2 + 8 * c
            if not tag & 1:
                payload = data[at:]
            else:
                n = int.from_bytes(data[at:at + 8], "little")
                buf = bytearray(data[at + 8:])
                while len(buf) < n:
                    more, _ = self._packet(False, True)
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
    _byte_bounds = np.byte_bounds  # type: ignore[attr-defined]


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
            return _aside(obj, self.small, self.ring, self.arrays, self.refs)
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


def _aside(obj, small, ring, arrays, refs):
    """Sets numpy array `obj` aside (Encoder): its id in `arrays`, or ("r", j)
    in `refs` for a view of the ring slot; None if it travels pickled."""
    if obj.dtype.hasobject or obj.nbytes < small:
        return None
    if ring is not None and obj.base is not None:   # else it owns its memory
        lo, hi = _byte_bounds(obj)
        if ring[0] <= lo and hi <= ring[1]:
            refs.append((obj.ctypes.data - ring[2], _dtype(obj.dtype), obj.shape, obj.strides))
            return ("r", len(refs) - 1)
    arrays.append((obj, "np"))
    return len(arrays) - 1


def _dtype(d):
    """A dtype as its string where that names it whole (it pickles and
    unpickles in a fraction of the object's time), else the dtype."""
    return d.str if d.fields is None and d.subdtype is None and d.metadata is None else d


def encode(obj, small=SMALL, ring=None):
    """(data, [(array, kind)] for the arena, [ring reference]) of a
    transform's output (Encoder). `data` is the pickle, or for the outputs
    transforms return most, an array or a dict of arrays keyed by strings (each
    set aside), a tuple that describes it without a pickle: ("a", id) or ("d",
    keys, ids); decode() reads either."""
    t = type(obj)
    if t is np.ndarray or (t is dict and obj and all(type(k) is str and type(v) is np.ndarray
                                                     for k, v in obj.items())):
        arrays, refs = [], []
        if t is dict:
            ids = [_aside(v, small, ring, arrays, refs) for v in obj.values()]
            if None not in ids:
                return ("d", list(obj), ids), arrays, refs
        else:
            i = _aside(obj, small, ring, arrays, refs)
            if i is not None:
                return ("a", i), arrays, refs
    f = io.BytesIO()
    enc = Encoder(f, small, ring)
    enc.dump(obj)
    return f.getvalue(), enc.arrays, enc.refs


def form(obj, small=SMALL, ring=None):
    """The form of an output that crosses as arrays alone: (key, arrays) for an
    array, or a dict of arrays keyed by strings, each of which goes to the arena
    (set aside, not a view of the batch's slot), where `key` (hashable) tells
    every output of the same dtypes, shapes and keys apart and `arrays` are
    its arrays in order; None for any other output. The worker describes a form
    once, then names it (DONE_FAST)."""
    t = type(obj)
    if t is np.ndarray:
        d = _arena_dtype(obj, small, ring)
        return None if d is None else ((d, obj.shape), (obj,))
    if t is not dict or not obj:
        return None
    key = []
    for k, v in obj.items():
        if type(k) is not str or type(v) is not np.ndarray:
            return None
        d = _arena_dtype(v, small, ring)
        if d is None:
            return None
        key.append((k, d, v.shape))
    return tuple(key), tuple(obj.values())


def _arena_dtype(a, small, ring):
    """The dtype string of array `a` if _aside() writes it into the arena and
    its dtype is named whole by its string (_dtype()), else None."""
    d = a.dtype
    if d.hasobject or a.nbytes < small or d.fields is not None or d.subdtype is not None \
            or d.metadata is not None:
        return None
    if ring is not None and a.base is not None:
        lo, hi = _byte_bounds(a)
        if ring[0] <= lo and hi <= ring[1]:
            return None
    return d.str


def decode(data, views, refs=()):
    """The output encode() described, over `views` (the arena's arrays) and
    `refs` (the ring's)."""
    if type(data) is not tuple:
        return Decoder(data, views, refs).load()

    def one(i):
        return refs[i[1]] if type(i) is tuple else views[i]
    if data[0] == "a":
        return one(data[1])
    return {k: one(i) for k, i in zip(data[1], data[2])}


def layout(arrays):
    """Offsets of `arrays` side by side at ALIGN-byte boundaries, and the total."""
    offs = []
    at = 0
    for a, _ in arrays:
        offs.append(at)
        at += (a.nbytes + ALIGN - 1) // ALIGN * ALIGN
    return offs, at


def specs(arrays, offs):
    """(offset, dtype, shape, kind) of each array laid out at `offs`: what
    the loader makes its views of."""
    return [(off, _dtype(a.dtype), a.shape, kind) for (a, kind), off in zip(arrays, offs)]


def write(arrays, offs, mm):
    """Copies each array to its offset of the writable mapping `mm`, once;
    returns specs()."""
    for (a, kind), off in zip(arrays, offs):
        dst = np.ndarray(a.shape, a.dtype, buffer=mm, offset=off)
        np.copyto(dst, a, casting="no")
    return specs(arrays, offs)


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
