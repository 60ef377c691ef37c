#!/usr/bin/env python3
"""lx157_vectors.py: writes loaderx-1.5.7.jsonl from PyPI loaderx 1.5.7's own Sampler.

The batches that loaderx 1.5.7 itself gives, so that zrecord's cyclic-lx157 and
sequential samplers are checked against the real thing rather than a rewrite of it.
loaderx 1.5.7 imports as `loaderx`, like zrecord's client, so run it in a venv of
its own:

    python3 -m venv /tmp/lx157 && /tmp/lx157/bin/pip install loaderx==1.5.7 numpy
    /tmp/lx157/bin/python proto/vectors/lx157_vectors.py > proto/vectors/loaderx-1.5.7.jsonl

Each line is a Sampler(n, batch_size, mode, seed) of loaderx 1.5.7 after seek(step),
then next(), written with zrecord's parameter names (rank 0 of world_size 1; mode
"cyclic-lx157" for its mode 2, "sequential" for its mode 0). Left out, because
zrecord does not follow 1.5.7 there on purpose (proto/SAMPLERS.md, "cyclic-lx157"):
cyclic with batch_size > n (1.5.7 gives a short batch of n), sequential where
step * batch_size reaches 2^64 (1.5.7's seek wraps the product), and iid (1.5.7's
is an Sfc64 stream replayed draw by draw; zrecord's iid is its own, O(1)).
"""
import json
import sys

import loaderx
from loaderx.sampler import Sampler

E12 = 10**12
P32, P62, P63 = 1 << 32, 1 << 62, 1 << 63
U64_MAX = (1 << 64) - 1

# (n, batch_size, seed, step): zrecord's table (tests/sampler/sampler-vectors.c) at
# world_size 1, and the steps around loaderx's cycle ends.
CASES = [
    (1, 1, 0, 0), (1, 1, 7, E12), (1, 4, 3, 5), (2, 1, 1, 0), (2, 2, 1, 3), (2, 2, P32 + 1, E12),
    (3, 8, 11, 2), (3, 2, 5, 0), (3, 2, 5, 1), (3, 2, 5, 2),
    (10, 3, 42, 0), (10, 3, 42, 1), (10, 3, 42, 2), (10, 3, 42, 3), (10, 3, 42, 4), (10, 3, 42, 5),
    (12, 4, 123, 0), (12, 4, 123, 2), (12, 4, 123, 3),
    (1000, 70, 5, 0), (1000, 64, P32, 1), (1000, 65, U64_MAX, 14), (1000, 32, 9, 30), (1000, 32, 9, 31),
    (1000, 16, 9, 5), (97, 15, P32 + 9, 3), (1000000, 16, 0x5EED, 123456),
    (1000003, 32, 1, E12), (1000003, 64, P32 * 3 + 1, P62), (1000003, 32, 2, U64_MAX),
    (1000, 100, 77, P62 + 1),
    (1048576, 100, 6, 10), (1048577, 100, 6, 10), (P32 - 1, 16, 3, 1), (P32, 16, 3, 1),
    (P32 + 1, 16, 3, E12), (P63 + 5, 16, P32 + 4, 2), (U64_MAX, 16, 8, P62),
]

MODES = (("sequential", Sampler.Mode.SEQUENTIAL), ("cyclic-lx157", Sampler.Mode.CYCLIC))


def main():
    if getattr(loaderx, "__version__", None) != "1.5.7" or not hasattr(loaderx, "_lib"):
        sys.exit("this needs PyPI loaderx 1.5.7 (a venv of its own), not %s" % loaderx.__file__)
    for name, mode in MODES:
        for n, b, seed, step in CASES:
            if name == "cyclic-lx157" and b > n:
                continue
            if name == "sequential" and step * b > U64_MAX:
                continue
            s = Sampler(n, b, mode, seed)
            s.seek(step)
            idx = [int(v) for v in s.next()]
            assert len(idx) == b
            print(json.dumps({"mode": name, "n": n, "batch_size": b, "seed": seed, "step": step,
                              "rank": 0, "world_size": 1, "indices": idx}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
