"""Reading stores in object storage ahead of the loaders, through a fault proxy
(tests/lib/s3proxy.py) in front of a real S3 server: two processes with other
seeds fetch each byte once between them; 503s, resets, cut and damaged bodies are
retried and the batches stay bit for bit; a body damaged twice ends the loader
with ZR_E_CORRUPT; a server that goes away stalls the loader (STATUS says
degraded, its stage says remote) and it resumes when the server returns."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import PKG, tool_binary
from loaderx import ZrecordError
from loaderx._conn import default as default_conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

BUCKET = "zr-test"
RECORD = 4096


def push(s3, local, url):
    r = subprocess.run([tool_binary(), "push", str(local), url], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, **s3.env()))
    assert r.returncode == 0, r.stderr


@pytest.fixture
def store(s3, tmp_path, request, monkeypatch, s3proxy):
    """A raw store of 2000 records of 4 KiB, pushed; the client's endpoint is the
    proxy's, so the daemon's every request goes through it."""
    if not tool_binary():
        pytest.skip("no zrecord tool: set ZR_BUILD")
    s3.make_bucket(BUCKET)
    a = np.random.default_rng(1).integers(0, 255, (2000, RECORD), dtype=np.uint8)
    d = DenseDataset(str(tmp_path / "local"), dtype="u1", item_shape=(RECORD,), codec="raw")
    d.append(a)
    d.close()
    url = f"s3://{BUCKET}/fetch/{request.node.name[:40]}"
    push(s3, tmp_path / "local", url)
    for k, v in s3.env(endpoint=s3proxy.endpoint).items():
        monkeypatch.setenv(k, v)
    return str(tmp_path / "local"), url, a


def remote_status():
    return default_conn().request("status")["remote"]


WORKER = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
url, seed, steps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loader = DataLoader({"x": DenseDataset(url)}, batch_size=100, sampler="cyclic", seed=seed)
sums = [int(np.asarray(next(loader)["x"], dtype=np.uint64).sum()) for _ in range(steps)]
print(json.dumps(sums))
"""


def test_two_processes_fetch_each_byte_once(store, s3proxy):
    local, url, a = store
    before = remote_status()
    s3proxy.record_ranges = True          # from the open on (its fingerprint's records)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, PKG, url, str(seed), "20"],
                              stdout=subprocess.PIPE, text=True) for seed in (1, 2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    # each batch is the local store's
    for seed, out in zip((1, 2), outs):
        want = DataLoader({"x": DenseDataset(local)}, batch_size=100, sampler="cyclic", seed=seed)
        assert json.loads(out) == [int(np.asarray(next(want)["x"], dtype=np.uint64).sum())
                                   for _ in range(20)]
    # one epoch each, of other orders: every record needed twice, fetched once
    got = sorted(r for r in s3proxy.ranges if r[0].endswith("/0.chunk"))
    assert got, s3proxy.ranges
    total = 0
    for (p0, a0, b0), (p1, a1, b1) in zip(got, got[1:]):
        assert a1 > b0, f"bytes {a1}-{b0} fetched twice"
    for _, x, y in got:
        total += y - x + 1
    assert total == a.nbytes
    st = remote_status()
    assert st["fetched_bytes"] - before["fetched_bytes"] == total
    assert st["needed_bytes"] - before["needed_bytes"] == total
    assert st["failures"] == before["failures"]


def test_faults_are_retried_bit_for_bit(store, s3proxy):
    local, url, a = store
    ds = DenseDataset(url)
    before = remote_status()
    chunk = lambda m, p, h: m == "GET" and p.endswith("0.chunk")   # noqa: E731
    s3proxy.inject("503", 3, chunk)
    s3proxy.inject("reset", 2, chunk)
    s3proxy.inject("truncate", 2, chunk)
    s3proxy.inject("corrupt", 1, chunk)
    kw = dict(batch_size=64, sampler="iid", seed=5)
    want = DataLoader({"x": DenseDataset(local)}, **kw)
    got = DataLoader({"x": ds}, **kw)
    for _ in range(25):
        assert np.array_equal(np.asarray(next(got)["x"]), np.asarray(next(want)["x"]))
    assert s3proxy.faults_done == {"503": 3, "reset": 2, "truncate": 2, "corrupt": 1}
    st = remote_status()
    # a reset before any byte may be retried by libcurl itself, on a new connection
    assert st["retries"] - before["retries"] >= 5
    assert st["refetched"] - before["refetched"] == 1
    assert st["failures"] == before["failures"] and st["state"] == "ok"


def test_damaged_twice_is_an_error(store, s3proxy):
    local, url, a = store
    ds = DenseDataset(url)
    s3proxy.inject("corrupt", 1000, lambda m, p, h: m == "GET" and p.endswith("0.chunk"))
    with pytest.raises(ZrecordError) as e:
        ds[[0, 1, 2]]
    assert e.value.name == "ZR_E_CORRUPT" and "does not match its checksum" in str(e.value)


def test_server_gone_stalls_then_resumes(store, s3proxy):
    local, url, a = store
    ds = DenseDataset(url)        # the open needs the server; a loader's open does not
    want = DataLoader({"x": DenseDataset(local)}, batch_size=50, sampler="sequential", seed=0)
    s3proxy.set_down(True)        # before the loader: it reads nothing ahead meanwhile
    loader = DataLoader({"x": ds}, batch_size=50, sampler="sequential", seed=0, prefetch=2)
    got = {}
    t = threading.Thread(target=lambda: got.update(b=np.array(next(loader)["x"])))
    t.start()
    assert s3proxy.wait_refused(4), "the daemon did not try again while the server was gone"
    st = default_conn().request("status")
    assert st["remote"]["state"] == "degraded" and "degraded_ms" in st["remote"]
    assert "b" not in got                   # the loader waits
    stages = [p.get("telemetry", {}).get("stage") for p in st["per_loader"]]
    assert "remote" in stages, stages
    tool = tool_binary()
    top = subprocess.run([tool, "top", "-n", "1", "--json"], capture_output=True, text=True,
                         timeout=60)
    assert top.returncode == 0 and '"remote"' in top.stdout, top.stdout
    s3proxy.set_down(False)
    t.join(timeout=120)
    assert not t.is_alive()
    assert np.array_equal(got["b"], np.asarray(next(want)["x"]))
    for _ in range(5):
        assert np.array_equal(np.asarray(next(loader)["x"]), np.asarray(next(want)["x"]))
    assert remote_status()["state"] == "ok"
