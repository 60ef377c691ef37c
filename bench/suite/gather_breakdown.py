#!/usr/bin/env python3
"""Where zrecord's `ds[idx]` spends its time, against npy-mmap fancy indexing.

    python3 bench/suite/gather_breakdown.py [BUILD_DIR]

A raw store of 1024 records of 256 KiB, batches of 256 (64 MiB), page cache
warm; medians of 40 batches of: `ds[idx]` whole, in one pass (the default: the
daemon gathers into a pool buffer the result maps privately) and through the
copy path (`_results.ONE_PASS_MIN` raised: READ into the shared buffer, then the
copy out split over the copy pool), alternating; its READ request alone (the daemon
gathers into the connection's shared buffer); a new (256, 512, 512) array's
first touch; the copy of the buffer into a warm array; a new array plus the
copy out of the buffer (first touch included) on one thread and on the pool;
`np.load(..., mmap_mode='r')[idx]`; and the minor page faults per batch of
`ds[idx]` and of the npy gather (getrusage). The profile behind
bench/README.md's store note.
"""
import os
import resource
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from suite import common as C  # noqa: E402


def main():
    build = C.find_build(sys.argv[1] if len(sys.argv) > 1 else None)
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
                             "READ only", "new array, first touch", "copy into warm array",
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

        for b in batches[2:]:
            for k, one_pass_min in (("ds[idx], one pass", _results.ONE_PASS_MIN),
                                    (f"ds[idx], copy path, {threads} threads", 1 << 62)):
                old, _results.ONE_PASS_MIN = _results.ONE_PASS_MIN, one_pass_min
                t = time.perf_counter()
                x = ds[b]
                T[k].append(time.perf_counter() - t)
                _results.ONE_PASS_MIN = old
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
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"64 MiB batches (256 x 256 KiB), median of {len(batches) - 2}; copy pool: {threads} "
              f"threads, from {_store.PARALLEL_MIN_BYTES >> 20} MiB; {when}; load average {load}")
        for k, v in T.items():
            med = statistics.median(v)
            print(f"  {k:32s} {med * 1e3:7.2f} ms  {64 / 1024 / med:6.2f} GiB/s")
        print("  minor faults per batch: ds[idx] "
              f"{statistics.median(faults(lambda: ds[b]) for b in batches[2:]):.0f}, npy "
              f"{statistics.median(faults(lambda: m[b]) for b in batches[2:]):.0f}")
        ds.close()
    finally:
        d.stop()
        C.drop_path(tmp)


if __name__ == "__main__":
    main()
