#!/usr/bin/env python3
"""make_loaderx_stores.py: writes one store of each kind with PyPI loaderx 1.5.7.

Run it in a venv of its own (loaderx 1.5.7 imports as `loaderx`, like zrecord's
client):

    python3 -m venv /tmp/lx157 && /tmp/lx157/bin/pip install loaderx==1.5.7 numpy
    /tmp/lx157/bin/python tests/compat/make_loaderx_stores.py OUTDIR

It writes, under OUTDIR, with the records of lxdata.py:
    dense-{raw,zstd,zstd_dict}    from_numpy, DENSE_N records (zstd: a caller's
                                  schema key too; zstd_dict: train_dict "fast")
    ragged-{raw,zstd,zstd_dict}   from_iterator, RAGGED_N records whose ndim varies
    bytes-{raw,zstd,zstd_dict}    the raw Zrecord API, BYTES_N byte records, no schema
                                  (zstd_dict: the ragged stores' dictionary installed)
    dense-deleted                 dense zstd, then DenseDataset.delete(LX_DELETE),
                                  not compacted (the deleted bytes still in the chunk)
    ragged-compacted              ragged zstd, then delete(LX_DELETE) and compact()
test-lx157.c runs it when ZR_LX157_PYTHON names that venv's python, and otherwise
writes the same stores byte by byte from the format's documentation.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lxdata as D  # noqa: E402

import loaderx  # noqa: E402
from loaderx.dataset import DenseDataset, RaggedDataset  # noqa: E402
from loaderx.utils import from_iterator, from_numpy, train_dict  # noqa: E402
from loaderx.zrecord import Zrecord  # noqa: E402


def main():
    if getattr(loaderx, "__version__", None) != "1.5.7" or not hasattr(loaderx, "_lib"):
        sys.exit("this needs PyPI loaderx 1.5.7 (a venv of its own), not %s" % loaderx.__file__)
    if len(sys.argv) != 2:
        sys.exit("usage: make_loaderx_stores.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    dense = D.dense_array(range(D.DENSE_N))
    ragged = [D.ragged_record(i) for i in range(D.RAGGED_N)]
    dicts = {"dense": train_dict(dense, tier="fast"), "ragged": train_dict(ragged, tier="fast")}
    for codec in D.CODECS:
        d = dicts["dense"] if codec == "zstd_dict" else None
        extra = {"source": "make_loaderx_stores"} if codec == "zstd" else None
        assert from_numpy(os.path.join(out, "dense-" + codec), dense, codec=codec, dict_bytes=d,
                          schema=extra) == D.DENSE_N
        d = dicts["ragged"] if codec == "zstd_dict" else None
        assert from_iterator(os.path.join(out, "ragged-" + codec), iter(ragged), np.int32, codec=codec,
                             dict_bytes=d) == D.RAGGED_N

    blobs = [D.bytes_record(i) for i in range(D.BYTES_N)]
    flat = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])[:-1]]).astype(np.uint64)
    for codec in D.CODECS:
        with Zrecord(os.path.join(out, "bytes-" + codec), codec) as zr:
            if codec == "zstd_dict":
                zr.install_dict(dicts["ragged"])
            zr.append(flat, offsets)

    from_numpy(os.path.join(out, "dense-deleted"), dense)
    with DenseDataset(os.path.join(out, "dense-deleted")) as ds:
        ds.delete(np.array(D.LX_DELETE))
    from_iterator(os.path.join(out, "ragged-compacted"), iter(ragged), np.int32)
    with RaggedDataset(os.path.join(out, "ragged-compacted")) as ds:
        ds.delete(np.array(D.LX_DELETE))
        ds.compact()
    return 0


if __name__ == "__main__":
    sys.exit(main())
