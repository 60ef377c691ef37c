"""Raw frames for tests/security, as any user.

`run_as()` (conftest.py) puts this directory and python-client on PYTHONPATH, so a
snippet run as the attacker can speak the protocol without the client library's
checks: ``from secframes import Raw``. Frames are encoded by loaderx's own codec
(python-client/loaderx/_wire.py); nothing here checks who answers.

A snippet reports with ``emit(obj)``: one JSON line on stdout, which the test reads
back with ``Result.json()``.
"""

import json
import os
import socket
import sys

from loaderx import _errors, _wire

__all__ = ["Raw", "RawError", "emit", "store_fds", "ERRORS"]

ERRORS = _errors.NAMES  # "ZR_E_BAD_FD" -> 1105


class RawError(Exception):
    """An "error" reply: .code, .name, .message."""

    def __init__(self, msg):
        self.code = msg.get("code")
        self.name = msg.get("name") or _errors.CODES.get(self.code) or str(self.code)
        self.message = msg.get("message", "")
        super().__init__(f"{self.name}: {self.message}")


class Raw:
    """One connection speaking raw frames; HELLO is sent unless hello=False."""

    def __init__(self, path, hello=True, timeout=30.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.fs = _wire.FrameSocket(self.sock)
        self.next_id = 1
        self.events = []          # (msg, fds) of events read while waiting for a reply
        self.hello = None
        if hello:
            self.hello = self.call("hello", {"min_version": 1, "max_version": 1,
                                             "client": "tests/security"})[0]
            self.fs.frame_max = int(self.hello["limits"]["frame_max"])

    def send(self, kind, fields=None, fds=(), request=True):
        """Sends one message (a request with an id unless request=False); returns the id."""
        msg = {"kind": kind}
        rid = None
        if request:
            rid = self.next_id
            self.next_id += 1
            msg["id"] = rid
        if fields:
            msg.update(fields)
        self.fs.send(msg, list(fds))
        return rid

    def recv(self):
        """The next frame: (msg, fds)."""
        return self.fs.recv()

    def reply(self, rid):
        """Reads until the reply to rid; events met on the way are kept. Returns
        (msg, fds); an "error" reply raises RawError (its descriptors closed)."""
        while True:
            msg, fds = self.recv()
            if msg.get("kind") in ("ok", "error") and msg.get("id") == rid:
                if msg["kind"] == "error":
                    close_all(fds)
                    raise RawError(msg)
                return msg, fds
            self.events.append((msg, fds))

    def call(self, kind, fields=None, fds=()):
        return self.reply(self.send(kind, fields, fds))

    def try_call(self, kind, fields=None, fds=()):
        """call() that returns the error's name instead of raising (None: ok)."""
        try:
            _, rfds = self.call(kind, fields, fds)
        except RawError as e:
            return e.name
        close_all(rfds)
        return None

    def event(self, kind, loader=None):
        """The next event of this kind (and loader), kept ones first."""
        for i, (msg, fds) in enumerate(self.events):
            if msg.get("kind") == kind and (loader is None or msg.get("loader") == loader):
                del self.events[i]
                return msg, fds
        while True:
            msg, fds = self.recv()
            if msg.get("kind") == kind and (loader is None or msg.get("loader") == loader):
                return msg, fds
            self.events.append((msg, fds))

    def close(self):
        for _, fds in self.events:
            close_all(fds)
        self.events = []
        self.fs.close()


def store_fds(path, meta_flags=os.O_RDONLY, dir_flags=os.O_RDONLY | os.O_DIRECTORY):
    """(directory descriptor, meta.zr descriptor) of a store, opened with these flags."""
    d = os.open(path, dir_flags | os.O_CLOEXEC)
    m = os.open(os.path.join(path, "meta.zr"), meta_flags | os.O_CLOEXEC)
    return d, m


def close_all(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def emit(obj):
    """Reports obj to the test: one JSON line on stdout."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
