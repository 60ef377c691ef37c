#!/usr/bin/env python3
"""`ds[idx]` after the daemon idled, with its workers pinned and not.

    python3 bench/suite/idle_calls.py [BUILD_DIR] [--rounds N]

The store layer alternates its contenders, and a training loop computes between
reads, so most `ds[idx]` calls start after the daemon slept: its threads and the
client wake again (each wake-up 100-200 us on this project's 2-CPU VM), and the
second worker of a gather may be queued on the first one's CPU. This times 1024
random 4 KiB records of a 16384-record store, `ds[idx]` against
`np.load(mmap_mode="r")[idx]` in the same loop, each call after `time.sleep(gap)`:
raw records after 5 ms and after none, zstd records (`--cache=0`) after 20 ms. Each
round starts one private daemon with `--pin-workers=yes` and one with `no`, in
alternating order; medians per round. Figures in bench/README.md ("A call after
the daemon idled").
"""
import argparse
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

N, SIDE, BATCH = 16384, 64, 1024
CASES = (("raw", 0.005, 150), ("raw", 0.0, 300), ("zstd", 0.02, 40))


def one(build, pin, codec, gap, nb):
    """(median ds[idx] s, median npy s) of nb calls, each after sleeping gap."""
    tmp = tempfile.mkdtemp(prefix="zrecord-idle-")
    d = C.Daemon(build, tmp, cache="0", extra=(f"--pin-workers={pin}",))
    try:
        from loaderx import _conn
        from loaderx.dataset import DenseDataset
        arr = C.images(N, SIDE)
        ds = DenseDataset(os.path.join(tmp, "t"), dtype=np.uint8, item_shape=(SIDE, SIDE),
                          codec=codec)
        for s in range(0, N, 4096):
            ds.append(arr[s:s + 4096])
        ds._store.sync()
        np.save(os.path.join(tmp, "t.npy"), arr)
        m = np.load(os.path.join(tmp, "t.npy"), mmap_mode="r")
        batches = C.draws(nb + 5, BATCH, N)
        for b in batches[:5]:
            ds[b]
            m[b]
        a, n = [], []
        for b in batches[5:]:
            for out, fn in ((a, ds.__getitem__), (n, m.__getitem__)):
                if gap:
                    time.sleep(gap)
                t = time.perf_counter()
                x = fn(b)
                out.append(time.perf_counter() - t)
                del x
        if not np.array_equal(ds[batches[-1]], arr[batches[-1]]):
            raise SystemExit(f"{codec}: ds[idx] differs from the source")
        ds.close()
        _conn.default().close()
        _conn._default = None
        return statistics.median(a), statistics.median(n)
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?")
    ap.add_argument("--rounds", type=int, default=3)
    o = ap.parse_args()
    build = C.find_build(o.build)
    C.import_loaderx()
    print(f"1024 x 4 KiB records, medians; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for r in range(o.rounds):
        for codec, gap, nb in CASES:
            for pin in (("yes", "no") if r % 2 == 0 else ("no", "yes")):
                a, n = one(build, pin, codec, gap, nb)
                print(f"  round {r + 1}  {codec:4s} idle {gap * 1e3:2.0f} ms  pin-workers={pin:3s}  "
                      f"ds[idx] {a * 1e6:8.0f} us  npy-mmap {n * 1e6:6.0f} us  "
                      f"ds/npy speed {n / a:4.2f}", flush=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
