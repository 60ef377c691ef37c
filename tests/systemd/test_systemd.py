"""The service side of zrecordd, tested for real: the units verify, the system
unit's exposure stays at most 2.0 with every uid mapped, both units bound memory
and tasks, socket activation through systemd-socket-activate serves a client on
the passed socket, the notify protocol says READY/STATUS, WATCHDOG and STOPPING
in order, SIGHUP reloads the config file and says what changed, log lines carry
<N> priorities under journald, and `meson install --destdir` lays the files where
the README says.

Needs: $ZRECORDD (the built daemon) and $ZR_BUILD (its meson build directory).
Every wait is on a socket or a process, bounded by a timeout; nothing sleeps.
"""

import contextlib
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import time

import msgpack
import pytest

ZRECORDD = os.environ.get("ZRECORDD")
BUILD = os.environ.get("ZR_BUILD")
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

pytestmark = pytest.mark.skipif(not ZRECORDD or not os.access(ZRECORDD, os.X_OK),
                                reason="set $ZRECORDD to the built zrecordd")

WAIT = 20.0  # seconds: a bound on every wait, never a sleep


def hello(sock_path):
    """Connects, sends HELLO, returns the decoded reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(WAIT)
    s.connect(sock_path)
    body = msgpack.packb({"kind": "hello", "id": 1, "min_version": 1, "max_version": 1,
                          "features": []})
    s.sendall(struct.pack("<I", len(body)) + body)
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        assert chunk, "daemon closed the connection"
        head += chunk
    (n,) = struct.unpack("<I", head)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk
        data += chunk
    s.close()
    return msgpack.unpackb(data)


class Notify:
    """A datagram socket standing in for the service manager."""

    def __init__(self, tmp_path):
        self.path = str(tmp_path / "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def next(self, timeout=WAIT):
        r, _, _ = select.select([self.sock], [], [], timeout)
        assert r, "no notify datagram in time"
        return self.sock.recv(4096).decode()

    def until(self, key, timeout=WAIT):
        """Datagrams received until one holds `key` (inclusive)."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.next(max(0.0, deadline - time.monotonic()))
            seen.append(msg)
            if key in msg.split("\n"):
                return seen

    def close(self):
        self.sock.close()


def start(tmp_path, notify, *args, env=None, stderr=None):
    sock = str(tmp_path / "zrecordd.sock")
    e = dict(os.environ, NOTIFY_SOCKET=notify.path)
    e.pop("JOURNAL_STREAM", None)
    if env:
        e.update(env)
    proc = subprocess.Popen([ZRECORDD, f"--socket={sock}", "--threads=1", *args], env=e,
                            stdout=subprocess.DEVNULL, stderr=stderr or subprocess.DEVNULL)
    return proc, sock


def test_notify_ready_status_watchdog_stopping(tmp_path):
    n = Notify(tmp_path)
    proc, sock = start(tmp_path, n, env={"WATCHDOG_USEC": "200000"})
    try:
        first = n.until("READY=1")[-1].split("\n")
        assert "READY=1" in first
        assert any(line.startswith("STATUS=") for line in first)
        assert hello(sock)["kind"] == "ok"      # serving once READY was said
        assert "WATCHDOG=1" in n.until("WATCHDOG=1")[-1]
        proc.send_signal(signal.SIGTERM)
        seen = n.until("STOPPING=1")
        assert all("READY=1" not in m for m in seen)
        assert proc.wait(WAIT) == 0
        assert not os.path.exists(sock)          # the daemon removes the socket it made
    finally:
        if proc.poll() is None:
            proc.kill()
        n.close()


@contextlib.contextmanager
def serving(tmp_path, *args, journal=False):
    """zrecordd started with its stderr in tmp_path/stderr (under journald's
    JOURNAL_STREAM if `journal`), yielded as (proc, sock, notify) once READY=1
    came; at the end SIGTERM, and it must exit 0 (killed if the test failed)."""
    err = open(tmp_path / "stderr", "wb")
    st = os.fstat(err.fileno())
    env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"} if journal else None
    n = Notify(tmp_path)
    proc, sock = start(tmp_path, n, *args, stderr=err, env=env)
    try:
        n.until("READY=1")
        yield proc, sock, n
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        n.close()
        err.close()


def reload_with(tmp_path, before, after):
    """zrecordd started on a config file holding `before`, which then holds
    `after` and is reloaded with SIGHUP; the daemon must still answer HELLO.
    Returns the notify datagrams up to the READY=1 that ends the reload; the
    daemon's stderr is in tmp_path/stderr."""
    conf = tmp_path / "zrecordd.conf"
    conf.write_text(before)
    with serving(tmp_path, f"--config={conf}") as (proc, sock, n):
        conf.write_text(after)
        proc.send_signal(signal.SIGHUP)
        seen = n.until("READY=1")
        assert hello(sock)["kind"] == "ok"      # still serving
    return seen


def test_sighup_reloads_and_says_what_changed(tmp_path):
    seen = reload_with(tmp_path, "log-level = info\nmax-clients = 10\n",
                       "log-level = debug\nmax-clients = 20\ncache = 64M\n")
    assert any("RELOADING=1" in m for m in seen)   # RELOADING=1 ... READY=1
    log = (tmp_path / "stderr").read_text()
    assert "log-level info -> debug" in log
    assert "max_clients 10 -> 20" in log or "max-clients 10 -> 20" in log
    assert "settings changed" in log


def test_bad_reload_keeps_settings(tmp_path):
    reload_with(tmp_path, "log-level = info\n", "no-such-setting = 1\n")
    assert "keeping the settings in force" in (tmp_path / "stderr").read_text()


def test_journal_priorities(tmp_path):
    with serving(tmp_path, "--log-level=debug", journal=True) as (proc, sock, n):
        hello(sock)
    lines = [l for l in (tmp_path / "stderr").read_text().splitlines() if l]
    assert lines, "the daemon logged nothing at debug level"
    assert all(l[0] == "<" and l[2] == ">" and l[1] in "01234567" for l in lines), lines[:3]


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None,
                    reason="systemd-socket-activate is not installed")
def test_socket_activation(tmp_path):
    sock = str(tmp_path / "activated.sock")
    n = Notify(tmp_path)
    env = dict(os.environ, NOTIFY_SOCKET=n.path)
    # The activator listens; zrecordd starts only when a client connects, and must
    # serve on the passed descriptor (its own --socket path is never bound).
    own = str(tmp_path / "never.sock")
    proc = subprocess.Popen(["systemd-socket-activate", "-l", sock, "-E", "NOTIFY_SOCKET",
                             ZRECORDD, f"--socket={own}",
                             "--threads=1"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT
        while not os.path.exists(sock):          # the activator binds before it waits
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline
            select.select([], [], [], 0.01)
        r, _, _ = select.select([n.sock], [], [], 0)
        assert not r, "the daemon started before any client connected"
        reply = hello(sock)
        assert reply["kind"] == "ok" and reply["id"] == 1
        assert "READY=1" in n.until("READY=1")[-1]
        assert not os.path.exists(own)
        proc.send_signal(signal.SIGTERM)          # exec'd: the daemon is this process
        assert proc.wait(WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        n.close()


def substituted_units(tmp_path):
    """The built units with ExecStart pointing at the built daemon."""
    out = tmp_path / "units"
    out.mkdir()
    for name in ("zrecordd.service", "zrecordd.socket"):
        text = open(os.path.join(BUILD, "systemd", name)).read()
        lines = []
        for line in text.splitlines():
            if line.startswith("ExecStart="):
                line = "ExecStart=" + ZRECORDD + " " + line.split(" ", 1)[1]
            lines.append(line)
        (out / name).write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.skipif(not BUILD or shutil.which("systemd-analyze") is None,
                    reason="needs $ZR_BUILD and systemd-analyze")
def test_units_verify_and_security(tmp_path):
    units = substituted_units(tmp_path)
    r = subprocess.run(["systemd-analyze", "verify", str(units / "zrecordd.service"),
                        str(units / "zrecordd.socket")], capture_output=True, text=True)
    problems = [l for l in (r.stdout + r.stderr).splitlines()
                if l.strip() and "Failed to connect to bus" not in l
                and "System has not been booted with systemd" not in l]
    assert r.returncode == 0 and not problems, problems
    r = subprocess.run(["systemd-analyze", "security", "--offline=true",
                        str(units / "zrecordd.service")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if "Overall exposure level" in l][0]
    score = float(line.split(":")[1].split()[0])
    print(f"systemd-analyze security: exposure {score}")
    assert score <= 2.0, line


def service_settings(name):
    """The [Service] settings of a built unit: {key: last value}."""
    out, section = {}, None
    for line in open(os.path.join(BUILD, "systemd", name)).read().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k] = v
    return out


@pytest.mark.skipif(not BUILD, reason="needs $ZR_BUILD")
def test_units_bound_resources_and_see_real_uids():
    """Both units bound the daemon's memory and tasks; the system unit maps every
    uid (no PrivateUsers=: the daemon compares clients' uids with file owners,
    issue 14 finding 7; tests/security/test_unit.py shows why)."""
    for name in ("zrecordd.service", "zrecordd-user.service"):
        s = service_settings(name)
        for key in ("MemoryMax", "TasksMax"):
            assert s.get(key) not in (None, "", "infinity"), f"{name}: no {key}="
    assert service_settings("zrecordd.service").get("PrivateUsers", "no") in ("no", "false")


@pytest.mark.skipif(not BUILD, reason="needs $ZR_BUILD")
def test_meson_install_layout(tmp_path):
    dest = tmp_path / "dest"
    r = subprocess.run(["meson", "install", "-C", BUILD, "--destdir", str(dest), "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    prefix = subprocess.run(["meson", "introspect", "--buildoptions", BUILD],
                            capture_output=True, text=True).stdout
    import json
    opts = {o["name"]: o["value"] for o in json.loads(prefix)}
    root = str(dest) + opts["prefix"]
    sysconf = opts["sysconfdir"]
    sysconf = sysconf if sysconf.startswith("/") else os.path.join(opts["prefix"], sysconf)
    expect = [
        os.path.join(root, opts["bindir"], "zrecordd"),
        os.path.join(root, "lib/systemd/system/zrecordd.service"),
        os.path.join(root, "lib/systemd/system/zrecordd.socket"),
        os.path.join(root, "lib/systemd/user/zrecordd.service"),
        os.path.join(root, "lib/systemd/user/zrecordd.socket"),
        os.path.join(root, "lib/sysusers.d/zrecord.conf"),
        os.path.join(root, "lib/tmpfiles.d/zrecord.conf"),
        str(dest) + os.path.join(sysconf, "zrecord/zrecordd.conf"),
    ]
    missing = [p for p in expect if not os.path.isfile(p)]
    assert not missing, missing
    unit = open(os.path.join(root, "lib/systemd/system/zrecordd.service")).read()
    assert f"ExecStart={os.path.join(opts['prefix'], opts['bindir'], 'zrecordd')} " in unit
    import re
    assert not re.search(r"@[a-z]+@", unit), "an unsubstituted variable in the unit"
    # the installed public headers stand alone, whichever is included first
    inc = os.path.join(root, opts["includedir"], "zrc")
    for first in ("zrc.h", "zrc-loader.h"):
        src = tmp_path / f"use-{first}.c"
        src.write_text(f'#include <{first}>\n'
                       "int main(void) { zrc_loader *l = 0; zrc_steps_query q = {0};\n"
                       "  (void)l; (void)q; return zrc_error_name(-ZR_E_RANGE) == 0; }\n")
        r = subprocess.run(["cc", "-std=c17", "-Wall", "-Wextra", "-Werror", "-I", inc,
                            "-c", str(src), "-o", str(tmp_path / "use.o")],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"{first}: {r.stderr}"
