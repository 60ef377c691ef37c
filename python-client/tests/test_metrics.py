"""The daemon's Prometheus metrics (docs/TELEMETRY.md), read with prometheus_client's
own parser: `zrecord metrics` (METRICS) and the metrics-listen endpoint serve the
same families; a loader's series carry its pid, uid, handle and dataset (a hostile
directory name escaped, and back as the daemon names it); counters agree with
STATUS; histograms are cumulative. The endpoint answers GET /metrics only, bounds
what a peer can make it hold and shows a TCP peer, who cannot be told apart, the
daemon-wide families only; a non-loopback address is refused at start."""

import os
import socket
import subprocess
import time

import numpy as np
import pytest

from loaderx import _conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import daemon_binary, tool_binary

parser = pytest.importorskip("prometheus_client.parser")
WAIT = 30


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def tool(sock, *args):
    t = tool_binary()
    if not t:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    r = subprocess.run([t, "--socket", sock, *args], capture_output=True, text=True,
                       timeout=WAIT)
    assert r.returncode == 0, r.stderr
    return r.stdout


def samples(fam, **labels):
    return [s for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())]


# a directory name a shell, a label and a terminal would all choke on: a quote, a
# backslash, a newline and a byte that is not UTF-8
HOSTILE = b'we"ird\\dir\nname-\xff'


def loaders(n_batches=6):
    """Two loaders of this process, one over a store in the hostile directory;
    returns them with the dataset label each should have."""
    x = np.arange(512 * 16, dtype=np.float32).reshape(512, 16)
    from_numpy("plain", x, codec="raw")
    os.mkdir(HOSTILE)
    from_numpy(HOSTILE.decode("utf-8", "surrogateescape"), x, codec="raw")
    out = []
    for name in (b"plain", HOSTILE):
        path = name.decode("utf-8", "surrogateescape")
        loader = DataLoader({"x": DenseDataset(path)}, batch_size=16, sampler="cyclic",
                            prefetch=2)
        for _ in range(n_batches):
            next(loader)
        label = os.path.realpath(os.fsencode(path)).decode("utf-8", "replace")
        # the daemon's UTF-8 repair: each bad byte, each control character, one '?'
        label = label.replace("\ufffd", "?").replace("\n", "?")
        out.append((loader, label))
    return out


def status_batches(handle):
    r = _conn.default().request("status", {"loader": handle})
    return r["per_loader"][0]["batches"]


def test_metrics_parse_and_agree_with_status(own_daemon):
    sock = own_daemon()
    ls = loaders()
    before = {l._session.loader: status_batches(l._session.loader) for l, _ in ls}
    fams = families(tool(sock, "metrics"))
    after = {l._session.loader: status_batches(l._session.loader) for l, _ in ls}
    types = {n: f.type for n, f in fams.items()}
    for name, kind in (("zrecord_loader_batches", "counter"),
                       ("zrecord_loader_wait_seconds", "counter"),
                       ("zrecord_loader_bytes", "counter"),
                       ("zrecord_loader_stage_seconds", "counter"),
                       ("zrecord_loader_batches_per_second", "gauge"),
                       ("zrecord_loader_verdict", "gauge"),
                       ("zrecord_loader_consumer_wait_seconds", "histogram"),
                       ("zrecord_loader_gather_duration_seconds", "histogram"),
                       ("zrecord_loaders_by_verdict", "gauge"),
                       ("zrecord_batches", "counter")):
        assert types.get(name) == kind, (name, types.get(name))
    assert fams["zrecord_loaders"].samples[0].value == 2
    assert sum(s.value for s in fams["zrecord_loaders_by_verdict"].samples) == 2
    for loader, label in ls:
        h = loader._session.loader
        who = dict(pid=str(os.getpid()), uid=str(os.getuid()), loader=str(h))
        got = samples(fams["zrecord_loader_batches"], **who)
        assert len(got) == 1, fams["zrecord_loader_batches"].samples
        assert got[0].labels["dataset"] == label
        assert before[h] <= got[0].value <= after[h]
        verdicts = samples(fams["zrecord_loader_verdict"], **who)
        assert sorted(s.labels["verdict"] for s in verdicts) == sorted(
            ["data-bound", "consumer-bound", "balanced", "idle", "unknown"])
        assert sum(s.value for s in verdicts) == 1
        # histograms: cumulative, +Inf is the count, one wait per batch returned
        # and released (the last ones may still be held)
        for hist in ("zrecord_loader_consumer_wait_seconds",
                     "zrecord_loader_gather_duration_seconds"):
            ss = samples(fams[hist], **who)
            buckets = sorted(((float(s.labels["le"]), s.value) for s in ss
                              if s.name.endswith("_bucket")))
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), buckets
            count = [s.value for s in ss if s.name.endswith("_count")]
            assert buckets[-1][0] == float("inf") and [buckets[-1][1]] == count
        waits = [s.value for s in samples(fams["zrecord_loader_consumer_wait_seconds"], **who)
                 if s.name.endswith("_count")][0]
        assert 6 - 2 <= waits <= 6, waits
    for loader, _ in ls:
        loader.close()


# ---- the endpoint ---------------------------------------------------------------

def http(addr, request, family=socket.AF_UNIX):
    """Sends the request bytes, reads to the close; returns (status line, headers,
    body)."""
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(WAIT)
    s.connect(addr)
    s.sendall(request)
    with s, s.makefile("rb") as f:
        data = f.read()                                  # to the daemon's close
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    hdrs = dict(l.split(": ", 1) for l in lines[1:] if ": " in l)
    return lines[0], hdrs, body


def test_endpoint_over_a_unix_socket(own_daemon, tmp_path):
    path = str(tmp_path / "metrics.sock")
    sock = own_daemon(f"--metrics-listen={path}")
    ls = loaders(2)
    status, hdrs, body = http(path, b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
    assert status == "HTTP/1.0 200 OK"
    assert hdrs["Content-Type"].startswith("text/plain; version=0.0.4")
    assert int(hdrs["Content-Length"]) == len(body)
    fams = families(body.decode())
    # the same families as METRICS, and this uid's loaders (SO_PEERCRED)
    assert set(fams) == set(families(tool(sock, "metrics")))
    assert len(samples(fams["zrecord_loader_step"], pid=str(os.getpid()))) == 2
    # HEAD: the headers alone
    status, hdrs, body = http(path, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert status == "HTTP/1.0 200 OK" and body == b"" and int(hdrs["Content-Length"]) > 0
    # what else it answers
    assert http(path, b"GET /other HTTP/1.0\r\n\r\n")[0] == "HTTP/1.0 404 Not Found"
    assert http(path, b"POST /metrics HTTP/1.0\r\n\r\n")[0] == "HTTP/1.0 405 Method Not Allowed"
    assert http(path, b"\x00\xff garbage\r\n\r\n")[0] == "HTTP/1.0 400 Bad Request"
    assert http(path, b"\n\n")[0] == "HTTP/1.0 400 Bad Request"
    # a head longer than 4 KiB: refused once it passes the bound, never echoed
    status, _, body = http(path, b"GET /metrics HTTP/1.0\r\nX: " + b"a" * 8192)
    assert status == "HTTP/1.0 400 Bad Request" and b"aaaa" not in body
    # peers that have their answers and linger (they have not closed) give their
    # places up to new ones
    lingering = []
    for _ in range(8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(WAIT)
        s.connect(path)
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        with s.makefile("rb") as f:
            assert f.read().startswith(b"HTTP/1.0 200 OK")   # to the daemon's EOF
        lingering.append(s)
    # one peer (a uid, here) holds four places at most: each new connection of
    # it takes the place of its oldest, so of eight unfinished heads the four
    # oldest are closed and the four newest served
    held = []
    for _ in range(8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(WAIT)
        s.connect(path)
        s.sendall(b"GET /metrics HTTP/1.0\r\n")      # not finished
        held.append(s)
    for s in held[:4]:
        assert s.recv(100) == b""
        s.close()
    for s in held[4:]:                                   # within their 2 s
        s.sendall(b"\r\n")
    for s in held[4:]:
        assert s.recv(64).startswith(b"HTTP/1.0 200 OK")
        s.close()
    for s in lingering:
        s.close()
    # a peer that says nothing is closed after the head's deadline (2 s)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(WAIT)
    s.connect(path)
    t0 = time.monotonic()
    assert s.recv(100) == b""
    assert 1 < time.monotonic() - t0 < WAIT
    s.close()
    # and it still serves
    assert http(path, b"GET /metrics HTTP/1.0\r\n\r\n")[0] == "HTTP/1.0 200 OK"
    for loader, _ in ls:
        loader.close()


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_endpoint_over_tcp_shows_daemon_families_only(own_daemon):
    port = free_port()
    own_daemon(f"--metrics-listen=127.0.0.1:{port}")
    ls = loaders(2)
    status, _, body = http(("127.0.0.1", port), b"GET /metrics HTTP/1.0\r\n\r\n",
                           socket.AF_INET)
    assert status == "HTTP/1.0 200 OK"
    fams = families(body.decode())
    assert fams["zrecord_loaders"].samples[0].value == 2
    assert not [n for n in fams if n.startswith("zrecord_loader_")], sorted(fams)
    assert str(os.getpid()).encode() not in body and b"plain" not in body
    for loader, _ in ls:
        loader.close()


@pytest.mark.no_daemon
@pytest.mark.parametrize("addr", ["192.0.2.1:9100", "[2001:db8::1]:9100", "0.0.0.0:9100",
                                  "relative/metrics.sock", "127.0.0.1:0", "127.0.0.1:x",
                                  "example.com:9100"])
def test_metrics_listen_refuses_what_is_not_local(addr, tmp_path):
    binary = daemon_binary()
    if not binary:
        pytest.skip("no zrecordd binary: set ZRECORDD")
    r = subprocess.run([binary, f"--socket={tmp_path / 's'}", f"--metrics-listen={addr}"],
                       capture_output=True, text=True, timeout=WAIT)
    assert r.returncode != 0
    assert "metrics-listen" in r.stderr, r.stderr
    assert not (tmp_path / "s").exists()


def test_a_mixtures_dataset_names_each_store_once(own_daemon):
    """A mixture's loader names every source's store, in source order, each once
    (two sources over one store: one name)."""
    own_daemon()
    x = np.arange(64 * 4, dtype=np.float32).reshape(64, 4)
    for name in ("a", "b"):
        from_numpy(name, x, codec="raw")
    a, b = DenseDataset("a"), DenseDataset("b")
    loader = DataLoader([({"x": a}, 1), ({"x": b}, 1), ({"x": DenseDataset("a")}, 2)],
                        batch_size=8, sampler="cyclic", prefetch=2, num_workers=0)
    next(loader)
    r = _conn.default().request("status", {"loader": loader._session.loader})
    want = ",".join(os.path.realpath(p) for p in ("a", "b"))
    assert r["per_loader"][0]["dataset"] == want
    loader.close()
