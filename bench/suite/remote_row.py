"""One row of the remote layer (remote.py), repeated, with daemon flags to compare.

    python3 bench/suite/remote_row.py RECORD BATCH PROCS SECONDS MIB [FLAGS ...]

Makes the data once (MIB MiB of RECORD-byte records, pushed to a SeaweedFS on
loopback behind the proxy of remote.py), then for each FLAGS (a comma-separated
list of zrecordd flags, "" for none), twice in turn: the probe, then zrecord's
row (remote.run_zrecord(): PROCS processes, batches of BATCH, a warm-up, a window
of SECONDS), printing its batches/s, × probe, fetched/needed and hits against
MIN, with the load. For telling a change of the daemon from the noise of a busy
machine one row at a time; the layer itself is `bench/run.py remote`.
"""

import argparse
import os
import shutil
import sys
import tempfile
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from suite import common as C        # noqa: E402
from suite import remote as R        # noqa: E402


def main():
    rec, batch, nproc = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    secs, total = float(sys.argv[4]), int(sys.argv[5]) << 20
    configs = [a.split(",") if a else [] for a in sys.argv[6:]] or [[]]
    C.import_loaderx()
    ctx = argparse.Namespace(build=C.find_build(None), quick=False)
    tmp = tempfile.mkdtemp(prefix="zrecord-remote-row-")
    s3server, s3proxy, _ = R._lib()
    flags = []
    base = C.Daemon

    class Daemon(base):   # run_zrecord()'s daemon, with the flags of the turn
        def __init__(self, build, d, extra=(), **kw):
            super().__init__(build, d, extra=tuple(extra) + tuple(flags), **kw)

    C.Daemon = Daemon
    with s3server.running("zrecord-remote-row-") as srv:
        proxy = s3proxy.S3Proxy(srv.port, latency_s=R.LATENCY_S, rate_bps=R.RATE_BPS).start()
        try:
            srv.make_bucket(R.BUCKET)
            nrec = max(total // rec, 4 * batch)
            url, _ = R.make_data(ctx, srv, rec, nrec, tmp)
            key = urllib.parse.urlparse(url).path.lstrip("/") + "/0.chunk"
            for i, cfg in enumerate(configs * 2):
                pr = R.probe(srv, proxy, key, rec, nrec, 6.0)
                flags[:] = cfg
                p = {"warm": 12 if rec == 4096 else 10, "steps": 1000, "seconds": secs}
                sub = os.path.join(tmp, f"run{i}")
                os.makedirs(sub)
                z = R.run_zrecord(ctx, srv, proxy, url, rec, batch, nrec, nproc, p, sub)
                C.say(f"{' '.join(cfg) or 'defaults'}: probe {pr / 1e6:.2f} MB/s; zrecord "
                      f"{z['batches_s']:.2f} batches/s, {z['server_Bps'] / pr:.2f}x probe; "
                      f"fetched/needed {z['fetched_per_needed']:.2f}; hits {z['hit']:.3f}, "
                      f"MIN {z['hit_min']:.3f}: {z['hit'] / z['hit_min']:.2f}x; "
                      f"load {os.getloadavg()[0]:.1f}")
        finally:
            proxy.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
