"""The frame codec against PROTOCOL.md's example and proto/vectors/frames/."""

import os
import socket

import pytest

from loaderx import _wire

from conftest import REPO

FRAMES = os.path.join(REPO, "proto", "vectors", "frames")
pytestmark = pytest.mark.no_daemon


def test_hello_example_bytes():
    want = bytes.fromhex(
        "3b000000 85 a46b696e64 a568656c6c6f a26964 01 ab6d696e5f76657273696f6e 01"
        " ab6d61785f76657273696f6e 01 a86665617475726573 91 a66c6f61646572".replace(" ", ""))
    got = _wire.encode({"kind": "hello", "id": 1, "min_version": 1, "max_version": 1,
                        "features": ["loader"]})
    assert got == want


def _accepted():
    path = os.path.join(FRAMES, "MANIFEST")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        line = line.split("#")[0].split()
        if len(line) >= 3 and line[1] == "accept":
            out.append((line[0], line[2]))
    return out


def test_accepted_frames_decode_in_one_stream():
    frames = _accepted()
    if not frames:
        pytest.skip("proto/vectors/frames not found")
    a, b = socket.socketpair()
    try:
        fs = _wire.FrameSocket(b)
        blob = b"".join(open(os.path.join(FRAMES, f), "rb").read() for f, _ in frames)
        a.setblocking(True)
        import threading
        t = threading.Thread(target=lambda: [a.sendall(blob[i:i + 7]) for i in range(0, len(blob), 7)])
        t.start()
        for f, kind in frames:
            msg, fds = fs.recv()
            assert msg["kind"] == kind, f
            assert fds == []
        t.join()
    finally:
        a.close()
        b.close()


def test_descriptors_belong_to_their_frame():
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        sender = _wire.FrameSocket(a)
        sender.send({"kind": "ok", "id": 1})
        sender.send({"kind": "ok", "id": 2, "pad": b"x" * 5000}, fds=[r])
        sender.send({"kind": "batch", "loader": 3})
        fs = _wire.FrameSocket(b)
        got = [fs.recv() for _ in range(3)]
        assert [m.get("id") for m, _ in got] == [1, 2, None]
        assert got[0][1] == [] and len(got[1][1]) == 1 and got[2][1] == []
        fd = got[1][1][0]
        os.write(w, b"z")
        assert os.read(fd, 1) == b"z"
        os.close(fd)
    finally:
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()


def test_oversized_frame_refused():
    a, b = socket.socketpair()
    try:
        a.sendall((2 << 20).to_bytes(4, "little"))
        fs = _wire.FrameSocket(b)
        with pytest.raises(_wire.ProtocolError):
            fs.recv()
    finally:
        a.close()
        b.close()
