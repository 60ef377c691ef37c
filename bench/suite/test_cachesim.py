"""Tests of bench/suite/cachesim.py:  python3 -m pytest -q bench/suite/test_cachesim.py"""

import json
import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from suite import cachesim as S  # noqa: E402

VECTORS = os.path.join(os.path.dirname(S._VECTORS), "vectors", "sampler.jsonl")


def brute_opt(tr, cap):
    """The most hits any cache of `cap` records can get on `tr`, by trying
    every choice on every miss: insert or not, and which record to evict."""
    best = 0
    states = {frozenset(): 0}
    for k in tr:
        nxt = {}
        for cache, hits in states.items():
            if k in cache:
                opts = [(cache, hits + 1)]
            elif len(cache) < cap:
                opts = [(cache | {k}, hits), (cache, hits)]
            else:
                opts = [(cache, hits)] + [((cache - {e}) | {k}, hits) for e in cache]
            for c, h in opts:
                if nxt.get(c, -1) < h:
                    nxt[c] = h
        states = nxt
    best = max(states.values())
    return best


def test_lru_textbook():
    # capacity 3, the classic reference string: 12 accesses, LRU hits 2 of them
    tr = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
    assert S.lru(tr, 3).hits == 2
    # capacity 4: 4 hits (no Belady anomaly for LRU)
    assert S.lru(tr, 4).hits == 4


def test_opt_textbook():
    # Belady's MIN on the same string: 5 hits at capacity 3, 6 at capacity 4
    tr = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]
    assert S.opt(tr, 3).hits == 5
    assert S.opt(tr, 4).hits == 6


def test_cyclic_scan_lru_gets_nothing_opt_keeps_part():
    tr = list(range(10)) * 5
    assert S.lru(tr, 9).hits == 0                  # every record evicted just before its reuse
    # MIN keeps 0..8 for good and lets 9 pass every time: 4 rounds x 9 hits
    assert S.opt(tr, 9).hits == 36


def test_zero_capacity():
    tr = [1, 1, 1]
    assert S.lru(tr, 0).hits == 0
    assert S.opt(tr, 0).hits == 0


@pytest.mark.parametrize("seed", range(40))
def test_opt_is_the_optimum(seed):
    rnd = random.Random(seed)
    tr = [rnd.randrange(6) for _ in range(14)]
    cap = rnd.randrange(1, 5)
    best = brute_opt(tr, cap)
    assert S.opt(tr, cap).hits == best
    assert S.lru(tr, cap).hits <= best


def test_opt_never_below_lru_on_larger_traces():
    rng = np.random.default_rng(5)
    for cap in (1, 10, 100, 400):
        tr = rng.zipf(1.3, 5000) % 1000
        assert S.opt(tr, cap).hits >= S.lru(tr, cap).hits
        # and everything fits: only first accesses miss
        assert S.opt(tr, 1000).hits == len(tr) - len(set(tr.tolist()))
        assert S.lru(tr, 1000).hits == len(tr) - len(set(tr.tolist()))


def test_window_counts_only_the_tail():
    tr = [1, 2, 1, 2, 3, 1, 2]
    full = S.lru(tr, 2)
    w = S.lru(tr, 2, count_from=4)
    assert w.hits == full.hits and w.window_accesses == 3
    assert full.hits == 2 and w.window_hits == 0   # 3 evicts 1, 1 evicts 2, then 2 misses
    assert S.opt(tr, 2, count_from=0).window_hits == S.opt(tr, 2).hits


def test_trace_is_the_samplers():
    """trace() reproduces the specification's vectors (rank 0, world 1)."""
    seen = 0
    with open(VECTORS) as f:
        for line in f:
            p = json.loads(line)
            if p["rank"] != 0 or p["world_size"] != 1:
                continue
            got = S.trace(p["mode"], p["n"], p["batch_size"], p["seed"], p["step"], p["step"] + 1)
            assert got.tolist() == p["indices"], p
            seen += 1
    assert seen > 50


def test_trace_concatenates_steps():
    a = S.trace("iid", 1000, 16, 3, 5, 8)
    assert len(a) == 48
    assert a[16:32].tolist() == S.batch_indices("iid", 1000, 16, 3, 6).tolist()
    assert S.trace("iid", 1000, 16, 3, 5, 5).size == 0


def test_capacity_records():
    assert S.capacity_records(64 << 20, 4096) == (64 << 20) // (4096 + 96)
    assert S.capacity_records(0, 4096) == 0


def test_uniform_iid_hit_ratio_is_about_the_fraction_cached():
    # LRU on uniform draws hits about capacity/n once warm; MIN does better
    tr = S.trace("iid", 20000, 512, 1, 0, 80)
    start = 20 * 512
    lr, op = S.lru(tr, 5000, start), S.opt(tr, 5000, start)
    assert 0.2 < lr.window_hits / lr.window_accesses < 0.3
    assert op.window_hits > lr.window_hits * 1.2


def test_brute_force_helper_itself():
    # a guard for the oracle: with room for everything, only first uses miss
    assert brute_opt([1, 2, 1, 2, 3, 3], 3) == 3
    assert brute_opt([1, 2, 3, 1], 1) == 1     # keep 1, let 2 and 3 pass
    # next uses: position 2, then 'never' (distinct values past the end)
    assert S.next_uses([4, 5, 4])[1] == [2, 5, 4]
