#!/usr/bin/env python3
"""`ds[idx]` of large records that are not in the page cache, against numpy.

    python3 bench/suite/cold_reads.py [BUILD_DIR] [--rounds N] [--dir DIR]

READs are not read ahead (docs/IO.md): a READ of records out of the page cache
reads them itself. This times 64 random records of 256 KiB (16 MiB) of a
1024-record raw store, each call right after the store's files were dropped
from the page cache (fdatasync, then POSIX_FADV_DONTNEED: no root needed), and
the same draw from the same bytes in a .npy through `np.load(mmap_mode="r")`,
with the kernel's default read-around and with MADV_RANDOM, each from a
dropped page cache too. Private daemon, its store reopened after writing so
that none of its pages is mapped. DIR must be on a disk (not tmpfs): default
$TMPDIR. Medians per contender, and zrecord's speed over each numpy's.
Figures in docs/IO.md ("What it does not do").
"""
import argparse
import glob
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from suite import common as C  # noqa: E402

N, SIDE, BATCH = 1024, 512, 64


def drop(paths):
    """Drops files `paths` from the page cache."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def npy_read(path, idx, advice):
    """Times numpy's fancy index of idx on a fresh mapping of path."""
    m = np.load(path, mmap_mode="r")
    if advice is not None:
        m._mmap.madvise(advice)
    t = time.perf_counter()
    x = np.array(m[idx])
    dt = time.perf_counter() - t
    del m
    return dt, x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    build = C.find_build(a.build)
    C.import_loaderx()
    from loaderx import _conn
    from loaderx.dataset import DenseDataset
    tmp = tempfile.mkdtemp(prefix="zrecord-cold-", dir=a.dir)
    try:
        arr = C.images(N, SIDE)
        npy = os.path.join(tmp, "t.npy")
        np.save(npy, arr)
        store = os.path.join(tmp, "t")
        d = C.Daemon(build, tmp)
        ds = DenseDataset(store, dtype=np.uint8, item_shape=(SIDE, SIDE), codec="raw")
        for s in range(0, N, 128):
            ds.append(arr[s:s + 128])
        ds._store.sync()
        ds.close()
        _conn.default().close()
        _conn._default = None
        d.stop()
        d = C.Daemon(build, tmp)            # none of the store's pages mapped
        ds = DenseDataset(store)
        chunks = glob.glob(os.path.join(store, "*.chunk"))
        times = {"zrecord": [], "npy mmap": [], "npy mmap MADV_RANDOM": []}
        for idx in C.draws(a.rounds, BATCH, N):
            drop(chunks)
            t = time.perf_counter()
            x = ds[idx]
            times["zrecord"].append(time.perf_counter() - t)
            assert np.array_equal(x, arr[idx])
            for name, advice in (("npy mmap", None), ("npy mmap MADV_RANDOM", mmap.MADV_RANDOM)):
                drop([npy])
                dt, y = npy_read(npy, idx, advice)
                times[name].append(dt)
                assert np.array_equal(y, arr[idx])
        ds.close()
        d.stop()
        mib = BATCH * SIDE * SIDE / 2**20
        print(f"{BATCH} random records of {SIDE * SIDE >> 10} KiB ({mib:.0f} MiB) of {N}, "
              f"each call from a dropped page cache, median of {a.rounds}; "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        zr = statistics.median(times["zrecord"])
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:22s} {med * 1000:8.1f} ms  {mib / med:7.1f} MiB/s  "
                  f"zrecord speed / this {med / zr:5.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
