"""MSSET_OPEN and its members (issue 14, suspected by reading): the daemon opened
each stream's directory of a set itself, with its own rights, so a client needed
only each stream's meta.zr, never its directory. Now the client passes each
stream's directory, opened O_RDONLY | O_DIRECTORY with its own rights, as
DATASET_OPEN takes it (PROTOCOL.md, MSSET_OPEN).

The victim's set has two streams: `a`, which group zrsec may read, and `b`,
whose directory the group may enter but not read (mode 0710), though its files
are group-readable, and which the service user may read (an ACL entry). The
attacker (in zrsec) cannot open `b`'s directory: the request without it (the old
form: the root and the meta.zr files, which main's daemon served, opening `b`
with its own rights) and one with an O_PATH descriptor in its place are refused;
the victim opens its set.
"""

import os

from . import acl
from .stores import RECORDS, make_store

ATTACKER = """
    import errno, os
    from secframes import Raw, emit
    root = os.environ["ROOT"]
    out = {}
    ro, rd = os.O_RDONLY | os.O_CLOEXEC, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        os.close(os.open(os.path.join(root, "b"), rd))
        out["premise: b's directory"] = "opened"
    except OSError as e:
        out["premise: b's directory"] = errno.errorcode[e.errno]
    out["premise: b's meta.zr"] = "opened" if os.open(os.path.join(root, "b", "meta.zr"), ro) \\
        else "?"
    raw = Raw(os.environ["ZRECORD_SOCKET"])
    fields = {"streams": ["a", "b"]}
    def meta(s):
        return os.open(os.path.join(root, s, "meta.zr"), ro)
    out["old form: root and meta.zr files"] = raw.try_call(
        "msset_open", fields, fds=[os.open(root, rd), meta("a"), meta("b")])
    out["b's directory O_PATH"] = raw.try_call(
        "msset_open", fields, fds=[os.open(root, rd), os.open(os.path.join(root, "a"), rd),
                                   meta("a"), os.open(os.path.join(root, "b"), os.O_PATH
                                                      | os.O_DIRECTORY), meta("b")])
    out["a's directory for b's"] = raw.try_call(
        "msset_open", fields, fds=[os.open(root, rd), os.open(os.path.join(root, "a"), rd),
                                   meta("a"), os.open(os.path.join(root, "a"), rd), meta("b")])
    emit(out)
    """

VICTIM = """
    import os
    from loaderx.dataset import MSDataset
    from secframes import emit
    ms = MSDataset(os.environ["ROOT"])
    emit({"length": len(ms), "a": ms["a"][:].tolist(), "b": ms["b"][:].tolist()})
    ms.close()
    """


def test_a_stream_the_client_cannot_read_is_refused(users, service, secdir, run_as):
    root = secdir.mkdir("set", users.victim, 0o750, group=users.group)
    for name, mode in (("a", 0o750), ("b", 0o710)):
        path = os.path.join(root, name)
        make_store(run_as, service, users.victim, path)
        os.chown(path, users.victim.uid, users.group.gid)
        os.chmod(path, mode)
        for f in os.listdir(path):
            os.chown(os.path.join(path, f), users.victim.uid, users.group.gid)
            os.chmod(os.path.join(path, f), 0o640)
    acl.grant(os.path.join(root, "b"), users.svc.uid, "rx")   # the service may list b
    svc = service()
    r = run_as(users.attacker, ATTACKER, env=svc.env(ROOT=root))
    assert r.rc == 0, r
    got = r.json()
    assert got.pop("premise: b's directory") == "EACCES"
    assert got.pop("premise: b's meta.zr") == "opened"
    # before: the old form opened the set, b included (the daemon opened b)
    assert got == {"old form: root and meta.zr files": "ZR_E_BAD_FD",
                   "b's directory O_PATH": "ZR_E_BAD_FD",
                   "a's directory for b's": "EACCES"}, got
    v = run_as(users.victim, VICTIM, env=svc.env(ROOT=root))
    assert v.rc == 0, v
    want = [[4.0 * i + k for k in range(4)] for i in range(RECORDS)]
    assert v.json() == {"length": RECORDS, "a": want, "b": want}
