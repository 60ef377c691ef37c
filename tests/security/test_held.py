"""The defenses of issue 14's audit that held, kept as regression cases, tried by
a real attacker user against the service user's daemon (tests/hardening tries the
same as the daemon's own user: hostile-fds.c; the msgpack limits are there and in
fuzz/, and are not repeated here).

- Daemon-made memfds: the attacker's own read buffer and ring, and the victim's
  ring that a loader group hands to the attacker (RING), cannot be shrunk, grown,
  written, mapped or mprotected writable, hole-punched or resealed, also reopened
  O_RDWR through /proc/self/fd; the victim's and the daemon's descriptors cannot be
  opened through /proc/PID/fd; the victim's batches read the same afterwards.
- Access proofs: with read access to the victim's store (group zrsec), an
  O_PATH directory or meta.zr, another store's meta.zr, or a read-only proof for
  write access is refused; a handle opened read-only refuses APPEND, DELETE and
  COMPACT; APPEND refuses a memfd that is not sealed against writes. The victim's
  store is unchanged.
"""

import json
import os

import pytest

from .conftest import read_line
from .stores import make_store, share_with_group, store_state

@pytest.fixture
def stores(users, service, secdir, run_as):
    """(the victim's store, shared read-only with zrsec; the attacker's own)."""
    vhome = secdir.mkdir("victim", users.victim, 0o750, group=users.group)
    ahome = secdir.mkdir("attacker", users.attacker, 0o700)
    victim_store = os.path.join(vhome, "store")
    attacker_store = os.path.join(ahome, "store")
    make_store(run_as, service, users.victim, victim_store)
    make_store(run_as, service, users.attacker, attacker_store)
    share_with_group(victim_store, users.victim, users.group)
    return victim_store, attacker_store


def has_future_write_seal():
    """F_SEAL_FUTURE_WRITE (Linux 5.1): without it the daemon may refuse to share
    rings across users, and the cross-user ring case does not apply."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.memfd_create("probe", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        return libc.fcntl(fd, 1033, 16) == 0
    finally:
        os.close(fd)


# The victim: opens a loader (sequential, batch 2, prefetch 4) on its store,
# holds the first 4 batches, says where its ring is, and when told, checks that
# the bytes of every held batch are still the records they must be.
VICTIM_LOADER = """
    import json, mmap, os, sys
    import numpy as np
    from secframes import Raw, emit, store_fds
    raw = Raw(os.environ["ZRECORD_SOCKET"])
    d, m = store_fds(os.environ["STORE"])
    h = raw.call("dataset_open", {}, fds=[d, m])[0]["handle"]
    reply, fds = raw.call("loader_open", {"streams": [{"handle": h}], "sampler": "sequential",
                                          "batch_size": 2, "seed": 7, "start_step": 0,
                                          "prefetch": 4})
    ring = mmap.mmap(fds[0], reply["ring_bytes"], mmap.MAP_SHARED, mmap.PROT_READ)
    held = [raw.event("batch", reply["loader"])[0] for _ in range(4)]
    print(json.dumps({"pid": os.getpid(), "ring_fd": fds[0], "ring": reply["ring"]}), flush=True)
    sys.stdin.readline()
    bad = []
    for b in held:
        st = b["streams"][0]
        got = np.frombuffer(ring[st["offset"]:st["offset"] + st["bytes"]], dtype="<f4")
        want = np.arange(8 * b["step"], 8 * b["step"] + 8, dtype="<f4")
        if b["ring"] != reply["ring"] or not np.array_equal(got, want):
            bad.append(b["step"])
    emit({"steps": sorted(b["step"] for b in held), "bad": bad})
    """

# The attacker: a read buffer and the same loader; the victim's ring arrives by a
# RING event; every attempt on each memfd, and on the victim's and the daemon's
# descriptors through /proc.
ATTACKER_MEMFDS = """
    import os
    from secframes import Raw, emit, store_fds
    import hostile
    raw = Raw(os.environ["ZRECORD_SOCKET"])
    results, seals = {}, {}
    reply, fds = raw.call("buffer_open", {"bytes": 65536})
    size = reply["bytes"]
    seals["buffer"] = hostile.seals(fds[0])
    results.update(hostile.attempts(fds[0], size, "own buffer"))
    results.update(hostile.attempts_reopened(fds[0], size, "own buffer"))
    d, m = store_fds(os.environ["STORE"])
    h = raw.call("dataset_open", {}, fds=[d, m])[0]["handle"]
    reply, fds = raw.call("loader_open", {"streams": [{"handle": h}], "sampler": "sequential",
                                          "batch_size": 2, "seed": 7, "start_step": 0,
                                          "prefetch": 4})
    seals["own ring"] = hostile.seals(fds[0])
    results.update(hostile.attempts(fds[0], reply["ring_bytes"], "own ring"))
    results.update(hostile.attempts_reopened(fds[0], reply["ring_bytes"], "own ring"))
    other = None
    if os.environ["WANT_RING"] == "1":
        ev, rfds = raw.event("ring", reply["loader"])
        other = ev["ring"]
        seals["victim's ring"] = hostile.seals(rfds[0])
        results.update(hostile.attempts(rfds[0], ev["ring_bytes"], "victim's ring"))
        results.update(hostile.attempts_reopened(rfds[0], ev["ring_bytes"], "victim's ring"))
        b, _ = raw.event("batch", reply["loader"])
        assert b["ring"] == other, (b, other)
    results.update(hostile.other_process_fds(int(os.environ["VICTIM_PID"]), "victim"))
    results.update(hostile.other_process_fds(int(os.environ["DAEMON_PID"]), "daemon"))
    emit({"seals": seals, "ring": other, "results": results,
          "not_refused": hostile.not_refused(results)})
    """


def test_memfds_as_another_user(users, service, stores, start_as, run_as):
    victim_store, _ = stores
    svc = service()
    victim = start_as(users.victim, VICTIM_LOADER, env=svc.env(STORE=victim_store))
    where = json.loads(read_line(victim))
    want_ring = has_future_write_seal()
    r = run_as(users.attacker, ATTACKER_MEMFDS,
               env=svc.env(STORE=victim_store, VICTIM_PID=str(where["pid"]),
                           DAEMON_PID=str(svc.pid), WANT_RING="1" if want_ring else "0"))
    assert r.rc == 0, r
    got = r.json()
    assert not got["not_refused"], got["not_refused"]
    full = 2 | 4 | 1 | 16   # SHRINK, GROW, SEAL, FUTURE_WRITE
    for what, s in got["seals"].items():
        assert s & full == full, f"{what}: seals {s:#x}"
    assert any(k.startswith("victim: opening /proc/") for k in got["results"])
    if want_ring:
        assert got["ring"] == where["ring"]
    out, err = victim.communicate("check\n", timeout=30)
    assert victim.returncode == 0, err
    held = json.loads(out.strip().splitlines()[-1])
    assert held == {"steps": [0, 1, 2, 3], "bad": []}, held


ATTACKER_PROOFS = """
    import os
    from secframes import Raw, emit, store_fds
    victim, mine = os.environ["STORE"], os.environ["MINE"]
    raw = Raw(os.environ["ZRECORD_SOCKET"])
    out = {}
    def fds(meta, meta_flags, dir_path=victim, dir_flags=os.O_RDONLY | os.O_DIRECTORY):
        return [os.open(dir_path, dir_flags | os.O_CLOEXEC),
                os.open(os.path.join(meta, "meta.zr"), meta_flags | os.O_CLOEXEC)]
    # the premise: the attacker reads the victim's store and cannot write it
    try:
        os.close(os.open(os.path.join(victim, "meta.zr"), os.O_RDWR))
        out["premise: meta.zr O_RDWR"] = "opened"
    except PermissionError:
        out["premise: meta.zr O_RDWR"] = "EACCES"
    out["O_PATH directory"] = raw.try_call("dataset_open", {}, fds=fds(
        victim, os.O_RDONLY, dir_flags=os.O_PATH | os.O_DIRECTORY))
    out["O_PATH meta.zr"] = raw.try_call("dataset_open", {}, fds=fds(victim, os.O_PATH))
    out["O_PATH meta.zr, writable"] = raw.try_call("dataset_open", {"writable": True},
                                                   fds=fds(victim, os.O_PATH))
    out["own meta.zr O_RDWR, writable"] = raw.try_call("dataset_open", {"writable": True},
                                                       fds=fds(mine, os.O_RDWR))
    out["own meta.zr O_RDONLY"] = raw.try_call("dataset_open", {}, fds=fds(mine, os.O_RDONLY))
    out["read-only proof, writable"] = raw.try_call("dataset_open", {"writable": True},
                                                    fds=fds(victim, os.O_RDONLY))
    reply, _ = raw.call("dataset_open", {}, fds=fds(victim, os.O_RDONLY))
    h = reply["handle"]
    out["read-only handle: writable"] = reply["writable"]
    import numpy as np
    from loaderx import _shm, _wire
    rec = np.zeros((1, 4), dtype="<f4").tobytes()
    mfd = _shm.SealedMemfd([rec], "append")
    out["read-only handle: append"] = raw.try_call("append", {
        "handle": h, "dtype": "<f4", "count": 1, "record_bytes": 16, "item_shape": [4]},
        fds=[mfd.fd])
    mfd.close()
    out["read-only handle: delete"] = raw.try_call("delete", {
        "handle": h, "indices": _wire.u64s([0])})
    out["read-only handle: compact"] = raw.try_call("compact", {"handle": h})
    # APPEND's memfd checks, on the attacker's own store opened writable
    reply, _ = raw.call("dataset_open", {"writable": True}, fds=fds(mine, os.O_RDWR, mine))
    w = reply["handle"]
    def memfd(seal):
        fd = os.memfd_create("append", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.write(fd, rec)
        if seal:
            import fcntl
            fcntl.fcntl(fd, 1033, seal)
        return fd
    fields = {"handle": w, "dtype": "<f4", "count": 1, "record_bytes": 16, "item_shape": [4]}
    out["append: unsealed memfd"] = raw.try_call("append", fields, fds=[memfd(0)])
    out["append: memfd without F_SEAL_WRITE"] = raw.try_call("append", fields,
                                                             fds=[memfd(2 | 4)])
    emit(out)
    """


def test_access_proofs_as_another_user(users, service, stores, run_as):
    victim_store, attacker_store = stores
    before = store_state(victim_store)
    svc = service()
    r = run_as(users.attacker, ATTACKER_PROOFS, env=svc.env(STORE=victim_store,
                                                            MINE=attacker_store))
    assert r.rc == 0, r
    got = r.json()
    assert got.pop("premise: meta.zr O_RDWR") == "EACCES"
    refused = ("ZR_E_BAD_FD", "EACCES")
    for case in ("O_PATH directory", "O_PATH meta.zr", "O_PATH meta.zr, writable"):
        assert got[case] == "ZR_E_BAD_FD", (case, got[case])
    for case in ("own meta.zr O_RDWR, writable", "own meta.zr O_RDONLY",
                 "read-only proof, writable"):
        assert got[case] in refused, (case, got[case])
    assert got["read-only handle: writable"] is False
    for case in ("append", "delete", "compact"):
        assert got[f"read-only handle: {case}"] == "ZR_E_READONLY", (case, got)
    assert got["append: unsealed memfd"] == "ZR_E_BAD_FD"
    assert got["append: memfd without F_SEAL_WRITE"] == "ZR_E_BAD_FD"
    assert store_state(victim_store) == before, "the victim's store changed"
