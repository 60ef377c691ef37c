"""Datasets: typed, read-write handles on stores served by zrecordd.

:class:`DenseDataset` holds one fixed-shape record per sample and reads back
stacked ``(B, *item_shape)`` arrays; :class:`RaggedDataset` keeps each record's
own shape and reads back lists of arrays; :class:`MSDataset` wraps a directory of
stores and keeps them index-aligned. Indexing follows record-set semantics: a
scalar (negatives wrap) selects one record, a slice, an integer array, a boolean
mask or a tuple (``ds[0, 5, 2]``) select a record set.

Reads are copied out of the daemon's buffer, so an array you get stays as it was
whatever is read later. Appends are validated here first (dtype, shape, kind) and
again by the daemon, which is the authority; a refused append changes nothing.

The API is loaderx 1.5.7's (docs/LOADERX-1.5.7.md, section 5): a wrong kind, dtype,
codec or shape is a ``ValueError``; ``DenseDataset(path, dtype, item_shape, codec,
schema)`` opens an existing store (checking what it is given) or creates one.
"""

import os
import pathlib
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import msgpack
import numpy as np

from . import _index, _s3, _shm, _store, _wire
from ._typing import DTypeLike, Index, Records, StorePath
from ._errors import (ZrecordError, ZrecordFileNotFoundError, ZrecordKeyError,
                      ZrecordTypeError, ZrecordValueError)

__all__ = ["DenseDataset", "RaggedDataset", "MSDataset", "DICT_TIERS", "DICT_TIER_DEFAULT",
           "open_dataset"]

#: The dictionary tiers of docs/DATASETS.md: a caller picks a name, never a number.
#: ``size`` is the dictionary's capacity, ``samples`` the byte budget of the strided
#: sample it trains on (loaderx 1.5.7's names and keys; zrecord's measured sizes).
DICT_TIERS = {
    "fast": {"size": 16 << 10, "samples": 2 << 20},
    "balanced": {"size": 128 << 10, "samples": 16 << 20},
    "max": {"size": 256 << 10, "samples": 32 << 20},
}
DICT_TIER_DEFAULT = "balanced"
#: The daemon's name of each tier (TRAIN_DICT, dataset/dicttrain.h).
DAEMON_TIERS = {"fast": "small", "balanced": "balanced", "max": "max"}

#: Schema keys that are the store's; any other key of schema.msgpack is the caller's.
_CORE_KEYS = {"format", "version", "kind", "dtype", "codec", "item_shape", "shapes", "ndim"}


def _delete_pieces(key, n, frame_max):
    """The indices of a delete of ``key`` from ``n`` records, in requests that fit a
    frame (none for an empty key). Swap-last applies a batch in descending index
    order and never moves a record below the index it deletes, so descending pieces
    applied one after the other leave exactly what one batch would."""
    idx, _ = _index.normalize(key, n)
    if len(idx) == 0:
        return []
    idx = np.unique(idx)[::-1]      # repeats name one record (loaderx 1.5.7 accepts them)
    per = max(1, (int(frame_max) - 4096) // 8)
    if len(idx) <= per:
        return [idx]
    return [idx[s:s + per] for s in range(0, len(idx), per)]


class _StoreOps:
    """``ds._store``: the store-level pass-throughs (dictionary, sync, verify)."""

    def __init__(self, ds):
        self._ds = ds

    def install_dict(self, dict_bytes):
        """Installs a zstd dictionary on an empty ``zstd_dict`` store."""
        data = bytes(dict_bytes)
        if not data:
            raise ZrecordValueError("install_dict: the dictionary is empty")
        with _shm.SealedMemfd([data], "loaderx-dict") as m:
            self._ds._h.request("install_dict", {"dict_bytes": m.size}, fds=(m.fd,))
        self._ds._h.has_dict = True

    def sync(self):
        self._ds._h.request("sync")

    def verify(self):
        r = self._ds._h.request("verify")
        return {"ok": r["ok"], "records": r["records"], "bad": r["bad"],
                "bad_indices": [int(x) for x in _wire.from_u64s(r.get("bad_indices"))]}

    @property
    def length(self):
        return len(self._ds)


def _read_schema_file(path):
    """schema.msgpack of the store at path as a dict, or None if there is none."""
    try:
        with open(os.path.join(path, _store.SCHEMA_FILE), "rb") as f:
            data = f.read(_store.SCHEMA_FILE_MAX + 1)
    except FileNotFoundError:
        return None
    try:
        s = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:
        raise ZrecordValueError(f"{path}/{_store.SCHEMA_FILE} is not msgpack ({e})",
                                name="ZR_E_SCHEMA") from None
    return s if isinstance(s, dict) else {}


def _add_caller_keys(path, extra):
    """Writes the caller's keys (schema=, loaderx 1.5.7) into the schema.msgpack the
    daemon just wrote for a new store: after the store's own keys, atomically. The
    daemon ignores keys it does not know; loaderx 1.5.7 keeps them."""
    extra = {k: v for k, v in (extra or {}).items() if k not in _CORE_KEYS}
    if not extra:
        return
    s = _read_schema_file(path)
    s.update(extra)
    tmp = os.path.join(path, f".{_store.SCHEMA_FILE}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(msgpack.packb(s, use_bin_type=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(path, _store.SCHEMA_FILE))


class _Dataset:
    _kind: Optional[str] = None
    _read: Callable[..., Any]       # the kind's own, DenseDataset's or RaggedDataset's
    _lengths: Callable[..., np.ndarray]

    def __init__(self):
        raise TypeError("use DenseDataset or RaggedDataset")

    # construction helpers ------------------------------------------------
    def _open_or_create(self, path, dtype, codec, schema, dict_bytes, creating, make_schema):
        """Opens the store at path, checking dtype and codec if given (loaderx 1.5.7),
        or, when there is none, creates it with make_schema() if creating."""
        if _store.is_store(path):
            h = _store.Handle(path)
            try:
                self._init_from_handle(h)
                if dtype is not None and np.dtype(dtype) != self._dtype:
                    raise ZrecordValueError(
                        f"{h.path} holds dtype {self._dtype.str!r}, cannot open as "
                        f"{np.dtype(dtype).str!r}", name="ZR_E_SCHEMA")
                if codec is not None and codec != self.codec:
                    raise ZrecordValueError(
                        f"{h.path} holds codec {self.codec!r}, cannot open as {codec!r}",
                        name="ZR_E_SCHEMA")
            except BaseException:
                h.close()
                raise
            return h
        if not creating:
            raise ZrecordFileNotFoundError(
                f"{os.path.join(os.fspath(path), _store.SCHEMA_FILE)} not found; {path} is not "
                "a loaderx dataset (give dtype to create one)", name="ZR_E_NOT_STORE")
        h = _store.Handle(path, create=make_schema(), dict_bytes=dict_bytes)
        try:
            _add_caller_keys(h.path, schema)
        except OSError as e:
            h.close()
            raise ZrecordValueError(f"writing the schema keys of {h.path}: {e}") from None
        self._init_from_handle(h)
        return h

    def _init_from_handle(self, h):
        self._h = h
        s = h.schema
        if s.get("kind") != self._kind:
            other = "DenseDataset" if s.get("kind") == "dense" else "RaggedDataset"
            raise ZrecordValueError(
                f"{h.path!r} is a {s.get('kind')!r} store, not {self._kind!r}; open it with "
                f"{other}, not {type(self).__name__}", name="ZR_E_SCHEMA")
        self._store = _StoreOps(self)
        self.path = h.path if _s3.is_url(h.path) else pathlib.Path(h.path)
        self.codec = s.get("codec")
        self._dtype = np.dtype(s["dtype"])

    # properties ----------------------------------------------------------
    @property
    def dtype(self):
        """The per-sample dtype (numpy)."""
        return self._dtype

    @property
    def schema(self):
        return dict(self._h.schema)

    @property
    def writable(self):
        return self._h.writable

    def __len__(self):
        return int(self._h.info()["length"])

    def has_dict(self) -> bool:
        """Whether the store has a zstd dictionary installed."""
        self._h.info()
        return self._h.has_dict

    def stats(self) -> Dict[str, int]:
        """``{'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}``."""
        r = self._h.request("stats")
        return {k: int(r[k]) for k in ("records", "live_bytes", "chunk_bytes", "reclaimable")}

    def compact(self):
        """Reclaims the bytes of deleted records, in place; returns stats()."""
        r = self._h.request("compact")
        return {k: int(r[k]) for k in ("records", "live_bytes", "chunk_bytes", "reclaimable")}

    def delete(self, key):
        """Deletes records (swap-last: survivors may be renumbered); repeats are one."""
        for piece in _delete_pieces(key, len(self), self._h.conn.frame_max):
            self._h.request("delete", {"indices": _wire.u64s(piece)})

    def close(self):
        h = getattr(self, "_h", None)
        if h is not None:
            h.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getitem__(self, key):
        idx, scalar = _index.normalize(key, self.__len__)
        out = self._read(idx)
        return out[0] if scalar else out

    def read(self, key: Index, out: Optional[np.ndarray] = None) -> Any:
        """``ds[key]``; with ``out``, into that array (dense only): it must be
        writable, C-contiguous and of the result's dtype and shape (``item_shape``
        for a single index), and is returned. Without ``out`` a large result is
        written once, by the daemon, into memory the returned array owns. ``out``
        that is such a result (or whole pages of one) is written in place, in one
        pass; other memory costs one copy."""
        idx, scalar = _index.normalize(key, self.__len__)
        if out is None:
            r = self._read(idx)
            return r[0] if scalar else r
        self._read_into(idx, out, scalar)
        return out

    def _read_into(self, idx, out, scalar):
        raise ZrecordTypeError(f"out= reads into one array: {type(self).__name__} records "
                               "each have their own shape")

    def __getitems__(self, idxs):
        """The records idxs as a batch (torch's batched fetch; loaderx 1.5.7): dense, a
        ``(len(idxs), *item_shape)`` array; ragged, a list of arrays."""
        idx, _ = _index.normalize(idxs, self.__len__)
        return self._read(idx)

    def lengths(self, idxs: Index) -> np.ndarray:
        """The byte size of each record of idxs (uint32): what a gather writes."""
        idx, _ = _index.normalize(idxs, len(self))
        return self._lengths(idx)

    def __iter__(self):
        n = len(self)
        step = 4096
        for s in range(0, n, step):
            for r in self[s:min(n, s + step)]:
                yield r

    def __repr__(self):
        return f"{type(self).__name__}({os.fspath(self.path)!r}, {self._h.schema})"

    def __reduce__(self):
        # pickled by path (multiprocessing's spawn, torch workers): reopened there
        return (type(self), (os.fspath(self.path),))


class DenseDataset(_Dataset):
    """A store of fixed-shape records (``schema.msgpack`` kind ``"dense"``).

    ``DenseDataset(path)`` opens an existing store; with ``dtype`` and ``item_shape``
    it opens the store there (refusing another dtype, shape or codec with
    ``ValueError``) or creates one and writes its schema now (``codec`` default
    ``'zstd'``; ``schema``: extra keys kept in schema.msgpack).
    """

    _kind = "dense"

    def __init__(self, path: StorePath, dtype: Optional[DTypeLike] = None,
                 item_shape: Optional[Sequence[int]] = None, codec: Optional[str] = None,
                 schema: Optional[Mapping[str, Any]] = None, *,
                 dict_bytes: Optional[bytes] = None, _handle: Any = None) -> None:
        if codec is not None:
            _store.check_codec(codec)
        if _handle is not None:
            self._init_from_handle(_handle)
        else:
            def make_schema():
                shape = () if item_shape is None else tuple(int(x) for x in item_shape)
                if any(x < 0 for x in shape):
                    raise ZrecordValueError(f"item_shape {shape} has a negative dimension")
                return {"kind": "dense", "dtype": _store.canonical_dtype(dtype),
                        "item_shape": list(shape), "codec": codec or "zstd"}
            self._open_or_create(path, dtype, codec, schema, dict_bytes, dtype is not None,
                                 make_schema)
        self._item_shape = tuple(int(x) for x in self._h.schema.get("item_shape", []))
        if item_shape is not None and tuple(int(x) for x in item_shape) != self._item_shape:
            self.close()
            raise ZrecordValueError(
                f"{self.path} holds item_shape {self._item_shape}, cannot open as "
                f"{tuple(int(x) for x in item_shape)}", name="ZR_E_SCHEMA")

    @property
    def item_shape(self):
        """The shape of one record (``()`` for scalars)."""
        return self._item_shape

    @property
    def record_bytes(self):
        return self._dtype.itemsize * int(np.prod(self._item_shape, dtype=np.int64))

    def _read(self, idx):
        return _store.read_dense(self._h, idx, self._dtype, self._item_shape)

    def _read_into(self, idx, out, scalar):
        if scalar:
            _store.check_out(out, self._item_shape, self._dtype)
            out = out.reshape((1,) + self._item_shape)
        _store.read_dense(self._h, idx, self._dtype, self._item_shape, out=out)

    def _lengths(self, idx):
        return np.full(len(idx), self.record_bytes, dtype=np.uint32)

    def _check_batch(self, records, what="append"):
        if isinstance(records, (list, tuple)) and records and all(
                isinstance(r, np.ndarray) for r in records):
            shapes = {r.shape for r in records}
            if len(shapes) > 1:
                raise ZrecordValueError(
                    f"{what}: a ragged batch (records of shapes {sorted(shapes)[:3]}...) cannot "
                    f"go into a dense store of item_shape {self._item_shape}; "
                    "use a RaggedDataset for variable-shape records")
        try:
            arr = np.asarray(records)
        except ValueError as e:
            raise ZrecordValueError(
                f"{what}: the batch is ragged ({e}); a dense store takes one array "
                f"of shape (B, {', '.join(map(str, self._item_shape))}) ") from None
        if arr.dtype == object:
            raise ZrecordValueError(
                f"{what}: a ragged batch cannot go into a dense store of item_shape "
                f"{self._item_shape}; use a RaggedDataset")
        if arr.ndim == 0:
            arr = arr.reshape(1)        # loaderx 1.5.7: a 0-d value is one record
        if arr.dtype != self._dtype:
            raise ZrecordValueError(
                f"{what}: dtype: expected {self._dtype.str} ({self._dtype}), got "
                f"{arr.dtype.str} ({arr.dtype}); convert with .astype({str(self._dtype)!r}) first",
                name="ZR_E_SCHEMA")
        want = self._item_shape
        if arr.ndim != len(want) + 1 or tuple(arr.shape[1:]) != want:
            hint = ""
            if tuple(arr.shape) == want:
                hint = "; one sample is a batch of 1: add the axis yourself (x[None])"
            raise ZrecordValueError(
                f"{what}: shape: expected (B, {', '.join(map(str, want))}{',' if len(want) == 1 else ''})"
                f" = (B, *item_shape), got {tuple(arr.shape)}{hint}", name="ZR_E_SCHEMA")
        if arr.shape[0] == 0:
            raise ZrecordValueError(f"{what} needs at least one record")
        return np.ascontiguousarray(arr)

    def append(self, records: Records, level: Optional[int] = None) -> int:
        """Appends a batch ``(B, *item_shape)``; returns the index of its first record.

        ``level``: the compression level, 1 to 19 in zstd's scale; None: the codec's
        default (docs/DATASETS.md, "Levels")."""
        lv = _store.level_fields(level, self._h.schema["codec"])
        arr = self._check_batch(records)
        fields = _store.dense_fields(self._h.schema, arr)
        with _shm.SealedMemfd([arr], "loaderx-append") as m:
            r = self._h.request("append", dict(fields, offset=0, **lv), fds=(m.fd,))
        return int(r["first"])


class RaggedDataset(_Dataset):
    """A store of variable-shape records (``schema.msgpack`` kind ``"ragged"``).

    ``RaggedDataset(path)`` opens; ``RaggedDataset(path, dtype=..., codec='zstd')``
    opens the store there (refusing another dtype or codec) or creates one. Each
    record keeps its own shape, of any number of dimensions (``ndim=k`` creates a
    store whose records all have k); reads return lists.

    loaderx 1.5.7's ragged stores (every shape in ``schema.msgpack``) open and work
    in place, as do its schema-less byte stores (``|u1`` records of one dimension):
    ``schema['layout']`` says which (``'loaderx-1.5.7'``, ``'bytes'``; absent for
    zrecord's own). An append to a loaderx 1.5.7 ragged store rewrites its
    ``schema.msgpack`` (O(records)); :func:`loaderx.utils.convert` moves a store to
    zrecord's layout, whose appends cost only their records.
    """

    _kind = "ragged"

    def __init__(self, path: StorePath, dtype: Optional[DTypeLike] = None, codec: Optional[str] = None,
                 schema: Optional[Mapping[str, Any]] = None, *, ndim: Optional[int] = None,
                 dict_bytes: Optional[bytes] = None, _handle: Any = None,
                 _layout: Optional[str] = None) -> None:
        if codec is not None:
            _store.check_codec(codec)
        if _handle is not None:
            self._init_from_handle(_handle)
        else:
            if dtype is None and ndim is not None:
                raise ZrecordTypeError("creating a RaggedDataset needs dtype")

            def make_schema():
                k = 0 if ndim is None else int(ndim)
                if not 1 <= k <= 32 and ndim is not None:
                    raise ZrecordValueError(f"ndim must be 1..32, got {ndim}")
                s = {"kind": "ragged", "dtype": _store.canonical_dtype(dtype), "ndim": k,
                     "codec": codec or "zstd"}
                if _layout:
                    s["layout"] = _layout
                return s
            self._open_or_create(path, dtype, codec, schema, dict_bytes, dtype is not None,
                                 make_schema)
        self._ndim = int(self._h.schema["ndim"])
        if ndim is not None and int(ndim) != self._ndim:
            self.close()
            raise ZrecordValueError(f"{self.path} holds records of ndim "
                                    f"{self.ndim or 'any'}, cannot open as ndim {ndim}",
                                    name="ZR_E_SCHEMA")

    @property
    def ndim(self):
        """The number of dimensions of every record, or None: each record has its own."""
        return self._ndim or None

    @property
    def item_shape(self):
        """``None``: every record has its own shape."""
        return None

    def _read(self, idx):
        return _store.read_ragged(self._h, idx, self._dtype, self._ndim)

    def _lengths(self, idx):
        return np.fromiter((r.nbytes for r in self._read(idx)), dtype=np.uint32, count=len(idx))

    def _check_records(self, records, what="append"):
        if isinstance(records, np.ndarray) and records.dtype != object and (
                records.ndim == self._ndim or not self._ndim):
            raise ZrecordTypeError(
                f"{what}: a ragged store takes a list of records (list in, list out); "
                f"got one array of shape {records.shape}: wrap it as [array]")
        if isinstance(records, (str, bytes, bytearray)):
            raise ZrecordTypeError(f"{what}: expected a list of records, got {type(records).__name__}")
        out = []
        try:
            it = iter(records)
        except TypeError:
            raise ZrecordTypeError(
                f"{what}: expected a list of records, got {type(records).__name__}") from None
        for j, r in enumerate(it):
            if isinstance(r, (bytes, bytearray, memoryview)):
                if self._dtype != np.uint8:
                    raise ZrecordValueError(
                        f"{what}: record {j}: bytes records are uint8, but the schema dtype is "
                        f"{self._dtype}", name="ZR_E_SCHEMA")
                a = np.frombuffer(r, dtype=np.uint8)
            else:
                a = np.asarray(r)
                if a.ndim == 0:
                    a = a.reshape(1)    # loaderx 1.5.7: a 0-d value is a record of one
            if a.dtype == object:
                raise ZrecordValueError(f"{what}: record {j} is itself ragged")
            if a.dtype != self._dtype:
                raise ZrecordValueError(
                    f"{what}: record {j}: dtype: expected {self._dtype.str} ({self._dtype}), "
                    f"got {a.dtype.str} ({a.dtype}); convert with .astype({str(self._dtype)!r})",
                    name="ZR_E_SCHEMA")
            if self._ndim and a.ndim != self._ndim:
                raise ZrecordValueError(
                    f"{what}: record {j}: expected {self._ndim} dimension(s), got shape {a.shape}",
                    name="ZR_E_SCHEMA")
            if a.ndim > 32:
                raise ZrecordValueError(f"{what}: record {j} has {a.ndim} dimensions, at most 32")
            if a.nbytes == 0:
                raise ZrecordValueError(
                    f"{what}: record {j} is empty (shape {a.shape}): empty records are not "
                    "stored, a record must be non-empty (loaderx 1.5.7)")
            if a.nbytes > _store.MAX_RECORD_LEN:
                raise ZrecordValueError(
                    f"{what}: record {j} of {a.nbytes} bytes exceeds the "
                    f"{_store.MAX_RECORD_LEN} byte record limit", name="ZR_E_TOO_BIG")
            out.append(np.ascontiguousarray(a))
        return out

    def append(self, records: Records, level: Optional[int] = None) -> int:
        """Appends a list of records (arrays, or ``bytes`` into a uint8 store);
        returns the index of the first. ``level``: as :meth:`DenseDataset.append`."""
        lv = _store.level_fields(level, self._h.schema["codec"])
        recs = self._check_records(records)
        if not recs:
            raise ZrecordValueError("append needs at least one record")
        first = None
        per = max(1, min(32768, (self._h.conn.frame_max - 1024) // 8))
        for s in range(0, len(recs), per):
            part = recs[s:s + per]
            pieces, sizes = _store.ragged_pieces(part)
            with _shm.SealedMemfd(pieces, "loaderx-append") as m:
                r = self._h.request("append", {
                    "offset": 0, "dtype": self._h.schema["dtype"], "ndim": self._ndim,
                    "sizes": _wire.u64s(sizes), **lv}, fds=(m.fd,))
            if first is None:
                first = int(r["first"])
        assert first is not None        # recs is not empty: the loop ran
        return first


def open_dataset(path):
    """Opens a store as whichever dataset kind its schema says."""
    h = _store.Handle(path)
    if h.schema.get("kind") == "ragged":
        return RaggedDataset(path, _handle=h)
    return DenseDataset(path, _handle=h)


def _from_stream_reply(path, conn, st):
    h = _store.Handle(path, conn=conn, reply=st, handle=st["handle"])
    if st["schema"].get("kind") == "ragged":
        return RaggedDataset(path, _handle=h)
    return DenseDataset(path, _handle=h)


class MSDataset:
    """A multi-stream dataset: a directory whose immediate children are stores.

    ``MSDataset(path, names=None)``: the children holding a store, in name order, or
    the ``names`` given, in their order. ``names`` lists them, ``streams`` maps each
    name to its dataset (a new dict); ``ds[name]`` is one of them.
    ``append({name: batch})`` writes every stream at the same indices and
    ``delete(indices)`` removes the same indices from every stream, so record i
    lines up across the streams. Opening checks they hold the same count.

    When the streams are all the stores of the directory, the daemon holds them as
    one set (MSSET_OPEN): an append or a delete is all-or-nothing across them. A set
    of some of them (``names``, or children that are stores without a schema) is
    held here, stream by stream, as loaderx 1.5.7 holds every set: each batch is
    checked first, then written to each stream in turn.
    """

    def __init__(self, path: str, names: Optional[Sequence[str]] = None) -> None:
        from . import _conn
        if _s3.is_url(path):
            self._open_remote(path.rstrip("/"), names)
            return
        self.root = os.path.abspath(os.fspath(path))
        self.path = pathlib.Path(self.root)
        dirfd = _store._open_dir(self.root)
        try:
            stores = sorted(
                e.name for e in os.scandir(dirfd)
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                and _store.is_store(os.path.join(self.root, e.name)))
            if names is None:
                names = [n for n in stores
                         if os.path.isfile(os.path.join(self.root, n, _store.SCHEMA_FILE))]
            else:
                names = [os.fspath(n) for n in names]
                for n in names:
                    if not _store.is_store(os.path.join(self.root, n)):
                        raise ZrecordFileNotFoundError(
                            f"{self.root}: no stream {n!r} (no store in {n})",
                            name="ZR_E_NOT_STORE")
            if not names:
                raise ZrecordFileNotFoundError(
                    f"{self.root} holds no loaderx streams (no {_store.SCHEMA_FILE} in any "
                    "immediate child)", name="ZR_E_NOT_STORE")
            self._conn = _conn.default()
            self._closed = False
            if sorted(names) != stores or len(set(names)) != len(names):
                self._open_loose(names)
                return
            writable = all(os.access(os.path.join(self.root, n, "meta.zr"), os.W_OK) for n in names)
            # the proofs: each stream's directory and meta.zr, opened here with
            # the caller's rights (PROTOCOL.md, MSSET_OPEN)
            proofs = []
            try:
                for n in names:
                    proofs.append(os.open(n, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                                          | os.O_NOFOLLOW, dir_fd=dirfd))
                    fd, _ = _store.open_meta(proofs[-1], os.path.join(self.root, n), writable)
                    proofs.append(fd)
                r = self._conn.request("msset_open", {"writable": writable, "streams": names},
                                       fds=[dirfd] + proofs, context=f"opening {self.root}")
            finally:
                for fd in proofs:
                    os.close(fd)
        finally:
            os.close(dirfd)
        self._set = r["set"]
        self._writable = bool(r.get("writable", writable))
        _store._warn_interrupted(self.root, parent=False)
        self._streams = {st["name"]: _from_stream_reply(os.path.join(self.root, st["name"]),
                                                        self._conn, st)
                         for st in r["streams"]}
        self._closed = False

    def _open_remote(self, url, names):
        """A set in object storage (docs/REMOTE.md): its streams are those its
        zrecord.set names (or `names`), read-only."""
        from . import _conn
        self.root = url
        self.path = url
        self._conn = _conn.default()
        self._closed = False
        fields = {"remote": _s3.remote_field(url)}
        if names is not None:
            fields["streams"] = [os.fspath(n) for n in names]
        r = self._conn.request("msset_open", fields, context=f"opening {url}")
        self._set = r["set"]
        self._writable = False
        self._streams = {st["name"]: _from_stream_reply(f"{url}/{st['name']}", self._conn, st)
                         for st in r["streams"]}

    def _open_loose(self, names):
        self._set = None
        self._streams = {}
        try:
            for n in names:
                self._streams[n] = open_dataset(os.path.join(self.root, n))
            lengths = {n: len(d) for n, d in self._streams.items()}
        except BaseException:
            self.close()
            raise
        first = lengths[names[0]]
        odd = [n for n in names if lengths[n] != first]
        if odd:
            self.close()
            raise ZrecordValueError(
                f"stream {odd[0]!r} has {lengths[odd[0]]} records, not aligned with the "
                f"{first} of the first stream ({names[0]!r})", name="ZR_E_MISALIGNED")

    def _append_loose(self, batches, level=None):
        missing = [n for n in self._streams if n not in batches]
        if missing:
            raise ZrecordKeyError(f"append to {self.root!r} needs one batch for every stream: "
                                  f"missing {', '.join(missing)}", name="ZR_E_SCHEMA")
        checked = {}
        for name, ds in self._streams.items():      # every batch checked before any write
            what = f"append to stream {name!r}"
            checked[name] = ds._check_batch(batches[name], what) if isinstance(ds, DenseDataset) \
                else ds._check_records(batches[name], what)
        counts = {n: len(b) for n, b in checked.items()}
        if len(set(counts.values())) > 1:
            raise ZrecordValueError(
                "append: streams given different record counts: "
                + ", ".join(f"{n}={c}" for n, c in counts.items()), name="ZR_E_MISALIGNED")
        first = None
        for name, ds in self._streams.items():
            at = {} if level is None or ds.codec == "raw" else {"level": level}
            f = ds.append(checked[name], **at)
            first = f if first is None else first
        return first

    @property
    def names(self):
        """The stream names, in order."""
        return list(self._streams)

    @property
    def streams(self):
        """``{name: DenseDataset | RaggedDataset}``, a new dict, ready for a DataLoader."""
        return dict(self._streams)

    def _set_handle(self):
        if self._closed:
            raise ZrecordValueError(f"the multi-stream dataset {self.root!r} is closed")
        c = self._conn
        if not c.usable:
            fresh = MSDataset(self.root, self.names)   # a forked child, or the daemon went away
            self.__dict__.update(fresh.__dict__)
        return self._set

    def __getitem__(self, name):
        try:
            return self._streams[name]
        except KeyError:
            raise KeyError(f"no stream {name!r} in {self.root!r}; streams: "
                           f"{', '.join(self._streams)}") from None

    def __contains__(self, name):
        return name in self._streams

    def keys(self):
        return self._streams.keys()

    def __len__(self):
        if self._set is not None:
            # the daemon reads every stream's length at one moment (INFO of the
            # set): another client's append through the set is in all or none
            h = self._set_handle()
            try:
                return int(self._conn.request("info", {"handle": h})["length"])
            except ZrecordError as e:
                if e.name != "ZR_E_NO_HANDLE":      # a daemon before INFO of a set
                    raise
        lengths = {n: len(d) for n, d in self._streams.items()}
        vals = set(lengths.values())
        if len(vals) > 1:
            raise ZrecordValueError(
                "streams differ in length: " + ", ".join(f"{n}={v}" for n, v in lengths.items()),
                name="ZR_E_MISALIGNED")
        return vals.pop()

    def append(self, batches: Mapping[str, Records], level: Optional[int] = None) -> int:
        """Appends one batch per stream, all of the same count; returns the first index.

        Every batch is checked before anything is written. A batch too large for one
        request (ragged record sizes travel in the request frame) is written in
        aligned pieces, each all-or-nothing across the streams. ``level``: the
        compression level of the compressed streams, as :meth:`DenseDataset.append`."""
        codecs = {d.codec for d in self._streams.values()}
        _store.level_fields(level, "raw" if codecs == {"raw"} else "zstd")
        if self._set is None:
            return self._append_loose(batches, level)
        h = self._set_handle()
        n_ragged = sum(1 for d in self._streams.values() if isinstance(d, RaggedDataset))
        per = max(1, (self._conn.frame_max - 16384) // (8 * max(1, n_ragged))) if n_ragged else None
        count = None
        for name, ds in self._streams.items():
            if name in batches:
                b = batches[name]
                count = len(b) if not isinstance(b, np.ndarray) else (b.shape[0] if b.ndim else None)
                break
        if per is not None and count is not None and count > per and set(batches) == set(self._streams):
            for name, ds in self._streams.items():       # check every stream first
                b = batches[name]
                if isinstance(ds, DenseDataset):
                    ds._check_batch(b, what=f"append to stream {name!r}")
                else:
                    ds._check_records(b, what=f"append to stream {name!r}")
            counts = {n: len(b) for n, b in batches.items()}
            if len(set(counts.values())) > 1:
                raise ZrecordValueError(
                    "append: streams given different record counts: "
                    + ", ".join(f"{n}={c}" for n, c in counts.items()),
                    name="ZR_E_MISALIGNED")
            first = None
            for s in range(0, count, per):
                f = self._append_one(h, {n: b[s:s + per] for n, b in batches.items()}, level)
                first = f if first is None else first
            assert first is not None    # count > per: the loop ran
            return first
        return self._append_one(h, batches, level)

    def _append_one(self, h, batches, level=None):
        names = set(batches)
        missing = [n for n in self._streams if n not in names]
        extra = [n for n in batches if n not in self._streams]
        if missing or extra:
            parts = []
            if missing:
                parts.append("missing " + ", ".join(missing))
            if extra:
                parts.append("unknown " + ", ".join(map(str, extra)))
            raise ZrecordKeyError(
                f"append to {self.root!r} needs one batch for every stream "
                f"({', '.join(self._streams)}): {'; '.join(parts)}", name="ZR_E_SCHEMA")
        pieces, streams, counts = [], [], {}
        offset = 0
        for name, ds in self._streams.items():
            b = batches[name]
            if isinstance(ds, DenseDataset):
                arr = ds._check_batch(b, what=f"append to stream {name!r}")
                f = _store.dense_fields(ds._h.schema, arr)
                f.update(name=name, offset=offset)
                pieces.append(arr)
                size = arr.nbytes
                counts[name] = arr.shape[0]
            else:
                recs = ds._check_records(b, what=f"append to stream {name!r}")
                p, sizes = _store.ragged_pieces(recs)
                f = {"name": name, "offset": offset, "dtype": ds._h.schema["dtype"],
                     "ndim": ds._ndim, "sizes": _wire.u64s(sizes)}
                pieces.extend(p)
                size = sum(sizes)
                counts[name] = len(recs)
            streams.append(f)
            pad = (-size) % 8
            if pad:
                pieces.append(b"\0" * pad)
            offset += size + pad
        if len(set(counts.values())) > 1:
            raise ZrecordValueError(
                "append: streams given different record counts: "
                + ", ".join(f"{n}={c}" for n, c in counts.items()),
                name="ZR_E_MISALIGNED")
        with _shm.SealedMemfd(pieces, "loaderx-append") as m:
            r = self._conn.request("append", {"handle": h, "streams": streams,
                                              **({} if level is None else {"level": level})},
                                   fds=(m.fd,), context=self.root)
        return int(r["first"])

    def delete(self, key):
        """Deletes the same records from every stream."""
        if self._set is None:
            n = len(self)
            for d in self._streams.values():
                d.delete(_index.normalize(key, n)[0])
            return
        h = self._set_handle()
        for piece in _delete_pieces(key, len(self), self._conn.frame_max):
            self._conn.request("delete", {"handle": h, "indices": _wire.u64s(piece)},
                               context=self.root)

    def compact(self):
        """Reclaims the bytes of deleted records in every stream, in place."""
        for d in self._streams.values():
            d.compact()

    def close(self):
        if getattr(self, "_closed", True):
            return
        self._closed = True
        for d in self._streams.values():
            d.close()
        c = self._conn
        if self._set is not None and c.pid == os.getpid() and not c.closed:
            try:
                c.request("close", {"handle": self._set})
            except ZrecordError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"MSDataset({self.root!r}, streams={list(self._streams)})"

    def __reduce__(self):
        return (MSDataset, (self.root, self.names))
