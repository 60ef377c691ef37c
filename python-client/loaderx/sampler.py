"""loaderx 1.5.7's ``Sampler``, computed here with numpy.

``Sampler(length, batch_size, mode, seed=42)`` is a stateful iterator of index
batches: ``next()`` returns the indices of the current step (a new uint64 array)
and advances, ``seek(step)`` makes the next ``next()`` return step ``step``.
``mode`` is ``Sampler.Mode``:

- ``SEQUENTIAL`` (0): ``((s·B mod 2^64) mod n + j) mod n`` for j < B, as loaderx
  1.5.7 computes it (the product wraps in 64 bits; the daemon's ``sequential`` is
  exact, the same below s·B = 2^64);
- ``IID`` (1): zrecord's counter-based ``iid`` (proto/SAMPLERS.md), which seeks in
  O(1); loaderx 1.5.7's is a stream replayed draw by draw, and its indices differ;
- ``CYCLIC`` (2): loaderx 1.5.7's cyclic, ``cyclic-lx157`` of proto/SAMPLERS.md bit
  for bit, including its short batch when ``length < batch_size`` (each step is a
  cycle of its own and gives all ``length`` indices).

These are the batches a ``DataLoader`` of the same mode, seed and batch size
serves at each step (at world size 1), so a run that counted its steps under
loaderx 1.5.7 resumes exactly: ``DataLoader(..., mode=2, start_step=s)``.
"""

import numpy as np

__all__ = ["Sampler"]

_U64 = np.uint64
_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_DELTA = 0xD1B54A32D192ED03
_DOMAIN_IID = 0x7A722D6969640001


def _mix(z):
    """SplitMix64's finalizer, wrapping, on a uint64 array."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def _mix_int(z):
    return int(_mix(np.array([z & _MASK64], dtype=_U64))[0])


def _lx157_rounds(x, h, key):
    """loaderx 1.5.7's 4-round Feistel over 2h bits (proto/SAMPLERS.md, E')."""
    mask = _U64((1 << h) - 1)
    left, right = (x >> _U64(h)) & mask, x & mask
    with np.errstate(over="ignore"):
        for i in range(4):
            f = _mix(_U64(key) ^ (right * _U64(_GAMMA)) ^ _U64((i * _DELTA) & _MASK64)) & mask
            left, right = right, left ^ f
    return (left << _U64(h)) | right


def _lx157_permute(n, key, q):
    """Q_c(q) for the uint64 array q (values < n) under cycle key `key`."""
    if n == 1:
        return np.zeros(q.size, dtype=_U64)
    bits = (n - 1).bit_length()
    h = (bits + 1) // 2
    y = _lx157_rounds(q, h, key)
    out = y >= _U64(n)
    while out.any():                # cycle-walking: at least one pass, until < n
        y[out] = _lx157_rounds(y[out], h, key)
        out = y >= _U64(n)
    return y


def _cyclic(n, b, seed, step):
    if n == 0:
        return np.empty(0, dtype=_U64)
    if b > n:                       # a short batch: every step a cycle of its own
        cycle, q = step, np.arange(n, dtype=_U64)
    else:
        per = n // b
        cycle, t = divmod(step, per)
        q = _U64(t * b) + np.arange(b, dtype=_U64)
    key = _mix_int(seed ^ ((cycle * _GAMMA) & _MASK64))
    return _lx157_permute(n, key, q)


def _sequential(n, b, step):
    if n == 0:
        raise ZeroDivisionError("a sequential Sampler of length 0 has no batch")
    start = ((step * b) & _MASK64) % n
    return (_U64(start) + np.arange(b, dtype=_U64) % _U64(n)) % _U64(n)


def _mul_hi_lo(x, n):
    """(high, low) 64 bits of the 128-bit products x · n."""
    nl, nh = _U64(n & 0xFFFFFFFF), _U64(n >> 32)
    m32 = _U64(0xFFFFFFFF)
    xl, xh = x & m32, x >> _U64(32)
    with np.errstate(over="ignore"):
        ll, lh, hl, hh = xl * nl, xl * nh, xh * nl, xh * nh
        mid = (ll >> _U64(32)) + (lh & m32) + (hl & m32)
        return hh + (lh >> _U64(32)) + (hl >> _U64(32)) + (mid >> _U64(32)), x * _U64(n)


def _iid(n, b, seed, step):
    """zrecord's iid at world size 1 (proto/SAMPLERS.md): Lemire's bound of SplitMix64
    draws keyed by (seed, step), with rejection."""
    if n == 0:
        return np.zeros(b, dtype=_U64)
    key = _mix_int((_mix_int(seed ^ _DOMAIN_IID) + step * _GAMMA) & _MASK64)
    with np.errstate(over="ignore"):
        base = _U64(key) + np.arange(b, dtype=_U64) * _U64(_GAMMA)
    floor = _U64(((1 << 64) - n) % n)
    out = np.empty(b, dtype=_U64)
    todo = np.arange(b)
    r = 0
    while todo.size:
        with np.errstate(over="ignore"):
            hi, lo = _mul_hi_lo(_mix(base[todo] + _U64((r * _DELTA) & _MASK64)), n)
        ok = lo >= floor
        out[todo[ok]] = hi[ok]
        todo = todo[~ok]
        r += 1
    return out


class Sampler:
    """loaderx 1.5.7's sampler: ``next()`` gives a step's indices, ``seek(step)``."""

    class Mode:
        SEQUENTIAL = 0
        IID = 1
        CYCLIC = 2  # without replacement, a new permutation each cycle

    def __init__(self, length: int, batch_size: int, mode: int, seed: int = 42):
        for what, v in (("length", length), ("batch_size", batch_size), ("seed", seed)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{what} must be an integer, got {type(v).__name__}")
            if not 0 <= v <= _MASK64:
                raise OverflowError(f"{what} {v} does not fit in a uint64")
        if mode not in (0, 1, 2) or isinstance(mode, bool):
            raise ValueError(f"unknown sampler mode {mode!r}: 0 sequential, 1 iid, 2 cyclic")
        self.length, self.batch_size = int(length), int(batch_size)
        self.mode, self.seed = int(mode), int(seed)
        self.step = 0

    def indices(self, step):
        """The indices of step ``step``, without moving (a new uint64 array)."""
        n, b = self.length, self.batch_size
        if self.mode == self.Mode.SEQUENTIAL:
            return _sequential(n, b, step)
        if self.mode == self.Mode.IID:
            return _iid(n, b, self.seed, step)
        return _cyclic(n, b, self.seed, step)

    def next(self):
        out = self.indices(self.step)
        self.step = (self.step + 1) & _MASK64
        return out

    def seek(self, step: int):
        """Positions at step ``step`` (0-based): the next ``next()`` returns it."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an integer, got {type(step).__name__}")
        if not 0 <= step <= _MASK64:
            raise OverflowError(f"step {step} does not fit in a uint64")
        self.step = int(step)

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()
