#!/usr/bin/env python3
"""Python DataLoader vs the C client's loader, in one run.

    ZRECORDD=build/daemon/zrecordd python3 python-client/bench/bench_loader.py

Starts a private zrecordd (``$ZRECORDD``) on a temporary socket, writes a raw store
of 256 KiB records, then alternates rounds of the same loader (cyclic, batch 256,
prefetch 4, identity consumer) driven by (a) libzrc through ``c_loader.c`` (compiled
here against the build tree's libzrc; ``--build`` names the build dir) and (b) a
fresh Python process running ``loaderx.dataloader.DataLoader`` with an identity
transform. Each consumer reads one byte of each batch. It prints batches/s of each
round, the medians, their ratio, and the Python process's peak RSS against its ring
size + 50 MiB.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(PKG)
sys.path.insert(0, PKG)

PY_CONSUMER = textwrap.dedent("""
    import json, sys, time
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset
    store, batch, prefetch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    l = DataLoader({'x': DenseDataset(store)}, batch_size=batch, prefetch=prefetch,
                   sampler='cyclic', seed=0, transform=lambda b: b)
    sink = 0
    for i in range(steps + 3):
        if i == 3:
            t0 = time.perf_counter()
        b = next(l)
        sink ^= int(b['x'][0, 0])
        del b
    dt = time.perf_counter() - t0
    ring = l._session.mapped.nbytes
    l.close()
    print(json.dumps({'bps': steps / dt, 'ring': ring,
                      'maxrss': [int(line.split()[1]) * 1024 for line in open('/proc/self/status')
                                 if line.startswith('VmHWM:')][0]}))
""")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=None, help="meson build dir with client/libzrc.so")
    ap.add_argument("--records", type=int, default=512)
    ap.add_argument("--record-kib", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--prefetch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import numpy as np
    from loaderx.utils import from_numpy
    sys.path.insert(0, os.path.join(PKG, "tests"))
    from conftest import start_daemon, stop_daemon, daemon_binary

    zrecordd = daemon_binary()
    build = args.build or os.path.dirname(os.path.dirname(zrecordd))
    tmp = tempfile.mkdtemp(prefix="loaderx-bench-")
    proc = None
    try:
        exe = os.path.join(tmp, "c_loader")
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "c_loader.c"),
                        "-I", os.path.join(REPO, "client"), "-I", os.path.join(REPO, "proto"),
                        "-L", os.path.join(build, "client"), "-lzrc",
                        f"-Wl,-rpath,{os.path.join(build, 'client')}"], check=True)
        proc, sock = start_daemon(tmp)
        os.environ["ZRECORD_SOCKET"] = sock
        store = os.path.join(tmp, "store")
        rec = args.record_kib << 10
        rng = np.random.default_rng(0)
        arr = rng.integers(0, 255, (args.records, rec), dtype=np.uint8)
        from_numpy(store, arr, codec="raw")
        del arr
        print(f"store: {args.records} raw records of {args.record_kib} KiB; batch {args.batch} "
              f"({args.batch * rec >> 20} MiB), prefetch {args.prefetch}, {args.steps} steps a round")
        env = dict(os.environ, PYTHONPATH=PKG)
        c_rates, py_rates, rss = [], [], []
        for r in range(args.rounds):
            out = subprocess.run([exe, sock, store, str(args.batch), str(args.prefetch),
                                  str(args.steps)], check=True, capture_output=True, text=True).stdout
            c = float(out.split()[-1])
            p = json.loads(subprocess.run(
                [sys.executable, "-c", PY_CONSUMER, store, str(args.batch), str(args.prefetch),
                 str(args.steps)], env=env, check=True, capture_output=True, text=True).stdout)
            c_rates.append(c)
            py_rates.append(p["bps"])
            rss.append((p["maxrss"], p["ring"]))
            print(f"round {r}: C libzrc {c:8.1f} batches/s   Python DataLoader {p['bps']:8.1f} batches/s")
        cm, pm = statistics.median(c_rates), statistics.median(py_rates)
        print(f"median: C {cm:.1f} batches/s, Python {pm:.1f} batches/s, ratio {pm / cm:.3f}")
        maxrss, ring = max(rss)
        print(f"Python peak RSS {maxrss / 2**20:.1f} MiB; ring {ring / 2**20:.0f} MiB + 50 MiB = "
              f"{(ring >> 20) + 50} MiB: {'within' if maxrss <= ring + (50 << 20) else 'OVER'}")
    finally:
        if proc is not None:
            stop_daemon(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
