"""Finding 2 of issue 14: another user squats the socket a client would find.

The victim has a store in a 0700 directory of its own. With no ZRECORD_SOCKET and
no XDG_RUNTIME_DIR, a client finds the daemon at /tmp/zrecord-<uid>/zrecordd.sock
(PROTOCOL.md section 1). The attacker makes that directory first and listens
there with a fake daemon that answers HELLO and records what it receives: before
the fix the victim's Python client and `zrecord compact` handed it the store's
directory descriptor and an O_RDWR meta.zr. Now nothing may reach the fake daemon
(no byte, no descriptor), and the victim's error names the path and the owner.

The same for a socket in the victim's own directory whose listener is the
attacker (the peer's SO_PEERCRED uid), for an explicit ZRECORD_SOCKET in a
directory others can write, and for the auto-start, which must not start a daemon
in a directory another user made. A user's own per-user daemon and the service
(through ZRECORD_SOCKET) are still found.
"""

import errno
import json
import os
import socket

import pytest

from .conftest import read_line

# The attacker's fake daemon: listens at $SQUAT (making its directory with
# $DIR_MODE) or on the bound socket $LISTEN_FD it inherited, answers HELLO with
# $HELLO_REPLY and every other request with an error, and when told (a line on
# stdin) reports what it received.
FAKE_DAEMON = r"""
import json, os, select, socket, sys
from loaderx import _wire

hello = json.loads(os.environ["HELLO_REPLY"])
if os.environ.get("LISTEN_FD"):
    s = socket.socket(fileno=int(os.environ["LISTEN_FD"]))
else:
    path = os.environ["SQUAT"]
    d = os.path.dirname(path)
    os.mkdir(d)
    os.chmod(d, int(os.environ["DIR_MODE"], 8))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, 0o777)
s.listen(8)
got = {"connections": 0, "bytes": 0, "fds": 0, "kinds": []}
print("listening", flush=True)
while True:
    r, _, _ = select.select([s, sys.stdin], [], [])
    if sys.stdin in r:
        break
    c, _ = s.accept()
    c.settimeout(30)
    got["connections"] += 1
    fs = _wire.FrameSocket(c)
    try:
        while True:
            msg, fds = fs.recv()
            got["kinds"].append(msg.get("kind"))
            got["fds"] += len(fds)
            for fd in fds:
                os.close(fd)
            if msg.get("kind") == "hello":
                fs.send(dict(hello, id=msg["id"]))
            elif "id" in msg:
                fs.send({"kind": "error", "id": msg["id"], "code": 1000,
                         "name": "ZR_E_NOT_STORE", "message": "no store here"})
    except (OSError, ValueError, _wire.ProtocolError):
        pass
    got["bytes"] += fs.rbase + len(fs.rbuf)
    fs.close()
print(json.dumps(got), flush=True)
"""

OPEN_STORE = """
    import os
    from secframes import emit
    from loaderx._errors import ZrecordConnectionError
    from loaderx.dataset import DenseDataset
    try:
        ds = DenseDataset(os.environ["STORE"])
        emit({"ok": True, "length": len(ds)})
    except Exception as e:
        emit({"ok": False, "connection_error": isinstance(e, ZrecordConnectionError),
              "code": getattr(e, "code", None), "message": str(e)})
    """

NO_DISCOVERY_ENV = {"ZRECORD_SOCKET": None, "XDG_RUNTIME_DIR": None}


def private_path(user):
    return f"/tmp/zrecord-{user.uid}/zrecordd.sock"


@pytest.fixture
def victim_store(users, service, secdir, run_as):
    """A dense store of 10 records in a 0700 directory of the victim's, made
    through the victim's own daemon (stopped again: no daemon of the victim runs
    afterwards)."""
    home = secdir.mkdir("victim", users.victim, 0o700)
    store = os.path.join(home, "store")
    own = service(user=users.victim)
    r = run_as(users.victim, """
        import os
        import numpy as np
        from loaderx.dataset import DenseDataset
        ds = DenseDataset(os.environ["STORE"], dtype="<f4", item_shape=(4,))
        ds.append(np.arange(40, dtype="<f4").reshape(10, 4))
        ds.close()
        """, env=own.env(STORE=store))
    assert r.rc == 0, r
    assert own.stop() == 0
    return store


@pytest.fixture
def hello_reply(users, service):
    """What a real daemon answers to HELLO, for the fake one to copy."""
    from secframes import Raw
    svc = service()
    raw = Raw(svc.socket)
    reply = dict(raw.hello)
    raw.close()
    reply.pop("id", None)
    return json.dumps(reply)


@pytest.fixture
def no_system_daemon():
    if os.path.exists("/run/zrecord/zrecordd.sock"):
        pytest.skip("a system daemon listens at /run/zrecord/zrecordd.sock, a default path "
                    "found before /tmp/zrecord-<uid>")


def start_fake(start_as, user, hello_reply, squat=None, dir_mode="0755", listen_fd=None):
    env = {"HELLO_REPLY": hello_reply}
    if listen_fd is None:
        env.update(SQUAT=squat, DIR_MODE=dir_mode)
        p = start_as(user, FAKE_DAEMON, env=env)
    else:
        env["LISTEN_FD"] = str(listen_fd)
        p = start_as(user, FAKE_DAEMON, env=env, pass_fds=(listen_fd,))
    assert read_line(p) == "listening"
    return p


def fake_report(p):
    out, err = p.communicate("done\n", timeout=30)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def assert_nothing_sent(got):
    assert got["bytes"] == 0 and got["fds"] == 0, (
        f"the attacker's socket received {got['bytes']} bytes and {got['fds']} descriptors "
        f"({got['kinds']})")


def assert_names(message, path, owner):
    assert path in message, message
    assert owner.name in message or f"uid {owner.uid}" in message, message


def test_squatted_private_dir_python_client(users, start_as, run_as, victim_store,
                                            hello_reply, default_paths_lock,
                                            no_system_daemon):
    squat = private_path(users.victim)
    fake = start_fake(start_as, users.attacker, hello_reply, squat=squat)
    r = run_as(users.victim, OPEN_STORE, env=dict(NO_DISCOVERY_ENV, STORE=victim_store))
    got = fake_report(fake)
    assert_nothing_sent(got)
    res = r.json()
    assert not res["ok"], res
    assert res["connection_error"] and res["code"] == errno.EPERM, res
    assert_names(res["message"], os.path.dirname(squat), users.attacker)
    # and the victim started no daemon of its own in the attacker's directory
    assert sorted(os.listdir(os.path.dirname(squat))) == ["zrecordd.sock"]


def test_squatted_private_dir_zrecord_compact(users, start_as, run_cmd_as, victim_store,
                                              hello_reply, default_paths_lock,
                                              no_system_daemon):
    from .conftest import tool_binary
    squat = private_path(users.victim)
    fake = start_fake(start_as, users.attacker, hello_reply, squat=squat)
    r = run_cmd_as(users.victim, [tool_binary(), "compact", victim_store],
                   env=NO_DISCOVERY_ENV)
    got = fake_report(fake)
    assert_nothing_sent(got)
    assert r.rc != 0, r
    assert_names(r.err, os.path.dirname(squat), users.attacker)


def test_attacker_listening_in_the_victims_own_dir(users, start_as, run_as, run_cmd_as,
                                                   victim_store, hello_reply,
                                                   default_paths_lock, no_system_daemon):
    """The directory passes (the victim's, 0700); the peer does not: the socket
    was bound here, and listen() called by the attacker, so SO_PEERCRED names the
    attacker."""
    from .conftest import tool_binary
    d = os.path.dirname(private_path(users.victim))
    os.mkdir(d)
    os.chown(d, users.victim.uid, users.victim.gid)
    os.chmod(d, 0o700)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(private_path(users.victim))
        os.chmod(private_path(users.victim), 0o666)
        fake = start_fake(start_as, users.attacker, hello_reply, listen_fd=s.fileno())
    finally:
        s.close()
    r = run_as(users.victim, OPEN_STORE, env=dict(NO_DISCOVERY_ENV, STORE=victim_store))
    t = run_cmd_as(users.victim, [tool_binary(), "compact", victim_store],
                   env=NO_DISCOVERY_ENV)
    got = fake_report(fake)
    assert_nothing_sent(got)
    res = r.json()
    assert not res["ok"], res
    assert_names(res["message"], private_path(users.victim), users.attacker)
    assert t.rc != 0, t
    assert_names(t.err, private_path(users.victim), users.attacker)


def test_explicit_socket_in_a_dir_others_can_write(users, start_as, run_as, run_cmd_as,
                                                   secdir, victim_store, hello_reply):
    """ZRECORD_SOCKET in a directory the group can write: whoever of the group
    binds there first would be trusted."""
    from .conftest import tool_binary
    shared = secdir.mkdir("shared", None, 0o775, group=users.group)
    squat = os.path.join(shared, "zrecordd.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(squat)
        os.chmod(squat, 0o666)
        fake = start_fake(start_as, users.attacker, hello_reply, listen_fd=s.fileno())
    finally:
        s.close()
    env = {"ZRECORD_SOCKET": squat, "XDG_RUNTIME_DIR": None}
    r = run_as(users.victim, OPEN_STORE, env=dict(env, STORE=victim_store))
    t = run_cmd_as(users.victim, [tool_binary(), "compact", victim_store], env=env)
    got = fake_report(fake)
    assert_nothing_sent(got)
    res = r.json()
    assert not res["ok"], res
    assert shared in res["message"] and "writable" in res["message"], res
    assert t.rc != 0, t
    assert shared in t.err and "writable" in t.err, t


def test_auto_start_refuses_a_dir_another_user_made(users, start_as, run_as, victim_store,
                                                    default_paths_lock, no_system_daemon):
    """No socket, only the directory, made by the attacker (0777): the victim's
    client must neither start a daemon there nor leave anything in it."""
    from .conftest import daemon_binary
    d = os.path.dirname(private_path(users.victim))
    r = run_as(users.attacker, f"import os; os.mkdir({d!r}); os.chmod({d!r}, 0o777)")
    assert r.rc == 0, r
    r = run_as(users.victim, OPEN_STORE,
               env=dict(NO_DISCOVERY_ENV, STORE=victim_store, ZRECORDD=daemon_binary()))
    res = r.json()
    assert not res["ok"], res
    assert_names(res["message"], d, users.attacker)
    assert os.listdir(d) == []


def test_own_private_daemon_and_the_service_are_found(users, service, run_as, run_cmd_as,
                                                      victim_store, default_paths_lock,
                                                      no_system_daemon):
    """The checks let the legitimate daemons through: the victim's own daemon,
    auto-started at /tmp/zrecord-<uid> by the Python client and then found there
    by `zrecord`, and the service through ZRECORD_SOCKET."""
    from .conftest import daemon_binary, tool_binary
    r = run_as(users.victim, OPEN_STORE,
               env=dict(NO_DISCOVERY_ENV, STORE=victim_store, ZRECORDD=daemon_binary(),
                        ZRECORD_IDLE_EXIT="30"))
    pidfile = f"/tmp/zrecord-{users.victim.uid}/zrecordd.pid"
    try:
        assert r.json() == {"ok": True, "length": 10}, r
        t = run_cmd_as(users.victim, [tool_binary(), "status"], env=NO_DISCOVERY_ENV)
        assert t.rc == 0, t
        assert private_path(users.victim) in t.out, t
    finally:
        with open(pidfile) as f:
            pid = int(f.read())
        assert os.stat(f"/proc/{pid}").st_uid == users.victim.uid
        pidfd = os.pidfd_open(pid)
        os.kill(pid, 15)
        import select
        assert select.select([pidfd], [], [], 30)[0], "the private daemon did not exit"
        os.close(pidfd)
    svc = service()
    t = run_cmd_as(users.attacker, [tool_binary(), "status"],
                   env={"ZRECORD_SOCKET": svc.socket})
    assert t.rc == 0, t
    assert svc.socket in t.out, t
