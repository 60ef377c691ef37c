"""Loader layer: the whole input pipeline end to end (sample, fetch, collate,
hand over a batch), 256 KiB images in batches of 256, with an identity
transform and a CPU-heavy one (suite.worker.augment), batches/s and the peak
memory of the whole process tree while batches flow.

Each run is its own process (suite.worker loader), so its memory is its own;
zrecord runs get a fresh daemon each, whose PSS is added to the client's (the
daemon does the work). Runs alternate contender by contender within a round.

  zrecord raw / zstd   loaderx.dataloader.DataLoader, sampler 'iid', prefetch 4;
                       heavy: transform on 2 threads (num_workers=2)
  torch                torch DataLoader over the .npy (np.load mmap_mode='r' in
                       each worker), batched __getitems__, RandomSampler with
                       replacement (one endless epoch), num_workers 2, persistent
  grain                grain.python.DataLoader over ArrayRecord (group_size:1,
                       uncompressed), IndexSampler(shuffle, no epoch end), worker_count 2
  streaming            MosaicML StreamingDataset over local MDS shards
                       (uncompressed), torch DataLoader num_workers 2
  loaderx 1.5 raw/zstd PyPI loaderx 1.5 DataLoader (IID mode), num_workers 2,
                       prefetch_size 4, in its own venv
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from . import common as C
from .common import say
from .worker import cpu_seconds


def shared_prepare(ctx, n, side):
    """prepare() once per run for the loader and multi layers (same data)."""
    cache = getattr(ctx, "loader_data", {})
    ctx.loader_data = cache
    if (n, side) not in cache:
        tmp = os.path.join(ctx.tmp, f"loaderdata-{n}-{side}")
        os.makedirs(tmp, exist_ok=True)
        cache[(n, side)] = prepare(ctx, n, side, tmp)
    return cache[(n, side)]


FORMATS = ("zr_raw", "zr_zstd", "arrayrecord", "mds", "lx15_raw", "lx15_zstd")


def prepare(ctx, n, side, tmp, formats=FORMATS):
    """Writes the one data set in every contender's format (the .npy and those
    of `formats` whose writer is installed); returns paths."""
    from loaderx.dataset import DenseDataset
    arr = C.images(n, side)
    p = {"n": n, "shape": [side, side], "nbytes": arr[0].nbytes}
    p["npy"] = os.path.join(tmp, "data.npy")
    np.save(p["npy"], arr)
    for codec in [c for c in ("raw", "zstd") if f"zr_{c}" in formats]:
        path = os.path.join(tmp, f"zr-{codec}")
        ds = DenseDataset(path, dtype=arr.dtype, item_shape=arr.shape[1:], codec=codec)
        per = max(1, (32 << 20) // arr[0].nbytes)
        for s in range(0, n, per):
            ds.append(arr[s:s + per])
        ds._store.sync()
        ds.close()
        p[f"zr_{codec}"] = path
    if "arrayrecord" in formats and C.have("array_record") and C.have("grain"):
        from array_record.python.array_record_module import ArrayRecordWriter
        p["arrayrecord"] = os.path.join(tmp, "data.array_record")
        w = ArrayRecordWriter(p["arrayrecord"], "group_size:1,uncompressed")
        for r in arr:
            w.write(r.tobytes())
        w.close()
    if "mds" in formats and C.have("streaming"):
        from streaming import MDSWriter
        p["mds"] = os.path.join(tmp, "mds")
        with MDSWriter(out=p["mds"], columns={"x": f"ndarray:uint8:{side},{side}"},
                       size_limit=1 << 26) as w:
            for r in arr:
                w.write({"x": r})
    lx, why = C.loaderx15_python() if any(f.startswith("lx15") for f in formats) else \
        (None, "not wanted here")
    if lx:
        p["loaderx15_py"] = lx[0]
        for codec in [c for c in ("raw", "zstd") if f"lx15_{c}" in formats]:
            path = os.path.join(tmp, f"lx15-{codec}")
            code = ("import numpy as np, sys; from loaderx.utils import from_numpy; "
                    "from_numpy(sys.argv[1], np.load(sys.argv[2]), codec=sys.argv[3])")
            subprocess.run([lx[0], "-c", code, path, p["npy"], codec], check=True, cwd="/",
                           env=C.peer_env())
            p[f"lx15_{codec}"] = path
    else:
        p["loaderx15_why"] = why
    return p


def contenders(p):
    out = [("zrecord raw", {"kind": "zrecord", "store": p["zr_raw"]}),
           ("zrecord zstd", {"kind": "zrecord", "store": p["zr_zstd"]})]
    C.add_if(out, C.have("torch"), "torch DataLoader", "torch",
             lambda: [("torch DataLoader", {"kind": "torch", "npy": p["npy"]})])
    C.add_if(out, "arrayrecord" in p, "grain over ArrayRecord",
             "grain" if not C.have("grain") else "array_record",
             lambda: [("grain (ArrayRecord)", {"kind": "grain", "arrayrecord": p["arrayrecord"],
                                               "n": p["n"], "shape": p["shape"]})])
    C.add_if(out, "mds" in p, "MosaicML Streaming", "streaming",
             lambda: [("streaming (MDS)", {"kind": "streaming", "mds": p["mds"]})])
    if "lx15_raw" in p:
        out += [("loaderx 1.5 raw", {"kind": "loaderx15", "store": p["lx15_raw"]}),
                ("loaderx 1.5 zstd", {"kind": "loaderx15", "store": p["lx15_zstd"]})]
    else:
        C.say_once(f"  skipped PyPI loaderx 1.5: {p['loaderx15_why']}")
    return out


def spawn(ctx, params, tmp, daemon=None):
    """Starts one loader process; returns (Popen, python)."""
    kind = params["kind"]
    py = ctx.loaderx15_py if kind == "loaderx15" else sys.executable
    env = C.peer_env() if kind == "loaderx15" else dict(os.environ, PYTHONPATH=C.BENCH)
    if daemon is not None:
        env["ZRECORD_SOCKET"] = daemon.sock
    env["PYTHONWARNINGS"] = "ignore"        # torch's and grain's start-up chatter
    log = open(os.path.join(tmp, f"worker-{params['kind']}-{time.monotonic_ns()}.log"), "w")
    proc = subprocess.Popen([py, "-m", "suite.worker", "loader", json.dumps(params)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                            cwd=C.BENCH, env=env, start_new_session=True)
    proc.log = log.name
    log.close()
    return proc


def log_tail(proc, n=6):
    """The last lines a failed loader process wrote to stderr."""
    try:
        lines = open(proc.log).read().strip().splitlines()
    except (OSError, AttributeError):
        return ""
    return "\n".join("    | " + x for x in lines[-n:])


def reap(proc):
    """Waits for a loader process, then kills what is left of its session:
    worker processes some loaders leave behind when their parent exits; then
    removes the shared-memory segments such workers leave (sweep_shm)."""
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    sweep_shm()


_shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def sweep_shm():
    """Removes Python shared_memory segments (/dev/shm/psm_*) that appeared
    since this suite started and that no process maps any more: a Grain or
    multiprocessing worker killed before its cleanup leaves them behind, and
    on tmpfs they hold memory until removed."""
    if not os.path.isdir("/dev/shm"):
        return
    new = [f for f in os.listdir("/dev/shm") if f.startswith("psm_") and f not in _shm_before]
    if not new:
        return
    mapped = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as fh:
                for line in fh:
                    if "/dev/shm/psm_" in line:
                        mapped.add(line.rsplit("/", 1)[1].split()[0])
        except OSError:
            pass
    for f in new:
        if f not in mapped:
            try:
                os.unlink(os.path.join("/dev/shm", f))
            except OSError:
                pass


def run_one(ctx, params, tmp):
    """One loader run in its own process (a fresh daemon for zrecord)."""
    daemon = None
    if params["kind"] == "zrecord":
        dtmp = os.path.join(tmp, f"d{time.monotonic_ns()}")
        os.makedirs(dtmp)
        daemon = C.Daemon(ctx.build, dtmp)
    try:
        proc = spawn(ctx, params, tmp, daemon)
        mem = C.MemSampler([proc.pid], [daemon.pid] if daemon else []).start()
        try:
            line = proc.stdout.readline()
            if line.strip() != "ready":
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{params['kind']} loader failed before its first batches:\n"
                                   + log_tail(proc))
            d_cpu0 = cpu_seconds([daemon.pid]) if daemon else 0.0
            proc.stdin.write("go\n")
            proc.stdin.flush()
            res = json.loads(proc.stdout.readline())
            # the daemon's CPU over the batches after "go" (the timed ones and
            # the few the rate skips)
            res["daemon_cpu_s"] = cpu_seconds([daemon.pid]) - d_cpu0 if daemon else 0.0
        finally:
            mem.stop()
            reap(proc)
        res["pss"] = mem.peak_pss
        res["rss"] = mem.peak_rss
        res["anon"] = mem.peak_anon
        return res
    finally:
        if daemon is not None:
            os.environ["ZRECORD_SOCKET"] = ctx.daemon.sock
            daemon.stop()


def run(ctx):
    q = ctx.quick
    n, side, B = (64, 512, 16) if q else (1024, 512, 256)
    tmp = os.path.join(ctx.tmp, "loader")
    os.makedirs(tmp, exist_ok=True)
    p = shared_prepare(ctx, n, side)
    ctx.loaderx15_py = p.get("loaderx15_py")
    cons = contenders(p)
    rounds = 1 if q else 2
    modes = [("identity", False, 3 if q else ctx.steps), ("heavy", True, 3 if q else max(8, ctx.steps // 2))]
    results = {}
    for mode, heavy, steps in modes:
        for r in range(rounds):
            for name, params in cons:
                pr = dict(params, batch=B, heavy=heavy, seed=1 + r, steps=steps, warm=3)
                try:
                    res = run_one(ctx, pr, tmp)
                except Exception as e:
                    say(f"  {name} ({mode}): failed: {type(e).__name__}: {e}")
                    continue
                results.setdefault((mode, name), []).append(res)
    rows = []
    batch_bytes = B * p["nbytes"]
    lim = (ctx.limits or {}).get(p["nbytes"], {})
    for mode, _, _ in modes:
        ref = results.get((mode, "zrecord raw"))
        ref_bps = C.med([x["bps"] for x in ref]) if ref else None
        for name, _ in cons:
            rs = results.get((mode, name))
            if not rs:
                continue
            bps = C.med([x["bps"] for x in rs])
            row = {"mode": mode, "contender": name, "bps": bps, "gib_s": bps * batch_bytes / C.GiB,
                   "pss_mib": max(x["pss"] for x in rs) / C.MiB,
                   "anon_mib": max(x["anon"] for x in rs) / C.MiB, "rss_mib": max(x["rss"] for x in rs) / C.MiB,
                   "first_s": C.med([x["first_batch_s"] for x in rs]),
                   "zr_over_this": ref_bps / bps if ref_bps else None, "runs": [x["bps"] for x in rs]}
            if name == "zrecord raw" and C.limit(lim, 'memcpy_mt') and mode == "identity":
                row["of_limit"] = f"{row['gib_s'] / C.limit(lim, 'memcpy_mt'):.2f} of memcpy"
                if C.limit(lim, "stream_mt"):
                    row["of_limit"] += f", {row['gib_s'] / C.limit(lim, 'stream_mt'):.2f} of streaming"
            # zrecord zstd: no limit fraction; after the first pass its records
            # come from the daemon's decoded-record cache, not the decompressor
            rows.append(row)
    C.table(f"loader, end to end: {n} records of {p['nbytes'] // 1024} KiB, batch {B} "
            f"({batch_bytes / C.MiB:.0f} MiB), median of {rounds} runs; memory = peak PSS / RSS of the process "
            "tree (+ the daemon for zrecord) while batches flow, PSS-file leaves out mapped page cache; zr/x = zrecord raw over the row",
            [("mode", "transform"), ("contender", "contender"), ("bps", "batches/s"), ("gib_s", "GiB/s"),
             ("zr_over_this", "zr/x"), ("of_limit", "of limit"), ("pss_mib", "PSS MiB"),
             ("anon_mib", "PSS-file MiB"), ("rss_mib", "RSS MiB"), ("first_s", "1st batch s")], rows)
    for mode, _, _ in modes:
        sub = [r for r in rows if r["mode"] == mode]
        C.bar_plot(f"loader-{mode}", f"loader, {mode} transform: batches/s (median) and peak PSS",
                   [r["contender"] for r in sub],
                   {"batches/s": [r["bps"] for r in sub], "peak PSS, MiB": [r["pss_mib"] for r in sub]},
                   "")
    C.drop_path(tmp)
    small = run_small(ctx)
    return {"records": n, "record_bytes": p["nbytes"], "batch": B, "rounds": rounds, "rows": rows,
            "small": small}


SMALL_SHAPE = (32, 32, 3)     # 3 KiB records: the small-batch table's
SMALL_BATCHES = (32, 512)
SMALL_NEED = {32: 0.7, 512: 1.5}   # issue 37: numpy memmap's time / zrecord's


def run_small(ctx):
    """The fixed cost of a batch: per-batch time of zrecord's DataLoader (iid,
    no transform, prefetch 4, the consumer reads one element) over 3 KiB
    records at batch 32 and 512, against a numpy memmap fancy-index gather of
    the same records (np.load(mmap_mode='r')[idx], a new array) for the same
    number of random batches; warm page cache. Rounds alternate numpy and
    zrecord; medians. The DataLoader runs in this process, a client of the
    run's daemon. `limit us` is what the batch's bytes take at the machine's
    best copy rate, measured in the same run (the limits layer's best memcpy or
    streaming gather, all or one thread, of its smallest records, 4 KiB: the
    closest to 3 KiB): no loader copies a batch faster; `ratio at limit` is
    numpy's time over it, the most any ratio could be."""
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset
    q = ctx.quick
    n, nb, rounds = (2048, 200, 1) if q else (16384, 3000, 3)
    tmp = os.path.join(ctx.tmp, "small")
    os.makedirs(tmp, exist_ok=True)
    arr = np.random.default_rng(37).integers(0, 256, (n,) + SMALL_SHAPE, dtype=np.uint8)
    np.save(os.path.join(tmp, "a.npy"), arr)
    path = os.path.join(tmp, "zr")
    ds = DenseDataset(path, dtype=arr.dtype, item_shape=SMALL_SHAPE, codec="raw")
    ds.append(arr)
    ds._store.sync()
    ds.close()
    mm = np.load(os.path.join(tmp, "a.npy"), mmap_mode="r")
    lim = min((ctx.limits or {}).items(), default=(None, {}))[1]
    rate = max((lim.get(k) or 0 for k in ("memcpy_1t_best", "memcpy_mt_best", "stream_mt_best")),
               default=0)
    rows = []
    for B in SMALL_BATCHES:
        rng = np.random.default_rng(B)
        idx = [rng.integers(0, n, B) for _ in range(nb)]
        for x in idx[: nb // 4]:            # warm: the .npy's pages mapped
            mm[x]
        np_us, zr_us = [], []
        for r in range(rounds):
            t0 = time.perf_counter_ns()
            for x in idx:
                y = mm[x]
                y[0, 0, 0, 0]
            np_us.append((time.perf_counter_ns() - t0) / nb / 1e3)
            dl = DataLoader({"x": DenseDataset(path)}, batch_size=B, sampler="iid", seed=r,
                            num_workers=0, prefetch_size=4)
            it = iter(dl)
            for _ in range(nb // 4):        # warm: the ring's slots faulted in
                b = next(it)
            t0 = time.perf_counter_ns()
            for _ in range(nb):
                b = next(it)
                b["x"][0, 0, 0, 0]
            zr_us.append((time.perf_counter_ns() - t0) / nb / 1e3)
            del b, it
            dl.close()
        z, m = C.med(zr_us), C.med(np_us)
        limit_us = B * arr[0].nbytes / (rate * 2 ** 30) * 1e6 if rate else None
        rows.append({"batch": B, "zr_us": z, "np_us": m, "ratio": m / z, "need": SMALL_NEED[B],
                     "limit_us": limit_us, "limit_ratio": m / limit_us if limit_us else None,
                     "copy_gib_s": rate or None,
                     "load": os.getloadavg()[0], "runs_zr": zr_us, "runs_np": np_us})
    C.table(f"small batches: {n} records of {arr[0].nbytes // 1024} KiB, iid, {nb} batches a round, "
            f"median of {rounds} rounds; zrecord DataLoader (no transform, prefetch 4) against a "
            "numpy memmap gather of as many random records; ratio = numpy's time / zrecord's; "
            f"limit = the batch's bytes at the machine's best copy rate of this run "
            f"({rate:.2f} GiB/s: the limits layer's best gather of {lim.get('label', '?')})",
            [("batch", "batch"), ("zr_us", "zrecord us"), ("np_us", "numpy memmap us"),
             ("ratio", "ratio"), ("need", "need"), ("limit_us", "limit us"),
             ("limit_ratio", "ratio at limit"), ("load", "load")], rows)
    C.drop_path(tmp)
    return {"records": n, "record_bytes": int(arr[0].nbytes), "batches": nb, "rounds": rounds,
            "rows": rows}


def targets(res):
    rows = {(r["mode"], r["contender"]): r for r in res["rows"]}
    out = []
    zr = rows.get(("identity", "zrecord raw"))
    for peer, need in (("torch DataLoader", 3.0), ("loaderx 1.5 raw", 1.5)):
        o = rows.get(("identity", peer))
        if zr and o:
            out.append((f"loader (identity) >= {need:g}x {peer}, batches/s", zr["bps"] / o["bps"], need))
            out.append((f"loader (identity) peak PSS below {peer}'s (their PSS / ours)", o["pss_mib"] / zr["pss_mib"], 1.0))
            out.append((f"loader (identity) peak PSS-file below {peer}'s (theirs / ours)", o["anon_mib"] / zr["anon_mib"], 1.0))
    return out


def targets37(res):
    """Issue 37's targets of the loader layer, as ratios (got / need >= 1 is met)."""
    rows = {(r["mode"], r["contender"]): r for r in res["rows"]}
    out = []
    zr, lx = rows.get(("identity", "zrecord raw")), rows.get(("identity", "loaderx 1.5 raw"))
    if zr and lx:
        # PSS-file is the fair one (bench/README.md, "Memory"): both have the
        # store's pages in the page cache, only zrecordd maps them (PSS counts
        # them), while loaderx 1.5 preads (they are not in its PSS)
        out.append((f"loader (identity, 64 MiB batches) peak PSS-file <= PyPI loaderx 1.5 raw's "
                    f"PSS-file (theirs / ours: {lx['anon_mib']:.0f} / {zr['anon_mib']:.0f} MiB)",
                    lx["anon_mib"] / zr["anon_mib"], 1.0))
        out.append((f"  ... and <= its PSS (theirs / ours: {lx['pss_mib']:.0f} / "
                    f"{zr['anon_mib']:.0f} MiB)", lx["pss_mib"] / zr["anon_mib"], 1.0))
        out.append((f"loader (identity, 64 MiB batches) peak PSS <= PyPI loaderx 1.5 raw's "
                    f"(theirs / ours: {lx['pss_mib']:.0f} / {zr['pss_mib']:.0f} MiB)",
                    lx["pss_mib"] / zr["pss_mib"], 1.0))
    for r in res.get("small", {}).get("rows", []):
        out.append((f"batch of {r['batch']} x 3 KiB: numpy memmap gather's time / zrecord's "
                    f"({r['np_us']:.1f} / {r['zr_us']:.1f} us)", r["ratio"], r["need"]))
    return out
