"""Raw byte records: ``Zrecord``, loaderx 1.5.7's store API, and its constants.

A raw byte store is what loaderx 1.5.7's ``Zrecord`` makes: a store without
``schema.msgpack``, each record an arbitrary (non-empty) byte string stored
exactly. The daemon serves it as a ragged dataset of dtype ``|u1`` and ndim 1
(layout ``"bytes"``), so stores interchange with loaderx 1.5.7 both ways. A
ragged ``|u1`` dataset of zrecord's own layout opens here too.

``Zrecord(path, codec='zstd')`` opens the byte store at ``path`` or creates one
(any missing directory too), as loaderx 1.5.7 does, and has its API:
``append(src, offsets)``, ``lengths(idxs)``, ``gather(idxs, dst, offsets)``,
``install_dict``, ``has_dict``, ``delete``, ``compact``, ``stats``, ``sync``,
``close`` and ``with``. Its errors are :class:`ZrecordError` with loaderx 1.5.7's
codes (-3 an index out of range, -4 an empty or too large record, -6 a buffer too
small). zrecord's own forms stay: ``append([b'...', ...])`` and ``z[i]`` (bytes).
"""

import os
from typing import Any, Optional

import numpy as np

from . import _index, _store
from ._typing import StorePath
from ._errors import ZrecordError, ZrecordTypeError, ZrecordValueError
from .dataset import DAEMON_TIERS, RaggedDataset

__all__ = ["Zrecord", "ZrecordError", "build_dict", "CODECS", "SCHEMA", "FORMAT",
           "MAX_RECORD_LEN"]

#: loaderx 1.5.7's codec tags (meta.zr byte 5).
CODECS = {"raw": 0, "zstd": 1, "zstd_dict": 2}
SCHEMA = _store.SCHEMA_FILE
FORMAT = "loaderx-zrecord"
MAX_RECORD_LEN = _store.MAX_RECORD_LEN


def _u64(a):
    return np.ascontiguousarray(a, dtype=np.uint64).reshape(-1)


def _flat(a, name):
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
        raise ValueError(f"{name} must be a C-contiguous numpy array")
    return a


class Zrecord:
    """A store of raw byte records at ``path`` (created if absent, with ``codec``).

    ``level``: the compression level of this object's appends, 1 to 19 in zstd's
    scale; None: the codec's default (docs/DATASETS.md, "Levels")."""

    def __init__(self, path: StorePath, codec: str = "zstd", level: Optional[int] = None) -> None:
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}, expected one of {sorted(CODECS)}")
        _store.level_fields(level, codec)           # before anything is created
        path = os.fspath(path)
        if _store.is_store(path):
            self._ds = RaggedDataset(path)
            if self._ds.dtype != np.uint8 or self._ds._ndim not in (0, 1):
                self._ds.close()
                raise ZrecordValueError(
                    f"{path!r} is a typed store ({self._ds.schema}), not raw byte records; "
                    "open it with DenseDataset or RaggedDataset", name="ZR_E_SCHEMA")
        else:
            self._ds = RaggedDataset(path, dtype=np.uint8, codec=codec, ndim=1, _layout="bytes")
        self.path = self._ds.path
        self.codec = self._ds.codec
        if level is not None:
            try:
                _store.level_fields(level, self.codec)
            except BaseException:
                self._ds.close()
                raise
        self.level = level

    def __len__(self):
        return len(self._ds)

    def append(self, src: Any, offsets: Any = None) -> int:
        """Appends records; returns the index of the first.

        loaderx 1.5.7's form: ``src`` a C-contiguous array holding the records back to
        back, ``offsets`` where each starts (the last runs to the end of ``src``).
        zrecord's: a list of byte strings (bytes, bytearray, memoryview)."""
        if offsets is None:
            if isinstance(src, np.ndarray):
                raise ZrecordTypeError("append(src, offsets): the records' offsets are missing")
            if isinstance(src, (bytes, bytearray, memoryview)):
                raise ZrecordTypeError("append takes a list of byte strings (wrap one as [b])")
            recs = []
            for j, r in enumerate(src):
                if not isinstance(r, (bytes, bytearray, memoryview)):
                    raise ZrecordTypeError(f"record {j}: expected bytes, got {type(r).__name__}")
                recs.append(np.frombuffer(r, dtype=np.uint8))
        else:
            flat = _flat(src, "src").reshape(-1).view(np.uint8)
            offs = _u64(offsets)
            if offs.size == 0:
                return len(self)
            ends = np.append(offs[1:], np.uint64(flat.size))
            if offs[-1] > flat.size or np.any(offs[1:] < offs[:-1]):
                raise ZrecordError(-6 if offs[-1] > flat.size else -4)
            recs = [flat[int(a):int(b)] for a, b in zip(offs.tolist(), ends.tolist())]
        for r in recs:
            if r.nbytes == 0 or r.nbytes > MAX_RECORD_LEN:
                raise ZrecordError(-4)   # loaderx 1.5.7: record_too_large, empty ones too
        if not recs:
            return len(self)
        return self._ds.append(recs, **({} if self.level is None else {"level": self.level}))

    def lengths(self, idxs):
        """The size of each record of idxs (a uint32 array)."""
        return self._ds._lengths(self._indices(idxs))

    def gather(self, idxs, dst, offsets):
        """Writes record idxs[i] into dst's bytes at offsets[i] (uint64 byte offsets,
        any layout); dst a C-contiguous array, its nbytes the bound."""
        idx = self._indices(idxs)
        offs = _u64(offsets)
        out = _flat(dst, "dst").reshape(-1).view(np.uint8)
        if offs.size < idx.size:
            raise ZrecordError(-6)
        recs = self._ds._read(idx)
        for o, r in zip(offs.tolist(), recs):
            if o + r.nbytes > out.size:
                raise ZrecordError(-6)
        for o, r in zip(offs.tolist(), recs):
            out[o:o + r.nbytes] = r.reshape(-1)

    def _indices(self, idxs):
        idx = _u64(idxs)
        n = len(self)
        if idx.size and int(idx.max()) >= n:
            raise ZrecordError(f"index {int(idx.max())} is out of range for a store of {n} "
                               "records", name="ZR_E_RANGE")
        return idx

    def __getitem__(self, key):
        idx, scalar = _index.normalize(key, len(self))
        out = [a.tobytes() for a in self._ds._read(idx)]
        return out[0] if scalar else out

    def install_dict(self, dict_bytes):
        """Installs a zstd dictionary (an empty ``zstd_dict`` store); returns its size."""
        data = bytes(dict_bytes)
        self._ds._store.install_dict(data)
        return len(data)

    def has_dict(self):
        return self._ds.has_dict()

    def delete(self, idxs):
        """Deletes records by swap-last (repeats and any order accepted)."""
        self._ds.delete(self._indices(idxs))

    def stats(self):
        return self._ds.stats()

    def compact(self):
        return self._ds.compact()

    def sync(self):
        self._ds._store.sync()

    def close(self):
        ds = getattr(self, "_ds", None)
        if ds is not None:
            ds.close()

    def __reduce__(self):
        return (Zrecord, (os.fspath(self.path),))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def build_dict(samples, sizes, target):
    """Trains a zstd dictionary on samples (bytes or a uint8 array) cut by sizes, of
    at most ``target`` bytes: the largest tier of DICT_TIERS that fits (the daemon
    trains by tier, docs/DATASETS.md). Returns its bytes."""
    from .dataset import DICT_TIERS
    from .utils import _train_on_pieces
    data = np.frombuffer(samples, dtype=np.uint8) if isinstance(samples, (bytes, bytearray)) \
        else np.ascontiguousarray(samples).reshape(-1).view(np.uint8)
    sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
    if sum(sizes) > data.size:
        raise ZrecordError(-6)
    fits = [t for t, v in DICT_TIERS.items() if v["size"] <= int(target)]
    if not fits:
        raise ZrecordError(-6)
    tier = max(fits, key=lambda t: DICT_TIERS[t]["size"])
    try:
        return _train_on_pieces([data[:sum(sizes)]], sizes, DAEMON_TIERS[tier])
    except ZrecordValueError:
        raise ZrecordError(-9) from None    # too few or too small samples
