"""beyond_worker.py: one contender of the beyond-memory layer, inside its cgroup.

    python -m suite.beyond_worker JSON

The layer starts this process inside the contender's memory cgroup; everything
it starts stays there. For zrecord it first starts the daemon the loaders talk
to (suite.common.Daemon: a private socket in params["daemon"]["dir"], the
decoded-record cache budget of the workload), then runs `nproc` loaders with
different seeds: the first in this process, each other one in a child process.
Lines on stdout, answers on stdin:

    -> ready              every loader has its warm-up batches
    <- go                 the layer has read its counters
    -> {JSON}             the result, as soon as the timed batches are done
    <- bye (or EOF)       loaders closed, the daemon stopped, exit

A loader's timed window: `skip` batches (which may have waited in prefetch
buffers), then at least `min_steps` and at most `max_steps` batches, ending
early once `max_s` seconds have passed since "go" (a contender beyond memory
may take seconds per batch). Its rate is taken over the batches after `skip`.

Runs with only the standard library and numpy at import time (PyPI loaderx 1.5
runs it under its own venv), like suite.worker, whose make_iter() builds every
loader.
"""

import json
import os
import subprocess
import sys
import time
import zlib

import numpy as np

from . import worker as W


def _crc(idx):
    return zlib.crc32(np.ascontiguousarray(np.asarray(idx), dtype=np.uint64).tobytes())


def warm(p):
    """Builds the loader and takes its warm-up batches; returns (iterator, owner)."""
    it, owner = W.make_iter(p)
    for _ in range(p["warm"]):
        W.touch(next(it))
    return it, owner


def proc_cpu(pid):
    """CPU seconds (user + system) process `pid` has used, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def timed(it, p):
    """The timed window, from "go" (now)."""
    t_go = time.monotonic()
    cpu0 = time.process_time()
    skip, lo, hi, max_s = p["skip"], p["min_steps"], p["max_steps"], p["max_s"]
    stamps, checks = [], []
    step = p["warm"]                # batch k of a loader opened at step 0 is step k
    while True:
        b = next(it)
        W.touch(b)
        if isinstance(b, dict) and "__index__" in b:
            checks.append([step, _crc(b["__index__"])])
            if len(checks) > 3:
                del checks[1]        # the first and the last two
        del b
        stamps.append(time.monotonic())
        step += 1
        n = len(stamps) - skip
        if n >= hi or (n >= lo and stamps[-1] - t_go >= max_s):
            break
    t0 = stamps[skip - 1] if skip else t_go
    t1 = stamps[-1]
    n = len(stamps) - skip
    return {"seed": p["seed"], "start": t0, "end": t1, "steps": n, "delivered": len(stamps),
            "bps": n / (t1 - t0) if t1 > t0 else float("nan"), "index_crc": checks,
            "pid": os.getpid(), "cpu_s": time.process_time() - cpu0, "window_s": t1 - t_go}


def wait_go():
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


def close_loader(objs):
    for obj in objs:
        for name in ("_shutdown_workers", "close"):
            fn = getattr(obj, name, None)
            if fn:
                try:
                    fn()
                except Exception:
                    pass
                break


def status():
    """The daemon's STATUS (zrecord only)."""
    sys.path.insert(0, W.PYCLIENT)
    import loaderx
    conn = loaderx.connect(os.environ["ZRECORD_SOCKET"])
    try:
        st = conn.request("status")
    finally:
        conn.close()
    keep = ("gathers", "batches", "hits", "misses", "bytes", "evictions", "cache", "prefetch",
            "budgets")
    out = {k: st.get(k) for k in keep}
    out["per_loader"] = [{k: pl.get(k) for k in ("pid", "loader", "step", "batches", "gathers",
                                                   "hits", "misses")}
                         for pl in st.get("per_loader") or []]
    return out


def child_run(p):
    """A loader in a child process: warm-up, ready, go, result line, bye."""
    it, owner = warm(p)
    wait_go()
    res = timed(it, p)
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()
    sys.stdin.readline()
    close_loader((it, owner))
    return 0


def main(p):
    daemon = None
    if p.get("daemon"):
        from . import common as C
        d = p["daemon"]
        daemon = C.Daemon(d["build"], d["dir"], cache=d.get("cache"), extra=d.get("extra") or ())
    children, objs = [], ()
    try:
        # the first loader runs here, the others in child processes (one
        # interpreter fewer in the cgroup than a relay process would cost)
        for s in p["seeds"][1:p["nproc"]]:
            cp = dict(p, seeds=[s], seed=s, role="child", daemon=None)
            children.append(subprocess.Popen([sys.executable, "-m", "suite.beyond_worker",
                                              json.dumps(cp)], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, text=True))
        lp = dict(p, seed=p["seeds"][0])
        objs = warm(lp)
        for c in children:
            if c.stdout.readline().strip() != "ready":
                raise SystemExit("a loader process failed before its first batches")
        wait_go()
        dcpu0 = proc_cpu(daemon.pid) if daemon else None
        st0 = status() if daemon else None
        for c in children:
            c.stdin.write("go\n")
            c.stdin.flush()
        res = [timed(objs[0], lp)]
        for c in children:
            line = c.stdout.readline()
            if not line:
                raise SystemExit("a loader process died during its timed batches")
            res.append(json.loads(line))
        st1 = status() if daemon else None
        dcpu1 = proc_cpu(daemon.pid) if daemon else None
        out = {"loaders": res, "status0": st0, "status1": st1,
               "daemon_cpu_s": dcpu1 - dcpu0 if dcpu0 is not None and dcpu1 is not None else None,
               "agg_bps": sum(r["steps"] for r in res) / (max(r["end"] for r in res) -
                                                          min(r["start"] for r in res)),
               "delivered": sum(r["delivered"] for r in res)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        sys.stdin.readline()
        return 0
    finally:
        for c in children:
            try:
                c.stdin.write("bye\n")
                c.stdin.close()
                c.wait(timeout=20)
            except Exception:
                c.kill()
                c.wait()
        close_loader(objs)
        if daemon is not None:
            daemon.stop()


if __name__ == "__main__":
    params = json.loads(sys.argv[1])
    sys.exit(child_run(params) if params.get("role") == "child" else main(params))
