"""Finding 7 of issue 14: the system unit's sandbox must not blind the daemon to
who its clients are.

With PrivateUsers=yes the daemon runs in a user namespace that maps only root and
its own user: every client uid and every other file owner reads as 65534 there, so
"the directory is owned by the client" (DATASET_CREATE, PROTOCOL.md section 6)
held for any client and any other user's directory. The test runs the daemon as
the built unit would (as the service user, and in such a namespace if the unit
says PrivateUsers=yes) and has the attacker create a store in the victim's empty
directory, which the service user may write and the attacker may not.
"""

import os

import pytest

from .conftest import build_dir


def unit_settings(name="zrecordd.service"):
    """The [Service] settings of a built unit: {key: [values]}."""
    path = os.path.join(build_dir(), "systemd", name)
    if not os.path.exists(path):
        pytest.skip(f"no built unit at {path} (set $ZR_BUILD)")
    out, section = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line
            elif section == "[Service]" and "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out.setdefault(k, []).append(v)
    return out


def yes(values):
    return bool(values) and values[-1].lower() in ("yes", "true", "1", "on")


def test_no_store_in_a_directory_the_client_cannot_write(users, service, secdir, run_as):
    private_users = yes(unit_settings().get("PrivateUsers"))
    svc = service(private_users=private_users)
    # The victim's empty directory: the service user may write it (its group),
    # the attacker may read and enter it, not write it.
    target = secdir.mkdir("victim-dir", users.victim, 0o775, group=users.svc)
    r = run_as(users.attacker, """
        import errno, os
        from secframes import Raw, emit
        target = os.environ["TARGET"]
        try:
            os.close(os.open(os.path.join(target, "mine"), os.O_CREAT | os.O_WRONLY, 0o644))
            writable = True
        except PermissionError:
            writable = False
        raw = Raw(os.environ["ZRECORD_SOCKET"])
        d = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
        schema = {"kind": "dense", "dtype": "<f4", "item_shape": [4], "codec": "raw"}
        emit({"writable": writable,
              "create": raw.try_call("dataset_create", {"schema": schema}, fds=[d])})
        """, env=svc.env(TARGET=target))
    assert r.rc == 0, r
    got = r.json()
    assert not got["writable"], "the attacker can write the victim's directory: no test"
    assert got["create"] == "EACCES", (
        f"the attacker's DATASET_CREATE in the victim's directory got {got['create']} "
        f"(daemon in a PrivateUsers namespace: {private_users})")
    assert os.listdir(target) == []
    # The owner may: the daemon can write there, and tells owners apart.
    r = run_as(users.victim, """
        import os
        from secframes import Raw, emit
        raw = Raw(os.environ["ZRECORD_SOCKET"])
        d = os.open(os.environ["TARGET"], os.O_RDONLY | os.O_DIRECTORY)
        schema = {"kind": "dense", "dtype": "<f4", "item_shape": [4], "codec": "raw"}
        emit({"create": raw.try_call("dataset_create", {"schema": schema}, fds=[d])})
        """, env=svc.env(TARGET=target))
    assert r.json() == {"create": None}, r
    assert "meta.zr" in os.listdir(target)

