#!/usr/bin/env python3
"""check_loaderx_stores.py: PyPI loaderx 1.5.7 reads, then appends to, a store
zrecord wrote or changed.

    /tmp/lx157/bin/python tests/compat/check_loaderx_stores.py dense|ragged|bytes DIR SPEC

SPEC names the record ids the store must hold (lxdata.ids_of). Every record is
read through loaderx 1.5.7's DenseDataset or RaggedDataset and compared with its
formula (lxdata.py), shape included (a byte store, without schema, through
loaderx's raw Zrecord: lengths and gather); then LX_APPEND records (ids
LX_APPEND_FIRST on) are appended with loaderx, which test-lx157.c and
test_lx157_interop.py check in turn. Exits 0 when
all matched, 1 with a message otherwise. Run by test-lx157.c when ZR_LX157_PYTHON
names a venv with loaderx 1.5.7.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lxdata as D  # noqa: E402

import loaderx  # noqa: E402
from loaderx.dataset import DenseDataset, RaggedDataset  # noqa: E402
from loaderx.zrecord import Zrecord  # noqa: E402


def check_bytes(path, ids, new):
    if os.path.exists(os.path.join(path, "schema.msgpack")):
        sys.exit(f"{path}: a byte store has no schema.msgpack")
    with Zrecord(path, "zstd") as zr:
        if len(zr) != len(ids):
            sys.exit(f"{path}: {len(zr)} records, expected {len(ids)}")
        idx = np.arange(len(ids), dtype=np.uint64)
        lens = zr.lengths(idx)
        offs = np.concatenate([[0], np.cumsum(lens.astype(np.uint64))[:-1]]).astype(np.uint64)
        buf = np.zeros(int(lens.sum()), dtype=np.uint8)
        zr.gather(idx, buf, offs)
        for i, want in enumerate(ids):
            got = buf[int(offs[i]):int(offs[i]) + int(lens[i])].tobytes()
            if got != D.bytes_record(want):
                sys.exit(f"{path}: record {i} is not byte record {want}")
        blobs = [D.bytes_record(i) for i in new]
        flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        starts = np.concatenate([[0], np.cumsum([len(b) for b in blobs])[:-1]]).astype(np.uint64)
        zr.append(flat, starts)


def main():
    if getattr(loaderx, "__version__", None) != "1.5.7" or not hasattr(loaderx, "_lib"):
        sys.exit("this needs PyPI loaderx 1.5.7 (a venv of its own), not %s" % loaderx.__file__)
    kind, path, spec = sys.argv[1:4]
    ids = D.ids_of(spec)
    new = list(range(D.LX_APPEND_FIRST, D.LX_APPEND_FIRST + D.LX_APPEND))
    if kind == "bytes":
        check_bytes(path, ids, new)
    elif kind == "dense":
        with DenseDataset(path) as ds:
            if len(ds) != len(ids):
                sys.exit(f"{path}: {len(ds)} records, expected {len(ids)}")
            got = ds[np.arange(len(ids))] if ids else np.empty((0, *D.DENSE_SHAPE), np.int32)
            if ids and not np.array_equal(got, D.dense_array(ids)):
                bad = next(i for i in range(len(ids)) if not np.array_equal(got[i], D.dense_record(ids[i])))
                sys.exit(f"{path}: record {bad} is not record {ids[bad]} of the fixture")
            ds.append(D.dense_array(new))
    else:
        with RaggedDataset(path) as ds:
            if len(ds) != len(ids):
                sys.exit(f"{path}: {len(ds)} records, expected {len(ids)}")
            got = ds[np.arange(len(ids))] if ids else []
            for i, (g, want) in enumerate(zip(got, ids)):
                w = D.ragged_record(want)
                if g.shape != w.shape or not np.array_equal(g, w):
                    sys.exit(f"{path}: record {i} is {g.shape}, not record {want} {w.shape}")
            ds.append([D.ragged_record(i) for i in new])
    return 0


if __name__ == "__main__":
    sys.exit(main())
