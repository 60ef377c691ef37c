#!/usr/bin/env python3
"""run.py: zrecord against its peers and against the machine's limits, in one run.

    python3 bench/run.py [all|limits|sampler|store|loader|multi|resume|beyond-memory|remote|transforms|hop|small-batches ...]
                         [--quick] [--build DIR] [--no-plots]

Prints a machine block (CPU, cores, memory, kernel, Python, numpy, every
contender's version), then one table per layer with a ratio column against
zrecord, writes bench/results/<layer>.json and, with matplotlib, a PNG per
table. A contender that is not installed is skipped with a line saying so; with
only numpy and msgpack every peer is skipped and zrecord still runs. The limit
probes (the C binaries of the build) run first in every invocation that needs
them: every zrecord figure is also given as a fraction of its limit.

beyond-memory runs every contender in a memory cgroup smaller than its data
(root only; skipped with a line saying why otherwise).

--quick proves the suite still runs (CI): tiny sizes, figures that mean
nothing, nothing asserted about speed. See bench/README.md for the method.
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from suite import common as C  # noqa: E402

LAYERS = ["limits", "sampler", "store", "loader", "multi", "resume", "beyond-memory", "remote",
          "tokens", "images"]
# tables that run with a layer, also runnable alone: the loader layer's transforms,
# and of those the worker hop's table alone (with the limits it is taken against);
# the loader layer's small batches (issue 37)
PARTS = ["transforms", "hop", "small-batches"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("layers", nargs="*", default=["all"], help="all (default) or any of " + ", ".join(LAYERS))
    ap.add_argument("--quick", action="store_true", help="tiny sizes: proves the suite runs (CI)")
    ap.add_argument("--build", help="meson build dir (default: $ZRECORD_BUILD or the newest build*/)")
    ap.add_argument("--records", type=int, default=1024, help="256 KiB records in the store layer (1024)")
    ap.add_argument("--tiles", type=int, default=16384, help="4 KiB records in the store layer (16384)")
    ap.add_argument("--batches", type=int, default=9, help="timed batches per store contender (9)")
    ap.add_argument("--steps", type=int, default=24, help="batches per loader and multi-process run after the warm-up (24; the rate skips the first 8, which may sit in prefetch buffers)")
    ap.add_argument("--transform-steps", type=int, default=300,
                    help="batches per run of the loader layer's transforms table after its warm-up "
                         "(300; the rate skips the first 8)")
    ap.add_argument("--dict-images", action="store_true",
                    help="also zstd_dict on the 256 KiB records (its training and appends: minutes on 2 cores)")
    ap.add_argument("--memcg", type=int, default=512,
                    help="beyond-memory: the contenders' memory cgroup, MiB (512; --quick: 64)")
    ap.add_argument("--beyond-ratio", type=float, default=3.0,
                    help="beyond-memory: data per record size over the cgroup limit (3.0)")
    ap.add_argument("--beyond-seconds", type=float, default=20.0,
                    help="beyond-memory: a contender's timed window ends after this many seconds "
                         "(once it has 2 timed batches) (20)")
    ap.add_argument("--beyond-steps", type=int, default=40,
                    help="beyond-memory: ... or after this many timed batches (40)")
    ap.add_argument("--beyond-only", help="beyond-memory: only the contenders whose names start "
                                          "with one of these, comma-separated (e.g. 'zrecord')")
    ap.add_argument("--beyond-workloads", help="beyond-memory: only these workloads, separated by ';', "
                                               "names as in the tables (e.g. '256 KiB iid;4 KiB sequential, cold')")
    ap.add_argument("--beyond-daemon-args", default="",
                    help="beyond-memory: extra zrecordd flags, space-separated (e.g. "
                         "'--io-direct=off' to compare the page cache's path)")
    ap.add_argument("--multi-daemon-args", default="",
                    help="multi: extra zrecordd flags, space-separated (e.g. '--io-direct=off')")
    ap.add_argument("--multi-cold", action="store_true",
                    help="multi: drop the data's pages from the page cache (POSIX_FADV_DONTNEED) "
                         "before each configuration: runs that start over a cold store")
    ap.add_argument("--beyond-dir", help="beyond-memory: where its data goes (default: the run's "
                                         "temporary directory under $TMPDIR or /tmp); on a disk")
    ap.add_argument("--images", type=int, default=20000,
                    help="images: JPEGs of about 500 x 375 made for the layer (20000)")
    ap.add_argument("--png-images", type=int, default=4000,
                    help="images: how many of them also as PNG (4000: about 400 KB each)")
    ap.add_argument("--images-dir",
                    help="images: keep the layer's images, stores and shards here and reuse "
                         "them in a later run of the same --images/--png-images (default: made "
                         "in the run's temporary directory and dropped)")
    ap.add_argument("--image-steps", type=int, default=20,
                    help="images: timed batches of 256 per contender after 6 warm-up ones (20)")
    ap.add_argument("--no-plots", action="store_true", help="no PNGs")
    ap.add_argument("--out", help="where JSON, tables.md and PNGs go (default bench/results; "
                                  "with --quick a directory under $TMPDIR, so a quick run never "
                                  "overwrites the published figures)")
    args = ap.parse_args()
    layers = LAYERS if "all" in args.layers else args.layers
    for l in layers:
        if l not in LAYERS + PARTS:
            ap.error(f"unknown layer {l!r}: all, {', '.join(LAYERS + PARTS)}")
    if args.no_plots:
        C.bar_plot = lambda *a, **k: None

    if args.out:
        C.RESULTS = os.path.abspath(args.out)
    elif args.quick:
        C.RESULTS = os.path.join(tempfile.gettempdir(), "zrecord-bench-quick-results")
    t_start = time.monotonic()
    ctx = argparse.Namespace(**vars(args))
    ctx.build = C.find_build(args.build)
    ctx.tmp = tempfile.mkdtemp(prefix="zrecord-bench-")
    ctx.limits = None
    C.say("zrecord benchmark suite" + (" (--quick: sizes too small for the figures to mean anything)"
                                      if args.quick else ""))
    machine = C.machine_block(ctx.build)
    C.import_loaderx()
    daemon = C.Daemon(ctx.build, ctx.tmp)
    ctx.daemon = daemon
    out = {"machine": machine, "quick": args.quick}
    targets = []
    targets19 = []
    targets15 = []
    targets35 = []
    targets33 = []
    targets34 = []
    targets36 = []
    targets37 = []
    try:
        from suite import limits, sampler, store, loader, multi, resume, beyond, transforms, remote
        from suite import tokens, images
        needs_limits = any(l in layers for l in ("limits", "store", "loader", "multi",
                                                  "transforms", "hop", "tokens", "small-batches"))
        if needs_limits:
            ctx.limits = limits.run(ctx)
            out["limits"] = {str(k): v for k, v in ctx.limits.items()}
            C.write_json("limits", {"machine": machine, "limits": out["limits"]})
        if "sampler" in layers:
            out["sampler"] = sampler.run(ctx)
            C.write_json("sampler", {"machine": machine, "sampler": out["sampler"]})
        if "store" in layers:
            out["store"] = store.run(ctx)
            targets += store.targets(out["store"][0], ctx.limits)
            targets15 = store.targets15(out["store"], ctx.limits)
            C.write_json("store", {"machine": machine, "store": out["store"]})
        if "loader" in layers:
            out["loader"] = loader.run(ctx)
            targets += loader.targets(out["loader"])
            targets37 += loader.targets37(out["loader"])
            out["loader"]["transforms"] = transforms.run(ctx)
            targets35 = transforms.targets(out["loader"]["transforms"])
            C.write_json("loader", {"machine": machine, "loader": out["loader"],
                                    "targets35": [{"target": t, "got": v, "need": need}
                                                  for t, v, need in targets35]})
        if "transforms" in layers and "loader" not in layers:
            out["transforms"] = transforms.run(ctx)
            targets35 = transforms.targets(out["transforms"])
            C.write_json("transforms", {"machine": machine, "transforms": out["transforms"],
                                        "targets35": [{"target": t, "got": v, "need": need}
                                                      for t, v, need in targets35]})
        if "hop" in layers and "loader" not in layers and "transforms" not in layers:
            out["hop"] = transforms.run_hop(ctx, ctx.tmp)
            targets35 = transforms.targets({"rows": [], "hop": out["hop"]})
            C.write_json("hop", {"machine": machine, "hop": out["hop"],
                                 "targets35": [{"target": t, "got": v, "need": need}
                                               for t, v, need in targets35]})
        if "small-batches" in layers and "loader" not in layers:
            out["small"] = loader.run_small(ctx)
            targets37 += loader.targets37({"rows": [], "small": out["small"]})
            C.write_json("small-batches", {"machine": machine, "small": out["small"]})
        if "multi" in layers:
            out["multi"] = multi.run(ctx)
            targets += multi.targets(out["multi"])
            targets37 += multi.targets37(out["multi"])
            C.write_json("multi", {"machine": machine, "multi": out["multi"]})
        if "resume" in layers:
            out["resume"] = resume.run(ctx)
            C.write_json("resume", {"machine": machine, "resume": out["resume"]})
        if "beyond-memory" in layers:
            out["beyond"] = beyond.run(ctx)
            targets19 = beyond.targets(out["beyond"])
            beyond37 = beyond.targets37(out["beyond"])
            targets37 += beyond37
            C.write_json("beyond", {"machine": machine, "beyond": out["beyond"],
                                    "targets": [{"target": t, "got": v, "need": need}
                                                for t, v, need in targets19],
                                    "targets37": [{"target": t, "got": v, "need": need}
                                                  for t, v, need in beyond37]})
        if "remote" in layers:
            out["remote"] = remote.run(ctx)
            targets33 = remote.targets(out["remote"])
            C.write_json("remote", {"machine": machine, "remote": out["remote"],
                                    "targets": [{"target": t, "got": v, "need": need}
                                                for t, v, need in targets33]})
        if "tokens" in layers:
            out["tokens"] = tokens.run(ctx)
            targets34 = tokens.targets(out["tokens"])
            C.write_json("tokens", {"machine": machine, "tokens": out["tokens"],
                                    "targets": [{"target": t, "got": v, "need": need}
                                                for t, v, need in targets34]})
        if "images" in layers:
            out["images"] = images.run(ctx)
            targets36 = images.targets(out["images"])
            C.write_json("images", {"machine": machine, "images": out["images"],
                                    "targets36": [{"target": t, "got": v, "need": need}
                                                  for t, v, need in targets36]})
    finally:
        daemon.stop()
        C.drop_path(ctx.tmp)
    for issue, ts, key in ((9, targets, "targets"), (15, targets15, "targets15"),
                           (19, targets19, "targets19"), (33, targets33, "targets33"),
                           (34, targets34, "targets34"),
                           (35, targets35, "targets35"), (36, targets36, "targets36"),
                           (37, targets37, "targets37")):
        if not ts:
            continue
        rows = [{"target": t, "got": f"{v:.2f}x", "need": f"{need:g}x",
                 "met": "met" if v >= need else f"MISSED by {(1 - v / need) * 100:.0f}%"}
                for t, v, need in ts]
        C.table(f"targets (issue {issue}, this machine, this run)" + (
                    " -- --quick: sizes too small, these verdicts mean nothing" if args.quick else ""),
                [("target", "target"), ("got", "got"), ("need", "need"), ("met", "")], rows)
        out[key] = [{"target": t, "got": v, "need": need} for t, v, need in ts]
    machine["loadavg_end"] = os.getloadavg()
    C.say("")
    C.say(f"done in {time.monotonic() - t_start:.0f} s; load average at the end "
          f"{' '.join(f'{x:.2f}' for x in machine['loadavg_end'])}; results in "
          f"{C.RESULTS}/")
    if "all" in args.layers:
        C.write_json("all", out)
    os.makedirs(C.RESULTS, exist_ok=True)
    with open(os.path.join(C.RESULTS, "tables.md"), "w") as f:
        m = machine
        f.write(f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
                f"Python {m['python']}, numpy {m['numpy']}; {m['date']}; load average "
                f"{m['loadavg_start'][0]:.2f} at the start, {m['loadavg_end'][0]:.2f} at the end"
                f"{' (--quick)' if args.quick else ''}.\n\n")
        f.write("\n".join(C.MARKDOWN))
    return 0


if __name__ == "__main__":
    sys.exit(main())
