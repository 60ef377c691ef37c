#!/usr/bin/env python3
"""check_loaderx_stores.py: PyPI loaderx 1.5.7 reads, then appends to, a store
zrecord wrote or changed.

    /tmp/lx157/bin/python tests/compat/check_loaderx_stores.py dense|ragged DIR SPEC

SPEC names the record ids the store must hold (lxdata.ids_of). Every record is
read through loaderx 1.5.7's DenseDataset or RaggedDataset and compared with its
formula (lxdata.py), shape included; then LX_APPEND records (ids LX_APPEND_FIRST
on) are appended with loaderx, which test-lx157.c checks in turn. Exits 0 when
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


def main():
    if getattr(loaderx, "__version__", None) != "1.5.7" or not hasattr(loaderx, "_lib"):
        sys.exit("this needs PyPI loaderx 1.5.7 (a venv of its own), not %s" % loaderx.__file__)
    kind, path, spec = sys.argv[1:4]
    ids = D.ids_of(spec)
    new = list(range(D.LX_APPEND_FIRST, D.LX_APPEND_FIRST + D.LX_APPEND))
    if kind == "dense":
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
