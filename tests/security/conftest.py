"""The real-user harness of tests/security: a hostile local user against the shared
service, for real.

Run as root (CI is). The session creates the group ``zrsec`` and three users:
``zrsec-svc``, the service user the daemon runs as (its own group, and a member of
``zrsec`` so that it may give its socket that group), and ``zrsec-victim`` and
``zrsec-attacker``, both members of ``zrsec``, the socket's group, as users of the
system service are members of ``zrecord``. Creation is idempotent; the users and the
group are removed at the end of the session, failed or not, unless another session
(another checkout's test run on this machine) still uses them: every session holds
a shared lock on ``/tmp/zrsec-harness.users`` while it runs, and creation and
removal happen under an exclusive one on ``/tmp/zrsec-harness.mutex``.

Fixtures:

- ``users``: the users (``.svc``, ``.victim``, ``.attacker``: name, uid, gid) and
  the group (``.group``: name, gid). Skips with a line when not root, without
  useradd, or without a Python interpreter the users may run that has numpy and
  msgpack (Debian: python3-numpy, python3-msgpack; scripts/setup.sh installs them).
- ``service(*args, private_users=False, user=None, **flags)``: starts the built zrecordd
  (``$ZRECORDD``, else ``$ZR_BUILD/daemon/zrecordd``, else ``build/daemon/zrecordd``)
  as ``zrsec-svc`` with ``--socket=<dir>/run/zrecordd.sock --socket-mode=0660
  --socket-group=zrsec`` and the extra flags (``max_clients=4`` is
  ``--max-clients=4``), waits for READY=1 on a notify socket (and for the
  daemon's pidfd, so an early exit is reported at once, with its log), and returns
  a ``Service``: ``.socket``, ``.pid``, ``.log()``, ``.env()`` (``ZRECORD_SOCKET``
  for run_as), ``.stop()``. ``private_users=True`` runs it in a user namespace
  that maps only root and the service user, as ``PrivateUsers=yes`` would;
  ``user=users.victim`` runs a user's own daemon instead (a 0600 socket in a 0700
  directory of that user). At the end of the test every service still running
  gets SIGTERM and must exit 0.
- ``run_as(user, code, env=None, timeout=60)``: runs a Python snippet (dedented)
  as that user with python-client and this directory on ``PYTHONPATH`` and a clean
  environment (no ``ZRECORD_SOCKET``, no ``XDG_RUNTIME_DIR`` unless ``env`` gives
  them); returns a ``Result`` (``.rc``, ``.out``, ``.err``, ``.json()``: the last
  line the snippet emitted with ``secframes.emit``). ``start_as`` is the same
  without waiting: a ``Popen`` with text pipes, killed at the end of the test.
  ``run_cmd_as(user, argv, env=None)`` runs a program (the ``zrecord`` tool).
- ``secdir``: a root-owned temporary directory that every user may traverse;
  ``secdir.mkdir(name, owner, mode, group=None)`` makes directories in it.
- ``userns_available``: a function, whether unprivileged user namespaces work
  (``unshare -Urm true`` as the attacker); tests that need them skip with a line.
- ``secframes.Raw``: raw frames as any user (see secframes.py).

Nothing sleeps: every wait is on a socket, a pidfd or a process, with a bound.
"""

import fcntl
import grp
import json
import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYCLIENT = os.path.join(REPO, "python-client")
for _p in (PYCLIENT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

GROUP = "zrsec"
SVC, VICTIM, ATTACKER = "zrsec-svc", "zrsec-victim", "zrsec-attacker"
LOCK_MUTEX = "/tmp/zrsec-harness.mutex"
LOCK_USERS = "/tmp/zrsec-harness.users"
LOCK_DEFAULT_PATHS = "/tmp/zrsec-harness.defaults"
WAIT = 30.0          # seconds: the bound on every wait
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def build_dir():
    b = os.environ.get("ZR_BUILD")
    return b if b else os.path.join(REPO, "build")


def daemon_binary():
    return os.environ.get("ZRECORDD") or os.path.join(build_dir(), "daemon", "zrecordd")


def tool_binary():
    return os.path.join(build_dir(), "client", "zrecord")


# ------------------------------------------------------------------ users
class User:
    def __init__(self, name):
        pw = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, pw.pw_uid, pw.pw_gid

    def __repr__(self):
        return f"{self.name}({self.uid})"


class Group:
    def __init__(self, name):
        self.name, self.gid = name, grp.getgrnam(name).gr_gid


class Users:
    def __init__(self, python):
        self.group = Group(GROUP)
        self.svc, self.victim, self.attacker = User(SVC), User(VICTIM), User(ATTACKER)
        self.python = python     # the interpreter the users run

    def all(self):
        return (self.svc, self.victim, self.attacker)


def _run(argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _exists(db, name):
    try:
        (pwd.getpwnam if db == "passwd" else grp.getgrnam)(name)
        return True
    except KeyError:
        return False


def _ensure_users():
    """Creates what is missing; fixes group membership of what exists."""
    if not _exists("group", GROUP):
        _run(["groupadd", GROUP])
    for name in (SVC, VICTIM, ATTACKER):
        if not _exists("passwd", name):
            # -U: a group of its own (its primary group); no home, no login
            _run(["useradd", "-M", "-U", "-d", "/nonexistent", "-s", "/usr/sbin/nologin",
                  "-G", GROUP, name])
        elif name not in grp.getgrnam(GROUP).gr_mem:
            _run(["usermod", "-a", "-G", GROUP, name])


def _user_pids(uids):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}").st_uid in uids:
                pids.append(int(d))
        except OSError:
            pass
    return pids


def _remove_users():
    """Kills what still runs as the test users (a daemon a test left), removes the
    per-user directories they left in /tmp, then the users and the group."""
    uids = set()
    for name in (SVC, VICTIM, ATTACKER):
        if _exists("passwd", name):
            uids.add(pwd.getpwnam(name).pw_uid)
    for pid in _user_pids(uids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for uid in uids:
        shutil.rmtree(f"/tmp/zrecord-{uid}", ignore_errors=True)
    for name in (SVC, VICTIM, ATTACKER):
        if _exists("passwd", name):
            _run(["userdel", name], check=False)
        if _exists("group", name):             # USERGROUPS_ENAB no: the group stays
            _run(["groupdel", name], check=False)
    if _exists("group", GROUP):
        _run(["groupdel", GROUP], check=False)


def _lock(path, how):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, how)
    return fd


def _user_python(user):
    """An interpreter this user may run that imports numpy and msgpack, or None."""
    for cand in (sys.executable, "/usr/bin/python3"):
        if not cand or not os.path.exists(cand):
            continue
        r = subprocess.run(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}",
                            "--init-groups", "--", cand, "-c", "import numpy, msgpack"],
                           capture_output=True, env={"PATH": PATH}, cwd="/", timeout=WAIT)
        if r.returncode == 0:
            return cand
    return None


@pytest.fixture(scope="session")
def users(request):
    if os.geteuid() != 0:
        pytest.skip(f"tests/security: needs root to create its users (running as uid "
                    f"{os.geteuid()})")
    for tool in ("useradd", "usermod", "userdel", "groupadd", "groupdel", "setpriv"):
        if shutil.which(tool, path=PATH) is None:
            pytest.skip(f"tests/security: {tool} is not installed")
    if not os.access(daemon_binary(), os.X_OK):
        pytest.skip(f"tests/security: no daemon at {daemon_binary()} (set $ZRECORDD)")

    mutex = _lock(LOCK_MUTEX, fcntl.LOCK_EX)
    users_lock = None

    def finish():
        # Removal only if no other session holds the users lock: try to take it
        # exclusively while holding the mutex (no session can join meanwhile).
        fcntl.flock(mutex, fcntl.LOCK_EX)
        try:
            last = True
            if users_lock is not None:
                try:
                    fcntl.flock(users_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    last = False
            if last:
                _remove_users()
        finally:
            if users_lock is not None:
                os.close(users_lock)
            os.close(mutex)

    request.addfinalizer(finish)
    try:
        _ensure_users()
        users_lock = _lock(LOCK_USERS, fcntl.LOCK_SH)
    finally:
        fcntl.flock(mutex, fcntl.LOCK_UN)
    python = _user_python(User(ATTACKER))
    if python is None:
        pytest.skip("tests/security: no Python the test users may run imports numpy and "
                    "msgpack (install python3-numpy python3-msgpack)")
    return Users(python)


# ------------------------------------------------------------ directories
class SecDir:
    """A root-owned directory every user may traverse (0711), removed after the test."""

    def __init__(self, prefix="zrsec-"):
        self.path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        os.chmod(self.path, 0o711)

    def mkdir(self, name, owner=None, mode=0o755, group=None):
        """<path>/name, owned by owner (a User; root if None), with group (a Group or
        User: its gid) and mode."""
        p = os.path.join(self.path, name)
        os.makedirs(p)
        os.chown(p, owner.uid if owner else 0,
                 group.gid if group is not None else (owner.gid if owner else 0))
        os.chmod(p, mode)
        return p

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def secdir():
    d = SecDir()
    yield d
    d.remove()


# ---------------------------------------------------------------- run_as
class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def json(self):
        """The last JSON line of stdout (emitted with secframes.emit)."""
        lines = [l for l in self.out.splitlines() if l.startswith(("{", "["))]
        assert lines, f"the snippet reported nothing (rc {self.rc}); stderr:\n{self.err}"
        return json.loads(lines[-1])

    def __repr__(self):
        return f"Result(rc={self.rc}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


def _user_env(env):
    e = {"PATH": PATH, "HOME": "/", "LANG": "C.UTF-8",
         "PYTHONPATH": os.pathsep.join((PYCLIENT, HERE)),
         "PYTHONDONTWRITEBYTECODE": "1"}
    if env:
        e.update({k: v for k, v in env.items() if v is not None})
    return e


def _as_user(user, argv):
    return ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--",
            *argv]


class Runner:
    def __init__(self, users):
        self.users = users
        self.procs = []

    def start_as(self, user, code, env=None, pass_fds=()):
        """The snippet as user, not waited for: a Popen with text pipes (and
        pass_fds inherited)."""
        argv = _as_user(user, [self.users.python, "-c", textwrap.dedent(code)])
        p = subprocess.Popen(argv, env=_user_env(env), cwd="/", text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, pass_fds=pass_fds)
        self.procs.append(p)
        return p

    def run_as(self, user, code, env=None, timeout=60):
        p = self.start_as(user, code, env)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"the snippet as {user.name} did not finish in {timeout} s; "
                                 f"stdout:\n{out}\nstderr:\n{err}") from None
        return Result(p.returncode, out, err)

    def run_cmd_as(self, user, argv, env=None, timeout=60):
        r = subprocess.run(_as_user(user, argv), env=_user_env(env), cwd="/", text=True,
                           capture_output=True, timeout=timeout)
        return Result(r.returncode, r.stdout, r.stderr)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def read_line(proc, timeout=WAIT):
    """The next line a start_as() process writes, within timeout (it must come)."""
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    assert r, f"no line from pid {proc.pid} within {timeout} s"
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout)
        raise AssertionError(f"pid {proc.pid} exited ({proc.returncode}) without a line; "
                             f"stderr:\n{proc.stderr.read()}")
    return line.rstrip("\n")


@pytest.fixture
def runner(users):
    r = Runner(users)
    yield r
    r.cleanup()


@pytest.fixture
def run_as(runner):
    return runner.run_as


@pytest.fixture
def start_as(runner):
    return runner.start_as


@pytest.fixture
def run_cmd_as(runner):
    return runner.run_cmd_as


# --------------------------------------------------------------- service
class Service:
    """zrecordd as the service user, on <dir>/run/zrecordd.sock."""

    def __init__(self, users, args, flags, private_users, user=None):
        self.users = users
        self.base = SecDir("zrsec-svc-")
        svc = user or users.svc
        self.user = svc
        if user is None or user is users.svc:
            # the system service: a socket for the members of zrsec
            self.rundir = self.base.mkdir("run", svc, 0o755)
            sock_args = ["--socket-mode=0660", f"--socket-group={users.group.name}"]
        else:
            # a user's own daemon: a private socket
            self.rundir = self.base.mkdir("run", svc, 0o700)
            sock_args = ["--socket-mode=0600"]
        ndir = self.base.mkdir("notify", svc, 0o700)
        self.socket = os.path.join(self.rundir, "zrecordd.sock")
        self.log_path = os.path.join(self.base.path, "zrecordd.log")
        argv = [daemon_binary(), f"--socket={self.socket}", *sock_args, "--threads=2",
                "--log-level=info",
                *args, *(f"--{k.replace('_', '-')}={v}" for k, v in flags.items())]
        if private_users:
            # The socket's group is unmapped in the namespace, so the daemon
            # cannot give it; root does once it listens, as systemd's
            # SocketGroup= would.
            argv = [a for a in argv if not a.startswith("--socket-group=")]
            gids = os.getgrouplist(svc.name, svc.gid)
            argv = [sys.executable, os.path.join(HERE, "privusers.py"), str(svc.uid),
                    str(svc.gid), ",".join(map(str, gids)), "--", *argv]
        else:
            argv = _as_user(svc, argv)
        npath = os.path.join(ndir, "notify")
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        ns.bind(npath)
        os.chown(npath, svc.uid, svc.gid)
        self.rc = None
        self.proc = None
        try:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(argv, env={"PATH": PATH, "NOTIFY_SOCKET": npath},
                                             cwd="/", stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT)
            self.pid = self.proc.pid
            self._wait_ready(ns)
            if private_users and (user is None or user is users.svc):
                os.chown(self.socket, -1, users.group.gid)
        except BaseException:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            ns.close()
            self.base.remove()
            raise
        ns.close()
        os.unlink(npath)   # the daemon's later STATUS= sends fail and are dropped

    def _wait_ready(self, ns):
        pidfd = os.pidfd_open(self.proc.pid)
        try:
            deadline = time.monotonic() + WAIT
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"zrecordd did not say READY=1 in {WAIT:.0f} s; log:\n"
                                         + self.log()[-3000:])
                r, _, _ = select.select([ns, pidfd], [], [], left)
                if ns in r and b"READY=1" in ns.recv(4096).split(b"\n"):
                    return
                if pidfd in r:
                    rc = self.proc.wait()
                    raise AssertionError(f"zrecordd exited with {rc} before READY=1; log:\n"
                                         + self.log()[-3000:])
        finally:
            os.close(pidfd)

    def env(self, **extra):
        e = {"ZRECORD_SOCKET": self.socket}
        e.update(extra)
        return e

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        """SIGTERM; returns the exit status (the caller checks it)."""
        if self.rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.rc = self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.rc = "no exit within the bound after SIGTERM"
        return self.rc


@pytest.fixture
def service(users):
    started = []

    def start(*args, private_users=False, user=None, **flags):
        s = Service(users, args, flags, private_users, user)
        started.append(s)
        return s

    yield start
    bad = []
    for s in started:
        rc = s.stop()
        if rc != 0:
            bad.append(f"zrecordd (pid {s.pid}) exited with {rc} after SIGTERM; log:\n"
                       + s.log()[-3000:])
        s.base.remove()
    assert not bad, "\n".join(bad)


# ------------------------------------------------- shared default paths
@pytest.fixture
def default_paths_lock(users):
    """Held by a test that uses the per-user default paths of the test users
    (/tmp/zrecord-<uid>): one test at a time on this machine, and those paths
    removed before and after."""
    fd = _lock(LOCK_DEFAULT_PATHS, fcntl.LOCK_EX)

    def clear():
        for u in users.all():
            shutil.rmtree(f"/tmp/zrecord-{u.uid}", ignore_errors=True)

    clear()
    try:
        yield
    finally:
        clear()
        os.close(fd)


# -------------------------------------------------------------- userns
@pytest.fixture(scope="session")
def userns_available(users):
    """A function: whether an unprivileged user may create a user namespace here
    and mount in it (``unshare -Urm true`` as the attacker). A test that needs one
    calls ``if not userns_available(): pytest.skip(...)``."""
    known = {}

    def available():
        if "ok" not in known:
            if shutil.which("unshare", path=PATH) is None:
                known["ok"] = False
            else:
                r = subprocess.run(_as_user(users.attacker, ["unshare", "-Urm", "true"]),
                                   capture_output=True, env={"PATH": PATH}, cwd="/",
                                   timeout=WAIT)
                known["ok"] = r.returncode == 0
        return known["ok"]

    return available
