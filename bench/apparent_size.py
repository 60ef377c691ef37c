#!/usr/bin/env python3
"""apparent_size.py: what a closed store weighs to tools that copy it.

    python3 bench/apparent_size.py [--build BUILD] [--dir DIR] [--large-mib 1024]

With BUILD's zrecordd (a daemon of its own), it writes two stores through the
Python client and closes them: the issue's small one (178 raw records of 160
bytes) and a large one (`--large-mib` MiB of incompressible raw 256 KiB records,
so that tar moves real bytes). For each it prints the records' bytes, the
store's apparent size (the sum of its files' sizes, what tar, scp and zip read)
and its size on disk (allocated blocks), then times `tar cf - STORE`, counting
the bytes it writes to a pipe (as `| wc -c` does), and `tar --sparse`'s. Run it
with an older build's daemon for the figures before (docs/FORMAT.md, "Apparent
size"). Prints the load average before and after; nothing is asserted; the
stores are removed at the end.
"""
import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from suite.common import Daemon, find_build, import_loaderx  # noqa: E402

RECORD = 256 << 10


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def sizes(path):
    apparent = disk = 0
    for d, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(d, f))
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


def tar(path, *flags):
    """(bytes tar writes to a pipe, seconds)."""
    t = time.perf_counter()
    p = subprocess.Popen(["tar", "cf", "-", *flags, "-C", os.path.dirname(path),
                          os.path.basename(path)], stdout=subprocess.PIPE)
    n = 0
    while True:
        b = p.stdout.read(1 << 20)
        if not b:
            break
        n += len(b)
    if p.wait() != 0:
        raise RuntimeError(f"tar of {path} failed")
    return n, time.perf_counter() - t


def let_go(path):
    """Waits until no writer holds the store: a daemon that closes a store after
    its CLOSE's reply (builds before the reply waited) is still at it."""
    fd = os.open(os.path.join(path, "meta.zr"), os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


def write(path, n, width, seed):
    import numpy as np
    from loaderx.dataset import DenseDataset
    rng = np.random.default_rng(seed)
    ds = DenseDataset(path, dtype="u1", item_shape=(width,), codec="raw")
    step = max(1, (64 << 20) // width)
    for i in range(0, n, step):
        k = min(step, n - i)
        ds.append(rng.integers(0, 256, size=(k, width), dtype=np.uint8))
    ds.close()
    return n * width


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--large-mib", type=int, default=1024)
    args = ap.parse_args()
    build = find_build(args.build)
    import_loaderx()
    root = tempfile.mkdtemp(prefix="zr-apparent-", dir=args.dir)
    print(f"apparent_size: {build}/daemon/zrecordd, stores in {root}; load {loadavg()}")
    daemon = Daemon(build, root)
    try:
        stores = [("small (178 x 160 B)", os.path.join(root, "small"), 178, 160),
                  (f"large ({args.large_mib} MiB of 256 KiB)", os.path.join(root, "large"),
                   (args.large_mib << 20) // RECORD, RECORD)]
        print(f"{'store':28} {'records B':>14} {'apparent B':>16} {'on disk B':>14} "
              f"{'tar B':>16} {'tar s':>8} {'tar --sparse B':>15} {'s':>6}")
        for name, path, n, width in stores:
            data = write(path, n, width, seed=n)
            let_go(path)
            apparent, disk = sizes(path)
            tb, ts = tar(path)
            sb, ss = tar(path, "--sparse")
            print(f"{name:28} {data:>14,} {apparent:>16,} {disk:>14,} {tb:>16,} {ts:>8.2f} "
                  f"{sb:>15,} {ss:>6.2f}")
            shutil.rmtree(path)
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
