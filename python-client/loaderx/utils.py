"""Conversions into stores, and dictionary training.

``from_numpy`` writes a dense store, one record per slice along axis 0, in bounded
chunks (an mmapped array is never materialized). ``from_iterator`` writes a ragged
store from any iterable of arrays. ``train_dict`` trains a zstd dictionary, sized by
a tier of :data:`loaderx.dataset.DICT_TIERS`, on an array, an iterable of records or
a dataset.
"""

import os
import shutil
import sys
import tempfile

import numpy as np

from . import _conn, _shm, _store, _wire
from ._errors import ZrecordFileExistsError, ZrecordTypeError, ZrecordValueError
from .dataset import DICT_TIERS, DenseDataset, RaggedDataset, _Dataset

__all__ = ["from_numpy", "from_iterator", "train_dict"]

CHUNK_BYTES = 32 << 20
PROGRESS_MIN_BYTES = 64 << 20   # smaller conversions finish too fast to need a bar
RAGGED_CHUNK_RECORDS = 32768
_SAMPLE_CAP = 128 << 10     # docs/DATASETS.md: a record contributes at most 128 KiB


def _progress(total, desc, unit="B"):
    """A tqdm bar when tqdm is installed and stderr is a terminal; else a no-op."""
    if total is not None and total < PROGRESS_MIN_BYTES and unit == "B":
        return _NoBar()
    try:
        if not sys.stderr.isatty():
            return _NoBar()
        from tqdm import tqdm
    except Exception:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _tier(tier):
    if tier not in DICT_TIERS:
        raise ZrecordValueError(
            f"unknown dictionary tier {tier!r}: expected one of {', '.join(DICT_TIERS)}")
    return DICT_TIERS[tier]


def _prepare_path(path):
    """Where to write a new store for path: (final path, how).

    how: None (the directory does not exist: written in place), False (an empty
    directory: written in place), or a temporary sibling directory (a store is
    there: the new one is written beside it and swapped in when complete).

    A conversion writes its path anew, as np.save does a file: an existing store
    there is replaced once the new one is complete. A directory that holds anything
    but a store is refused (nothing of it is touched).
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise ZrecordFileExistsError(f"{path!r} exists and is not a store directory")
        entries = os.listdir(path)
        if not entries:
            return path, False
        if not _store.is_store(path):
            raise ZrecordFileExistsError(
                f"{path!r} is a non-empty directory that holds no store; refusing to "
                "replace it")
        parent = os.path.dirname(path)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.new-", dir=parent)
        return path, tmp
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path, None


def _abandon_path(path, tmp):
    """Removes what a failed conversion wrote (never anything that was there before)."""
    if isinstance(tmp, str):
        shutil.rmtree(tmp, ignore_errors=True)
    elif tmp is None:                      # the directory did not exist: ours entirely
        shutil.rmtree(path, ignore_errors=True)
    else:                                  # an empty directory that was there: empty it
        for name in os.listdir(path):
            p = os.path.join(path, name)
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.unlink(p)


def _commit_path(path, tmp):
    if not isinstance(tmp, str):
        return
    trash = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.old-", dir=os.path.dirname(path))
    old = os.path.join(trash, "store")
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    shutil.rmtree(trash, ignore_errors=True)


def _write_store(path, create, fill):
    """Writes a new store for ``path``: ``create(target)`` makes it (a dataset),
    ``fill(ds, name)`` appends its records (name: the path's last part, for a
    progress bar); then it is synced and put in place. A failure leaves ``path``
    as it was."""
    final, tmp = _prepare_path(path)
    target = tmp if isinstance(tmp, str) else final
    ds = None
    try:
        ds = create(target)
        fill(ds, os.path.basename(final))
        ds._store.sync()
    except BaseException:
        if ds is not None:
            ds.close()
            ds = None
        _abandon_path(final, tmp)
        raise
    finally:
        if ds is not None:
            ds.close()
    _commit_path(final, tmp)


def _max_samples():
    """Records one TRAIN_DICT can name (their sizes travel in the request frame)."""
    return max(1, (_conn.default().frame_max - 4096) // 8)


def _strided(n, sizes_fn, budget):
    """Indices of the strided byte-budget sample (docs/DATASETS.md, section 8)."""
    total = sizes_fn()
    m = n if total <= budget else max(1, int(n * budget // total))
    m = min(m, _max_samples())
    if m >= n:
        return np.arange(n)
    return np.unique((np.arange(m, dtype=np.int64) * n) // m)


def _train_on_pieces(pieces, sizes, tier):
    conn = _conn.default()
    with _shm.SealedMemfd(pieces, "loaderx-train") as m:
        r = conn.request("train_dict", {"tier": tier, "offset": 0, "sizes": _wire.u64s(sizes)},
                         fds=(m.fd,), context="train_dict")
    return _read_dict_reply(r)


def _read_dict_reply(r):
    (fd,) = r["_fds"]
    try:
        n = int(r["dict_bytes"])
        out = bytearray()
        while len(out) < n:
            chunk = os.pread(fd, n - len(out), len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)
    finally:
        os.close(fd)


def _train_array(array, tier):
    t = _tier(tier)
    arr = array if isinstance(array, np.ndarray) else np.asarray(array)
    if arr.ndim == 0:
        raise ZrecordValueError("train_dict: a 0-d array holds no records")
    n = arr.shape[0]
    rec = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    idx = _strided(n, lambda: n * min(rec, _SAMPLE_CAP), t["sample_bytes"])
    if rec <= _SAMPLE_CAP:       # small rows: one gather of the sample
        return _train_on_pieces([np.ascontiguousarray(arr[idx])], [rec] * len(idx), tier)
    pieces, sizes = [], []
    for i in idx:
        row = np.ascontiguousarray(arr[int(i)])
        pieces.append(row)
        sizes.append(row.nbytes)
    return _train_on_pieces(pieces, sizes, tier)


def train_dict(source, tier="balanced"):
    """Trains a zstd dictionary on settled data; returns its bytes.

    ``source``: a numpy array (one record per slice along axis 0, as from_numpy
    stores it), an iterable of records (arrays of any shape, stored as ragged
    records; or ``bytes``), or a dataset (trained on its stored records, sampled by
    the daemon). ``tier``: a name of ``DICT_TIERS``.
    """
    _tier(tier)
    if isinstance(source, _Dataset):
        r = source._h.request("train_dict", {"tier": tier}, context="train_dict")
        return _read_dict_reply(r)
    from .zrecord import Zrecord
    if isinstance(source, Zrecord):
        return train_dict(source._ds, tier)
    if isinstance(source, np.ndarray):
        return _train_array(source, tier)
    if isinstance(source, (str, bytes, os.PathLike)) and not isinstance(source, bytes):
        raise ZrecordTypeError("train_dict takes an array, an iterable of records or a dataset, "
                               "not a path: open the dataset first")
    budget = _tier(tier)["sample_bytes"]
    limit = _max_samples()
    pieces, sizes, total = [], [], 0
    for r in source:
        if isinstance(r, (bytes, bytearray, memoryview)):
            a = np.frombuffer(bytes(r), dtype=np.uint8)
        else:
            a = np.ascontiguousarray(np.asarray(r))
            if a.ndim == 0:
                a = a.reshape(1)
        hdr = _store.ragged_header(a.ndim, a.shape)
        pieces += [hdr, a]
        sizes.append(hdr.nbytes + a.nbytes)
        total += min(sizes[-1], _SAMPLE_CAP)
        if total >= budget or len(sizes) >= limit:
            break
    if not sizes:
        raise ZrecordValueError("train_dict: the iterable gave no records")
    return _train_on_pieces(pieces, sizes, tier)


def from_numpy(path, array, codec="zstd", dict_bytes=None):
    """Writes ``array`` as a dense store at ``path``, one record per slice along axis 0.

    A 1-D array becomes a store of scalars. The array is read in bounded chunks,
    so an mmapped array is never materialized. An existing store at ``path`` is
    replaced once the new one is complete. ``codec``: ``'raw'``, ``'zstd'`` or
    ``'zstd_dict'``; ``zstd_dict`` without ``dict_bytes`` trains a dictionary on the
    array itself (it is the settled data), tier ``'balanced'``.
    """
    _store.check_codec(codec)
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    if array.ndim == 0:
        raise ZrecordValueError("from_numpy: a 0-d array holds no records; give at least 1-D")
    dtype = _store.canonical_dtype(array.dtype)
    if dict_bytes is not None and codec != "zstd_dict":
        raise ZrecordValueError(f"from_numpy: dict_bytes is only for codec 'zstd_dict', not {codec!r}")
    if codec == "zstd_dict" and dict_bytes is None:
        dict_bytes = _train_array(array, "balanced")

    def create(target):
        return DenseDataset(target, dtype=dtype, item_shape=array.shape[1:], codec=codec,
                            dict_bytes=dict_bytes)

    def fill(ds, name):
        n = array.shape[0]
        rec = max(1, ds.record_bytes)
        per = max(1, CHUNK_BYTES // rec)
        bar = _progress(n * rec, name)
        try:
            for s in range(0, n, per):
                chunk = np.ascontiguousarray(array[s:s + per])
                ds.append(chunk)
                bar.update(chunk.nbytes)
        finally:
            bar.close()

    _write_store(path, create, fill)


def from_iterator(path, iterable, dtype, codec="zstd", dict_bytes=None):
    """Writes a ragged store at ``path`` from an iterable of arrays of ``dtype``.

    Each record keeps its own shape; every record must have the same number of
    dimensions (that of the first). ``zstd_dict`` needs ``dict_bytes`` (train one
    with :func:`train_dict` on the settled data): a stream cannot train its own.
    """
    _store.check_codec(codec)
    dt = np.dtype(_store.canonical_dtype(dtype))
    if codec == "zstd_dict" and dict_bytes is None:
        raise ZrecordValueError(
            "from_iterator: codec 'zstd_dict' needs dict_bytes: a stream cannot train its own "
            "dictionary; train one first with loaderx.utils.train_dict(settled_data) and pass "
            "it as dict_bytes=", name="ZR_E_NO_DICT")
    if dict_bytes is not None and codec != "zstd_dict":
        raise ZrecordValueError(f"from_iterator: dict_bytes is only for codec 'zstd_dict', not {codec!r}")
    it = iter(iterable)
    first = next(it, None)
    ndim = 1
    if first is not None:
        first = np.asarray(first)
        ndim = max(1, first.ndim)

    def create(target):
        return RaggedDataset(target, dtype=dt, codec=codec, ndim=ndim, dict_bytes=dict_bytes)

    def fill(ds, name):
        bar = _progress(None, name, unit="rec")
        try:
            buf, nbytes = [], 0
            if first is not None:
                buf.append(first)
                nbytes += first.nbytes
            for r in it:
                r = np.asarray(r)
                buf.append(r)
                nbytes += r.nbytes
                if nbytes >= CHUNK_BYTES or len(buf) >= RAGGED_CHUNK_RECORDS:
                    ds.append(buf)
                    bar.update(len(buf))
                    buf, nbytes = [], 0
            if buf:
                ds.append(buf)
                bar.update(len(buf))
        finally:
            bar.close()

    _write_store(path, create, fill)
