"""Finding 3 of issue 14: a planted file kills the daemon with SIGBUS.

The attacker creates a store through the service in a directory of its own that
the service user may write (group zrsec, set-group-ID), plants its own 0.chunk
(mode 0666) before the first append, appends, truncates the file and reads: the
daemon had opened the planted file (no O_EXCL) and mapped it (the map-or-pread
decision was taken at create, when the directory was empty), and died of SIGBUS.

Now a file the store creates is always new (the planted one is removed first),
only the daemon's own files that nobody else may write are mapped, and a mapped
read that meets a truncated file fails instead of killing the daemon. The second
case has the daemon serve a store all of whose files the attacker made (a copy of
its store, mode 0666), then truncates its chunk.
Either way reads give data or an error, the daemon lives and serves the victim.
"""

import os

import pytest

from .stores import RECORDS

ATTACKER = """
    import errno, os
    import numpy as np
    from loaderx.dataset import DenseDataset, open_dataset
    from secframes import emit
    store = os.environ["STORE"]
    chunk = os.path.join(store, "0.chunk")
    out = {}

    def attempt(fn):
        # fn's value ("ok" for None), or the error's name
        try:
            r = fn()
            return "ok" if r is None else r
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
        except Exception as e:
            return getattr(e, "name", None) or type(e).__name__

    def plant(content):
        fd = os.open(chunk, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        os.fchmod(fd, 0o666)
        os.write(fd, content)
        os.close(fd)
        os.link(chunk, chunk + ".mine")   # keeps its inode: compared below
        return os.stat(chunk).st_ino

    ds = DenseDataset(store, dtype="<f4", item_shape=(4,), codec="raw")
    if os.environ["WHEN"] == "before-append":
        ino = plant(b"\\xa5" * 4096)
        out["append"] = attempt(lambda: [ds.append(
            np.arange(4 * int(os.environ["N"]), dtype="<f4").reshape(-1, 4))] and None)
        out["planted in use"] = os.stat(chunk).st_ino == ino
    else:
        # a store all of whose files the attacker made: a copy of this one,
        # mode 0666 (the .loc and chunk files sparse, as the daemon makes them)
        ds.append(np.arange(4 * int(os.environ["N"]), dtype="<f4").reshape(-1, 4))
        ds.close()
        copy = os.environ["COPY"]
        for name in os.listdir(store):
            with open(os.path.join(store, name), "rb") as f:
                head, size = f.read(65536), os.fstat(f.fileno()).st_size
            fd = os.open(os.path.join(copy, name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            os.fchmod(fd, 0o666)
            os.write(fd, head)
            os.ftruncate(fd, size)
            os.close(fd)
        chunk = os.path.join(copy, "0.chunk")
        ds = open_dataset(copy)
    out["read before"] = attempt(lambda: ds[:].tolist())
    out["truncate"] = attempt(lambda: os.truncate(chunk, 0))
    out["read after"] = attempt(lambda: ds[:].tolist())
    out["read again"] = attempt(lambda: ds[:].tolist())
    emit(out)
    """

VICTIM = """
    import os
    import numpy as np
    from loaderx.dataset import DenseDataset
    from secframes import emit
    ds = DenseDataset(os.environ["STORE"], dtype="<f4", item_shape=(4,), codec="raw")
    ds.append(np.arange(8, dtype="<f4").reshape(2, 4))
    emit({"records": ds[:].tolist()})
    ds.close()
    """


@pytest.mark.parametrize("when", ["before-append", "served"])
def test_a_planted_chunk_cannot_kill_the_daemon(users, service, secdir, run_as, when):
    # the stores' own (empty) directories, which the service user may write
    adir = secdir.mkdir("attacker", users.attacker, 0o2770, group=users.group)
    copy = secdir.mkdir("attacker-copy", users.attacker, 0o2770, group=users.group)
    vdir = secdir.mkdir("victim", users.victim, 0o770, group=users.svc)
    svc = service()
    r = run_as(users.attacker, ATTACKER, env=svc.env(STORE=adir,
                                                     COPY=copy, N=str(RECORDS), WHEN=when))
    assert r.rc == 0, r
    got = r.json()
    assert svc.proc.poll() is None, f"the daemon died: {got}\n" + svc.log()[-3000:]
    want = [[4.0 * i + k for k in range(4)] for i in range(RECORDS)]
    if when == "before-append":
        assert got["append"] == "ok", got
        # the planted file is not the store's: it was removed and a new one made
        assert got["planted in use"] is False, got
        assert got["read before"] == want, got
    else:
        # the daemon serves the planted store (with pread: the attacker's files)
        assert got["read before"] == want, got
        assert got["truncate"] == "ok", got
    for k in ("read after", "read again"):
        assert got[k] == want or got[k] == "ZR_E_CORRUPT", (k, got)
    if got["truncate"] == "ok":
        assert got["read after"] == "ZR_E_CORRUPT", got
    v = run_as(users.victim, VICTIM, env=svc.env(STORE=vdir))
    assert v.rc == 0, v
    assert v.json()["records"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert svc.proc.poll() is None
