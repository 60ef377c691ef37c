"""Frames of the zrecord protocol (proto/PROTOCOL.md, sections 2, 3 and 5).

A frame is a little-endian u32 length and one msgpack map. Descriptors travel as
SCM_RIGHTS with the sendmsg() that sends a frame's first byte; on receipt they
belong to the frame that holds the last byte the recvmsg() returned.
"""

import array
import select
import socket
import struct

import msgpack
import numpy as np

FRAME_MAX_DEFAULT = 1 << 20
HELLO_FRAME_MAX = 64 << 10
FDS_PER_FRAME_MAX = 65   # ZR_FDS_PER_FRAME_MAX: MSSET_OPEN's root, directory and meta.zr
_HDR = struct.Struct("<I")
_ANC = socket.CMSG_SPACE(FDS_PER_FRAME_MAX * array.array("i").itemsize)
_RECV_CHUNK = 256 << 10


def u64s(values):
    """An array of u64 as the protocol's ``u64s`` (bin, little-endian)."""
    a = np.ascontiguousarray(values, dtype="<u8")
    return a.tobytes()


def from_u64s(b):
    """A ``u64s`` bin as a numpy array of ``<u8`` (a view of the bytes)."""
    if b is None:
        return np.empty(0, dtype="<u8")
    return np.frombuffer(b, dtype="<u8")


def encode(msg):
    body = msgpack.packb(msg, use_bin_type=True)
    return _HDR.pack(len(body)) + body


def decode(body):
    return msgpack.unpackb(body, raw=False, strict_map_key=True)


class ProtocolError(Exception):
    pass


class FrameSocket:
    """A stream socket speaking frames; not thread safe (the connection locks)."""

    def __init__(self, sock):
        self.sock = sock
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self.rbuf = bytearray()
        self.rbase = 0          # absolute stream offset of rbuf[0]
        self.fd_groups = []     # (absolute offset of the last byte, [fds])
        self.frame_max = FRAME_MAX_DEFAULT

    def close(self):
        for _, fds in self.fd_groups:
            for fd in fds:
                _close_quiet(fd)
        self.fd_groups = []
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, msg, fds=()):
        data = encode(msg)
        if fds:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            n = self.sock.sendmsg([data], anc)
            if n < len(data):
                self.sock.sendall(memoryview(data)[n:])
        else:
            self.sock.sendall(data)

    def send_frames(self, frames):
        """Frames already encoded (encode()), without descriptors, in one write."""
        self.sock.sendall(frames[0] if len(frames) == 1 else b"".join(frames))

    def _fill(self):
        data, anc, flags, _ = self.sock.recvmsg(_RECV_CHUNK, _ANC, socket.MSG_CMSG_CLOEXEC)
        fds = fds_of(anc)
        if flags & socket.MSG_CTRUNC:
            for fd in fds:
                _close_quiet(fd)
            raise ProtocolError("descriptors from the daemon were truncated (MSG_CTRUNC)")
        if not data:
            for fd in fds:
                _close_quiet(fd)
            raise ConnectionResetError("the daemon closed the connection")
        self.rbuf += data
        if fds:
            self.fd_groups.append((self.rbase + len(self.rbuf) - 1, fds))

    def has_frame(self):
        """True if a whole frame is already read (recv() returns it without a
        system call)."""
        if len(self.rbuf) < 4:
            return False
        (length,) = _HDR.unpack_from(self.rbuf, 0)
        return len(self.rbuf) >= 4 + length

    def wait_readable(self, timeout=None):
        """Blocks until a frame is buffered or the socket has bytes (or an end)
        to read, or `timeout` seconds passed (then False). It takes nothing off
        the socket, so an interrupt here loses nothing (_interrupt.py)."""
        if not self.has_frame() and self.sock.gettimeout() is None:
            if timeout is None:
                self._poll.poll()
            else:
                return bool(self._poll.poll(int(timeout * 1000) + 1))
        return True

    def recv(self):
        """One frame: (message dict, [fds])."""
        while True:
            if len(self.rbuf) >= 4:
                (length,) = _HDR.unpack_from(self.rbuf, 0)
                if length == 0 or length > max(self.frame_max, FRAME_MAX_DEFAULT):
                    raise ProtocolError(f"the daemon sent a frame of {length} bytes")
                if len(self.rbuf) >= 4 + length:
                    body = bytes(self.rbuf[4:4 + length])
                    start, end = self.rbase, self.rbase + 4 + length
                    del self.rbuf[:4 + length]
                    self.rbase = end
                    fds = []
                    keep = []
                    for last, group in self.fd_groups:
                        if start <= last < end:
                            fds.extend(group)
                        else:
                            keep.append((last, group))
                    self.fd_groups = keep
                    msg = decode(body)
                    if not isinstance(msg, dict):
                        for fd in fds:
                            _close_quiet(fd)
                        raise ProtocolError("the daemon sent a body that is not a map")
                    return msg, fds
            self._fill()


def fds_of(anc):
    """The descriptors in a recvmsg()'s ancillary data (SCM_RIGHTS)."""
    fds = []
    for level, typ, cdata in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(cdata[:len(cdata) - (len(cdata) % a.itemsize)])
            fds.extend(a)
    return fds


def _close_quiet(fd):
    import os
    try:
        os.close(fd)
    except OSError:
        pass
