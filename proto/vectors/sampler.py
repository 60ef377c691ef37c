#!/usr/bin/env python3
"""sampler.py: the samplers of proto/SAMPLERS.md in numpy, checked against the vectors.

A second implementation written from the specification alone, with numpy's uint64
arrays (wrapping multiplication, shifts, xor) and Python integers where the
specification says "exact". It is the proof that a client can reproduce the
vectors without the engine, and a starting point for one:

    python3 proto/vectors/sampler.py [proto/vectors/sampler.jsonl ...]

checks each file named (by default sampler.jsonl, sampler-cyclic-lx157.jsonl and
loaderx-1.5.7.jsonl, the batches of PyPI loaderx 1.5.7 itself), prints how many vectors it reproduced and
exits 0, exits 1 on the first mismatch, and exits 77 (a skipped test) when numpy
is not installed.
"""
import json
import os
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("numpy is not installed: skipped")
    sys.exit(77)

U64 = np.uint64
M32 = U64(0xFFFFFFFF)
GAMMA = 0x9E3779B97F4A7C15
DELTA = 0xD1B54A32D192ED03
MIX_M1 = 0xBF58476D1CE4E5B9
MIX_M2 = 0x94D049BB133111EB
DOMAIN_IID = 0x7A722D6969640001
DOMAIN_CYCLIC = 0x7A722D6379630002
FEISTEL_ROUNDS = 4
FEISTEL_MUL1 = 0x7FEB352D
FEISTEL_SHIFT = 15
FEISTEL_MUL2 = 0x846CA68B
MASK64 = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finalizer on a uint64 array (wrapping)."""
    z = (z ^ (z >> U64(30))) * U64(MIX_M1)
    z = (z ^ (z >> U64(27))) * U64(MIX_M2)
    return z ^ (z >> U64(31))


def mix64_int(z):
    return int(mix64(np.array([z & MASK64], dtype=U64))[0])


def key(seed, domain, a):
    """mix64(mix64(seed ^ domain) + a * GAMMA), mod 2^64."""
    return mix64_int((mix64_int(seed ^ domain) + a * GAMMA) & MASK64)


def mul_hi_lo(x, n):
    """The 128-bit product x * n as (high64, low64), x a uint64 array, n an int."""
    nl, nh = U64(n & 0xFFFFFFFF), U64(n >> 32)
    xl, xh = x & M32, x >> U64(32)
    ll, lh, hl, hh = xl * nl, xl * nh, xh * nl, xh * nh
    mid = (ll >> U64(32)) + (lh & M32) + (hl & M32)
    hi = hh + (lh >> U64(32)) + (hl >> U64(32)) + (mid >> U64(32))
    return hi, x * U64(n)


def sequential(n, b, step, rank, world):
    start = (step * b * world + rank * b) % n  # exact
    j = np.arange(b, dtype=U64) % U64(n)
    room = U64(n - start)  # j < room: no wrap
    return np.where(j < room, U64(start) + j, j - room)


def iid(n, b, seed, step, rank, world):
    s = key(seed, DOMAIN_IID, step)
    g = U64(rank * b) + np.arange(b, dtype=U64)
    base = U64(s) + g * U64(GAMMA)
    t = U64(((1 << 64) - n) % n)  # 2^64 mod n
    out = np.empty(b, dtype=U64)
    todo = np.arange(b)
    r = 0
    while todo.size:
        hi, lo = mul_hi_lo(mix64(base[todo] + U64((r * DELTA) & MASK64)), n)
        ok = lo >= t
        out[todo[ok]] = hi[ok]
        todo = todo[~ok]
        r += 1
    return out


def feistel_f(v, k, h):
    t = ((v ^ U64(k)) * U64(FEISTEL_MUL1)) & M32
    t ^= t >> U64(FEISTEL_SHIFT)
    t = (t * U64(FEISTEL_MUL2)) & M32
    return t >> U64(32 - h)


def feistel_encrypt(x, a, b, keys):
    r, l = x & U64((1 << a) - 1), x >> U64(a)
    for i in range(0, FEISTEL_ROUNDS, 2):
        l = l ^ feistel_f(r, keys[i], b)
        r = r ^ feistel_f(l, keys[i + 1], a)
    return (l << U64(a)) | r


def cyclic(n, b, seed, step, rank, world):
    glob = b * world
    per_cycle = n // glob
    c, t = step // per_cycle, step % per_cycle
    w = max(2, (n - 1).bit_length())
    a, bb = w // 2, w - w // 2
    k = key(seed, DOMAIN_CYCLIC, c)
    keys = [mix64_int((k + (i + 1) * GAMMA) & MASK64) & 0xFFFFFFFF for i in range(FEISTEL_ROUNDS)]
    q = U64(t * glob + rank * b) + np.arange(b, dtype=U64)
    y = feistel_encrypt(q, a, bb, keys)
    walk = y >= U64(n)
    while walk.any():
        y[walk] = feistel_encrypt(y[walk], a, bb, keys)
        walk = y >= U64(n)
    return y


def lx157_mix(key, v, rnd):
    """mix64(key ^ v * GAMMA ^ round * DELTA): loaderx 1.5.7's round function."""
    return mix64(U64(key) ^ (v * U64(GAMMA)) ^ U64((rnd * DELTA) & MASK64))


def lx157_encrypt(x, h, key):
    mask = U64((1 << h) - 1)
    l, r = (x >> U64(h)) & mask, x & mask
    for i in range(4):
        l, r = r, l ^ (lx157_mix(key, r, i) & mask)
    return (l << U64(h)) | r


def cyclic_lx157(n, b, seed, step, rank, world):
    glob = b * world
    per_cycle = n // glob
    c, t = step // per_cycle, step % per_cycle
    q = U64(t * glob + rank * b) + np.arange(b, dtype=U64)
    if n == 1:
        return np.zeros(b, dtype=U64)
    bits = (n - 1).bit_length()
    h = (bits + (bits & 1)) // 2
    key = mix64_int(seed ^ ((c * GAMMA) & MASK64))
    y = lx157_encrypt(q, h, key)
    walk = y >= U64(n)
    while walk.any():
        y[walk] = lx157_encrypt(y[walk], h, key)
        walk = y >= U64(n)
    return y


SAMPLERS = {"sequential": lambda p: sequential(p["n"], p["batch_size"], p["step"], p["rank"], p["world_size"]),
            "iid": lambda p: iid(p["n"], p["batch_size"], p["seed"], p["step"], p["rank"], p["world_size"]),
            "cyclic": lambda p: cyclic(p["n"], p["batch_size"], p["seed"], p["step"], p["rank"], p["world_size"]),
            "cyclic-lx157": lambda p: cyclic_lx157(p["n"], p["batch_size"], p["seed"], p["step"], p["rank"],
                                                   p["world_size"])}


def check(path):
    """Returns how many lines of `path` were reproduced, or None at a mismatch."""
    count = 0
    with np.errstate(over="ignore"), open(path) as f:
        for lineno, line in enumerate(f, 1):
            p = json.loads(line)
            got = [int(v) for v in SAMPLERS[p["mode"]](p)]
            if got != p["indices"]:
                print(f"{path}:{lineno}: {p['mode']} n={p['n']} step={p['step']} rank={p['rank']}: "
                      f"got {got[:8]}..., want {p['indices'][:8]}...")
                return None
            count += 1
    return count


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    paths = sys.argv[1:] or [os.path.join(here, f) for f in
                             ("sampler.jsonl", "sampler-cyclic-lx157.jsonl", "loaderx-1.5.7.jsonl")]
    for path in paths:
        count = check(path)
        if count is None:
            return 1
        print(f"{path}: {count} sampler vectors reproduced with numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
