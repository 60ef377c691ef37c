"""The floor of the worker hop on this machine: two bare Python processes.

The loader's worker hop (suite.transforms.run_hop) hands a task to a worker
process and takes its answer back around one write of 64 MiB. Its floor is
what two Python processes that do nothing else pay for the same exchange: a
48-byte struct each way over a SOCK_SEQPACKET socketpair (the loader's
channel), the child writing 64 MiB between (so every cache is as cold as the
loader's worker leaves it), the parent blocked in recv() meanwhile, as the
loader is. Per exchange: `send` (the parent's send()), `wake` (the child's
wake-up: the send to its recv() returning, when it waited), `back` (the
child's send() to the parent's recv() returning: its wake-up) and `recv` (the
parent's unpacking of the struct); the hop = their sum.

    python3 -m suite.hop_floor [exchanges]        prints one JSON line
"""

import json
import os
import socket
import struct
import subprocess
import sys
import time

_S = struct.Struct("<6Q")       # step, t_recv, t_write, t_sent, 2 spare: 48 bytes
_CHILD = r"""
import socket, struct, sys, time
import numpy as np
s = socket.socket(fileno=int(sys.argv[1]))
S = struct.Struct("<6Q")
src = np.ones(int(sys.argv[2]), np.uint8)
dst = np.empty_like(src)
dst[:] = 0
while True:
    d = s.recv(64)
    if not d:
        break
    t_recv = time.monotonic_ns()
    step = S.unpack(d)[0]
    t_write = time.monotonic_ns()
    np.copyto(dst, src)
    s.send(S.pack(step, t_recv, t_write, time.monotonic_ns(), 0, 0))
"""


def _med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def measure(n=40, nbytes=64 << 20, warm=4):
    """Medians (µs) of the exchange's parts over n exchanges after `warm`."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(theirs.fileno()), str(nbytes)],
                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
    theirs.close()
    parts = {"send": [], "wake": [], "back": [], "recv": [], "write": []}
    try:
        for i in range(warm + n):
            t0 = time.monotonic_ns()
            mine.send(_S.pack(i, 0, 0, 0, 0, 0))
            t1 = time.monotonic_ns()
            d = mine.recv(64)
            t_arrived = time.monotonic_ns()
            step, t_recv, t_write, t_sent, _, _ = _S.unpack(d)
            t_done = time.monotonic_ns()
            if step != i:
                raise RuntimeError(f"the child answered step {step} for {i}")
            if i < warm:
                continue
            parts["send"].append(t1 - t0)
            parts["wake"].append(max(0, t_recv - t1))
            parts["back"].append(max(0, t_arrived - t_sent))
            parts["recv"].append(t_done - t_arrived)
            parts["write"].append(t_sent - t_write)
    finally:
        mine.close()
        proc.wait()
    out = {k: _med(v) / 1e3 for k, v in parts.items()}
    out["hop"] = _med([sum(x) for x in zip(*(parts[k] for k in ("send", "wake", "back", "recv")))]) / 1e3
    return out


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    res = dict(measure(n), load=os.getloadavg()[0])
    sys.stdout.write(json.dumps(res) + "\n")
