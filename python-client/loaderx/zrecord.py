"""Raw byte records: ``Zrecord``.

The protocol serves typed datasets only (every store the daemon opens carries a
``schema.msgpack``), so a raw byte store is a ragged dataset of dtype ``|u1`` and
ndim 1: each record is an arbitrary byte string, stored exactly (plus the 16-byte
shape header every ragged record has).
"""

import os

import numpy as np

from . import _index, _store
from ._errors import ZrecordTypeError
from .dataset import RaggedDataset

__all__ = ["Zrecord"]


class Zrecord:
    """A store of raw byte records at ``path`` (created if absent, with ``codec``)."""

    def __init__(self, path, codec="zstd"):
        path = os.fspath(path)
        if _store.is_store(path):
            self._ds = RaggedDataset(path)
            if self._ds.dtype != np.uint8 or self._ds.ndim != 1:
                self._ds.close()
                raise ZrecordTypeError(
                    f"{path!r} is a typed store ({self._ds.schema}), not raw byte records; "
                    "open it with DenseDataset or RaggedDataset")
        else:
            self._ds = RaggedDataset(path, dtype=np.uint8, codec=codec, ndim=1)
        self.path = self._ds.path
        self.codec = self._ds.codec

    def __len__(self):
        return len(self._ds)

    def append(self, records):
        """Appends byte strings (bytes, bytearray, memoryview); returns the first index."""
        if isinstance(records, (bytes, bytearray, memoryview)):
            raise ZrecordTypeError("append takes a list of byte strings (wrap one as [b])")
        arrs = []
        for j, r in enumerate(records):
            if not isinstance(r, (bytes, bytearray, memoryview)):
                raise ZrecordTypeError(f"record {j}: expected bytes, got {type(r).__name__}")
            arrs.append(np.frombuffer(r, dtype=np.uint8))
        return self._ds.append(arrs)

    def __getitem__(self, key):
        idx, scalar = _index.normalize(key, len(self))
        out = [a.tobytes() for a in self._ds._read(idx)]
        return out[0] if scalar else out

    def delete(self, key):
        self._ds.delete(key)

    def stats(self):
        return self._ds.stats()

    def compact(self):
        return self._ds.compact()

    def close(self):
        self._ds.close()

    def __reduce__(self):
        return (Zrecord, (self.path,))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
