"""The device's limits for the beyond-memory layer: random reads of one record
size at several queue depths, and a sequential read.

    python -m suite.ioprobe --file PATH --bytes N --seconds S [--drop-caches]

is the fallback probe, used when the build has no `bench/io-probe` (the C probe:
threads and io_uring, buffered and O_DIRECT, queue depths 1, 2, 32, 128). It
prints one JSON object:

    {"probe": "python", "file": ..., "bytes": N,
     "random": [{"engine": "pread threads", "qd": 1, "direct": false,
                 "reads": k, "seconds": s, "reads_s": r, "mib_s": m}, ...],
     "sequential": [{"engine": "read", "block": 1048576, "mib_s": m, ...}]}

Random reads: `qd` threads of os.preadv of N bytes each at N-aligned offsets of
the file, every offset at most once (a permutation), buffered, with
POSIX_FADV_RANDOM (no read-around: one read is one device request of N
bytes). Sequential: 1 MiB reads from the start, POSIX_FADV_SEQUENTIAL. With
--drop-caches (root), the page cache is dropped before each probe.

parse() turns the output of either probe into the same rows: the C probe's JSON
is read by key names (any object with a queue depth and a rate), so that a
change of its layout degrades to "no rows" (and the fallback), never a crash.
"""

import argparse
import json
import os
import sys
import threading
import time

DEPTHS = (1, 2, 32)
SEQ_BLOCK = 1 << 20


def _drop():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError:
        pass


def random_probe(path, bs, qd, seconds):
    import numpy as np
    size = os.path.getsize(path)
    nblocks = max(1, size // bs)
    order = iter(np.random.default_rng(qd).permutation(nblocks).tolist())
    lock = threading.Lock()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    counts = [0] * qd
    start = threading.Barrier(qd + 1)
    deadline = [0.0]

    def run(i):
        buf = bytearray(bs)
        n = 0
        start.wait()
        while time.monotonic() < deadline[0]:
            with lock:
                k = next(order, None)
            if k is None:
                break
            os.preadv(fd, [buf], k * bs)
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=run, args=(i,)) for i in range(qd)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    deadline[0] = t0 + seconds
    start.wait()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    os.close(fd)
    reads = sum(counts)
    return {"engine": "pread threads", "qd": qd, "direct": False, "reads": reads,
            "seconds": secs, "reads_s": reads / secs, "mib_s": reads * bs / secs / (1 << 20)}


def sequential_probe(path, seconds):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    buf = bytearray(SEQ_BLOCK)
    total, off = 0, 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        n = os.preadv(fd, [buf], off)
        if n <= 0:
            break
        total += n
        off += n
    secs = time.monotonic() - t0
    os.close(fd)
    return {"engine": "read", "block": SEQ_BLOCK, "direct": False, "bytes": total,
            "seconds": secs, "mib_s": total / secs / (1 << 20)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--drop-caches", action="store_true")
    a = ap.parse_args(argv)
    out = {"probe": "python", "file": a.file, "bytes": a.bytes, "random": [], "sequential": []}
    for qd in DEPTHS:
        if a.drop_caches:
            _drop()
        out["random"].append(random_probe(a.file, a.bytes, qd, a.seconds))
    if a.drop_caches:
        _drop()
    out["sequential"].append(sequential_probe(a.file, a.seconds))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


# ------------------------------------------------------------------- parsing
_QD = ("qd", "queue_depth", "iodepth", "depth")
_RATE_READS = ("reads_s", "reads_per_s", "iops", "ops_s", "ops_per_s")
_RATE_BYTES = (("bytes_s", 1), ("bytes_per_s", 1), ("bps", 1), ("mib_s", 1 << 20), ("MiB_s", 1 << 20),
               ("mib_per_s", 1 << 20), ("gib_s", 1 << 30), ("GiB_s", 1 << 30))
_ENGINE = ("engine", "method", "mode", "kind", "ioengine")


def _first(d, keys):
    for k in keys:
        if k in d and isinstance(d[k], (int, float, str, bool)):
            return d[k]
    return None


def _rate(d, bs):
    """(reads/s, bytes/s) of a probe object, either may be None."""
    r = _first(d, _RATE_READS)
    by = None
    for k, mult in _RATE_BYTES:
        if isinstance(d.get(k), (int, float)):
            by = float(d[k]) * mult
            break
    if r is None and by is not None and bs:
        r = by / bs
    if by is None and r is not None and bs:
        by = float(r) * bs
    return (float(r) if r is not None else None), by


def parse(obj, bs):
    """(random rows, sequential rows) of a probe's JSON: rows are dicts with
    label, qd, reads_s, mib_s."""
    rnd, seq = [], []

    def walk(x, path):
        if isinstance(x, dict):
            rec_bs = _first(x, ("bs", "block", "block_size", "read_size", "record_bytes")) if any(
                k in x for k in _QD) else None
            b = rec_bs if isinstance(rec_bs, int) and rec_bs > 0 else bs
            reads, by = _rate(x, b)
            issequential = any("seq" in str(p).lower() for p in path) or "seq" in str(
                _first(x, _ENGINE) or "").lower() or str(x.get("pattern", "")).lower().startswith("seq")
            if by is not None and (issequential or any(k in x for k in _QD)):
                eng = _first(x, _ENGINE)
                direct = x.get("direct", x.get("o_direct"))
                if isinstance(x.get("mode"), str):         # bench/io-probe's rows
                    direct = x["mode"] == "direct"
                where = "/".join(str(p) for p in path if isinstance(p, str) and p not in
                                 ("random", "results", "probes"))
                label = " ".join(str(v) for v in (eng or where, "O_DIRECT" if direct is True else
                                                  ("buffered" if direct is False else None))
                                 if v) or "?"
                row = {"label": label, "qd": _first(x, _QD), "reads_s": reads, "mib_s": by / (1 << 20),
                       "bytes": b}
                if issequential:
                    seq.append(row)
                elif b == bs:
                    rnd.append(row)
                return
            for k, v in x.items():
                walk(v, path + [k])
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, path + [i])

    walk(obj, [])
    return rnd, seq


def best_random(rows):
    rows = [r for r in rows if r.get("reads_s")]
    return max(rows, key=lambda r: r["reads_s"]) if rows else None


if __name__ == "__main__":
    sys.exit(main())
