#!/usr/bin/env python3
"""Where zrecord's `ds[idx]` spends its time, against npy-mmap fancy indexing.

    python3 bench/suite/gather_breakdown.py [BUILD_DIR]

Three parts, page cache warm, medians, the variants alternating batch by batch:

1. 256 KiB records: a raw store of 1024 records of 256 KiB, batches of 256 (64 MiB),
   40 batches: `ds[idx]` whole, in one pass (the default: the daemon gathers into a
   pool buffer the result maps privately) and through the copy path
   (`_results.ONE_PASS_MIN` raised: READ into the shared buffer, then the copy out
   split over the copy pool); `ds.read(idx, out=r)` into an earlier result `r` (in
   place); its READ request alone (the daemon gathers into the connection's shared
   buffer); a new (256, 512, 512) array's first touch; the copy of the buffer into a
   warm array; a new array plus the copy out of the buffer (first touch included) on
   one thread and on the pool; `np.load(..., mmap_mode='r')[idx]`; and the minor page
   faults per batch of `ds[idx]` and of the npy gather (getrusage).
2. 4 KiB records: 16384 records of 4 KiB, batches of 1024 (4 MiB), 60 batches, stage
   by stage: a READ of no record (the round trip: client, socket, the daemon's loop,
   a pool job and its completion), of one record, of the batch; `ds[idx]` in one
   pass, through the copy path, and in place into an earlier result; npy-mmap.
3. Where one pass starts to pay: `ds[idx]` of k 4 KiB records, one pass against the
   copy path, for k from 1 to 1024 (4 KiB to 4 MiB): `_results.ONE_PASS_MIN` is set
   from this.
4. The loader at 4 KiB records: `DataLoader` (iid, batch 1024, prefetch 4, identity
   consumer) over the same store, batches/s over 300 steps after 30, against the
   4 KiB memcpy gather probe (`bench/limits`, all threads) run just before.

The profile behind bench/README.md's store notes.
"""
import os
import random
import resource
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from suite import common as C  # noqa: E402


def load():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def med_us(v):
    return statistics.median(v) * 1e6


def small(tmp):
    """Parts 2 and 3: 4 KiB records."""
    from loaderx import _results, _store, _wire
    from loaderx.dataset import DenseDataset
    n, rec = 16384, 4096
    arr = C.images(n, 64)
    ds = DenseDataset(os.path.join(tmp, "t"), dtype=np.uint8, item_shape=(64, 64), codec="raw")
    for s in range(0, n, 4096):
        ds.append(arr[s:s + 4096])
    ds._store.sync()
    np.save(os.path.join(tmp, "t.npy"), arr)
    m = np.load(os.path.join(tmp, "t.npy"), mmap_mode="r")
    for s in range(0, n, 1024):
        ds[np.arange(s, s + 1024)]
        m[np.arange(s, s + 1024)]
    h = ds._h
    conn = h.conn
    batches = C.draws(62, 1024, n)
    held = ds[batches[0]]
    T = {k: [] for k in ("READ of no record", "READ of 1 record", "READ of 1024 records",
                         "ds[idx], one pass", "ds[idx], copy path", "ds.read(idx, out=result)",
                         "npy mmap fancy index")}

    def timed(k, fn):
        t = time.perf_counter()
        x = fn()
        T[k].append(time.perf_counter() - t)
        del x

    def read(b):
        with conn.buffer_lock:
            buf = _store._buffer(conn, 4 << 20)
            return conn.request("read", {"handle": h.h(), "buffer": buf.handle, "offset": 0,
                                         "indices": _wire.u64s(b)})

    def with_min(v, fn):
        old, _results.ONE_PASS_MIN = _results.ONE_PASS_MIN, v
        try:
            return fn()
        finally:
            _results.ONE_PASS_MIN = old

    steps = [("READ of no record", lambda b: read(b[:0])),
             ("READ of 1 record", lambda b: read(b[:1])),
             ("READ of 1024 records", read),
             ("ds[idx], one pass", lambda b: with_min(1, lambda: ds[b])),
             ("ds[idx], copy path", lambda b: with_min(1 << 62, lambda: ds[b])),
             ("ds.read(idx, out=result)", lambda b: ds.read(b, out=held)),
             ("npy mmap fancy index", lambda b: m[b])]
    for j, b in enumerate(batches[2:]):
        # the first read of a batch's records pays more than the ones after it:
        # a shuffled order per batch (fixed seeds) gives every row its share
        order = list(steps)
        random.Random(j).shuffle(order)
        for k, fn in order:
            timed(k, lambda: fn(b))
    print(f"4 MiB batches (1024 x 4 KiB), median of {len(batches) - 2}; load average {load()}")
    for k, v in T.items():
        us = med_us(v)
        rate = f"{4 / 1024 / (us * 1e-6):6.2f} GiB/s" if "1024" in k or "idx" in k else ""
        print(f"  {k:32s} {us:8.1f} us  {us / 1024 * 1e3:6.0f} ns/record  {rate}")

    print(f"one pass against the copy path by result size (4 KiB records), median of 40; "
          f"ONE_PASS_MIN now {_results.ONE_PASS_MIN >> 10} KiB")
    for k in (1, 4, 16, 32, 64, 96, 128, 192, 256, 1024):
        one, copy = [], []
        for j, b in enumerate(C.draws(42, k, n, seed=k)):
            for v, out in ((1, one), (1 << 62, copy))[::1 if j % 2 else -1]:
                t = time.perf_counter()
                x = with_min(v, lambda: ds[b])
                if j >= 2:
                    out.append(time.perf_counter() - t)
                del x
        print(f"  {k:5d} records ({k * rec >> 10:5d} KiB): one pass {med_us(one):8.1f} us, "
              f"copy path {med_us(copy):8.1f} us, copy / one pass {med_us(copy) / med_us(one):5.2f}")
    ds.close()
    loader_small(os.path.join(tmp, "t"), rec)


def loader_small(path, rec):
    import subprocess
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset
    exe = os.path.join(BUILD, "bench", "limits")
    out = subprocess.run([exe, "--records", "1024", "--batches", "9"], check=True,
                         capture_output=True, text=True).stdout
    memcpy = None
    for line in out.splitlines()[out.splitlines().index(next(
            l for l in out.splitlines() if "4096 B" in l)):]:
        if "memcpy gather, all threads" in line:
            memcpy = float(line.split()[4])     # median GiB/s
            break
    dl = DataLoader({"x": DenseDataset(path)}, batch_size=1024, sampler="iid", seed=7, prefetch=4,
                    transform=None, num_workers=0)
    it = iter(dl)
    for _ in range(30):
        next(it)
    t = time.perf_counter()
    for _ in range(300):
        b = next(it)
        b["x"][0, 0, 0]
        del b
    secs = time.perf_counter() - t
    gib_s = 300 * 1024 * rec / C.GiB / secs
    print(f"loader, 4 KiB records, batch 1024, iid, prefetch 4: {300 / secs:.0f} batches/s, "
          f"{gib_s:.2f} GiB/s; the memcpy gather probe (4 KiB, all threads, median) {memcpy:.2f} "
          f"GiB/s: {gib_s / memcpy:.2f} of it; load average {load()}")
    dl.close() if hasattr(dl, "close") else None


BUILD = None


def main():
    global BUILD
    build = BUILD = C.find_build(sys.argv[1] if len(sys.argv) > 1 else None)
    tmp = tempfile.mkdtemp(prefix="zrecord-breakdown-")
    d = C.Daemon(build, tmp)
    try:
        C.import_loaderx()
        from loaderx import _results, _store, _wire
        from loaderx.dataset import DenseDataset
        arr = C.images(1024, 512)
        ds = DenseDataset(os.path.join(tmp, "s"), dtype=np.uint8, item_shape=(512, 512), codec="raw")
        for s in range(0, 1024, 128):
            ds.append(arr[s:s + 128])
        ds._store.sync()
        np.save(os.path.join(tmp, "x.npy"), arr)
        m = np.load(os.path.join(tmp, "x.npy"), mmap_mode="r")
        batches = C.draws(42, 256, 1024)
        for s in range(0, 1024, 256):
            ds[np.arange(s, s + 256)]
            m[np.arange(s, s + 256)]
        threads = _store.copy_threads()
        T = {k: [] for k in ("ds[idx], one pass", f"ds[idx], copy path, {threads} threads",
                             "ds.read(idx, out=result)", "READ only", "new array, first touch", "copy into warm array",
                             "new array + copy, 1 thread", f"new array + copy, {threads} threads",
                             "npy mmap fancy index")}
        h = ds._h
        conn = h.conn
        warm = np.empty((256, 512, 512), np.uint8)
        warm[:] = 1
        nbytes = 256 << 18

        def new_copy(src, nthreads):
            _store.COPY_THREADS = nthreads
            o = np.empty(nbytes, np.uint8)
            _store.copy_bytes(o, src)
            _store.COPY_THREADS = None
            return o

        held = ds[batches[0]]
        for j, b in enumerate(batches[2:]):
            ways = [("ds[idx], one pass", _results.ONE_PASS_MIN),
                    (f"ds[idx], copy path, {threads} threads", 1 << 62),
                    ("ds.read(idx, out=result)", None)]
            random.Random(j).shuffle(ways)          # no row always reads a batch first
            for k, one_pass_min in ways:
                t = time.perf_counter()
                if one_pass_min is None:
                    x = ds.read(b, out=held)
                else:
                    old, _results.ONE_PASS_MIN = _results.ONE_PASS_MIN, one_pass_min
                    x = ds[b]
                    _results.ONE_PASS_MIN = old
                T[k].append(time.perf_counter() - t)
                del x
            with conn.buffer_lock:
                t = time.perf_counter()
                buf = _store._buffer(conn, nbytes)
                conn.request("read", {"handle": h.h(), "buffer": buf.handle, "offset": 0,
                                      "indices": _wire.u64s(b)})
                T["READ only"].append(time.perf_counter() - t)
                t = time.perf_counter()
                o = np.empty((256, 512, 512), np.uint8)
                o.reshape(-1)[::4096] = 0
                T["new array, first touch"].append(time.perf_counter() - t)
                del o
                t = time.perf_counter()
                warm.reshape(-1)[:] = buf.array[:nbytes]
                T["copy into warm array"].append(time.perf_counter() - t)
                for k, nthreads in (("new array + copy, 1 thread", 1),
                                    (f"new array + copy, {threads} threads", None)):
                    t = time.perf_counter()
                    o = new_copy(buf.array[:nbytes], nthreads)
                    T[k].append(time.perf_counter() - t)
                    del o
            t = time.perf_counter()
            x = m[b]
            T["npy mmap fancy index"].append(time.perf_counter() - t)
            del x

        def faults(fn):
            a = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            x = fn()
            n = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - a
            del x
            return n

        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"64 MiB batches (256 x 256 KiB), median of {len(batches) - 2}; copy pool: {threads} "
              f"threads, from {_store.PARALLEL_MIN_BYTES >> 20} MiB; {when}; load average {load()}")
        for k, v in T.items():
            med = statistics.median(v)
            print(f"  {k:32s} {med * 1e3:7.2f} ms  {64 / 1024 / med:6.2f} GiB/s")
        print("  minor faults per batch: ds[idx] "
              f"{statistics.median(faults(lambda: ds[b]) for b in batches[2:]):.0f}, npy "
              f"{statistics.median(faults(lambda: m[b]) for b in batches[2:]):.0f}")
        ds.close()
        del m
        small(tmp)
        print(f"load average at the end {load()}")
    finally:
        d.stop()
        C.drop_path(tmp)


if __name__ == "__main__":
    main()
