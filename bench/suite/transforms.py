"""The loader layer's transforms (issue 35): a transform on every core.

A batch of 64 images of 256 x 256 uint8 (4 MiB), uniform draws with
replacement, warm page cache, and two transforms per sample (suite.worker):
`numpy` (augment: downsample, flip, blur; numpy releases the GIL inside its
array operations) and `python` (py_features: a histogram counted in a Python
loop, which holds the GIL; the images pass on). Each runs on k = 1 and 2
workers of:

  zrecord threads      DataLoader(transform=f, num_workers=k, workers='thread')
  zrecord processes    DataLoader(..., workers='process'): worker processes
                       that read the ring in place and write the output once
                       into the loader's arena
  torch DataLoader     over the .npy, a batch-level dataset (__getitems__ gathers
                       and transforms in the worker), num_workers=k, persistent
  grain                grain.python.DataLoader over the .npy (a random-access
                       source), Batch then the transform, worker_count=k

and inline on one core (zrecord, num_workers=0) as the reference. Every run is
its own process (suite.worker loader), zrecord's with a daemon of its own.
Columns: batches/s (median of the rounds) and k=2 over k=1; the CPU the
training process and the worker processes spend per batch (from
/proc/PID/stat over the timed batches); the bytes that cross between
processes per batch (zrecord processes: measured by the loader, stats();
torch and grain: the output's bytes, which each moves into shared memory it
makes per batch, by construction); zrecord processes' hop per batch
(stats()['workers']['hop_s']); peak PSS of the process tree (+ the daemon).

Then the same figures on paper for k = 8 and 32: each contender's rate is
bounded by k workers' CPU per batch, by the training process's CPU per batch
(one core), and for threads by the GIL (Amdahl's law with the serial share
its k=2 run showed). And the hop at 64 MiB: zrecord processes, k=1, batches of
256 records of 256 KiB, a transform that returns a copy of the batch (in:
views of the ring; out: written once into the arena), against one memcpy of 64
MiB (the limits probe's 1-thread rate) and against its floor, two bare Python
processes exchanging a struct each way around the same write (suite.hop_floor).
`run.py hop` runs this table alone (with the limits).
"""

import os

import numpy as np

from . import common as C
from . import loader as L
from .common import say

KS = (1, 2)
PAPER_KS = (8, 32)
SIDE, BATCH, RECORDS = 256, 64, 1024


def contenders():
    out = [("zrecord threads", {"kind": "zrecord", "workers": "thread"}),
           ("zrecord processes", {"kind": "zrecord", "workers": "process"})]
    C.add_if(out, C.have("torch"), "torch DataLoader (transforms)", "torch",
             lambda: [("torch DataLoader", {"kind": "torch"})])
    C.add_if(out, C.have("grain"), "grain with multiprocessing (transforms)", "grain",
             lambda: [("grain", {"kind": "grain_npy"})])
    return out


def prepare(ctx, n, side, tmp):
    p = L.prepare(ctx, n, side, tmp, formats=("zr_raw",))
    return p


def out_bytes(name, batch, side):
    """Bytes of one batch's output, by transform."""
    if name == "numpy":
        return batch * (side // 2) ** 2 * 4
    return batch * side * side + batch * 16 * 4


def one(ctx, p, params, name, k, transform, steps, rnd, tmp):
    pr = dict(params, batch=p["batch"], heavy=False, seed=1 + rnd, steps=steps,
              warm=p["warm"], warm_s=1.0 if k else 0.0, warm_max=p["warm_max"], transform=transform,
              workers_k=k, npy=p["npy"], store=p.get("zr_raw"), n=p["n"])
    if params["kind"] == "torch":
        pr["workers"] = k
    load = os.getloadavg()[0]
    res = L.run_one(ctx, pr, tmp)
    res["load"] = load
    return res


def run(ctx):
    q = ctx.quick
    n, side, B = (64, 64, 16) if q else (RECORDS, SIDE, BATCH)
    steps = 4 if q else ctx.transform_steps
    rounds = 1 if q else 2
    tmp = os.path.join(ctx.tmp, "transforms")
    os.makedirs(tmp, exist_ok=True)
    p = prepare(ctx, n, side, tmp)
    p.update(batch=B, warm=3 if q else 20, warm_max=3 if q else 400)
    cons = contenders()
    results = {}
    for rnd in range(rounds):
        for transform in ("numpy", "python"):
            runs = [("inline, 1 core", {"kind": "zrecord", "workers": None}, 0)]
            runs += [(name, params, k) for name, params in cons for k in KS]
            for name, params, k in runs:
                try:
                    res = one(ctx, p, params, name, k, transform, steps, rnd, tmp)
                except Exception as e:
                    say(f"  {name} k={k} ({transform}): failed: {type(e).__name__}: {e}")
                    continue
                results.setdefault((transform, name, k), []).append(res)
    rows = []
    for transform in ("numpy", "python"):
        ob = out_bytes(transform, B, side)
        inline = results.get((transform, "inline, 1 core", 0))
        if inline:
            rows.append(row(transform, "inline, 1 core", {0: inline}, ob, threads=False))
        for name, params in cons:
            rs = {k: results.get((transform, name, k)) for k in KS}
            if any(rs.values()):
                rows.append(row(transform, name, rs, ob, threads=params.get("workers") == "thread",
                                inproc=params.get("workers") == "thread"))
    C.table(f"loader, transforms on every core (issue 35): {B} images of {side} x {side} uint8 "
            f"({B * side * side / C.MiB:.0f} MiB) a batch, iid, warm; median of {rounds} rounds; "
            "CPU ms per batch (at k=2) of the training process, its worker processes, the daemon, "
            "and all of them; 2-core ceiling = the k2/k1 two cores allow at these costs (2 x the "
            "busiest process's CPU at k=1 over a batch's CPU at k=2); bytes between processes per "
            "batch; peak PSS of the process tree (+ the daemon for zrecord); load = 1-minute load "
            "average at the start of the k=2 run",
            [("transform", "transform"), ("contender", "contender"), ("bps1", "k=1 b/s"),
             ("bps2", "k=2 b/s"), ("scale", "k2/k1"), ("ceiling", "2-core ceiling"),
             ("main_ms2", "main ms"), ("workers_ms2", "workers ms"), ("daemon_ms2", "daemon ms"),
             ("cpu_ms2", "CPU ms"), ("xbytes", "bytes between"), ("hop_us", "hop µs"),
             ("pss1", "PSS k=1"), ("pss2", "PSS k=2"), ("load2", "load")], rows)
    paper = project(rows)
    C.table(f"the same on paper for k = {', '.join(map(str, PAPER_KS))} (batches/s from the "
            "per-batch costs above: k workers' CPU, the training process's CPU on its core, "
            "threads' GIL share by Amdahl's law from their k=2 run; no core shortage, memory "
            "bandwidth or daemon bound assumed)",
            [("transform", "transform"), ("contender", "contender")] +
            [(f"k{k}", f"k={k} b/s") for k in PAPER_KS] + [("bound", "bound at k=32")], paper)
    hop = run_hop(ctx, tmp)
    C.drop_path(tmp)
    return {"records": n, "side": side, "batch": B, "rounds": rounds, "steps": steps,
            "rows": rows, "paper": paper, "hop": hop}


def row(transform, name, rs, out_nbytes, threads, inproc=False):
    r = {"transform": transform, "contender": name}
    for k, runs in rs.items():
        if not runs:
            continue
        kk = max(k, 1)
        r[f"bps{kk}"] = C.med([x["bps"] for x in runs])
        r[f"pss{kk}"] = max(x["pss"] for x in runs) / C.MiB
        r[f"main_ms{kk}"] = C.med([x["main_cpu_s"] / x["steps"] * 1e3 for x in runs])
        r[f"workers_ms{kk}"] = C.med([x["workers_cpu_s"] / x["steps"] * 1e3 for x in runs])
        # the daemon's over every batch after "go": the timed ones and those skipped
        r[f"daemon_ms{kk}"] = C.med([x.get("daemon_cpu_s", 0) / (x["steps"] + x["skipped"]) * 1e3
                                     for x in runs])
        r[f"load{kk}"] = max(x["load"] for x in runs)
        zr = [x.get("zr_workers") for x in runs if x.get("zr_workers")]
        if zr and zr[-1].get("kind") == "process":
            w = zr[-1]
            a = w["arena"]
            b = max(1, w["batches"])
            r[f"xbytes{kk}"] = (a["written_bytes"] + w["pickled_bytes"] + w["task_bytes"]) / b
            r[f"written{kk}"] = a["written_bytes"] / b
            r[f"hop_us{kk}"] = C.med([x["zr_workers"]["hop_s"] * 1e6 for x in runs
                                      if x.get("zr_workers", {}).get("hop_s")])
            r[f"write_us{kk}"] = C.med([x["zr_workers"]["write_s"] * 1e6 for x in runs
                                        if x.get("zr_workers", {}).get("write_s")])
    if r.get("bps1") and r.get("bps2"):
        r["scale"] = r["bps2"] / r["bps1"]
    top = 2 if "bps2" in r and r["bps2"] else 1
    r["main_ms2"] = r.get(f"main_ms{top}")
    r["workers_ms2"] = r.get(f"workers_ms{top}")
    r["daemon_ms2"] = r.get(f"daemon_ms{top}")
    r["cpu_ms2"] = sum(r.get(f"{w}_ms{top}") or 0 for w in ("main", "workers", "daemon"))
    r["cpu_ms1"] = sum(r.get(f"{w}_ms1") or 0 for w in ("main", "workers", "daemon"))
    # what two cores allow from k=1 to k=2 at these costs: k=1 runs at the pace
    # of its busiest process; k=2 at most at two cores over the CPU of a batch
    busiest = max(r.get("main_ms1") or 0, r.get("workers_ms1") or 0)
    if busiest and r["cpu_ms2"] and r.get("bps2") is not None and not threads:
        r["ceiling"] = min(2.0, 2 * busiest / r["cpu_ms2"])
    r["load2"] = r.get(f"load{top}")
    r["hop_us"] = r.get(f"hop_us{top}")
    if name.startswith("zrecord processes"):
        r["xbytes"] = r.get(f"xbytes{top}")
        r["out_bytes"] = out_nbytes
    elif name in ("torch DataLoader", "grain"):
        r["xbytes"] = out_nbytes
        r["out_bytes"] = out_nbytes
    else:
        r["xbytes"] = 0
    r["threads"] = threads
    return r


def project(rows):
    """Batches/s on paper for PAPER_KS from the measured per-batch costs."""
    out = []
    for r in rows:
        if r["contender"].startswith("inline") or not r.get("bps1"):
            continue
        main = (r.get("main_ms2") or 0) / 1e3
        work = (r.get("workers_ms2") or 0) / 1e3
        k_meas = 2 if r.get("bps2") else 1
        p = {"transform": r["transform"], "contender": r["contender"]}
        for k in PAPER_KS:
            if r["threads"]:
                # all of it in the training process; Amdahl from k=1 -> k=2
                s2 = r.get("scale") or 1.0
                par = max(0.0, min(1.0, 2 * (1 - 1 / s2))) if s2 > 1 else 0.0
                rate = r["bps1"] / ((1 - par) + par / k)
                bound = f"GIL: {100 * (1 - par):.0f} % serial"
            else:
                per_worker = work / k_meas if work else None   # CPU s a batch costs a worker
                cands = []
                if per_worker:
                    cands.append((k / (per_worker * k_meas), "workers"))
                if main:
                    cands.append((1 / main, "training process"))
                rate, bound = min(cands) if cands else (None, "?")
            p[f"k{k}"] = rate
            p["bound"] = bound
        out.append(p)
    return out


def run_hop(ctx, tmp):
    """zrecord processes, k=1, 64 MiB batches, a transform that returns the
    batch: the hop and the one write of the output, per batch."""
    q = ctx.quick
    n, side, B = (64, 128, 16) if q else (1024, 512, 256)
    p = L.shared_prepare(ctx, n, side)
    pr = {"kind": "zrecord", "workers": "process", "store": p["zr_raw"], "batch": B,
          "heavy": False, "seed": 7, "steps": 4 if q else 40, "warm": 3 if q else 10,
          "transform": "copy", "workers_k": 1}
    load = os.getloadavg()[0]
    try:
        res = L.run_one(ctx, pr, tmp)
    except Exception as e:
        say(f"  the hop at {B * p['nbytes'] / C.MiB:.0f} MiB: failed: {type(e).__name__}: {e}")
        return None
    w = res.get("zr_workers") or {}
    lim = (ctx.limits or {}).get(p["nbytes"], {})
    memcpy = C.limit(lim, "memcpy_1t")
    batch_bytes = B * p["nbytes"]
    copy_ms = batch_bytes / (memcpy * C.GiB) * 1e3 if memcpy else None
    row = {"what": f"zrecord processes, k=1, {batch_bytes / C.MiB:.0f} MiB in and out",
           "hop_us": w.get("hop_s", 0) * 1e6 if w.get("hop_s") else None,
           "write_ms": w.get("write_s", 0) * 1e3 if w.get("write_s") else None,
           "copy_ms": copy_ms, "bps": res["bps"], "load": load,
           "written_mib": (w.get("arena", {}).get("written_bytes", 0) / max(1, w.get("batches", 1))
                           / C.MiB)}
    parts = w.get("hop_parts_s") or {}
    if parts:
        # the work of the hop, and the two wake-ups (the worker's when it waited
        # for the task, the loader's when it waited for the result)
        row["hop_cpu_us"] = sum((parts.get(k) or 0) for k in ("send", "intake", "encode",
                                                               "recv", "decode")) * 1e6
        row["hop_wake_us"] = sum((parts.get(k) or 0) for k in ("wake", "back")) * 1e6
        row["parts_us"] = {k: (v or 0) * 1e6 for k, v in parts.items()}
    if row["hop_us"] and copy_ms:
        row["hop_of_copy"] = row["hop_us"] / 1e3 / copy_ms
    rows = [row]
    # the floor: two bare Python processes, a 48-byte struct each way around
    # the same 64 MiB write (suite.hop_floor), in this run
    from . import hop_floor
    load = os.getloadavg()[0]
    try:
        f = hop_floor.measure(8 if q else 40, batch_bytes)
    except Exception as e:
        say(f"  the hop's floor: failed: {type(e).__name__}: {e}")
        f = None
    if f:
        floor = {"what": "floor: 2 bare Python processes, a 48 B struct each way",
                 "hop_us": f["hop"], "hop_cpu_us": f["send"] + f["recv"],
                 "hop_wake_us": f["wake"] + f["back"], "write_ms": f["write"] / 1e3,
                 "copy_ms": copy_ms, "load": load,
                 "parts_us": {k: f[k] for k in ("send", "wake", "back", "recv")}}
        if copy_ms:
            floor["hop_of_copy"] = f["hop"] / 1e3 / copy_ms
        row["floor"] = floor
        rows.append(floor)
    C.table("the worker hop at 64 MiB (zrecord processes; hop = handing a batch to the worker and "
            "its result back, the one write of the output apart; write = that write; one copy = "
            "64 MiB at the limits probe's 1-thread memcpy rate)",
            [("what", "run"), ("hop_us", "hop µs p50"), ("hop_cpu_us", "of it work µs"),
             ("hop_wake_us", "wake-ups µs"), ("write_ms", "write ms p50"),
             ("copy_ms", "one copy ms"), ("hop_of_copy", "hop / copy"),
             ("written_mib", "MiB written a batch"), ("bps", "batches/s"), ("load", "load")], rows)
    if parts:
        say("  the hop's parts, µs p50 each (wake-ups: wake, back; the rest work): " +
            ", ".join(f"{k} {v * 1e6:,.0f}" for k, v in parts.items() if v is not None))
    if f:
        say("  the floor's parts, µs p50 each: " +
            ", ".join(f"{k} {v:,.0f}" for k, v in floor["parts_us"].items()))
    return row


def targets(res):
    rows = {(r["transform"], r["contender"]): r for r in res["rows"]}
    out = []
    zp = rows.get(("python", "zrecord processes"))
    tp = rows.get(("python", "torch DataLoader"))
    if zp and zp.get("scale"):
        out.append(("python transform: zrecord processes k=2 >= 1.8x k=1", zp["scale"], 1.8))
    if zp and tp and zp.get("bps2") and tp.get("bps2"):
        out.append(("python transform: zrecord processes k=2 >= 1.2x torch k=2",
                    zp["bps2"] / tp["bps2"], 1.2))
    zn = rows.get(("numpy", "zrecord processes"))
    tn = rows.get(("numpy", "torch DataLoader"))
    for k in KS:
        if zn and tn and zn.get(f"bps{k}") and tn.get(f"bps{k}"):
            out.append((f"numpy transform: zrecord processes >= torch at k={k}",
                        zn[f"bps{k}"] / tn[f"bps{k}"], 1.0))
    for tr in ("numpy", "python"):
        z = rows.get((tr, "zrecord processes"))
        if z and z.get("written2") and z.get("out_bytes"):
            # the output written once: bytes written per batch over its bytes
            # (1.0 once; the input is views of the ring, copied 0 times)
            out.append((f"{tr} transform: output written once (output bytes / bytes written)",
                        z["out_bytes"] / z["written2"], 1.0))
    h = res.get("hop")
    if h and h.get("hop_us"):
        out.append(("worker hop <= 100 us a 64 MiB batch (100 us / hop)", 100 / h["hop_us"], 1.0))
    if h and h.get("hop_cpu_us"):
        out.append(("  its work alone, wake-ups apart (100 us / work)", 100 / h["hop_cpu_us"], 1.0))
    for tr in ("numpy", "python"):
        z, t = rows.get((tr, "zrecord processes")), rows.get((tr, "torch DataLoader"))
        for k in KS:
            if z and t and z.get(f"pss{k}") and t.get(f"pss{k}"):
                out.append((f"{tr} transform: peak PSS <= torch's at k={k} (theirs / ours)",
                            t[f"pss{k}"] / z[f"pss{k}"], 1.0))
    return out
