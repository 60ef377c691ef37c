#!/usr/bin/env python3
"""sampler.py: the samplers of proto/SAMPLERS.md in numpy, checked against the vectors.

A second implementation written from the specification alone, with numpy's uint64
arrays (wrapping multiplication, shifts, xor) and Python integers where the
specification says "exact". It is the proof that a client can reproduce the
vectors without the engine, and a starting point for one. It holds the four
samplers, mixtures of sources (`mixture`) and the inverses, which steps saw a
record (`steps_of`, `mixture_steps_of`):

    python3 proto/vectors/sampler.py [proto/vectors/sampler.jsonl ...]

checks each file named (by default sampler.jsonl, sampler-cyclic-lx157.jsonl,
loaderx-1.5.7.jsonl, the batches of PyPI loaderx 1.5.7 itself,
sampler-mixture.jsonl and sampler-inverse.jsonl), prints how many vectors it
reproduced and exits 0, exits 1 on the first mismatch, and exits 77 (a skipped
test) when numpy is not installed. A line's kind follows from its keys: a
"sources" list is a mixture, a "hits" list an inverse, else a sampler batch.
"""
import heapq
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
DOMAIN_MIX = 0x7A722D6D69780003      # "zr-mix" then 0x0003: a mixture's layout of a step
DOMAIN_SOURCE = 0x7A722D7372630004   # "zr-src" then 0x0004: a mixture source's seed
FEISTEL_ROUNDS = 4
FEISTEL_MUL1 = 0x7FEB352D
FEISTEL_SHIFT = 15
FEISTEL_MUL2 = 0x846CA68B
MASK64 = (1 << 64) - 1
MODES = ("sequential", "iid", "cyclic", "cyclic-lx157")
MIXTURE_MAX_SOURCES = 256
MIXTURE_MAX_WEIGHT = (1 << 32) - 1
SCAN_LIMIT = 1 << 34                 # iid inverses: positions (or draws) one call may scan


class SamplerError(ValueError):
    """Parameters the specification refuses (the engine's ZR_E_SAMPLER)."""


def mix64(z):
    """SplitMix64's finalizer on a uint64 array (wrapping)."""
    z = (z ^ (z >> U64(30))) * U64(MIX_M1)
    z = (z ^ (z >> U64(27))) * U64(MIX_M2)
    return z ^ (z >> U64(31))


def mix64_int(z):
    with np.errstate(over="ignore"):
        return int(mix64(np.array([z & MASK64], dtype=U64))[0])


def key(seed, domain, a):
    """mix64(mix64(seed ^ domain) + a * GAMMA), mod 2^64."""
    return mix64_int((mix64_int(seed ^ domain) + a * GAMMA) & MASK64)


def keys(seed, domain, a):
    """key() of a uint64 array of counters."""
    return mix64(U64(mix64_int(seed ^ domain)) + a * U64(GAMMA))


def mul_hi_lo(x, n):
    """The 128-bit product x * n as (high64, low64), x a uint64 array, n an int."""
    nl, nh = U64(n & 0xFFFFFFFF), U64(n >> 32)
    xl, xh = x & M32, x >> U64(32)
    ll, lh, hl, hh = xl * nl, xl * nh, xh * nl, xh * nh
    mid = (ll >> U64(32)) + (lh & M32) + (hl & M32)
    hi = hh + (lh >> U64(32)) + (hl >> U64(32)) + (mid >> U64(32))
    return hi, x * U64(n)


# ------------------------------------------------------------------ samplers
def sequential(n, b, step, rank, world):
    start = (step * b * world + rank * b) % n  # exact
    j = np.arange(b, dtype=U64) % U64(n)
    room = U64(n - start)  # j < room: no wrap
    return np.where(j < room, U64(start) + j, j - room)


def iid_positions(n, s, g):
    """The iid index of each global position g (a uint64 array) under step key s."""
    base = U64(s) + g * U64(GAMMA)
    t = U64(((1 << 64) - n) % n)  # 2^64 mod n
    out = np.empty(g.size, dtype=U64)
    todo = np.arange(g.size)
    r = 0
    while todo.size:
        hi, lo = mul_hi_lo(mix64(base[todo] + U64((r * DELTA) & MASK64)), n)
        ok = lo >= t
        out[todo[ok]] = hi[ok]
        todo = todo[~ok]
        r += 1
    return out


def iid(n, b, seed, step, rank, world):
    return iid_positions(n, key(seed, DOMAIN_IID, step), U64(rank * b) + np.arange(b, dtype=U64))


def feistel_f(v, k, h):
    t = ((v ^ k) * U64(FEISTEL_MUL1)) & M32
    t ^= t >> U64(FEISTEL_SHIFT)
    t = (t * U64(FEISTEL_MUL2)) & M32
    return t >> U64(32 - h)


def feistel_encrypt(x, a, b, rk):
    r, l = x & U64((1 << a) - 1), x >> U64(a)
    for i in range(0, FEISTEL_ROUNDS, 2):
        l = l ^ feistel_f(r, rk[i], b)
        r = r ^ feistel_f(l, rk[i + 1], a)
    return (l << U64(a)) | r


def feistel_decrypt(y, a, b, rk):
    r, l = y & U64((1 << a) - 1), y >> U64(a)
    for i in range(FEISTEL_ROUNDS - 2, -1, -2):
        r = r ^ feistel_f(l, rk[i + 1], a)
        l = l ^ feistel_f(r, rk[i], b)
    return (l << U64(a)) | r


def feistel_round_keys(k):
    """The round keys k_0..k_3 of permutation key k: an int, or a uint64 array of keys."""
    if isinstance(k, np.ndarray):
        return [mix64(k + U64(((i + 1) * GAMMA) & MASK64)) & M32 for i in range(FEISTEL_ROUNDS)]
    return [U64(mix64_int((k + (i + 1) * GAMMA) & MASK64) & 0xFFFFFFFF) for i in range(FEISTEL_ROUNDS)]


def feistel_walk(n, k, x, step):
    """P (step = feistel_encrypt) or its inverse (feistel_decrypt) of the uint64 array x,
    each value < n, under key k (an int, or one key per value)."""
    w = max(2, (n - 1).bit_length())
    a, bb = w // 2, w - w // 2
    rk = feistel_round_keys(k)
    per_lane = isinstance(k, np.ndarray)
    y = step(x, a, bb, rk)
    walk = y >= U64(n)
    while walk.any():
        y[walk] = step(y[walk], a, bb, [r[walk] for r in rk] if per_lane else rk)
        walk = y >= U64(n)
    return y


def cyclic(n, b, seed, step, rank, world):
    glob = b * world
    per_cycle = n // glob
    c, t = step // per_cycle, step % per_cycle
    q = U64(t * glob + rank * b) + np.arange(b, dtype=U64)
    return feistel_walk(n, key(seed, DOMAIN_CYCLIC, c), q, feistel_encrypt)


def lx157_mix(key_, v, rnd):
    """mix64(key ^ v * GAMMA ^ round * DELTA): loaderx 1.5.7's round function."""
    return mix64(U64(key_) ^ (v * U64(GAMMA)) ^ U64((rnd * DELTA) & MASK64))


def lx157_encrypt(x, h, key_):
    mask = U64((1 << h) - 1)
    l, r = (x >> U64(h)) & mask, x & mask
    for i in range(4):
        l, r = r, l ^ (lx157_mix(key_, r, i) & mask)
    return (l << U64(h)) | r


def lx157_decrypt(y, h, key_):
    mask = U64((1 << h) - 1)
    l, r = (y >> U64(h)) & mask, y & mask
    for i in range(3, -1, -1):
        l, r = r ^ (lx157_mix(key_, l, i) & mask), l
    return (l << U64(h)) | r


def lx157_walk(n, key_, x, step):
    """Q_c (step = lx157_encrypt) or its inverse of x (values < n) under cycle key key_
    (an int, or one key per value)."""
    if n == 1:
        return np.zeros(x.size, dtype=U64)
    bits = (n - 1).bit_length()
    h = (bits + (bits & 1)) // 2
    per_lane = isinstance(key_, np.ndarray)
    y = step(x, h, key_)
    walk = y >= U64(n)
    while walk.any():
        y[walk] = step(y[walk], h, key_[walk] if per_lane else key_)
        walk = y >= U64(n)
    return y


def lx157_cycle_key(seed, c):
    """K = mix64(seed ^ c * GAMMA): an int c, or a uint64 array of cycles."""
    if isinstance(c, np.ndarray):
        return mix64(U64(seed) ^ (c * U64(GAMMA)))
    return mix64_int(seed ^ ((c * GAMMA) & MASK64))


def cyclic_lx157(n, b, seed, step, rank, world):
    glob = b * world
    per_cycle = n // glob
    c, t = step // per_cycle, step % per_cycle
    q = U64(t * glob + rank * b) + np.arange(b, dtype=U64)
    return lx157_walk(n, lx157_cycle_key(seed, c), q, lx157_encrypt)


SAMPLERS = {"sequential": lambda p: sequential(p["n"], p["batch_size"], p["step"], p["rank"], p["world_size"]),
            "iid": lambda p: iid(p["n"], p["batch_size"], p["seed"], p["step"], p["rank"], p["world_size"]),
            "cyclic": lambda p: cyclic(p["n"], p["batch_size"], p["seed"], p["step"], p["rank"], p["world_size"]),
            "cyclic-lx157": lambda p: cyclic_lx157(p["n"], p["batch_size"], p["seed"], p["step"], p["rank"],
                                                   p["world_size"])}


def check_params(mode, n, b, world):
    """The refusals of SAMPLERS.md, "Parameters" (rank aside)."""
    if mode not in MODES:
        raise SamplerError(f"sampler mode {mode!r} is unknown")
    if n < 1 or b < 1 or world < 1:
        raise SamplerError("n, batch_size and world_size must be >= 1")
    if b * world > MASK64:
        raise SamplerError(f"batch_size {b} * world_size {world} overflows 64 bits")
    if mode in ("cyclic", "cyclic-lx157") and b * world > n:
        raise SamplerError(f"{mode}: global batch {b * world} > n = {n}")


# ------------------------------------------------------------------ mixtures
def source_stream(mode, n, seed, c):
    """Draws c (a uint64 array) of a mixture source's own stream: for each, the index
    that `mode` over n with batch_size 1 gives at step c (iid: position c of step 0)."""
    if mode == "sequential":
        return c % U64(n)
    if mode == "iid":
        return iid_positions(n, key(seed, DOMAIN_IID, 0), c)
    cyc, q = c // U64(n), c % U64(n)
    if mode == "cyclic":
        return feistel_walk(n, keys(seed, DOMAIN_CYCLIC, cyc), q, feistel_encrypt)
    return lx157_walk(n, lx157_cycle_key(seed, cyc), q, lx157_encrypt)


class Mixture:
    """A mixture of sources [(mode, n, weight), ...] with batch_size b over world ranks
    under `seed`: SAMPLERS.md, "Mixtures"."""

    def __init__(self, sources, b, world, seed):
        k = len(sources)
        if k == 0:
            raise SamplerError("a mixture needs at least one source")
        if k > MIXTURE_MAX_SOURCES:
            raise SamplerError(f"a mixture of {k} sources: at most {MIXTURE_MAX_SOURCES}")
        for i, (mode, n, w) in enumerate(sources):
            if mode not in MODES:
                raise SamplerError(f"source {i}: sampler mode {mode!r} is unknown")
            if n < 1:
                raise SamplerError(f"source {i}: n = 0 records")
            if not 1 <= w <= MIXTURE_MAX_WEIGHT:
                raise SamplerError(f"source {i}: weight {w} is outside 1 .. 2^32 - 1")
        if b < 1 or world < 1 or b * world > MASK64:
            raise SamplerError("batch_size and world_size must be >= 1, their product < 2^64")
        self.sources, self.b, self.world, self.g, self.seed = list(sources), b, world, b * world, seed
        self.k = k
        self.source_seeds = [key(seed, DOMAIN_SOURCE, i) for i in range(k)]
        # the apportionment tree: Huffman's, ties to the older node (the lower id)
        self.weight = [w for _, _, w in sources]
        self.left, self.right = [-1] * k, [-1] * k
        heap = [(w, i) for i, w in enumerate(self.weight)]
        heapq.heapify(heap)
        while len(heap) > 1:
            a, b_ = heapq.heappop(heap), heapq.heappop(heap)
            self.left.append(a[1])
            self.right.append(b_[1])
            self.weight.append(a[0] + b_[0])
            heapq.heappush(heap, (self.weight[-1], len(self.weight) - 1))
        self.root = len(self.weight) - 1
        self.parent = [-1] * len(self.weight)
        for node in range(k, len(self.weight)):
            self.parent[self.left[node]] = self.parent[self.right[node]] = node

    def last_step(self):
        """The last step the mixture defines: every position (s + 1) * G - 1 < 2^64 - 1."""
        return MASK64 // self.g - 1

    def _split(self, x, node):
        """The left child's share of its parent's x: round(x * w_left / w_parent), halves up."""
        return (2 * x * self.weight[self.left[node]] + self.weight[node]) // (2 * self.weight[node])

    def node_draws(self, step):
        """X of every node of the tree at the start of `step` (house step * G)."""
        x = [0] * len(self.weight)
        x[self.root] = step * self.g
        for node in range(len(self.weight) - 1, self.k - 1, -1):
            xl = self._split(x[node], node)
            x[self.left[node]], x[self.right[node]] = xl, x[node] - xl
        return x

    def draws_before(self, source, step):
        """D_k(step): draws of source k in steps 0 .. step - 1, along its path only."""
        path = []
        node = source
        while self.parent[node] >= 0:
            path.append(node)
            node = self.parent[node]
        x = step * self.g
        for child in reversed(path):
            parent = self.parent[child]
            xl = self._split(x, parent)
            x = xl if self.left[parent] == child else x - xl
        return x

    def counts(self, step):
        """(D_k(step), count_k(step)) for every source."""
        if step > self.last_step():
            raise SamplerError(f"step {step} is past the mixture's last step {self.last_step()}")
        x0, x1 = self.node_draws(step), self.node_draws(step + 1)
        return x0[:self.k], [x1[i] - x0[i] for i in range(self.k)]

    def layout(self, step, g):
        """The slot of each global position g (a uint64 array) of `step`."""
        return feistel_walk(self.g, key(self.seed, DOMAIN_MIX, step), g, feistel_encrypt)

    def unlayout(self, step, t):
        return feistel_walk(self.g, key(self.seed, DOMAIN_MIX, step), t, feistel_decrypt)

    def stream(self, source, c):
        mode, n, _ = self.sources[source]
        return source_stream(mode, n, self.source_seeds[source], c)

    def batch(self, step, rank):
        """(source, index) of rank's batch_size positions at `step`, two uint64 arrays."""
        if rank >= self.world:
            raise SamplerError(f"rank {rank} >= world_size {self.world}")
        before, count = self.counts(step)
        first = np.cumsum([0] + count[:-1]).astype(U64)      # Y_k: the first slot of source k
        t = self.layout(step, U64(rank * self.b) + np.arange(self.b, dtype=U64))
        src = np.searchsorted(first, t, side="right") - 1    # Y_k <= t < Y_k+1 (counts may be 0)
        draw = np.array(before, dtype=U64)[src] + (t - first[src])
        idx = np.empty(self.b, dtype=U64)
        for k in np.unique(src):
            sel = src == k
            idx[sel] = self.stream(int(k), draw[sel])
        return src.astype(U64), idx

    def step_of_draw(self, source, c, lo, hi):
        """The step s in [lo, hi) with D_k(s) <= c < D_k(s + 1) (one exists)."""
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.draws_before(source, mid) <= c:
                lo = mid
            else:
                hi = mid
        return lo


def mixture(p):
    """A vector line's batch: (sources, indices) as lists of ints."""
    m = Mixture([(s["mode"], s["n"], s["weight"]) for s in p["sources"]], p["batch_size"], p["world_size"],
                p["seed"])
    src, idx = m.batch(p["step"], p["rank"])
    before, count = m.counts(p["step"])
    return m, [int(v) for v in src], [int(v) for v in idx], before, count


# ------------------------------------------------------------------ inverses
def _record_checks(n, record, start, stop):
    if record >= n:
        raise SamplerError(f"record {record} >= n = {n}")
    return max(0, stop - start)


def _iid_find(n, s, first, count, record, progress=None, done=0, total=0):
    """The positions g in [first, first + count) whose iid index under step key s is
    `record`: a vectorized scan that narrows on the first draw's range, then checks the
    rejected lanes exactly."""
    two64 = 1 << 64
    lo = -(-(record * two64) // n)                   # high64(x * n) = record  <=>  lo <= x <= hi
    hi = -(-((record + 1) * two64) // n) - 1
    t = U64((two64 - n) % n)
    found = []
    chunk = 1 << 18
    for off in range(0, count, chunk):
        g = U64(first + off) + np.arange(min(chunk, count - off), dtype=U64)
        x = mix64(U64(s) + g * U64(GAMMA))
        _, low = mul_hi_lo(x, n)
        rejected = low < t
        inside = (x >= U64(lo)) & (x <= U64(hi)) & ~rejected
        if rejected.any():
            again = g[rejected]
            inside[rejected] = iid_positions(n, s, again) == U64(record)
        found.extend(int(v) for v in g[inside])
        if progress is not None:
            progress(done + off + g.size, total)
    return found


def steps_of(mode, n, b, seed, world, record, start, stop, progress=None, scan_limit=SCAN_LIMIT):
    """Every (step, rank, position) of steps [start, stop) whose batch holds `record`,
    in ascending step then position: SAMPLERS.md, "Which steps saw a record"."""
    check_params(mode, n, b, world)
    g_ = b * world
    steps = _record_checks(n, record, start, stop)
    hits = []
    if steps == 0:
        return hits
    if mode == "sequential":
        p = start * g_ + (record - start * g_) % n   # the first position >= start * G holding record
        while p < stop * g_:
            s, g = divmod(p, g_)
            hits.append((s, g // b, g % b))
            p += n
        return hits
    if mode == "iid":
        if steps * g_ > scan_limit:
            raise SamplerError(f"iid: steps [{start}, {stop}) scan {steps * g_} positions, "
                               f"above the limit {scan_limit}")
        for i, s in enumerate(range(start, stop)):
            for g in _iid_find(n, key(seed, DOMAIN_IID, s), 0, g_, record, progress, i * g_, steps * g_):
                hits.append((s, g // b, g % b))
        return hits
    m = n // g_
    cycles = np.arange(start // m, (stop - 1) // m + 1, dtype=U64)
    r = np.full(cycles.size, record, dtype=U64)
    if mode == "cyclic":
        q = feistel_walk(n, keys(seed, DOMAIN_CYCLIC, cycles), r, feistel_decrypt)
    else:
        q = lx157_walk(n, lx157_cycle_key(seed, cycles), r, lx157_decrypt)
    for c, qq in zip(cycles, q):
        c, qq = int(c), int(qq)
        if qq >= m * g_:
            continue                                 # dropped in this cycle
        s = c * m + qq // g_
        if start <= s < stop:
            g = qq % g_
            hits.append((s, g // b, g % b))
    return hits


def mixture_steps_of(mix, source, record, start, stop, progress=None, scan_limit=SCAN_LIMIT):
    """Every (step, rank, position) of steps [start, stop) whose batch holds record
    `record` of source `source`, in ascending step then position."""
    mode, n, _ = mix.sources[source]
    stop = min(stop, mix.last_step() + 1)
    if _record_checks(n, record, start, stop) == 0:
        return []
    c_lo, c_hi = mix.draws_before(source, start), mix.draws_before(source, stop)
    if c_hi <= c_lo:
        return []
    # the draws of the source's own stream in [c_lo, c_hi) that give `record`
    if mode == "sequential":
        draws = range(c_lo + (record - c_lo) % n, c_hi, n)
    elif mode == "iid":
        if c_hi - c_lo > scan_limit:
            raise SamplerError(f"iid source {source}: draws [{c_lo}, {c_hi}) scan {c_hi - c_lo} draws, "
                               f"above the limit {scan_limit}")
        draws = _iid_find(n, key(mix.source_seeds[source], DOMAIN_IID, 0), c_lo, c_hi - c_lo, record,
                          progress, 0, c_hi - c_lo)
    else:
        cycles = np.arange(c_lo // n, (c_hi - 1) // n + 1, dtype=U64)
        r = np.full(cycles.size, record, dtype=U64)
        seed = mix.source_seeds[source]
        if mode == "cyclic":
            q = feistel_walk(n, keys(seed, DOMAIN_CYCLIC, cycles), r, feistel_decrypt)
        else:
            q = lx157_walk(n, lx157_cycle_key(seed, cycles), r, lx157_decrypt)
        draws = [c for c in (int(cy) * n + int(qq) for cy, qq in zip(cycles, q)) if c_lo <= c < c_hi]
    hits = []
    lo = start
    for c in draws:
        s = mix.step_of_draw(source, c, lo, stop)
        lo = s
        before, count = mix.counts(s)
        t = sum(count[:source]) + c - before[source]
        g = int(mix.unlayout(s, np.array([t], dtype=U64))[0])
        hits.append((s, g // mix.b, g % mix.b))
    hits.sort()
    return hits


# ------------------------------------------------------------------ the vectors
def check_line(p):
    """(got, want) for one vector line."""
    if "hits" in p:
        want = [list(h) for h in p["hits"]]
        if "sources" in p:
            m = Mixture([(s["mode"], s["n"], s["weight"]) for s in p["sources"]], p["batch_size"],
                        p["world_size"], p["seed"])
            got = mixture_steps_of(m, p["source"], p["record"], p["start"], p["stop"])
        else:
            got = steps_of(p["mode"], p["n"], p["batch_size"], p["seed"], p["world_size"], p["record"],
                           p["start"], p["stop"])
        return [list(h) for h in got], want
    if "sources" in p:
        _, src, idx, before, count = mixture(p)
        return ([src, idx, before, count],
                [p["source"], p["indices"], p["draws_before"], p["counts"]])
    return [int(v) for v in SAMPLERS[p["mode"]](p)], p["indices"]


def check(path):
    """Returns how many lines of `path` were reproduced, or None at a mismatch."""
    count = 0
    with np.errstate(over="ignore"), open(path) as f:
        for lineno, line in enumerate(f, 1):
            p = json.loads(line)
            got, want = check_line(p)
            if got != want:
                print(f"{path}:{lineno}: {line[:120]}...: got {str(got)[:200]}, want {str(want)[:200]}")
                return None
            count += 1
    return count


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    paths = sys.argv[1:] or [os.path.join(here, f) for f in
                             ("sampler.jsonl", "sampler-cyclic-lx157.jsonl", "loaderx-1.5.7.jsonl",
                              "sampler-mixture.jsonl", "sampler-inverse.jsonl")]
    for path in paths:
        count = check(path)
        if count is None:
            return 1
        print(f"{path}: {count} sampler vectors reproduced with numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
