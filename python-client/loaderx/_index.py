"""Index normalization: every selector form to a u64 index array.

A dataset is a collection of records, so every selector names records: a scalar
(negatives wrap from the end), a slice, an integer array or list, a boolean mask of
the dataset's length, or a tuple of any of these (``ds[0, 5, 2]`` is the record
set of records 0, 5 and 2).
"""

import numbers
import operator

import numpy as np

from ._errors import ZrecordIndexError, ZrecordTypeError


def _scalar(i, n):
    if i < -n or i >= n:
        raise ZrecordIndexError(
            f"index {i} is out of range for a dataset of {n} records "
            f"(valid: {-n} .. {n - 1})" if n else
            f"index {i} is out of range: the dataset is empty", name="ZR_E_RANGE")
    return i + n if i < 0 else i


def _is_int(x):
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


class _Length:
    """The dataset's length, asked for once and only when a selector needs it."""
    __slots__ = ("get", "n")

    def __init__(self, get):
        self.get, self.n = get, None

    def __call__(self):
        if self.n is None:
            self.n = int(self.get())
        return self.n


def normalize(key, n):
    """(indices as a ``<u8`` array, True if key was a single scalar). ``n`` is the
    length, or a function that returns it: then it is called only for what needs
    it (negative indices, slices, masks), and indices that need no length are
    passed on unchecked: the daemon checks them (ZR_E_RANGE, an IndexError)."""
    if callable(n) and not isinstance(n, _Length):
        n = _Length(n)
    if isinstance(key, np.ndarray) and key.ndim == 0 and key.dtype.kind in "iu":
        key = key.item()            # a 0-d integer array is a scalar, as in numpy
    if _is_int(key):
        i = operator.index(key)
        if isinstance(n, _Length) and i >= 0:
            return np.array([i], dtype="<u8"), True
        return np.array([_scalar(i, _len(n))], dtype="<u8"), True
    if isinstance(key, tuple):
        parts = [normalize(k, n)[0] for k in key]
        if not parts:
            return np.empty(0, dtype="<u8"), False
        return np.concatenate(parts).astype("<u8", copy=False), False
    return _normalize_multi(key, n), False


def _len(n):
    return n() if isinstance(n, _Length) else n


def _normalize_multi(key, n):
    if isinstance(key, slice):
        return np.arange(*key.indices(_len(n)), dtype=np.int64).astype("<u8")
    if isinstance(key, (bool, np.bool_)):
        raise ZrecordTypeError(
            "a single boolean is not a record selector: use an integer, a slice, "
            "an integer array or a boolean mask of the dataset's length")
    if isinstance(key, (float, np.floating, complex)):
        raise ZrecordTypeError(
            f"record indices must be integers, got {type(key).__name__} {key!r}")
    if isinstance(key, (str, bytes, dict)) or key is None or key is Ellipsis:
        raise ZrecordTypeError(
            f"record indices must be integers, slices, integer arrays or boolean masks, "
            f"got {type(key).__name__}")
    try:
        a = np.asarray(key)
    except (ValueError, TypeError) as e:
        raise ZrecordTypeError(f"cannot use {type(key).__name__} as record indices: {e}") from None
    if a.dtype == np.bool_:
        n = _len(n)
        if a.ndim != 1 or a.shape[0] != n:
            raise ZrecordIndexError(
                f"a boolean mask must be 1-D with one element per record: the dataset "
                f"has {n} records, the mask has shape {a.shape}")
        return np.flatnonzero(a).astype("<u8")
    if a.size == 0:
        return np.empty(0, dtype="<u8")
    if a.dtype.kind not in "iu":
        raise ZrecordTypeError(
            f"record indices must be integers, got an array of {a.dtype}")
    if a.ndim != 1:
        raise ZrecordIndexError(
            f"an index array must be 1-D, got shape {a.shape}")
    if isinstance(n, _Length) and a.ndim == 1 and (a.dtype.kind == "u" or not (a < 0).any()):
        return a.astype("<u8", copy=False)      # no length needed: the daemon checks
    n = _len(n)
    if a.dtype.kind == "u":
        bad = a >= n
        if bad.any():
            raise ZrecordIndexError(
                f"index {int(a[bad][0])} is out of range for a dataset of {n} records",
                name="ZR_E_RANGE")
        return a.astype("<u8")
    a = a.astype(np.int64)
    bad = (a < -n) | (a >= n)
    if bad.any():
        raise ZrecordIndexError(
            f"index {int(a[bad][0])} is out of range for a dataset of {n} records "
            f"(valid: {-n} .. {n - 1})", name="ZR_E_RANGE")
    a = np.where(a < 0, a + n, a)
    return a.astype("<u8")
