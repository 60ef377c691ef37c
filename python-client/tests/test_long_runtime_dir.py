"""The embedded default under a long ``XDG_RUNTIME_DIR``: the private daemon starts
whenever its socket path fits a Unix socket address (107 bytes and a NUL), and
where it does not the error names the path, its length and the limit.

Before the fix, an ``XDG_RUNTIME_DIR`` of 81 characters (socket path 103 bytes)
failed with ``OSError: AF_UNIX path too long``: the client bound its notify socket
under a longer temporary name."""

import json
import os
import signal
import time

import pytest

from loaderx import _daemon

from conftest import daemon_binary
from test_processes import _alive, run_py

# The start itself, as Connection() does it when no daemon answers (called directly:
# a daemon at another default path, /tmp/zrecord-<uid>, would otherwise be used).
CODE = """
    import json, os, numpy as np
    from loaderx import _conn, _daemon
    from loaderx.utils import from_numpy
    from loaderx.dataset import DenseDataset
    os.environ['ZRECORD_SOCKET'] = _daemon.ensure_private_daemon()
    from_numpy('s', np.arange(12, dtype=np.int64))
    c = _conn.default()
    print(json.dumps({'path': c.path, 'sum': int(DenseDataset('s')[:].sum())}))
"""


def the_binary():
    b = daemon_binary()
    if not b:
        pytest.skip("no zrecordd binary: set ZRECORDD")
    return b


def runtime_dir(tmp_path, length):
    """A directory (mode 0700) whose path is exactly ``length`` bytes."""
    base = str(tmp_path) + "/"
    pad = length - len(base)
    assert pad > 0, f"{base} is already longer than {length}"
    d = base + "r" * pad
    os.mkdir(d, 0o700)
    assert len(d) == length
    return d


def env_for(run, daemon):
    env = dict(os.environ)
    env.pop("ZRECORD_SOCKET", None)
    env.update(XDG_RUNTIME_DIR=run, ZRECORDD=daemon, ZRECORD_IDLE_EXIT="30")
    return env


def stop(run):
    try:
        pid = int(open(os.path.join(run, "zrecord", "zrecordd.pid")).read())
    except OSError:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.no_daemon
@pytest.mark.parametrize("length", [81, 107 - len("/zrecord/zrecordd.sock")])
def test_auto_start_under_a_long_runtime_dir(tmp_path, monkeypatch, length):
    """81 characters (the report), and the longest directory whose socket path fits."""
    b = the_binary()
    run = runtime_dir(tmp_path, length)
    monkeypatch.chdir(tmp_path)
    try:
        out = json.loads(run_py(CODE, env_for(run, b)))
        sock = os.path.join(run, "zrecord", "zrecordd.sock")
        assert out == {"path": sock, "sum": 66}
        assert len(sock) <= 107
        # nothing is left of the readiness handshake
        assert sorted(os.listdir(os.path.join(run, "zrecord"))) == [
            "start.lock", "zrecordd.log", "zrecordd.pid", "zrecordd.sock"]
    finally:
        stop(run)


@pytest.mark.no_daemon
def test_a_socket_path_too_long_is_refused_by_name(tmp_path, monkeypatch):
    b = the_binary()
    run = runtime_dir(tmp_path, 107 - len("/zrecord/zrecordd.sock") + 1)
    sock = os.path.join(run, "zrecord", "zrecordd.sock")
    monkeypatch.chdir(tmp_path)
    code = """
        from loaderx import _daemon
        from loaderx._errors import ZrecordConnectionError
        try:
            _daemon.ensure_private_daemon()
        except ZrecordConnectionError as e:
            print(e.message)
    """
    msg = run_py(code, env_for(run, b)).strip()
    assert sock in msg and f"{len(sock)} bytes" in msg and "at most 107" in msg, msg
    assert "XDG_RUNTIME_DIR" in msg and "ZRECORD_SOCKET" in msg
    assert not os.path.exists(os.path.join(run, "zrecord", "zrecordd.pid")), "a daemon was started"
