"""Stores for the tests of tests/security: made, shared and compared (``from .stores
import ...`` in a test module).
"""

import os

SCHEMA = {"kind": "dense", "dtype": "<f4", "item_shape": [4], "codec": "raw"}
RECORDS = 10   # record i holds the floats 4i .. 4i+3


def make_store(run_as, service, user, path, records=RECORDS):
    """A dense store of `records` records made by user's own daemon (stopped
    again): its files are the user's."""
    own = service(user=user)
    r = run_as(user, """
        import os
        import numpy as np
        from loaderx.dataset import DenseDataset
        ds = DenseDataset(os.environ["STORE"], dtype="<f4", item_shape=(4,), codec="raw")
        ds.append(np.arange(4 * int(os.environ["N"]), dtype="<f4").reshape(-1, 4))
        ds.close()
        """, env=own.env(STORE=path, N=str(records)))
    assert r.rc == 0, r
    assert own.stop() == 0


def store_state(path):
    """What would show a change: each file's inode, size and mtime, meta.zr's bytes
    and the chunk's first page (the chunk and .loc files are sparse, 4 GiB)."""
    state = {}
    for f in sorted(os.listdir(path)):
        st = os.stat(os.path.join(path, f))
        with open(os.path.join(path, f), "rb") as fh:
            state[f] = (st.st_ino, st.st_size, st.st_mtime_ns, fh.read(4096))
    return state


def share_with_group(path, owner, group):
    """The owner shares a store with group: read for the group, nothing for others."""
    for root, dirs, files in os.walk(path):
        os.chown(root, owner.uid, group.gid)
        os.chmod(root, 0o750)
        for f in files:
            os.chown(os.path.join(root, f), owner.uid, group.gid)
            os.chmod(os.path.join(root, f), 0o640)
