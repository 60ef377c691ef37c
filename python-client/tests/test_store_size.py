"""A closed store's apparent size is its data plus a small constant
(docs/FORMAT.md, "Apparent size"), so tar, scp and rsync copy what is there.

- a store of 178 records of 160 bytes (the issue's) written through the daemon:
  its files add up to its records, their table (16 bytes each) and a few hundred
  bytes, and `tar cf -` writes
  tens of KiB (main's daemon: two 4 GiB sparse files, 8.6 GB through tar);
- a store with its files at full size (a writer killed, an older build) is left
  as it is by readers, and cut to its data by the next writer's close.
"""

import os
import subprocess

import numpy as np

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

N, FEATURES = 178, 40
DATA = N * FEATURES * 4
FULL = 1 << 32


def sizes(path):
    return {f: os.stat(os.path.join(path, f)).st_size for f in os.listdir(path)}


def tar_bytes(path):
    p = subprocess.run(["tar", "cf", "-", "-C", os.path.dirname(path),
                        os.path.basename(path)], capture_output=True, check=True)
    return len(p.stdout)


def test_a_closed_store_is_its_data(workdir):
    path = os.path.join(workdir, "small")
    data = np.arange(N * FEATURES, dtype=np.float32).reshape(N, FEATURES)
    assert from_numpy(path, data, codec="raw") == N
    s = sizes(path)
    assert s["0.chunk"] == DATA and s["0.loc"] == N * 16, s
    # the records and their table, and meta.zr and schema.msgpack beside
    assert sum(s.values()) < DATA + N * 16 + 1024, s
    assert tar_bytes(path) < DATA + N * 16 + 16 * 1024   # tar's headers and padding

    # a reader leaves it so; a writer's close cuts it again
    ds = DenseDataset(path)
    loader = DataLoader({"x": ds}, batch_size=16, sampler="iid", seed=1)
    np.testing.assert_array_equal(next(loader)["x"].shape, (16, FEATURES))
    loader.close()
    ds.append(data[:2])
    ds.close()
    s = sizes(path)
    assert s["0.chunk"] == DATA + 2 * FEATURES * 4 and s["0.loc"] == (N + 2) * 16, s


def test_files_at_full_size_are_cut_by_the_next_writer(workdir):
    path = os.path.join(workdir, "full")
    data = np.ones((N, FEATURES), dtype=np.float32)
    from_numpy(path, data, codec="raw")
    for f in ("0.chunk", "0.loc"):                 # as a writer that was killed left them
        os.truncate(os.path.join(path, f), FULL)
    ds = DenseDataset(path)
    np.testing.assert_array_equal(ds[:], data)
    ds.close()
    assert sizes(path)["0.chunk"] == FULL          # reading writes nothing
    ds = DenseDataset(path)
    ds.append(data[:1])
    ds.close()
    s = sizes(path)
    assert s["0.chunk"] == DATA + FEATURES * 4 and s["0.loc"] == (N + 1) * 16, s
