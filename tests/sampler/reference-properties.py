#!/usr/bin/env python3
"""reference-properties.py: the numpy reference (proto/vectors/sampler.py) against
brute force, for mixtures and inverses.

For random (mode, seed, n, B, W, steps, record), plain and mixed, steps_of holds a
(step, rank, position) exactly when that step's batch holds the record there, in
ascending order; a mixture's counts are non-negative, sum to G and stay within the
tree's bound of the weights; a step's batch over all ranks is each source's next
draws; ranks slice one global batch. The engine's side of the same properties is
tests/sampler/test-mixture.c and test-inverse.c; the vectors tie the two together.
Cases come from a fixed seed. Exits 0, 1 on the first failure, 77 without numpy.
"""
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "proto", "vectors"))

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("numpy is not installed: skipped")
    sys.exit(77)

import sampler as S  # noqa: E402

np.seterr(over="ignore")
rng = random.Random(0x5EED)


def plain_batch(mode, n, b, seed, world, step, rank):
    return S.SAMPLERS[mode]({"n": n, "batch_size": b, "seed": seed, "step": step, "rank": rank,
                             "world_size": world})


def check_plain_inverse(cases):
    for c in range(cases):
        mode = S.MODES[c % 4]
        n, b, world = rng.randint(1, 60), rng.randint(1, 9), rng.randint(1, 3)
        if mode.startswith("cyclic") and b * world > n:
            n = b * world + rng.randint(0, 10)
        seed = rng.getrandbits(64)
        start = rng.choice([rng.randint(0, 30), rng.getrandbits(62), (1 << 64) - 1 - rng.randint(30, 500)])
        stop = start + rng.randint(0, 25)
        record = rng.randrange(n)
        want = [(s, r, j) for s in range(start, stop) for r in range(world)
                for j, v in enumerate(plain_batch(mode, n, b, seed, world, s, r)) if int(v) == record]
        got = S.steps_of(mode, n, b, seed, world, record, start, stop)
        assert got == want, (mode, n, b, world, seed, start, stop, record, got, want)


def random_mixture(max_sources=5, max_n=30, max_w=20):
    k = rng.randint(1, max_sources)
    sources = [(rng.choice(S.MODES), rng.randint(1, max_n), rng.randint(1, max_w)) for _ in range(k)]
    return sources, rng.randint(1, 8), rng.randint(1, 3), rng.getrandbits(64)


def check_mixture_inverse(cases):
    for _ in range(cases):
        sources, b, world, seed = random_mixture(max_n=rng.choice([3, 30]))
        m = S.Mixture(sources, b, world, seed)
        start = rng.choice([rng.randint(0, 20), rng.getrandbits(40), m.last_step() - rng.randint(0, 20)])
        stop = start + rng.randint(0, 15)
        k = rng.randrange(len(sources))
        record = rng.randrange(sources[k][1])
        want = []
        for s in range(start, min(stop, m.last_step() + 1)):
            for r in range(world):
                src, idx = m.batch(s, r)
                want += [(s, r, j) for j, (a, v) in enumerate(zip(src, idx)) if int(a) == k and int(v) == record]
        got = S.mixture_steps_of(m, k, record, start, stop)
        assert got == want, (sources, b, world, seed, start, stop, k, record, got, want)


def tree_bound(m, k):
    """(1/2) sum of w_k / w_A over the nodes from leaf k up to, not including, the root."""
    bound, node = 0.0, k
    while node != m.root:
        bound += m.weight[k] / m.weight[node]
        node = m.parent[node]
    return bound / 2


def check_apportionment(cases):
    worst = 0.0
    for _ in range(cases):
        sources, b, world, seed = random_mixture(max_sources=10, max_w=rng.choice([5, 100, 100000]))
        m = S.Mixture(sources, b, world, seed)
        total = sum(w for _, _, w in sources)
        s0 = rng.choice([0, rng.getrandbits(45)])
        prev = None
        for s in range(s0, s0 + 60):
            before, count = m.counts(s)
            assert sum(count) == b * world and min(count) >= 0, (sources, s, count)
            if prev is not None:
                assert [p + c for p, c in zip(prev[0], prev[1])] == before
            prev = (before, count)
            for k, (_, _, w) in enumerate(sources):
                assert m.draws_before(k, s) == before[k]
                dev = abs(before[k] * total - s * b * world * w) / total
                assert dev <= tree_bound(m, k) + 1e-9 < 1.68, (sources, s, k, dev)
                worst = max(worst, dev)
    assert worst > 0.5, worst


def check_batches(cases):
    for _ in range(cases):
        sources, b, world, seed = random_mixture(max_n=rng.choice([3, 50]))
        step = rng.choice([rng.randint(0, 50), rng.getrandbits(50)])
        m = S.Mixture(sources, b, world, seed)
        before, count = m.counts(step)
        parts = [m.batch(step, r) for r in range(world)]
        src = np.concatenate([p[0] for p in parts])
        idx = np.concatenate([p[1] for p in parts])
        # one rank of the same global batch gives the same positions
        whole = S.Mixture(sources, b * world, 1, seed).batch(step, 0)
        assert (whole[0] == src).all() and (whole[1] == idx).all()
        for k in range(len(sources)):
            mine = sorted(int(v) for v in idx[src == k])
            want = sorted(int(v) for v in m.stream(k, np.arange(before[k], before[k] + count[k], dtype=np.uint64)))
            assert mine == want, (sources, step, k)


def main():
    check_plain_inverse(300)
    check_mixture_inverse(250)
    check_apportionment(150)
    check_batches(150)
    print("reference properties: plain and mixture inverses, apportionment, batches: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
