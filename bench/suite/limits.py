"""Limits: the C probes (bench/limits), run from this invocation.

memcpy gather of the same records from memory on 1 thread and on all threads,
the same gather on all threads through streaming stores (the daemon's copy of a
large batch, daemon/util/copy.h), and zstd (level 3) decompress of the same records' frames on 1 and all threads,
for both workloads (512 x 512 and 64 x 64 uint8 images). Every zrecord figure
of the other layers is printed as a fraction of these.
"""

import os
import re
import subprocess

from . import common as C
from .common import say

LINE = re.compile(r"^\s+(memcpy gather|streaming gather|zstd decompress), (1 thread|all threads)\s+([\d.]+) GiB/s median\s+([\d.]+) GiB/s best")
HEAD = re.compile(r"^(.*): (\d+) records of (\d+) B, batch (\d+) .*ratio ([\d.]+)")


def run(ctx):
    exe = os.path.join(ctx.build, "bench", "limits")
    args = [exe] + (["--quick"] if ctx.quick else ["--records", str(ctx.records), "--batches", "9"])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    lim, cur = {}, None
    for line in out.splitlines():
        m = HEAD.match(line)
        if m:
            cur = lim.setdefault(int(m.group(3)), {"label": m.group(1), "records": int(m.group(2)),
                                                   "batch": int(m.group(4)),
                                                   "zstd3_ratio": float(m.group(5))})
            continue
        m = LINE.match(line)
        if m and cur is not None:
            key = m.group(1).split()[0].replace("streaming", "stream") + \
                  ("_1t" if m.group(2) == "1 thread" else "_mt")
            cur[key] = float(m.group(3))
            cur[key + "_best"] = float(m.group(4))
    rows = [{"workload": f"{v['label']} ({k // 1024} KiB x {v['batch']})", **v} for k, v in sorted(lim.items(), reverse=True)]
    C.table(f"limits (C probes, {os.path.relpath(exe, C.REPO)}; GiB/s of decoded bytes, median and best "
            "batch; zrecord's fractions are of the best)",
            [("workload", "workload"), ("memcpy_1t", "memcpy 1 thr"), ("memcpy_1t_best", "best"),
             ("memcpy_mt", "memcpy all"), ("memcpy_mt_best", "best"), ("stream_mt", "streaming all"),
             ("stream_mt_best", "best"), ("zstd_1t", "zstd-3 dec 1 thr"),
             ("zstd_1t_best", "best"), ("zstd_mt", "zstd-3 dec all"), ("zstd_mt_best", "best"),
             ("zstd3_ratio", "zstd-3 ratio")],
            rows)
    return lim
