"""Case 7 of issue 32: the client's auto-start runs a binary another user planted.

When no daemon answers, the Python client starts one as the user (loaderx/_daemon.py),
the newest ``<checkout>/build*/daemon/zrecordd`` of the source checkout it was
imported from when nothing else is found. In a checkout its group may write, any
member can put a ``build-x/daemon/zrecordd`` there: before the fix it ran as the
victim. Now a program is started only if it and every directory above it belong to
the user or root and nobody else may write them; otherwise nothing runs and the
error names the binary and what is wrong. A checkout of the victim's own (0755)
still auto-starts its build.
"""

import errno
import os
import select
import shutil

import pytest

from .conftest import PYCLIENT, daemon_binary
from .test_socket import NO_DISCOVERY_ENV, no_system_daemon, private_path  # noqa: F401

# The planted "daemon": proves it ran, and as whom, then exits.
PLANTED = """#!/bin/sh
id -u > "$(dirname "$0")/../../ran-as"
exit 1
"""

CONNECT = """
    from secframes import emit
    from loaderx import _conn
    from loaderx._errors import ZrecordConnectionError
    try:
        c = _conn.default()
        emit({"ok": True, "path": c.path})
    except ZrecordConnectionError as e:
        emit({"ok": False, "code": e.code, "message": str(e)})
    """

# PATH without any zrecordd (the client would take one there before the checkout's),
# no socket to find: the checkout's build is what the client would start.
ENV = dict(NO_DISCOVERY_ENV, ZRECORDD=None, PATH="/usr/bin:/bin")


@pytest.fixture
def no_zrecordd_on_path():
    for d in ENV["PATH"].split(":"):
        if os.path.exists(os.path.join(d, "zrecordd")):
            pytest.skip(f"{d}/zrecordd exists: the client would start it before a checkout's")


def make_checkout(secdir, owner, group, mode):
    """A source checkout of owner's holding python-client/loaderx (a copy) and
    meson.build: directories of mode, files readable by all (and writable by the
    group when mode lets the group write)."""
    root = secdir.mkdir("checkout", owner, mode, group=group)
    shutil.copytree(os.path.join(PYCLIENT, "loaderx"),
                    os.path.join(root, "python-client", "loaderx"),
                    ignore=shutil.ignore_patterns("__pycache__", "_bin"))
    open(os.path.join(root, "meson.build"), "w").close()
    for d, _, files in os.walk(root):
        os.chown(d, owner.uid, group.gid)
        os.chmod(d, mode)
        for f in files:
            os.chown(os.path.join(d, f), owner.uid, group.gid)
            os.chmod(os.path.join(d, f), 0o644 | (mode & 0o020))
    return root


def add_dirs(checkout, owner, mode, *parts):
    """checkout/parts..., each directory owner's with mode; returns the last."""
    d = checkout
    for part in parts:
        d = os.path.join(d, part)
        os.mkdir(d)
        os.chown(d, owner.uid, owner.gid)
        os.chmod(d, mode)
    return d


def env_for(checkout, **extra):
    from .conftest import HERE
    return dict(ENV, PYTHONPATH=os.pathsep.join((os.path.join(checkout, "python-client"), HERE)),
                **extra)


def test_planted_binary_in_a_group_writable_checkout_is_not_started(
        users, secdir, run_as, default_paths_lock, no_system_daemon, no_zrecordd_on_path):
    checkout = make_checkout(secdir, users.victim, users.group, 0o2775)
    r = run_as(users.attacker, f"""
        import os
        d = os.path.join({checkout!r}, "build-x", "daemon")
        os.makedirs(d)
        p = os.path.join(d, "zrecordd")
        with open(p, "w") as f:
            f.write({PLANTED!r})
        os.chmod(p, 0o755)
        """)
    assert r.rc == 0, r
    planted = os.path.join(checkout, "build-x", "daemon", "zrecordd")
    r = run_as(users.victim, CONNECT, env=env_for(checkout))
    res = r.json()
    ran = os.path.join(checkout, "ran-as")
    assert not os.path.exists(ran), (
        f"the planted {planted} ran as uid {open(ran).read().strip()} ({res})")
    assert not res["ok"], res
    assert res["code"] == errno.EPERM, res
    assert planted in res["message"], res
    assert users.attacker.name in res["message"], res      # the file is the attacker's


def test_own_binary_in_a_group_writable_checkout_is_not_started(
        users, secdir, run_as, default_paths_lock, no_system_daemon, no_zrecordd_on_path):
    """The binary is the victim's own build, but the checkout's group may write the
    checkout: any member could have replaced the build directory under it."""
    checkout = make_checkout(secdir, users.victim, users.group, 0o2775)
    d = add_dirs(checkout, users.victim, 0o755, "build", "daemon")
    binary = os.path.join(d, "zrecordd")
    with open(binary, "w") as f:
        f.write(PLANTED)
    os.chown(binary, users.victim.uid, users.victim.gid)
    os.chmod(binary, 0o755)
    r = run_as(users.victim, CONNECT, env=env_for(checkout))
    res = r.json()
    assert not os.path.exists(os.path.join(checkout, "ran-as")), res
    assert not res["ok"] and res["code"] == errno.EPERM, res
    assert binary in res["message"], res
    assert f"the directory {checkout} (mode 2775" in res["message"], res
    assert "writable by its group zrsec" in res["message"], res


def test_own_checkout_build_is_started(users, secdir, run_as, default_paths_lock,
                                       no_system_daemon, no_zrecordd_on_path):
    """The checks let a user's own build through: a 0755 checkout of the victim's
    with the daemon built there (a copy) is auto-started."""
    checkout = make_checkout(secdir, users.victim, users.group, 0o755)
    d = add_dirs(checkout, users.victim, 0o755, "build", "daemon")
    binary = os.path.join(d, "zrecordd")
    shutil.copy(daemon_binary(), binary)
    os.chown(binary, users.victim.uid, users.victim.gid)
    os.chmod(binary, 0o755)
    r = run_as(users.victim, CONNECT, env=env_for(checkout, ZRECORD_IDLE_EXIT="30"))
    pidfile = f"/tmp/zrecord-{users.victim.uid}/zrecordd.pid"
    try:
        assert r.json() == {"ok": True, "path": private_path(users.victim)}, r
        with open(pidfile) as f:
            pid = int(f.read())
        assert os.readlink(f"/proc/{pid}/exe") == binary
        assert os.stat(f"/proc/{pid}").st_uid == users.victim.uid
    finally:
        if os.path.exists(pidfile):
            with open(pidfile) as f:
                pid = int(f.read())
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                pidfd = None
            if pidfd is not None:
                os.kill(pid, 15)
                assert select.select([pidfd], [], [], 30)[0], "the private daemon did not exit"
                os.close(pidfd)


def stop_private_daemon(user):
    """Stops the private daemon of user that a test started, if any (its pidfile)."""
    pidfile = f"/tmp/zrecord-{user.uid}/zrecordd.pid"
    if not os.path.exists(pidfile):
        return
    with open(pidfile) as f:
        pid = int(f.read())
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    os.kill(pid, 15)
    assert select.select([pidfd], [], [], 30)[0], "the private daemon did not exit"
    os.close(pidfd)


def test_tool_refuses_a_binary_in_a_group_writable_checkout(
        users, secdir, run_cmd_as, default_paths_lock, no_system_daemon):
    """The zrecord tool starts the per-user daemon when none answers (issue 38 item
    6), with the Python client's trust rule: the victim's own build in a checkout
    its group may write is not run, and the tool says why and how to start one."""
    from .conftest import tool_binary
    checkout = make_checkout(secdir, users.victim, users.group, 0o2775)
    d = add_dirs(checkout, users.victim, 0o755, "build", "daemon")
    binary = os.path.join(d, "zrecordd")
    with open(binary, "w") as f:
        f.write(PLANTED)
    os.chown(binary, users.victim.uid, users.victim.gid)
    os.chmod(binary, 0o755)
    r = run_cmd_as(users.victim, [tool_binary(), "status"], env=dict(ENV, ZRECORDD=binary))
    assert not os.path.exists(os.path.join(checkout, "ran-as")), r
    assert r.rc == 3, r
    assert f"refusing to start {binary}" in r.err, r
    assert f"the directory {checkout} (mode 2775" in r.err and "writable by its group" in r.err, r
    assert "start one yourself with: zrecordd --socket=" \
        f"/tmp/zrecord-{users.victim.uid}/zrecordd.sock" in r.err, r


def test_tool_starts_the_private_daemon(users, secdir, run_cmd_as, default_paths_lock,
                                        no_system_daemon):
    """No daemon answers: `zrecord status` starts the victim's own (a copy of the
    daemon in a 0755 directory of the victim's), as the victim, at the private path,
    and reports it; before, it failed with "cannot connect to zrecordd"."""
    from .conftest import tool_binary
    home = secdir.mkdir("own", users.victim, 0o755)
    binary = os.path.join(home, "zrecordd")
    shutil.copy(daemon_binary(), binary)
    os.chown(binary, users.victim.uid, users.victim.gid)
    os.chmod(binary, 0o755)
    try:
        r = run_cmd_as(users.victim, [tool_binary(), "status"],
                       env=dict(ENV, ZRECORDD=binary, ZRECORD_IDLE_EXIT="30"))
        assert r.rc == 0, r
        assert f"at {private_path(users.victim)}" in r.out, r
        with open(f"/tmp/zrecord-{users.victim.uid}/zrecordd.pid") as f:
            pid = int(f.read())
        assert os.readlink(f"/proc/{pid}/exe") == binary
        assert os.stat(f"/proc/{pid}").st_uid == users.victim.uid
        # a second run finds it: the same daemon, nothing started again
        r = run_cmd_as(users.victim, [tool_binary(), "status"],
                       env=dict(ENV, ZRECORDD="/nonexistent"))
        assert r.rc == 0 and f"at {private_path(users.victim)}" in r.out, r
    finally:
        stop_private_daemon(users.victim)
