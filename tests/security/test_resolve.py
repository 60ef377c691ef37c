"""Finding 1 of issue 14: a reader poisons, redirects or pins another user's store.

The attacker has group read access to the victim's store, which the service may
also write (an ACL for the service user: a store shared for writing through the
service). In a user namespace of its own (``unshare -Urm``, here ``userns.py``) it
mounts over the store's names, opens the store through the service first and
keeps it open, so that the daemon's one shared instance is made from its view:

- a file of its own over ``0.chunk``: the victim's reads returned the attacker's
  bytes, and the victim's append went into the attacker's file;
- the store's directory mounted read-only over itself: every writer got
  ``ZR_E_READONLY``.

Now the daemon resolves every store file beneath the directory, on its mount
(openat2 RESOLVE_NO_XDEV, or a mount-id check), so the first open is refused
(EXDEV); and a store first opened read-only is made writable by the next opener
with write access through a writable path. Both tests skip with a line where
unprivileged user namespaces are off.
"""

import json
import os
import re

import numpy as np
import pytest

from . import acl
from .conftest import read_line
from .stores import RECORDS, make_store, share_with_group


@pytest.fixture
def shared(users, service, secdir, run_as, userns_available):
    """The victim's store: its own files, read for group zrsec, and read-write for
    the service user (ACLs), in a directory the attacker may enter."""
    if not userns_available():
        pytest.skip("finding 1: unprivileged user namespaces are off here "
                    "(unshare -Urm fails as the attacker)")
    vhome = secdir.mkdir("victim", users.victim, 0o750, group=users.group)
    store = os.path.join(vhome, "store")
    make_store(run_as, service, users.victim, store)
    share_with_group(store, users.victim, users.group)
    acl.grant(store, users.svc.uid, "rwx")
    for f in os.listdir(store):
        acl.grant(os.path.join(store, f), users.svc.uid, "rw")
    ahome = secdir.mkdir("attacker", users.attacker, 0o700)
    return store, ahome


# The attacker: in its own namespaces, mounts (MOUNT: a file of its own over
# 0.chunk; READONLY: the store's directory read-only over itself), opens the store
# through the service and holds it until told.
ATTACKER = """
    import os, sys
    from secframes import Raw, emit, store_fds
    import userns
    store = os.environ["STORE"]
    userns.enter()
    if os.environ["HOW"] == "chunk":
        userns.bind(os.environ["EVIL"], os.path.join(store, "0.chunk"))
    else:
        userns.bind(store, store, readonly=True)
    with open(os.path.join(store, "0.chunk"), "rb") as f:
        seen = f.read(4).hex()
    raw = Raw(os.environ["ZRECORD_SOCKET"])
    emit({"open": raw.try_call("dataset_open", {}, fds=list(store_fds(store))), "seen": seen})
    sys.stdin.readline()
    """

# The victim, through the service: opens its store writable, reads every record,
# appends record RECORDS (the floats 1000..1003), closes.
VICTIM = """
    import os
    import numpy as np
    from loaderx.dataset import open_dataset
    from secframes import emit
    out = {}
    ds = open_dataset(os.environ["STORE"])
    out["writable"] = ds.writable
    out["records"] = ds[:].tolist()
    try:
        ds.append(np.arange(1000, 1004, dtype="<f4").reshape(1, 4))
        out["append"] = None
    except Exception as e:
        out["append"] = getattr(e, "name", None) or type(e).__name__
    ds.close()
    emit(out)
    """


def records(n):
    return np.arange(4 * n, dtype="<f4").reshape(-1, 4).tolist()


def run_attack(users, svc, start_as, run_as, store, env):
    attacker = start_as(users.attacker, ATTACKER, env=svc.env(STORE=store, **env))
    held = json.loads(read_line(attacker))
    victim = run_as(users.victim, VICTIM, env=svc.env(STORE=store))
    attacker.communicate("done\n", timeout=30)
    assert victim.rc == 0, victim
    return held, victim.json()


def reread(users, svc, run_as, store):
    r = run_as(users.victim, """
        import os
        from loaderx.dataset import open_dataset
        from secframes import emit
        ds = open_dataset(os.environ["STORE"])
        emit({"records": ds[:].tolist()})
        ds.close()
        """, env=svc.env(STORE=store))
    assert r.rc == 0, r
    return r.json()["records"]


def test_a_file_mounted_over_a_chunk_is_not_the_store(users, service, shared, start_as,
                                                       run_as):
    store, ahome = shared
    evil = os.path.join(ahome, "evil.chunk")
    with open(evil, "wb") as f:
        f.write(b"\x5a" * 4096)
        f.truncate(os.stat(os.path.join(store, "0.chunk")).st_size)
    os.chown(evil, users.attacker.uid, users.attacker.gid)
    os.chmod(evil, 0o666)   # the daemon may read and write it, as the attacker wants
    before = os.stat(evil)
    svc = service()
    held, got = run_attack(users, svc, start_as, run_as, store, {"HOW": "chunk", "EVIL": evil})
    assert held["seen"] == "5a5a5a5a", "the attacker's mount did not take: " + str(held)
    # refused: 0.chunk is a mount point in the attacker's view (before: opened)
    assert held["open"] == "EXDEV", held
    assert got["writable"] is True
    assert got["records"] == records(RECORDS), "the victim read bytes that are not its own"
    assert got["append"] is None, got
    after = os.stat(evil)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns), \
        "the attacker's file was written"
    assert reread(users, svc, run_as, store) == records(RECORDS) + [[1000, 1001, 1002, 1003]]


def test_a_read_only_mount_does_not_pin_the_store(users, service, shared, start_as, run_as):
    store, _ = shared
    svc = service()
    held, got = run_attack(users, svc, start_as, run_as, store, {"HOW": "readonly"})
    # the attacker's open works, read-only: the daemon cannot write through its view
    assert held["open"] is None, held
    assert got["writable"] is True
    assert got["records"] == records(RECORDS)
    # before: ZR_E_READONLY, the shared instance pinned read-only by the attacker
    assert got["append"] is None, got
    assert reread(users, svc, run_as, store) == records(RECORDS) + [[1000, 1001, 1002, 1003]]
    assert re.search(r"pid \d+ made store \d+ writable", svc.log()), svc.log()[-2000:]
