"""Sampler: zrecord's iid, cyclic and sequential batches (the engine's C
sampler, bench/sampler-bench) against numpy's Generator.integers and a
Generator.permutation shuffle, over a 1M index space (bench/sampler_vs_numpy.py);
then mixtures against the plain cyclic batch, and which steps saw a record
(sampler-bench --mix): cyclic over 10^6 cycles, a mixture's cyclic source over
10^6 of its cycles, and the iid scan."""

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
    return {"n": r["n"], "rows": rows, "mixtures": mixtures(ctx, exe)}


def mixtures(ctx, exe):
    """Mixture batches over plain cyclic ones, and the inverses' costs."""
    load = os.getloadavg()[0]
    cycles = 10 ** 4 if ctx.quick else 10 ** 6
    args = [exe, "--mix", "--json", "--cycles", str(cycles)] + (["--reps", "21"] if ctx.quick else [])
    r = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
    rows = [{"batch": x["batch"], "cyc_us": x["cyclic_ns"] / 1e3, "mix3_us": x["mix3_ns"] / 1e3,
             "mix16_us": x["mix16_ns"] / 1e3, "mix3_over": x["mix3_ns"] / x["cyclic_ns"],
             "mix16_over": x["mix16_ns"] / x["cyclic_ns"]} for x in r["batches"]]
    C.table(f"mixtures: us per batch, median of {r['reps']} (3 cyclic sources 70/20/10 over 1M/300K/100K; "
            f"16 sources of every mode); ratios against the plain cyclic batch over 1M (load {load:.2f} at the start)",
            [("batch", "batch"), ("cyc_us", "cyclic us"), ("mix3_us", "3 sources us"), ("mix16_us", "16 sources us"),
             ("mix3_over", "3/cyclic"), ("mix16_over", "16/cyclic")], rows)
    inv = r["inverse"]
    inv_rows = [
        {"lookup": f"cyclic, n = 1M, batch 1024: {inv['cycles']:,} cycles", "ms": inv["cyclic_ns"] / 1e6,
         "per": inv["cyclic_ns"] / inv["cycles"], "unit": "ns a cycle"},
        {"lookup": f"a mixture's cyclic source (1M, 70 % of 1024): {inv['cycles']:,} of its cycles",
         "ms": inv["mixture_ns"] / 1e6, "per": inv["mixture_ns"] / inv["cycles"], "unit": "ns a cycle"},
        {"lookup": f"iid scan, n = 1M: {inv['iid_positions']:,} positions", "ms": inv["iid_ns"] / 1e6,
         "per": inv["iid_ns"] / inv["iid_positions"], "unit": "ns a position"},
    ]
    C.table("which steps saw a record: one call over the range", [("lookup", "lookup"), ("ms", "ms"),
                                                                  ("per", "per unit"), ("unit", "unit")], inv_rows)
    return {"load_at_start": load, "batches": rows, "inverse": inv_rows}
