"""Reading ahead through the real daemon (docs/IO.md): a store dropped from the
page cache (fdatasync + POSIX_FADV_DONTNEED, no root needed) read by a
DataLoader, with io_uring and with pread threads forced (`--io-backend`), gives
the same batches as the records themselves, and the daemon's STATUS says it
read them ahead within its budget; a read that fails (the daemon's test switch
ZRECORDD_TEST_IO_FAIL) fails its batch with EIO and the next loader works."""

import glob
import os

import numpy as np
import pytest

from loaderx import _conn, _errors
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

N, REC, B = 4096, 4096, 128


def records():
    a = np.zeros((N, REC), dtype=np.uint8)
    a[:, :8] = np.arange(N, dtype=np.uint64)[:, None].view(np.uint8).reshape(N, 8)
    a[:, 8:] = (np.arange(N)[:, None] * 7 + np.arange(REC - 8)[None, :]).astype(np.uint8)
    return a


def drop_from_page_cache(path):
    for f in glob.glob(os.path.join(path, "*.chunk")):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def status():
    return _conn.default().request("status")


@pytest.mark.no_daemon
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_cold_batches_bit_exact(own_daemon, workdir, backend):
    own_daemon(f"--io-backend={backend}", "--prefetch=8M")
    st = status()
    if st["prefetch"]["backend"] != backend:
        pytest.skip(f"io-backend={backend} cannot run here: the daemon reads ahead with "
                    f"{st['prefetch']['backend']}")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="iid", seed=3,
                        prefetch=2)
    for _ in range(24):
        batch = next(loader)["x"]
        ids = batch[:, :8].copy().view(np.uint64).ravel()  # each record says which it is
        np.testing.assert_array_equal(batch, data[ids])
    pf = status()["prefetch"]
    # reads of steps past the last batch may still be in flight: bytes lag records
    assert pf["steps"] > 0 and pf["records"] > 0 and 0 < pf["read_bytes"] <= pf["records"] * 4096
    assert pf["errors"] == 0
    assert pf["peak"] <= max(8 << 20, B * REC)
    assert pf["budget"] == 8 << 20
    loader.close()
    assert status()["prefetch"]["bytes"] == 0


@pytest.mark.no_daemon
def test_failed_read_fails_its_batch(own_daemon, workdir):
    own_daemon("--io-backend=threads", env={"ZRECORDD_TEST_IO_FAIL": "1"})
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="cyclic", seed=5,
                        prefetch=2)
    with pytest.raises(_errors.ZrecordError) as e:
        next(loader)
    assert "reading step 0 ahead" in str(e.value) and "[EIO]" in str(e.value)
    loader.close()
    assert status()["prefetch"]["errors"] == 1
    again = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="cyclic", seed=5,
                       prefetch=2)
    for _ in range(4):
        batch = next(again)["x"]
        ids = batch[:, :8].copy().view(np.uint64).ravel()
        np.testing.assert_array_equal(batch, data[ids])
    again.close()
