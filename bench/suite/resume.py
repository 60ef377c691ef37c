"""Resume: the time from "resume at step k" to the first batch, k = 10^3,
10^6, 10^9, on a 1M-record index space (64-byte records; quick: 64K), batch 256.

Each figure is one fresh process (imports not counted; opening the data set,
building the loader, its workers and the first batch counted):

  zrecord     DataLoader(..., sampler='cyclic', start_step=k), next()
  torchdata   StatefulDataLoader (shuffle, num_workers 2) over the .npy,
              load_state_dict() of a checkpoint taken at step k, next()
  grain       DataLoader over ArrayRecord (IndexSampler shuffle, 2 workers),
              iterator.set_state() of a checkpoint at step k, next()

A torch checkpoint holds the epoch's generator state and the position in the
epoch, so its restore fast-forwards at most one epoch (k mod steps-per-epoch);
the checkpoints are built directly (the state of a run that reached step k),
since no run reaches step 10^9 here.
"""

import json
import os
import subprocess
import sys

import numpy as np

from . import common as C
from .common import say
from .loader import reap


def run(ctx):
    q = ctx.quick
    n, B = (1 << 16, 256) if q else (1 << 20, 256)
    ks = [10 ** 3, 10 ** 6, 10 ** 9]
    reps = 1 if q else 3
    tmp = os.path.join(ctx.tmp, "resume")
    os.makedirs(tmp, exist_ok=True)
    rng = np.random.default_rng(3)
    arr = rng.integers(0, 256, (n, 64), dtype=np.uint8)
    p = {"n": n, "batch": B, "npy": os.path.join(tmp, "data.npy"), "store": os.path.join(tmp, "zr")}
    np.save(p["npy"], arr)
    from loaderx.dataset import DenseDataset
    ds = DenseDataset(p["store"], dtype=arr.dtype, item_shape=(64,), codec="raw")
    for s in range(0, n, 1 << 18):
        ds.append(arr[s:s + (1 << 18)])
    ds._store.sync()
    ds.close()
    cons = ["zrecord"]
    if C.have("torchdata") and C.have("torch"):
        cons.append("torchdata")
    else:
        C.skip("torchdata StatefulDataLoader", "torchdata")
    if C.have("grain") and C.have("array_record"):
        from array_record.python.array_record_module import ArrayRecordWriter
        p["arrayrecord"] = os.path.join(tmp, "data.array_record")
        w = ArrayRecordWriter(p["arrayrecord"], "group_size:1,uncompressed")
        for r in arr:
            w.write(r.tobytes())
        w.close()
        cons.append("grain")
    else:
        C.skip("grain checkpoint restore", "grain" if not C.have("grain") else "array_record")
    res = {}
    env = dict(os.environ, PYTHONPATH=C.BENCH)
    for rep in range(reps):
        for k in ks:
            for c in cons:
                pr = dict(p, kind=c, k=k)
                proc = subprocess.Popen([sys.executable, "-m", "suite.worker", "resume", json.dumps(pr)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        cwd=C.BENCH, env=env, start_new_session=True)
                try:
                    r = json.loads(proc.stdout.readline())
                except Exception as e:
                    say(f"  {c} at k={k}: failed: {type(e).__name__}: {e}")
                    continue
                finally:
                    reap(proc)
                res.setdefault((c, k), []).append(r)
    rows = []
    for k in ks:
        ref = res.get(("zrecord", k))
        refs = C.med([x["secs"] for x in ref]) if ref else None
        for c in cons:
            rs = res.get((c, k))
            if not rs:
                continue
            s = C.med([x["secs"] for x in rs])
            rows.append({"k": f"10^{len(str(k)) - 1}", "contender": c, "ms": s * 1e3,
                         "x_zr": s / refs if refs else None, "note": rs[0]["note"]})
    C.table(f"resume: time from 'resume at step k' to the first batch, ms (median of {reps}); "
            f"{n} records, batch {B}; x zr = the row's time over zrecord's",
            [("k", "k"), ("contender", "contender"), ("ms", "ms"), ("x_zr", "x zr"), ("note", "how")], rows)
    C.bar_plot("resume", "resume at step k: ms to the first batch (log)",
               [f"{r['contender']} k={r['k']}" for r in rows], {"ms": [r["ms"] for r in rows]}, "ms", log=True)
    C.drop_path(tmp)
    return {"records": n, "batch": B, "rows": rows}
