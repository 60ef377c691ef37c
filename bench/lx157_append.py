#!/usr/bin/env python3
"""lx157_append.py: what an append costs in loaderx 1.5.7's ragged layout.

    ZRECORDD=build/daemon/zrecordd PYTHONPATH=python-client \\
        python3 bench/lx157_append.py [--dir DIR] [--sizes 10000,100000,1000000]

For each size N it makes a ragged dataset of N int32 records of shape (4,) in
zrecord's layout, converts it to loaderx 1.5.7's (CONVERT), then times 15 appends
of one record to each through the Python client and prints the medians, the size
of the loaderx store's schema.msgpack (which every such append rewrites, with
three fsyncs) and the load average before and after. Nothing is asserted; the
stores are removed at the end (docs/FORMAT.md, "Ragged stores: two layouts").
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from loaderx.dataset import RaggedDataset
from loaderx.utils import convert

APPENDS = 15


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed_appends(ds, rec):
    times = []
    for _ in range(APPENDS):
        t = time.perf_counter()
        ds.append([rec])
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="lx157-append-", dir=args.dir)
    rec = np.arange(4, dtype=np.int32)
    print(f"load average before: {loadavg()}")
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            own, lx = os.path.join(root, f"own-{n}"), os.path.join(root, f"lx-{n}")
            with RaggedDataset(own, dtype=np.int32, codec="raw") as ds:
                for s in range(0, n, 100_000):
                    ds.append([rec] * min(100_000, n - s))
            convert(own, lx, to="loaderx-1.5.7")
            with RaggedDataset(own) as ds:
                t_own = timed_appends(ds, rec)
            with RaggedDataset(lx) as ds:
                t_lx = timed_appends(ds, rec)
            size = os.path.getsize(os.path.join(lx, "schema.msgpack"))
            print(f"N={n}: one-record append, median of {APPENDS}: zrecord's layout "
                  f"{t_own * 1e3:.2f} ms, loaderx 1.5.7's {t_lx * 1e3:.2f} ms "
                  f"(its schema.msgpack: {size} bytes)", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
