"""Cache simulation on a loader's access trace: LRU and the offline optimum.

A loader's records are a pure function of (seed, step): `trace()` rebuilds the
record indices of steps [first, last) with proto/vectors/sampler.py (the
samplers of proto/SAMPLERS.md, bit for bit), and `lru()` / `opt()` replay a
trace through a cache of `capacity` records from empty:

  lru  evicts the least recently used record; every miss is inserted;
  opt  Belady's MIN: on a miss with the cache full, of the cached records and
       the new one, the one whose next use is farthest away (never: infinitely
       far) stays out. Letting the new record stay out is a bypass (no
       insertion), which an optimal cache may do; MIN is then the most hits any
       cache of that capacity can get on the trace, knowing it whole.

Both return a Sim: hits and accesses overall, and within [count_from, end) of
the trace when asked (a window after the cold start).
"""

import heapq
import os
import sys
from collections import OrderedDict, namedtuple

import numpy as np

_VECTORS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "proto", "vectors")

Sim = namedtuple("Sim", "hits accesses window_hits window_accesses")


def _sampler():
    if _VECTORS not in sys.path:
        sys.path.insert(0, _VECTORS)
    import sampler   # proto/vectors/sampler.py
    return sampler


def batch_indices(mode, n, batch, seed, step, rank=0, world=1):
    """The record indices of one step, as the daemon's sampler draws them."""
    s = _sampler()
    with np.errstate(over="ignore"):
        if mode == "iid":
            v = s.iid(n, batch, seed, step, rank, world)
        elif mode == "cyclic":
            v = s.cyclic(n, batch, seed, step, rank, world)
        elif mode == "sequential":
            v = s.sequential(n, batch, step, rank, world)
        else:
            raise ValueError(f"unknown sampler {mode!r}")
    return v.astype(np.uint64)


def trace(mode, n, batch, seed, first, last):
    """The indices of steps [first, last), concatenated in step order."""
    if last <= first:
        return np.empty(0, np.uint64)
    return np.concatenate([batch_indices(mode, n, batch, seed, k) for k in range(first, last)])


def _window(tr, count_from):
    return len(tr) if count_from is None else int(count_from)


def lru(tr, capacity, count_from=None):
    """LRU at `capacity` records on trace `tr` (a sequence of keys)."""
    start = _window(tr, count_from)
    cache = OrderedDict()
    hits = whits = 0
    for t, k in enumerate(tr.tolist() if hasattr(tr, "tolist") else tr):
        if k in cache:
            cache.move_to_end(k)
            hits += 1
            if t >= start:
                whits += 1
            continue
        if capacity <= 0:
            continue
        if len(cache) >= capacity:
            cache.popitem(last=False)
        cache[k] = None
    n = len(tr)
    return Sim(hits, n, whits, max(0, n - start))


def next_uses(tr):
    """nu[t]: the position of the next access to tr[t] after t, or len(tr)
    + (a distinct offset) when there is none."""
    keys = tr.tolist() if hasattr(tr, "tolist") else list(tr)
    n = len(keys)
    nu = [0] * n
    last = {}
    never = n
    for t in range(n - 1, -1, -1):
        k = keys[t]
        nxt = last.get(k)
        if nxt is None:
            never += 1                  # distinct, so that ties never arise
            nxt = never
        nu[t] = nxt
        last[k] = t
    return keys, nu


def opt(tr, capacity, count_from=None):
    """Belady's MIN (with bypass) at `capacity` records on trace `tr`."""
    start = _window(tr, count_from)
    keys, nu = next_uses(tr)
    cache = {}          # key -> its next use
    heap = []           # (-next use, key); stale entries skipped
    hits = whits = 0
    for t, k in enumerate(keys):
        if k in cache:
            hits += 1
            if t >= start:
                whits += 1
            cache[k] = nu[t]
            heapq.heappush(heap, (-nu[t], k))
            continue
        if capacity <= 0:
            continue
        if len(cache) < capacity:
            cache[k] = nu[t]
            heapq.heappush(heap, (-nu[t], k))
            continue
        while True:                     # the cached record used farthest ahead
            far, fk = heap[0]
            if cache.get(fk) == -far:
                break
            heapq.heappop(heap)
        if -far > nu[t]:                # it goes, the new one comes in
            heapq.heappop(heap)
            del cache[fk]
            cache[k] = nu[t]
            heapq.heappush(heap, (-nu[t], k))
        # else: the new record is used later than every cached one: bypass
    n = len(keys)
    return Sim(hits, n, whits, max(0, n - start))


def ratio(hits, accesses):
    return hits / accesses if accesses else None


def capacity_records(budget_bytes, record_bytes, overhead=96):
    """Records a byte budget holds when each costs its bytes plus `overhead`
    (the daemon's decoded-record cache: ZR_RCACHE_ENTRY_OVERHEAD)."""
    return int(budget_bytes // (record_bytes + overhead))
