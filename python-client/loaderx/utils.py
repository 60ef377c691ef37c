"""Conversions into stores, and dictionary training.

``from_numpy`` writes a dense store, one record per slice along axis 0, in bounded
chunks (an mmapped array is never materialized). ``from_iterator`` writes a ragged
store from any iterable of arrays. ``from_images`` writes encoded JPEG and PNG
files into an image store (images.py, docs/IMAGES.md). ``train_dict`` trains a zstd dictionary, sized by
a tier of :data:`loaderx.dataset.DICT_TIERS`, on an array, an iterable of records or
a dataset.

Every conversion is all or nothing, Ctrl-C included: each is written inside
:func:`conversion` (_conversion.py), the helper a new writer builds on as well.
"""

import os
import sys
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

from . import _conn, _shm, _store, _wire
from ._typing import DTypeLike, StorePath
from ._conversion import conversion
from ._errors import ZrecordTypeError, ZrecordValueError
from .images import from_images
from .dataset import (DAEMON_TIERS, DICT_TIER_DEFAULT, DICT_TIERS, DenseDataset, RaggedDataset,
                      _Dataset)

from ._corpora import (from_arrow, from_hf, from_megatron, from_parquet,  # noqa: E402
                       from_webdataset, to_megatron)

__all__ = ["from_numpy", "from_iterator", "from_images", "train_dict", "convert", "conversion",
           "from_parquet", "from_arrow", "from_hf", "from_webdataset", "from_megatron",
           "to_megatron"]

CHUNK_BYTES = 32 << 20
PROGRESS_MIN_BYTES = 64 << 20   # smaller conversions finish too fast to need a bar
RAGGED_CHUNK_RECORDS = 32768
_SAMPLE_CAP = 128 << 10     # docs/DATASETS.md: a record contributes at most 128 KiB


def _progress(total, desc, unit="B"):
    """On a terminal (stderr), a tqdm bar, or without tqdm a progress line
    (_progressline); else a no-op."""
    if total is not None and total < PROGRESS_MIN_BYTES and unit == "B":
        return _NoBar()
    try:
        if not sys.stderr.isatty():
            return _NoBar()
    except Exception:
        return _NoBar()
    try:
        from tqdm import tqdm
    except Exception:
        from ._progressline import ProgressLine
        return ProgressLine(total, desc, unit)
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _tier(tier):
    """The daemon's name of a tier of DICT_TIERS (None: the default), or ValueError."""
    if tier is None:
        tier = DICT_TIER_DEFAULT
    if not isinstance(tier, str) or tier not in DICT_TIERS:
        raise ZrecordValueError(
            f"unknown dict tier {tier!r}, expected one of {sorted(DICT_TIERS)}")
    return DAEMON_TIERS[tier]


def _write_into(path, open_or_create, fill):
    """open_or_create(where) opens the store there, checking its schema, or creates
    one; fill(ds) appends. All or nothing (:func:`conversion`); loaderx 1.5.7 keeps
    what it appended before a failure."""
    with conversion(path) as c:
        fill(c.add(open_or_create(c.path)))


def _installed_dict(path):
    try:
        with open(os.path.join(path, "dict.zr"), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _use_dict(ds, dict_bytes):
    """A zstd_dict store written with dict_bytes: installed on a store without one; on
    one that has it, nothing; another dictionary is refused (installing it would make
    the store's records undecodable: loaderx 1.5.7 replaces it)."""
    if dict_bytes is None:
        return
    if not ds.has_dict():
        ds._store.install_dict(dict_bytes)
    elif _installed_dict(ds.path) != bytes(dict_bytes):
        raise ZrecordValueError(
            f"{ds.path} already has another zstd dictionary; its records decode only with "
            "that one: append without dict_bytes, or write a new store", name="ZR_E_HAS_DICT")


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
                         fds=(m.fd,), context="train_dict", abandon=True)
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
    daemon_tier = _tier(tier)
    budget = DICT_TIERS[tier or DICT_TIER_DEFAULT]["samples"]
    arr = array if isinstance(array, np.ndarray) else np.asarray(array)
    if arr.ndim == 0:
        raise ZrecordValueError("train_dict: a 0-d array holds no records")
    n = arr.shape[0]
    if n == 0:
        raise ZrecordValueError("train_dict: the array holds no records")
    rec = arr.dtype.itemsize * int(np.prod(arr.shape[1:], dtype=np.int64))
    idx = _strided(n, lambda: n * min(rec, _SAMPLE_CAP), budget)
    if rec <= _SAMPLE_CAP:       # small rows: one gather of the sample
        return _train_on_pieces([np.ascontiguousarray(arr[idx])], [rec] * len(idx), daemon_tier)
    pieces, sizes = [], []
    for i in idx:
        row = np.ascontiguousarray(arr[int(i)])
        pieces.append(row)
        sizes.append(row.nbytes)
    return _train_on_pieces(pieces, sizes, daemon_tier)


def _as_record(r):
    """A record of an iterable as a contiguous array (bytes: uint8; 0-d: one element)."""
    if isinstance(r, (bytes, bytearray, memoryview)):
        return np.frombuffer(r, dtype=np.uint8)
    a = np.ascontiguousarray(np.asarray(r))
    return a.reshape(1) if a.ndim == 0 else a


def train_dict(source: Any, tier: Optional[str] = None,
               path: Optional[StorePath] = None) -> bytes:
    """Trains a zstd dictionary on settled data; returns its bytes (and writes them
    to ``path`` when given).

    ``source``: a numpy array (one record per slice along axis 0, as from_numpy
    stores it), an iterable of records (arrays of any shape, stored as ragged
    records; or ``bytes``), or a dataset (trained on its stored records, sampled by
    the daemon). ``tier``: a name of ``DICT_TIERS`` (None: ``'balanced'``).
    """
    daemon_tier = _tier(tier)
    if isinstance(source, _Dataset):
        if len(source) == 0:
            raise ZrecordValueError("cannot train a zstd dictionary on an empty store")
        r = source._h.request("train_dict", {"tier": daemon_tier}, context="train_dict",
                              abandon=True)
        d = _read_dict_reply(r)
    elif _is_zrecord(source):
        d = train_dict(source._ds, tier)
    elif isinstance(source, np.ndarray):
        d = _train_array(source, tier)
    elif isinstance(source, (str, bytes, os.PathLike)):
        raise ZrecordTypeError("train_dict takes an array, an iterable of records or a dataset, "
                               "not a path or a single bytes object: open the dataset first")
    else:
        budget = DICT_TIERS[tier or DICT_TIER_DEFAULT]["samples"]
        limit = _max_samples()
        pieces, sizes, total = [], [], 0
        for r in source:
            a = _as_record(r)
            hdr = _store.ragged_header(a.ndim, a.shape)
            pieces += [hdr, a]
            sizes.append(hdr.nbytes + a.nbytes)
            total += min(sizes[-1], _SAMPLE_CAP)
            if total >= budget or len(sizes) >= limit:
                break
        if not sizes:
            raise ZrecordValueError("train_dict needs at least one record")
        d = _train_on_pieces(pieces, sizes, daemon_tier)
    if path is not None:
        _write_file(path, d)
    return d


def _write_file(path, data):
    """path holds data, or what it held before: a temporary file, fsync, rename."""
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)),
                       f".{os.path.basename(path)}.partial-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _is_zrecord(x):
    from .zrecord import Zrecord
    return isinstance(x, Zrecord)


def from_numpy(path: StorePath, array: np.ndarray, codec: str = "zstd",
               dict_bytes: Optional[bytes] = None, schema: Optional[Mapping[str, Any]] = None,
               level: Optional[int] = None) -> int:
    """Writes ``array`` into a dense store at ``path``, one record per slice along
    axis 0; returns ``len(array)``.

    A 1-D array becomes a store of scalars. The array is read in bounded chunks, so
    an mmapped array is never materialized. **An existing store at ``path`` of the
    same dtype, item shape and codec is appended to** (loaderx 1.5.7); one of another
    schema is refused (``ValueError``). ``codec``: ``'raw'``, ``'zstd'`` or
    ``'zstd_dict'``; ``zstd_dict`` without ``dict_bytes`` trains a dictionary on the
    array itself (it is the settled data), tier ``'balanced'``, unless the store
    already has one. ``schema``: extra keys for a new store's schema.msgpack.
    ``level``: the compression level, 1 to 19 in zstd's scale (higher: smaller,
    slower); None: the codec's default (docs/DATASETS.md, "Levels").
    """
    if codec not in _store.CODECS:
        raise ZrecordValueError(f"unknown codec {codec!r}, expected one of {sorted(_store.CODECS)}",
                                name="ZR_E_BAD_CODEC")
    _store.level_fields(level, codec)
    at = {} if level is None else {"level": level}
    if not isinstance(array, np.ndarray):
        raise ZrecordTypeError(f"from_numpy expects np.ndarray, got {type(array).__name__}")
    if array.ndim == 0:
        raise ZrecordValueError("from_numpy: array must have a sample axis (a 0-d array holds "
                                "no records)")
    item = array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    if item > _store.MAX_RECORD_LEN:
        raise ZrecordValueError(f"sample of {item} bytes exceeds the {_store.MAX_RECORD_LEN} "
                                "byte record limit", name="ZR_E_TOO_BIG")
    dtype = _store.canonical_dtype(array.dtype)
    if codec != "zstd_dict":
        dict_bytes = None           # loaderx 1.5.7: a dictionary only for zstd_dict

    def open_or_create(target):
        return DenseDataset(target, dtype=dtype, item_shape=array.shape[1:], codec=codec,
                            schema=schema)

    def fill(ds):
        d = dict_bytes
        if codec == "zstd_dict" and d is None and not ds.has_dict() and array.shape[0]:
            d = _train_array(array, DICT_TIER_DEFAULT)
        _use_dict(ds, d)
        n = array.shape[0]
        rec = max(1, ds.record_bytes)
        per = max(1, CHUNK_BYTES // rec)
        bar = _progress(n * rec, os.path.basename(os.fspath(path)))
        try:
            for s in range(0, n, per):
                chunk = np.ascontiguousarray(array[s:s + per])
                ds.append(chunk, **at)
                bar.update(chunk.nbytes)
        finally:
            bar.close()

    _write_into(path, open_or_create, fill)
    return int(array.shape[0])


def from_iterator(path: StorePath, source: Union[Iterable[Any], bytes, bytearray],
                  dtype: DTypeLike, codec: str = "zstd", dict_bytes: Optional[bytes] = None,
                  schema: Optional[Mapping[str, Any]] = None,
                  level: Optional[int] = None) -> int:
    """Writes an iterable of records into a ragged store at ``path``; returns the
    number of records written.

    ``dtype`` is the store's, explicit; each record keeps its own shape (records may
    differ in ndim too). ``source``: arrays, or ``bytes`` (uint8; a ``bytes`` source
    is one record). An existing store of the same dtype and codec is appended to.
    ``zstd_dict`` needs ``dict_bytes`` (train one with :func:`train_dict` on the
    settled data): a stream cannot train its own. ``level``: as :func:`from_numpy`.
    """
    if codec not in _store.CODECS:
        raise ZrecordValueError(f"unknown codec {codec!r}, expected one of {sorted(_store.CODECS)}",
                                name="ZR_E_BAD_CODEC")
    _store.level_fields(level, codec)
    at = {} if level is None else {"level": level}
    dt = np.dtype(_store.canonical_dtype(dtype))
    if codec == "zstd_dict" and dict_bytes is None:
        raise ZrecordValueError(
            "zstd_dict needs a pre-trained dictionary: a stream cannot train its own; train "
            "one on the settled data with loaderx.utils.train_dict, then pass dict_bytes=...",
            name="ZR_E_NO_DICT")
    if codec != "zstd_dict":
        dict_bytes = None
    if isinstance(source, (bytes, bytearray)):
        source = [source]
    count = 0

    def open_or_create(target):
        return RaggedDataset(target, dtype=dt, codec=codec, schema=schema)

    def fill(ds):
        nonlocal count
        _use_dict(ds, dict_bytes)
        bar = _progress(None, os.path.basename(os.fspath(path)), unit="rec")
        try:
            buf, nbytes = [], 0
            for r in source:
                buf.append(r)
                nbytes += len(r) if isinstance(r, (bytes, bytearray)) else np.asarray(r).nbytes
                if nbytes >= CHUNK_BYTES or len(buf) >= RAGGED_CHUNK_RECORDS:
                    ds.append(buf, **at)
                    count += len(buf)
                    bar.update(len(buf))
                    buf, nbytes = [], 0
            if buf:
                ds.append(buf, **at)
                count += len(buf)
                bar.update(len(buf))
        finally:
            bar.close()

    _write_into(path, open_or_create, fill)
    return count


def convert(src: StorePath, dst: StorePath, to: str = "zrecord") -> Any:
    """Writes the ragged dataset at ``src`` into a new one at ``dst`` (created if
    missing; an empty directory otherwise) in the other layout: ``to='zrecord'``,
    zrecord's own (each record carries its shape, so appends cost only their
    records), from loaderx 1.5.7's ragged or byte store; ``to='loaderx-1.5.7'``,
    loaderx 1.5.7's (every shape in ``schema.msgpack``), which loaderx 1.5.7
    opens. Same records, order, dtype, codec and dictionary; ``src`` does not
    change. Returns the number of records converted. The daemon does the work
    (CONVERT); ``zrecord convert`` is the same from the shell. All or nothing: until
    it returns, nothing is at ``dst``."""
    if to not in ("zrecord", "loaderx-1.5.7"):
        raise ValueError(f"to must be 'zrecord' or 'loaderx-1.5.7', not {to!r}")
    src = os.fspath(src)
    with conversion(dst) as c:
        return _store.convert(_conn.default(), src, c.path, to, shown=c.target)
