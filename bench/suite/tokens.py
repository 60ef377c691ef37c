"""Tokens (issue 34): packed token sequences and the corpora converters.

A corpus of 10^6 documents (quick: 10^4) of int32 tokens, lengths drawn from a
log-normal (median e^5.5 ≈ 245, sigma 1.0) clipped to 1..8192, written as
Megatron-LM's .bin/.idx and as Parquet (a list<int32> column), then:

  conversion  from_megatron (page cache dropped: against the disk's
              sequential read of the same .bin, also cold, its write of as
              many bytes, and a copy of the .bin: a virtual disk may share
              one rate between reads and writes) and from_parquet
              (warm: against pyarrow reading the column, warm) into raw stores
  packed      concat batches/s of (8, 2048) and (64, 4096), cyclic sampler,
              against the machine's memcpy (the limits layer's all-thread
              gather of 256 KiB records), for the batch's bytes: tokens,
              segment ids and positions; a first pass and the same steps
              again, with the store's share in the page cache before each
              and the daemon's major faults during it
  first       the first batch at step 0 with no index (built), at step 0
              and at step 10^6 with the index on disk (a fresh process each,
              imports not counted)
  index       our build of a cycle's index (an open of a fresh seed minus an
              open whose index is on disk) against Megatron-LM's GPTDataset
              index for one epoch (its own _build_document_index,
              helpers.build_sample_idx and _build_shuffle_index, timed
              directly: GPTDataset itself wants a tokenizer and a config, and
              those three functions are its whole index build), same lengths
  padding     best_fit (window 1024) padding over one cycle of the first 50,000
              documents against Grain's BestFitPackIterDataset on the same
              pieces (each document cut into whole rows and a rest, as ours)
"""

import json
import os
import subprocess
import sys
import time

import numpy as np

from . import common as C
from .common import say

SEED = 34


def _docs(n):
    rng = np.random.default_rng(SEED)
    lens = np.clip(np.rint(rng.lognormal(5.5, 1.0, n)), 1, 8192).astype(np.int64)
    values = rng.integers(0, 50000, int(lens.sum()), dtype=np.int32)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    return lens, values, off


def _write_megatron(prefix, lens, values):
    import struct
    n = len(lens)
    ptrs = np.zeros(n, "<i8")
    ptrs[1:] = np.cumsum(lens[:-1] * 4)
    values.astype("<i4").tofile(prefix + ".bin")
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, n, n + 1))
        f.write(lens.astype("<i4").tobytes() + ptrs.tobytes() +
                np.arange(n + 1, dtype="<i8").tobytes())


def _drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def _seq_write(path, nbytes):
    """The disk's sequential write of nbytes (16 MiB writes, then fdatasync)."""
    buf = np.random.default_rng(1).integers(0, 255, 16 << 20, dtype=np.uint8).tobytes()
    t = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        left = nbytes
        while left > 0:
            left -= f.write(buf[:min(left, len(buf))])
        os.fdatasync(f.fileno())
    dt = time.perf_counter() - t
    os.unlink(path)
    return dt


def _seq_copy(src, dst):
    """The disk reading and writing at once: src copied to a new file dst in
    16 MiB pieces (the kernel's copy_file_range, a read and a write of each
    byte on a file system that does not share blocks), then fdatasync; what a
    converter of one file into another on the same disk can do at most."""
    t = time.perf_counter()
    with open(src, "rb", buffering=0) as f, open(dst, "wb", buffering=0) as g:
        left = os.fstat(f.fileno()).st_size
        while left > 0:
            got = os.copy_file_range(f.fileno(), g.fileno(), min(left, 16 << 20))
            if got == 0:
                break
            left -= got
        os.fdatasync(g.fileno())
    dt = time.perf_counter() - t
    os.unlink(dst)
    return dt


def _seq_read(path):
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(16 << 20)
        while f.readinto(buf):
            pass
    return time.perf_counter() - t


CHILD = r"""
import json, sys, time
sys.path.insert(0, {pkg!r})
from loaderx.dataloader import DataLoader
from loaderx.dataset import RaggedDataset
import numpy as np
t = time.perf_counter()
dl = DataLoader({{"tokens": RaggedDataset({store!r})}}, batch_size={B}, sampler="cyclic",
                seed={seed}, start_step={step}, pack={{"tokens": {L}}}, num_workers=0)
b = next(dl)
first = time.perf_counter() - t
print(json.dumps({{"first_s": first, "tok0": int(b["tokens"][0, 0])}}))
dl.close()
"""


def _first(store, B, L, seed, step):
    code = CHILD.format(pkg=os.path.join(C.REPO, "python-client"), store=store, B=B, L=L, seed=seed, step=step)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=1200, env=dict(os.environ))
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])["first_s"]


def _first_here(store, B, L, seed, step):
    """The first batch in this process, whose connection is up (a resume through
    load_state_dict() in a running job): the store opened, the loader opened, its
    first batch."""
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import RaggedDataset
    t = time.perf_counter()
    ds = RaggedDataset(store)
    dl = DataLoader({"tokens": ds}, batch_size=B, sampler="cyclic", seed=seed, start_step=step,
                    pack={"tokens": L}, num_workers=0)
    next(dl)
    dt = time.perf_counter() - t
    dl.close()
    ds.close()
    return dt


def _majflt(pid):
    """The major page faults of process pid so far (reads from the disk)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[9])
    except (OSError, IndexError, ValueError):
        return None


def _cpu_s(pid):
    """The CPU seconds process pid's threads have run so far (the scheduler's
    own count, in ns: /proc's user and system times tick at 10 ms), or None."""
    import glob
    total = 0
    try:
        for p in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                with open(p) as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:
                pass                # a thread that ended
    except (OSError, IndexError, ValueError):
        return None
    return total / 1e9 if total else None


def _resident(store):
    """The fraction of the store's chunk files in the page cache (util-linux's
    fincore), or None."""
    import glob
    import shutil
    tool = shutil.which("fincore")
    files = glob.glob(os.path.join(store, "*.chunk"))
    if not tool or not files:
        return None
    r = subprocess.run([tool, "-b", "-n", "-o", "RES,SIZE"] + files, capture_output=True,
                       text=True, timeout=60)
    res = size = 0
    for line in r.stdout.split("\n"):
        f = line.split()
        if len(f) == 2:
            res, size = res + int(f[0]), size + int(f[1])
    return res / size if size else None


def _packed_rate(store, B, L, steps, pid=None):
    """Batches/s over the same steps twice, in two loaders: the first pass is
    the first read of those documents after the conversion; the second reads
    them again, as a later pass over the corpus would. With each pass, the
    store's fraction in the page cache before it and the daemon's major faults
    during it: a first pass much slower than the second read its pages from the
    disk (packed loaders do not read ahead yet, docs/TOKENS.md). Returns
    (first, second, batch bytes, [(resident, faults)] per pass, cpu of the second
    pass: the daemon's CPU a batch, its cores busy on average, this process's
    CPU a batch; None where unknown)."""
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import RaggedDataset
    rates, seen = [], []
    for _ in range(2):
        with DataLoader({"tokens": RaggedDataset(store)}, batch_size=B, sampler="cyclic",
                        seed=1, pack={"tokens": L}, num_workers=0, prefetch=8) as dl:
            res = _resident(store)
            for _ in range(8):
                next(dl)
            f0 = _majflt(pid) if pid else None
            c0 = _cpu_s(pid) if pid else None
            me0 = time.process_time()
            t = time.perf_counter()
            for _ in range(steps):
                b = next(dl)
                del b
            dt = time.perf_counter() - t
            me = (time.process_time() - me0) / steps
            c1 = _cpu_s(pid) if pid else None
            rates.append(steps / dt)
            f1 = _majflt(pid) if pid else None
            seen.append((res, None if f0 is None or f1 is None else f1 - f0))
            cpu = {"daemon_us": None, "daemon_cores": None, "client_us": me * 1e6}
            if c0 is not None and c1 is not None:
                cpu.update(daemon_us=(c1 - c0) / steps * 1e6, daemon_cores=(c1 - c0) / dt)
    return rates[0], rates[1], B * L * 12, seen, cpu


def _megatron_index(lens, L, epochs=1, repeats=3):
    """Megatron-LM's GPTDataset index of `epochs` epochs (document, sample and
    shuffle indexes), best of `repeats`."""
    try:
        import megatron.core.datasets.gpt_dataset as g
        from megatron.core.datasets import helpers
    except Exception as e:  # noqa: BLE001
        C.skip(f"Megatron-LM's index build ({type(e).__name__}: {e})", "megatron-core")
        return None
    sizes = lens.astype(np.int32)
    best = None
    for _ in range(repeats):
        t = time.perf_counter()
        rs = np.random.RandomState(SEED)
        doc = g._build_document_index(np.arange(len(sizes), dtype=np.int32), epochs, rs, False)
        sample = helpers.build_sample_idx(sizes, doc, L, epochs, int(sizes.sum()), True, True)
        g._build_shuffle_index(sample.shape[0] - 1, sample.shape[0] - 1, rs)
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best


def _index_build_s(build):
    """The daemon's total wall time of index builds so far (METRICS, through the
    zrecord tool): the builds alone, their writing to disk not counted."""
    tool = os.path.join(build, "client", "zrecord")
    r = subprocess.run([tool, "--socket", os.environ["ZRECORD_SOCKET"], "metrics"],
                       capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        if line.startswith("zrecord_token_index_build_seconds_total "):
            return float(line.split()[1])
    return None


def _our_padding(store, n_docs, L, B):
    """The padding of the rows of one whole cycle (the rows until the cycle's
    tokens were all seen; the last batch may run into the next cycle's rows)."""
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import RaggedDataset
    total = 0
    pad = rows = 0
    with DataLoader({"tokens": RaggedDataset(store)}, batch_size=B, sampler="sequential",
                    pack={"tokens": L}, pack_mode="best_fit", num_workers=0) as dl:
        while True:
            b = next(dl)
            seg = b["tokens_segment_ids"]
            used = int(np.count_nonzero(seg))
            total += used
            pad += seg.size - used
            rows += B
            if total >= _our_padding.tokens:
                break
    return pad / (pad + total), rows


def _grain_padding(lens, L, bins):
    try:
        import grain
        import grain.experimental as ge
    except Exception as e:  # noqa: BLE001
        C.skip(f"Grain's best fit ({type(e).__name__})", "grain")
        return None
    pieces = []
    for k in lens:
        k = int(k)
        pieces += [L] * (k // L) + ([k % L] if k % L else [])
    ds = grain.MapDataset.source([{"tokens": np.ones(p, np.int32)} for p in pieces]).to_iter_dataset()
    packed = ge.BestFitPackIterDataset(ds, length_struct={"tokens": L}, num_packing_bins=bins,
                                       shuffle_bins=False)
    pad = used = 0
    for ex in packed:
        seg = ex["tokens_segment_ids"]
        u = int(np.count_nonzero(seg))
        used += u
        pad += seg.size - u
    return pad / (pad + used)


def run(ctx):
    from loaderx.utils import from_megatron, from_parquet
    q = ctx.quick
    n = 10 ** 4 if q else 10 ** 6
    tmp = os.path.join(ctx.tmp, "tokens")
    os.makedirs(tmp, exist_ok=True)
    out = {"documents": n}
    lens, values, off = _docs(n)
    out["tokens"] = int(lens.sum())
    out["mean_len"] = float(lens.mean())
    say(f"tokens: {n} documents, {out['tokens']} int32 tokens ({out['tokens'] * 4 / 2 ** 30:.2f} "
        f"GiB), mean {out['mean_len']:.0f}, max {int(lens.max())}")
    prefix = os.path.join(tmp, "corpus")
    _write_megatron(prefix, lens, values)

    # -- conversions
    cold = _drop_caches()
    disk_s = _seq_read(prefix + ".bin")
    nbytes = out["tokens"] * 4
    write_s = _seq_write(os.path.join(tmp, "write-probe"), nbytes)
    _drop_caches()
    copy_s = _seq_copy(prefix + ".bin", os.path.join(tmp, "copy-probe"))
    _drop_caches()
    store = os.path.join(tmp, "store")
    t = time.perf_counter()
    from_megatron(store, prefix)
    meg_s = time.perf_counter() - t
    out["conversion"] = {"bytes": nbytes, "cold": cold,
                         "disk_seq_gib_s": nbytes / disk_s / 2 ** 30,
                         "disk_write_gib_s": nbytes / write_s / 2 ** 30,
                         "disk_copy_gib_s": nbytes / copy_s / 2 ** 30,
                         "from_megatron_gib_s": nbytes / meg_s / 2 ** 30}
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pqf = os.path.join(tmp, "corpus.parquet")
        arr = pa.LargeListArray.from_arrays(pa.array(off), pa.array(values))
        arr = pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(values)) \
            if off[-1] < 2 ** 31 else arr
        pq.write_table(pa.table({"tokens": arr}), pqf, row_group_size=65536,
                       compression="none")
        del arr
        best = None
        for _ in range(3):
            t = time.perf_counter()
            for b in pq.ParquetFile(pqf).iter_batches(batch_size=65536, columns=["tokens"]):
                b.column(0).values.to_numpy()
            dt = time.perf_counter() - t
            best = dt if best is None else min(best, dt)
        t = time.perf_counter()
        from_parquet(os.path.join(tmp, "pq-store"), pqf, "tokens")
        fp_s = time.perf_counter() - t
        C.drop_path(os.path.join(tmp, "pq-store"))
        out["conversion"].update(pyarrow_gib_s=nbytes / best / 2 ** 30,
                                 from_parquet_gib_s=nbytes / fp_s / 2 ** 30)
    except ImportError:
        C.skip("from_parquet against pyarrow", "pyarrow")
    cv = out["conversion"]
    C.table("tokens: conversions (GiB/s of token bytes" + ("" if cold else
                                                           "; page cache NOT dropped: not root") +
            ")", [("what", "what"), ("rate", "GiB/s")],
            [{"what": "disk, sequential read of the .bin (cold)", "rate": cv["disk_seq_gib_s"]},
             {"what": "disk, sequential write of as many bytes (fdatasync)",
              "rate": cv["disk_write_gib_s"]},
             {"what": "disk, a copy of the .bin (cold; both at once, fdatasync)",
              "rate": cv["disk_copy_gib_s"]},
             {"what": "from_megatron (cold)", "rate": cv["from_megatron_gib_s"]}] +
            ([{"what": "pyarrow, the Parquet column (warm)", "rate": cv["pyarrow_gib_s"]},
              {"what": "from_parquet (warm)", "rate": cv["from_parquet_gib_s"]}]
             if "pyarrow_gib_s" in cv else []))

    # -- packed batches/s
    mc = None
    if ctx.limits:
        big = max(ctx.limits)
        mc = ctx.limits[big].get("memcpy_mt_best")
    rows = []
    steps = 40 if q else 400
    pid = getattr(getattr(ctx, "daemon", None), "pid", None)
    for B, L in ((8, 2048), (64, 4096)):
        first, rate, bb, seen, cpu = _packed_rate(store, B, L, steps, pid)
        gib = rate * bb / 2 ** 30
        rows.append({"shape": f"({B}, {L})", "first_s": first,
                     "first_gib": first * bb / 2 ** 30, "batches_s": rate, "gib_s": gib,
                     "memcpy": mc, "ratio": gib / mc if mc else None,
                     "again_first": rate / first,
                     "first_resident": seen[0][0], "first_majflt": seen[0][1],
                     "again_resident": seen[1][0], "again_majflt": seen[1][1], **cpu})
    out["packed"] = rows
    C.table("tokens: packed concat batches (cyclic; GiB/s of tokens, segment ids and "
            "positions; memcpy: the limits layer's all-thread gather, best; first pass: "
            "the first read of those documents after the conversion; again: the same steps)",
            [("shape", "(B, L)"), ("first_s", "first pass /s"), ("first_gib", "GiB/s"),
             ("batches_s", "again /s"), ("gib_s", "GiB/s"), ("memcpy", "memcpy GiB/s"),
             ("ratio", "x memcpy")], rows)
    C.table("tokens: packed batches' CPU, the second pass (the daemon's CPU a batch, all its "
            "threads, and its cores busy on average: /proc's schedstat; the client's CPU a "
            "batch: this process's)",
            [("shape", "(B, L)"), ("batches_s", "batches/s"), ("daemon_us", "daemon us"),
             ("daemon_cores", "daemon cores busy"), ("client_us", "client us"),
             ("cpu_bound", "(daemon + client) x rate, cores")],
            [dict(r, cpu_bound=None if r["daemon_us"] is None else
                  (r["daemon_us"] + r["client_us"]) * r["batches_s"] / 1e6) for r in rows])
    pct = lambda v: None if v is None else 100 * v  # noqa: E731
    C.table("tokens: why the first pass is slower (the store's share in the page cache "
            "before each pass, fincore; the daemon's major page faults, reads from the disk, "
            "during it)",
            [("shape", "(B, L)"), ("again_first", "again / first"),
             ("fr", "first: resident %"), ("first_majflt", "first: major faults"),
             ("ar", "again: resident %"), ("again_majflt", "again: major faults")],
            [dict(r, fr=pct(r["first_resident"]), ar=pct(r["again_resident"])) for r in rows])

    # -- the first batch; the index
    step_far = 10 ** 6
    t0 = _first(store, 8, 2048, 11, 0)          # seed 11: no index yet
    t1 = _first(store, 8, 2048, 11, 0)          # its index on disk
    _first(store, 8, 2048, 11, step_far)        # builds the cycle of step 10^6
    t2 = min(_first(store, 8, 2048, 11, step_far) for _ in range(3))
    h0 = _first_here(store, 8, 2048, 12, 0)                 # seed 12: built here
    h1 = min(_first_here(store, 8, 2048, 12, 0) for _ in range(3))
    _first_here(store, 8, 2048, 12, step_far)
    h2 = min(_first_here(store, 8, 2048, 12, step_far) for _ in range(3))
    b0 = _index_build_s(ctx.build)
    builds = [_first_here(store, 8, 2048, 100 + k, 0) for k in range(3)]
    b1 = _index_build_s(ctx.build)
    cached = [_first_here(store, 8, 2048, 100 + k, 0) for k in range(3)]
    ours = max(0.0, min(builds) - min(cached))
    # the build itself, as the daemon timed it (3 builds: cycle 0 of 3 seeds)
    build_only = (b1 - b0) / 3 if b0 is not None and b1 is not None else None
    meg = _megatron_index(lens, 2048)
    # a run resumed at step 10^6 of (8, 2048): Megatron-LM builds the index of every
    # epoch up to it at start; zrecord builds (or loads) the one cycle it is in
    epochs = int(np.ceil(step_far * 8 * 2049 / float(lens.sum()))) if not q else 2
    meg_e = _megatron_index(lens, 2048, epochs, 1) if meg is not None else None
    out["first"] = {"step0_build_s": t0, "step0_cached_s": t1, "step1e6_cached_s": t2,
                    "here_step0_build_s": h0, "here_step0_cached_s": h1,
                    "here_step1e6_cached_s": h2}
    out["index"] = {"ours_s": ours, "build_only_s": build_only, "megatron_s": meg,
                    "epochs": epochs,
                    "megatron_epochs_s": meg_e}
    C.table("tokens: first batch (8, 2048): in a fresh process (connection, HELLO and the "
            "store's open included), and in this process, connected (best of 3)",
            [("what", "what"), ("ms", "fresh process ms"), ("here", "connected ms")],
            [{"what": "step 0, index built", "ms": t0 * 1e3, "here": h0 * 1e3},
             {"what": "step 0, index on disk", "ms": t1 * 1e3, "here": h1 * 1e3},
             {"what": f"step {step_far}, index on disk", "ms": t2 * 1e3, "here": h2 * 1e3}])
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    C.table("tokens: a cycle's index", [("what", "who"), ("ms", "ms")],
            [{"what": "zrecord (open of a fresh seed minus an open of a cached one)",
              "ms": ms(ours)}] +
            ([{"what": "zrecord, the build alone (the daemon's own timing, mean of 3)",
               "ms": ms(build_only)}] if build_only is not None else []) +
            ([{"what": "Megatron-LM GPTDataset index, one epoch", "ms": ms(meg)},
              {"what": f"Megatron-LM, the {epochs} epochs before step {step_far} of (8, 2048)",
               "ms": ms(meg_e)}] if meg else []))

    # -- padding: best fit against Grain's
    m = min(n, 50000)
    small = os.path.join(tmp, "small")
    from loaderx.utils import from_megatron as fm
    _write_megatron(os.path.join(tmp, "small-in"), lens[:m], values[:int(off[m])])
    fm(small, os.path.join(tmp, "small-in"))
    L = 2048
    _our_padding.tokens = int(lens[:m].sum())
    ours_pad, _ = _our_padding(small, m, L, 64)
    pad_rows = [{"who": "zrecord best_fit, window 1024 documents", "padding": ours_pad}]
    for bins in (64, 1024):
        g = _grain_padding(lens[:m], L, bins)
        if g is not None:
            pad_rows.append({"who": f"Grain BestFitPackIterDataset, {bins} bins", "padding": g})
    out["padding"] = pad_rows
    C.table(f"tokens: best-fit padding, the first {m} documents, L = {L}",
            [("who", "who"), ("pct", "padding %")],
            [dict(r, pct=100 * r["padding"]) for r in pad_rows])
    C.drop_path(tmp)
    return out


def targets(t):
    """(target, got, need) rows: got/need >= 1 is met."""
    rows = []
    for r in t.get("packed", []):
        if r["ratio"] is not None:
            rows.append((f"packed concat {r['shape']} vs memcpy", r["ratio"], 0.8))
    pads = t.get("padding", [])
    g = [r["padding"] for r in pads[1:]]
    if g:
        # ours <= Grain's best: the ratio grain/ours >= 1
        rows.append(("best_fit padding <= Grain's (Grain's best / ours)",
                     min(g) / max(pads[0]["padding"], 1e-9), 1.0))
    f = t.get("first", {})
    if f:
        rows.append(("first batch after resume at 10^6 <= 50 ms, connected (50 ms / got)",
                     0.05 / max(f["here_step1e6_cached_s"], 1e-9), 1.0))
        rows.append(("the same in a fresh process (50 ms / got)",
                     0.05 / max(f["step1e6_cached_s"], 1e-9), 1.0))
    ix = t.get("index", {})
    if ix.get("megatron_s"):
        rows.append(("index build vs Megatron-LM, one epoch (theirs / ours: open minus open)",
                     ix["megatron_s"] / max(ix["ours_s"], 1e-9), 10.0))
        if ix.get("build_only_s"):
            rows.append(("index build vs Megatron-LM, one epoch (theirs / our build alone)",
                         ix["megatron_s"] / max(ix["build_only_s"], 1e-9), 10.0))
        rows.append(("index to resume at 10^6 vs Megatron-LM's epochs to it (theirs / ours)",
                     ix["megatron_epochs_s"] / max(ix["ours_s"], 1e-9), 10.0))
    cv = t.get("conversion", {})
    if "from_parquet_gib_s" in cv:
        rows.append(("from_parquet vs pyarrow's read", cv["from_parquet_gib_s"] /
                     cv["pyarrow_gib_s"], 0.5))
    if cv:
        # a conversion reads every byte and writes it once: the slower of the two
        disk = min(cv["disk_seq_gib_s"], cv["disk_write_gib_s"])
        rows.append(("from_megatron vs the disk's sequential rate (min of read, write)",
                     cv["from_megatron_gib_s"] / disk, 1.0))
        if "disk_copy_gib_s" in cv:
            # the same disk reading and writing at once: what a copy can do
            rows.append(("from_megatron vs the disk copying the .bin (both at once)",
                         cv["from_megatron_gib_s"] / cv["disk_copy_gib_s"], 1.0))
    return rows
