"""Store layer: random batch gather, write throughput and size on disk.

Two workloads: 256 KiB images (512 x 512 uint8) in batches of 256 (64 MiB) and
4 KiB tiles (64 x 64) in batches of 1024 (4 MiB). Every contender writes the
same in-memory array, then gathers the same list of random batches (uniform,
with replacement) into a new array of (batch, H, W), through the call its users
make. Warm page cache: every store is swept once through its own gather before
timing. Contenders are timed round robin (batch k of every contender, then
batch k + 1; the order within a round is shuffled, fixed seeds). The last
batch of each is checked against the source. Two diagnostic rows time parts of
zrecord raw's `ds[idx]`: its READ request alone, and `ds[idx]` through the
copy path (READ into the shared buffer, then a copy into a new array), which
one-pass reads replaced for large results.
"""

import json
import os
import random
import subprocess
import sys
import time

import numpy as np

from . import common as C
from .common import say


class Contender:
    compressed = False
    name = "?"

    def write(self, arr, path):
        raise NotImplementedError

    def gather(self, idx):
        raise NotImplementedError

    def close(self):
        pass


class Zrecord(Contender):
    def __init__(self, codec):
        self.codec = codec
        self.name = f"zrecord {codec}"
        self.compressed = codec != "raw"

    def write(self, arr, path):
        from loaderx.dataset import DenseDataset
        from loaderx.utils import train_dict
        t0 = time.perf_counter()
        kw = {}
        if self.codec == "zstd_dict":
            kw["dict_bytes"] = train_dict(arr, "balanced")
        self.train_s = time.perf_counter() - t0
        ds = DenseDataset(path, dtype=arr.dtype, item_shape=arr.shape[1:], codec=self.codec, **kw)
        per = max(1, (32 << 20) // arr[0].nbytes)
        for s in range(0, len(arr), per):
            ds.append(arr[s:s + per])
        secs = time.perf_counter() - t0
        ds._store.sync()            # durability: not timed (page-cache ingestion, as the others)
        self.ds = ds
        return secs

    def gather(self, idx):
        return self.ds[idx]

    def close(self):
        self.ds.close()


class ZrecordReadOnly(Contender):
    """Diagnostic, not a contender: the READ request of `ds[idx]` alone (the
    daemon gathers into the connection's shared buffer), without the client's
    copy out into a new array. ds[idx] = this + np.empty + one copy."""
    name = "(zrecord raw: READ only)"
    diag = True

    def attach(self, path, arr):
        from loaderx.dataset import DenseDataset
        self.ds = DenseDataset(path)
        self.shape, self.rec = arr.shape[1:], arr[0].nbytes

    def gather(self, idx):
        from loaderx import _store, _wire
        h = self.ds._h
        conn = h.conn
        with conn.buffer_lock:
            buf = _store._buffer(conn, self.rec * len(idx))
            conn.request("read", {"handle": h.h(), "buffer": buf.handle, "offset": 0,
                                  "indices": _wire.u64s(idx)})
            return buf.array[:self.rec * len(idx)].reshape((len(idx),) + self.shape)

    def close(self):
        self.ds.close()


class ZrecordCopyPath(Contender):
    """Diagnostic, not a contender: `ds[idx]` through the copy path (the READ into
    the connection's shared buffer, then the client's copy out into a new array
    on its copy pool: two passes), which one-pass reads replaced for results of
    `_results.ONE_PASS_MIN` and more; to compare with the `zrecord raw` row."""
    name = "(zrecord raw: copy path)"
    diag = True

    def attach(self, path, arr):
        from loaderx.dataset import DenseDataset
        self.ds = DenseDataset(path)

    def gather(self, idx):
        try:
            from loaderx import _results
        except ImportError:                         # a client before one-pass reads
            return self.ds[idx]
        old = _results.ONE_PASS_MIN
        _results.ONE_PASS_MIN = 1 << 62
        try:
            return self.ds[idx]
        finally:
            _results.ONE_PASS_MIN = old

    def close(self):
        self.ds.close()


class ZrecordOut(Contender):
    """Diagnostic, not a contender: `ds.read(idx, out=r)` into an earlier result `r`
    of the same size (the daemon writes into its buffer in place: one pass, no
    new buffer); the way a training loop refills one batch."""
    name = "(zrecord raw: out= a result)"
    diag = True

    def attach(self, path, arr):
        from loaderx.dataset import DenseDataset
        self.ds = DenseDataset(path)
        self.held = None

    def gather(self, idx):
        if self.held is None or len(self.held) != len(idx):
            self.held = self.ds[idx]
            return self.held
        return self.ds.read(idx, out=self.held)

    def close(self):
        self.held = None
        self.ds.close()


class Npy(Contender):
    name = "npy mmap"

    def write(self, arr, path):
        path += ".npy"
        t0 = time.perf_counter()
        np.save(path, arr)
        secs = time.perf_counter() - t0
        self.m = np.load(path, mmap_mode="r")
        self.path = path
        return secs

    def gather(self, idx):
        return self.m[idx]

    def close(self):
        del self.m


class H5(Contender):
    def __init__(self, gzip):
        self.gzip = gzip
        self.compressed = gzip
        self.name = "h5py gzip chunk/rec" if gzip else "h5py contiguous"

    def write(self, arr, path):
        import h5py
        t0 = time.perf_counter()
        f = h5py.File(path, "w")
        if self.gzip:
            f.create_dataset("x", data=arr, chunks=(1,) + arr.shape[1:], compression="gzip")
        else:
            f.create_dataset("x", data=arr)
        f.close()
        secs = time.perf_counter() - t0
        self.f = h5py.File(path, "r")
        self.d = self.f["x"]
        return secs

    def gather(self, idx):
        # h5py point selections must be increasing and unique: read those, reorder
        uniq, inv = np.unique(idx, return_inverse=True)
        return self.d[uniq][inv]

    def close(self):
        self.f.close()


class Lmdb(Contender):
    name = "lmdb"

    def write(self, arr, path):
        import lmdb
        t0 = time.perf_counter()
        env = lmdb.open(path, map_size=max(1 << 30, arr.nbytes * 2 + (64 << 20)), sync=False,
                        metasync=False, readahead=False)
        with env.begin(write=True) as txn:
            for i in range(len(arr)):
                txn.put(i.to_bytes(8, "big"), arr[i].tobytes())
        secs = time.perf_counter() - t0
        env.sync(True)
        self.env, self.shape, self.dt = env, arr.shape[1:], arr.dtype
        return secs

    def gather(self, idx):
        out = np.empty((len(idx),) + self.shape, self.dt)
        with self.env.begin(buffers=True) as txn:
            for j, i in enumerate(idx.tolist()):
                out[j] = np.frombuffer(txn.get(i.to_bytes(8, "big")), self.dt).reshape(self.shape)
        return out

    def close(self):
        self.env.close()


class Blosc2(Contender):
    name = "blosc2"
    compressed = True

    def write(self, arr, path):
        import blosc2
        t0 = time.perf_counter()
        a = blosc2.asarray(arr, chunks=(1,) + arr.shape[1:], urlpath=path, mode="w")
        del a
        secs = time.perf_counter() - t0
        self.a = blosc2.open(path, mode="r")
        return secs

    def gather(self, idx):
        return self.a[idx]


class ArrayRecord(Contender):
    name = "array_record"
    compressed = True
    OPTIONS = "group_size:1,zstd:3"

    def write(self, arr, path):
        from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter
        t0 = time.perf_counter()
        w = ArrayRecordWriter(path, self.OPTIONS)
        for r in arr:
            w.write(r.tobytes())
        w.close()
        secs = time.perf_counter() - t0
        self.r = ArrayRecordReader(path, "readahead_buffer_size:0")
        self.shape, self.dt = arr.shape[1:], arr.dtype
        return secs

    def gather(self, idx):
        recs = self.r.read(idx.tolist())
        out = np.empty((len(idx),) + self.shape, self.dt)
        for j, b in enumerate(recs):
            out[j] = np.frombuffer(b, self.dt).reshape(self.shape)
        return out

    def close(self):
        self.r.close()


class Loaderx15(Contender):
    """PyPI loaderx 1.5 in its own venv, behind suite.worker's JSON-lines server;
    the gather is timed inside that process."""

    def __init__(self, py, codec):
        self.py, self.codec = py, codec
        self.name = f"loaderx 1.5 {codec}"
        self.compressed = codec != "raw"
        self.p = subprocess.Popen([py, "-m", "suite.worker", "store"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, cwd=C.BENCH, env=C.peer_env())

    def call(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("PyPI loaderx worker died")
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(r["error"])
        return r

    def write(self, arr, path):
        return self.call(op="write", codec=self.codec, npy=self.npy, path=path)["secs"]

    def sweep(self, step):
        self.call(op="sweep", step=step)

    def timed_gather(self, idx, check):
        return self.call(op="gather", idx=idx.tolist(), check=check)

    def close(self):
        try:
            self.call(op="close")
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()


def contenders(ctx, dict_too):
    out = [Zrecord("raw"), ZrecordReadOnly(), ZrecordCopyPath(), ZrecordOut(), Zrecord("zstd")]
    if dict_too:
        out.append(Zrecord("zstd_dict"))
    out.append(Npy())
    C.add_if(out, C.have("h5py"), "h5py contiguous and gzip", "h5py", lambda: [H5(False), H5(True)])
    C.add_if(out, C.have("lmdb"), "LMDB", "lmdb", lambda: [Lmdb()])
    C.add_if(out, C.have("blosc2"), "blosc2", "blosc2", lambda: [Blosc2()])
    C.add_if(out, C.have("array_record"), "ArrayRecord", "array_record", lambda: [ArrayRecord()])
    lx, why = C.loaderx15_python()
    if lx:
        out += [Loaderx15(lx[0], "raw"), Loaderx15(lx[0], "zstd")]
    else:
        C.say_once(f"  skipped PyPI loaderx 1.5: {why}")
    return out


def run_workload(ctx, label, n, side, batch, nbatches, dict_too):
    arr = C.images(n, side)
    rec = arr[0].nbytes
    tmp = os.path.join(ctx.tmp, f"store-{side}")
    os.makedirs(tmp, exist_ok=True)
    npy_src = os.path.join(tmp, "source.npy")
    np.save(npy_src, arr)
    cons = contenders(ctx, dict_too)
    rows = {}
    for c in cons:
        if isinstance(c, Loaderx15):
            c.npy = npy_src
        path = os.path.join(tmp, c.name.replace(" ", "_").replace("/", "-"))
        if getattr(c, "diag", False):
            c.attach(os.path.join(tmp, "zrecord_raw"), arr)
            rows[c.name] = {"contender": c.name, "compressed": False, "diag": True, "secs": []}
            continue
        try:
            secs = c.write(arr, path)
        except Exception as e:
            say(f"  {c.name}: write failed ({type(e).__name__}: {e}); dropped")
            c.failed = True
            continue
        size = C.disk_bytes(getattr(c, "path", path))
        rows[c.name] = {"contender": c.name, "compressed": c.compressed,
                        "write_mib_s": arr.nbytes / C.MiB / secs, "disk_mib": size / C.MiB,
                        "ratio_disk": arr.nbytes / size if size else None, "secs": []}
        if getattr(c, "train_s", 0):
            rows[c.name]["dict_train_s"] = c.train_s
    cons = [c for c in cons if c.name in rows]
    # warm: sweep every record once through the contender's own gather
    for c in cons:
        if isinstance(c, Loaderx15):
            c.sweep(batch)
        else:
            for s in range(0, n, batch):
                c.gather(np.arange(s, min(n, s + batch)))
    warm = 2
    batches = C.draws(warm + nbatches, batch, n)
    bad = []

    def one(c, k):
        idx = batches[k]
        last = k == warm + nbatches - 1
        if isinstance(c, Loaderx15):
            r = c.timed_gather(idx, last)
            secs = r["secs"]
            if last and r["sum"] != int(arr[idx].view(np.uint64).sum()):
                bad.append(c.name)
        else:
            t0 = time.perf_counter()
            out = c.gather(idx)
            secs = time.perf_counter() - t0
            if last and not np.array_equal(out, arr[idx]):
                bad.append(c.name)
            out = None
        if k >= warm:
            rows[c.name]["secs"].append(secs)

    # Round robin, in an order shuffled per round (fixed seeds): a contender's cost
    # can depend on what ran just before it (e.g. whether malloc hands it pages the
    # previous one left mapped or fresh ones to fault in), and a fixed order would
    # give it the same predecessor in every round.
    for k in range(warm + nbatches):
        order = list(cons)
        random.Random(k).shuffle(order)
        for c in order:
            one(c, k)
    for c in cons:
        c.close()
        r = rows[c.name]
        r["gib_s"] = batch * rec / C.GiB / C.med(r["secs"])
        r["best_gib_s"] = batch * rec / C.GiB / min(r["secs"])
        r["ms"] = C.med(r["secs"]) * 1e3
        r["ok"] = c.name not in bad
    C.drop_path(tmp)
    return {"label": label, "records": n, "record_bytes": rec, "batch": batch,
            "batch_mib": batch * rec / C.MiB, "batches": nbatches, "rows": list(rows.values())}


def report(ctx, w, limits):
    rows = w["rows"]
    ref = next(r for r in rows if r["contender"] == "zrecord raw")
    refz = next(r for r in rows if r["contender"] == "zrecord zstd")
    lim = (limits or {}).get(w["record_bytes"], {})
    w["limits"] = lim           # the probes of this run, so that store.json stands alone
    for r in rows:
        if r.get("diag"):
            r["of_limit"] = f"{r['gib_s'] / C.limit(lim, 'memcpy_mt'):.2f} of memcpy" if C.limit(lim, 'memcpy_mt') else None
            if r["contender"] == ZrecordCopyPath.name:
                r["zr_over_this"] = ref["gib_s"] / r["gib_s"]    # what the copy pool gains
            continue
        base = refz if r["compressed"] else ref
        r["zr_over_this"] = base["gib_s"] / r["gib_s"]
        if r["contender"].startswith("zrecord"):
            key = "memcpy_mt" if r["contender"] == "zrecord raw" else "zstd_mt"
            if C.limit(lim, key) and r["contender"] != "zrecord zstd_dict":
                r["of_limit"] = f"{r['gib_s'] / C.limit(lim, key):.2f} of {'memcpy' if key == 'memcpy_mt' else 'zstd'}"
                if key == "memcpy_mt" and C.limit(lim, "stream_mt"):
                    r["of_limit"] += f", {r['gib_s'] / C.limit(lim, 'stream_mt'):.2f} of streaming"
    C.table(f"store gather, {w['label']}: {w['records']} records of {w['record_bytes'] // 1024} KiB, "
            f"batch {w['batch']} ({w['batch_mib']:.0f} MiB), median of {w['batches']} batches; "
            "zr/x = zrecord (raw for raw rows, zstd for compressed) over the row",
            [("contender", "contender"), ("gib_s", "GiB/s"), ("best_gib_s", "best"), ("ms", "ms/batch"),
             ("zr_over_this", "zr/x"), ("of_limit", "of limit (all threads)"),
             ("write_mib_s", "write MiB/s"), ("disk_mib", "disk MiB"), ("ratio_disk", "ratio"),
             ("ok", "bytes ok")],
            rows)
    if lim:
        say(f"  limits, same record size (C probes, all threads / 1 thread): memcpy gather "
            f"{C.limit(lim, 'memcpy_mt'):.2f} / {C.limit(lim, 'memcpy_1t'):.2f} GiB/s, streaming gather "
            f"{C.limit(lim, 'stream_mt') or 0:.2f} GiB/s (all threads), zstd decompress "
            f"{C.limit(lim, 'zstd_mt'):.2f} / {C.limit(lim, 'zstd_1t'):.2f} GiB/s (best batch of each probe: "
            "the fractions above are of these)")
    C.bar_plot(f"store-{w['record_bytes'] // 1024}k", f"store gather, {w['label']} (GiB/s, median)",
               [r["contender"] for r in rows if not r.get("diag")],
               {"GiB/s": [r["gib_s"] for r in rows if not r.get("diag")]}, "GiB/s")


def targets(w, limits):
    """The issue's store targets, on the 256 KiB workload."""
    rows = {r["contender"]: r for r in w["rows"]}
    out = []
    raw = rows["zrecord raw"]["gib_s"]
    npy = rows["npy mmap"]["gib_s"]
    out.append(("store raw gather >= 3x npy mmap", raw / npy, 3.0))
    lim = (limits or {}).get(w["record_bytes"], {})
    if C.limit(lim, 'memcpy_mt'):
        out.append(("store raw gather >= 0.8x the all-threads memcpy gather", raw / C.limit(lim, 'memcpy_mt'), 0.8))
    others = [r["gib_s"] for k, r in rows.items() if r["compressed"] and not k.startswith(("zrecord", "("))]
    if others:
        out.append(("zstd gather >= 5x the best other compressed contender",
                    rows["zrecord zstd"]["gib_s"] / max(others), 5.0))
    return out


def targets15(res, limits):
    """Issue 15's targets (one-pass ds[idx], small records) on both workloads:
    (text, got, need), met when got >= need."""
    out = []
    for w in res:
        rows = {r["contender"]: r for r in w["rows"]}
        lim = (limits or {}).get(w["record_bytes"], {})
        kib = w["record_bytes"] // 1024
        raw, npy = rows["zrecord raw"]["gib_s"], rows["npy mmap"]["gib_s"]
        need_mem, need_npy = (0.8, 2.0) if kib >= 256 else (0.6, 1.5)
        if C.limit(lim, "memcpy_mt"):
            out.append((f"ds[idx] raw {kib} KiB >= {need_mem}x the all-threads memcpy probe",
                        raw / C.limit(lim, "memcpy_mt"), need_mem))
        out.append((f"ds[idx] raw {kib} KiB >= {need_npy}x npy mmap", raw / npy, need_npy))
        if C.limit(lim, "zstd_mt"):
            out.append((f"ds[idx] zstd {kib} KiB >= 0.95x the all-threads decompress probe",
                        rows["zrecord zstd"]["gib_s"] / C.limit(lim, "zstd_mt"), 0.95))
    return out


def run(ctx):
    q = ctx.quick
    res = []
    res.append(run_workload(ctx, "256 KiB images", 96 if q else ctx.records, 512,
                            64 if q else 256, 3 if q else ctx.batches, ctx.dict_images))
    res.append(run_workload(ctx, "4 KiB tiles", 2048 if q else ctx.tiles, 64,
                            256 if q else 1024, 3 if q else ctx.batches, True))
    for w in res:
        report(ctx, w, ctx.limits)
    return res
