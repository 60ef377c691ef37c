"""Sampler: zrecord's iid, cyclic and sequential batches (the engine's C
sampler, bench/sampler-bench) against numpy's Generator.integers and a
Generator.permutation shuffle, over a 1M index space (bench/sampler_vs_numpy.py)."""

import json
import os
import subprocess
import sys

from . import common as C


def run(ctx):
    exe = os.path.join(ctx.build, "bench", "sampler-bench")
    script = os.path.join(C.BENCH, "sampler_vs_numpy.py")
    out = subprocess.run([sys.executable, script, "--bench", exe, "--json"], check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out)
    rows = [{"mode": x["mode"], "batch": x["batch"], "zr_us": x["zrecord_ns"] / 1e3,
             "np_us": x["numpy_ns"] / 1e3, "ratio": x["numpy_over_zrecord"], "over_iid": x["over_iid"]}
            for x in r["rows"]]
    C.table(f"sampler over n = {r['n']}: us per batch, median (numpy {r['numpy']}; cyclic's numpy figure "
            f"is rng.permutation(n) = {r['permutation_ns'] / 1e6:.2f} ms amortized over n/B batches, plus the slice)",
            [("mode", "mode"), ("batch", "batch"), ("zr_us", "zrecord us"), ("np_us", "numpy us"),
             ("ratio", "numpy/zr"), ("over_iid", "zr/iid")], rows)
    C.bar_plot("sampler", "sampler: numpy time / zrecord time (above 1: zrecord faster)",
               [f"{x['mode']} {x['batch']}" for x in rows], {"numpy/zrecord": [x["ratio"] for x in rows]}, "x")
    return {"n": r["n"], "rows": rows}
