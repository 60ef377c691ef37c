"""lxdata.py: the records of the loaderx 1.5.7 compatibility fixtures, by formula.

make_loaderx_stores.py writes them with PyPI loaderx 1.5.7, check_loaderx_stores.py
checks with it what zrecord wrote, and tests/compat/test-lx157.c computes the same
values in C (lxdata.h), so that a store written by either side is checked record by
record without any file of expected values.
"""
import numpy as np

DENSE_N = 3000
DENSE_SHAPE = (4, 4)
RAGGED_N = 1500
RAGGED_SHAPES = [(2, 4), (5,), (3, 3, 3), (7, 2), (1, 1)]
BYTES_N = 200
CODECS = ("raw", "zstd", "zstd_dict")

# What test-lx157.c does to every fixture store it opens, in this order, before
# loaderx 1.5.7 checks it: append APPEND records (the next ids), delete DELETE
# (a repeat included: loaderx tolerates repeats), compact.
APPEND_DENSE = 100
APPEND_RAGGED = 20
DELETE = [0, 7, 1499, 750, 42, 42]
# The same for the byte stores (python-client/tests/test_lx157_interop.py).
APPEND_BYTES = 10
DELETE_BYTES = [0, 7, 199, 100, 42, 42]
# What make_loaderx_stores.py does to its "deleted" stores with loaderx 1.5.7.
LX_DELETE = [3, 1499, 700, 700, 10]


def dense_record(i):
    """Record i of a dense fixture: int32, shape DENSE_SHAPE."""
    return (np.arange(16, dtype=np.int32) + np.int32(i * 16)).reshape(DENSE_SHAPE)


def dense_array(ids):
    return np.stack([dense_record(i) for i in ids])


def ragged_shape(i):
    return RAGGED_SHAPES[i % len(RAGGED_SHAPES)]


def ragged_record(i):
    """Record i of a ragged fixture: int32 of shape ragged_shape(i)."""
    s = ragged_shape(i)
    return (np.arange(int(np.prod(s)), dtype=np.int32) + np.int32(i * 1000)).reshape(s)


def bytes_record(i):
    return bytes([i % 251]) * (100 + (i * 13) % 400)


def swap_last(ids, doomed):
    """ids after a swap-last delete of `doomed` (distinct, descending), as zrecord
    and loaderx 1.5.7 both do it."""
    ids = list(ids)
    for k in sorted(set(doomed), reverse=True):
        ids[k] = ids[-1]
        ids.pop()
    return ids


def after_zrecord_ops(n, append):
    """The record ids of a fixture of n records after test-lx157.c's changes."""
    return swap_last(list(range(n + append)), DELETE)

# What check_loaderx_stores.py appends with loaderx 1.5.7 after checking a store, so
# that test-lx157.c can then check loaderx's writes into zrecord's stores.
LX_APPEND_FIRST = 100000
LX_APPEND = 5


def ids_of(spec):
    """The record ids a store must hold, from a spec word of test-lx157.c:
    "plain:N" (0..N-1), "zr-dense:N" / "zr-ragged:N" (after test-lx157.c's changes
    to a fixture of N), "zr-bytes:N" (after test_lx157_interop.py's changes to a
    byte store of N), "lx:N" (after make_loaderx_stores.py's delete)."""
    kind, n = spec.split(":")
    n = int(n)
    if kind == "plain":
        return list(range(n))
    if kind == "zr-dense":
        return after_zrecord_ops(n, APPEND_DENSE)
    if kind == "zr-ragged":
        return after_zrecord_ops(n, APPEND_RAGGED)
    if kind == "zr-bytes":
        return swap_last(list(range(n + APPEND_BYTES)), DELETE_BYTES)
    if kind == "lx":
        return swap_last(range(n), LX_DELETE)
    raise ValueError(spec)
