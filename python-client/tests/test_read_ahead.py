"""Reading ahead through the real daemon (docs/IO.md): a store dropped from the
page cache (fdatasync + POSIX_FADV_DONTNEED, no root needed) read by a
DataLoader, with io_uring and with pread threads forced (`--io-backend`), gives
the same batches as the records themselves, and the daemon's STATUS says it
read them ahead within its budget, or (`--io-direct=always`) read steps found
not resident with O_DIRECT straight into the ring, mapping nothing and reading
each aligned record once; with `--io-direct=auto` (the default) a store that
fits in the daemon's memory is read through the page cache and found resident
from its second pass on, where read directly it stayed cold; with direct reads
off, steps of large records found not resident,
and READs (ds[idx]) of such records, are read with pread, so the daemon maps
none of their pages; a read that fails (the daemon's test switch
ZRECORDD_TEST_IO_FAIL) fails its batch with EIO and the next loader works."""

import glob
import os
import socket
import struct
import time

import numpy as np
import pytest

from loaderx import StaleError, _conn, _errors
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

WAIT = 30.0  # seconds: the bound on a wait

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


def released():
    """The read-ahead bytes once every closed loader is gone: a loader closed
    while its gather or read-ahead job runs goes when that job ends (the daemon
    never waits for it), and gives its bytes back then. STATUS round trips for
    at most WAIT seconds, each waiting on the daemon's answer."""
    t0 = time.monotonic()
    while status()["prefetch"]["bytes"] != 0 and time.monotonic() - t0 < WAIT:
        pass
    return status()["prefetch"]["bytes"]


def take_bit_exact(path, data, batch_size, seed, steps=24):
    """Opens an iid DataLoader over path and checks its first steps' batches
    against data (each record's first 8 bytes say which it is); returns it."""
    loader = DataLoader({"x": DenseDataset(path)}, batch_size=batch_size, sampler="iid",
                        seed=seed, prefetch=2)
    for _ in range(steps):
        batch = next(loader)["x"]
        ids = batch[:, :8].copy().view(np.uint64).ravel()
        np.testing.assert_array_equal(batch, data[ids])
    return loader


@pytest.mark.no_daemon
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_cold_batches_bit_exact(own_daemon, workdir, backend):
    own_daemon(f"--io-backend={backend}", "--prefetch=8M", "--io-direct=off")
    st = status()
    if st["prefetch"]["backend"] != backend:
        pytest.skip(f"io-backend={backend} cannot run here: the daemon reads ahead with "
                    f"{st['prefetch']['backend']}")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = take_bit_exact("cold", data, B, seed=3)
    pf = status()["prefetch"]
    # reads of steps past the last batch may still be in flight: bytes lag records
    assert pf["steps"] > 0 and pf["records"] > 0 and 0 < pf["read_bytes"] <= pf["records"] * 4096
    assert pf["cold"] == 0  # small records: gathered from the mappings
    assert pf["errors"] == 0
    assert pf["peak"] <= max(8 << 20, B * REC)
    assert pf["budget"] == 8 << 20
    loader.close()
    assert released() == 0


def on_tmpfs(path):
    """True when path lies on a tmpfs (which may refuse O_DIRECT)."""
    best, fs = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, kind = line.split()[:3]
            if os.path.realpath(path).startswith(mnt.rstrip("/") + "/") and len(mnt) > len(best):
                best, fs = mnt, kind
    return fs == "tmpfs"


@pytest.mark.no_daemon
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_cold_batches_direct(own_daemon, workdir, backend):
    # a store this small fits in memory: only `always` reads it directly
    own_daemon(f"--io-backend={backend}", "--prefetch=8M", "--io-direct=always")
    if status()["prefetch"]["backend"] != backend:
        pytest.skip(f"io-backend={backend} cannot run here")
    if on_tmpfs(str(workdir)):
        pytest.skip("the test directory is on a tmpfs: test-loader-prefetch checks its fallback")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = take_bit_exact("cold", data, B, seed=3)
    pf = status()["prefetch"]
    # every step found cold is read directly: nothing through the page cache,
    # each 4 KiB record read once into its place, nothing copied
    assert pf["direct"] > 0 and pf["direct_steps"] > 0
    assert pf["direct_fallbacks"] == 0
    assert pf["direct_copied"] == 0
    assert pf["direct_bytes"] == pf["direct_steps"] * B * REC
    assert pf["steps"] == 0 and pf["cold"] == 0 and pf["fits"] == 0
    assert pf["direct_mode"] == "always"
    loader.close()
    assert released() == 0


@pytest.mark.no_daemon
@pytest.mark.parametrize("mode", ["auto", "always"])
def test_cold_store_that_fits_stays_resident(own_daemon, workdir, mode):
    # a 16 MiB store dropped from the page cache, read for two epochs in
    # order by a daemon whose memory (the box's or its cgroup's) is far
    # larger: in `auto` its cold steps go through the page cache (`fits`),
    # none directly, and the second epoch finds every step resident; in
    # `always` they are read directly, stay out of the page cache, and the
    # second epoch reads the device again (what `auto` did before)
    own_daemon("--io-backend=threads", "--prefetch=8M", f"--io-direct={mode}")
    if on_tmpfs(str(workdir)):
        pytest.skip("the test directory is on a tmpfs: test-loader-prefetch checks its fallback")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    pf = status()["prefetch"]
    assert pf["direct_mode"] == mode
    assert pf["direct_min"] > 4 * N * REC        # half the memory, here far more than 16 MiB
    epoch = N // B
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="sequential", seed=5,
                        prefetch=2)
    for step in range(epoch):
        np.testing.assert_array_equal(next(loader)["x"], data[step * B:(step + 1) * B])
    first = status()["prefetch"]
    for step in range(epoch):
        np.testing.assert_array_equal(next(loader)["x"], data[step * B:(step + 1) * B])
    second = status()["prefetch"]
    loader.close()
    if mode == "auto":
        assert second["direct"] == 0 and second["direct_steps"] == 0
        assert first["fits"] >= epoch // 2, first
        # reads ahead of the second epoch found every step warm: none cold (once 8
        # steps in a row are found warm, one in 16 is asked: prefetch.c PF_WARM_RUN)
        assert second["fits"] == first["fits"], (first, second)
        assert second["warm"] - first["warm"] >= 1, (first, second)
    else:
        assert second["fits"] == 0
        # the second epoch read directly again: the first left nothing resident
        assert second["direct_steps"] - first["direct_steps"] >= epoch - 4, (first, second)
    assert released() == 0


def mapped_rss(pid, suffix):
    """Bytes resident in process pid's mappings of files whose names end with suffix."""
    total, counting = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:       # a mapping's first line
                counting = len(head) >= 6 and head[-1].endswith(suffix)
            elif counting and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def cold_big_store(own_daemon, *flags):
    """A daemon of its own, and a store of 2048 records of 64 KiB (128 MiB),
    each saying which it is, dropped from the page cache; returns the daemon's
    pid and the records."""
    own_daemon(*flags)
    conn = _conn.default()
    pid = struct.unpack("3i", conn._fs.sock.getsockopt(socket.SOL_SOCKET,
                                                          socket.SO_PEERCRED, 12))[0]
    n, rec = 2048, 64 << 10
    data = np.empty((n, rec), dtype=np.uint8)
    data[:] = (np.arange(rec) % 251).astype(np.uint8)
    data[:, :8] = np.arange(n, dtype=np.uint64)[:, None].view(np.uint8).reshape(n, 8)
    from_numpy("big", data, codec="raw")
    drop_from_page_cache("big")
    return pid, data


@pytest.mark.no_daemon
def test_cold_large_records_not_mapped(own_daemon, workdir):
    pid, data = cold_big_store(own_daemon, "--io-backend=threads", "--prefetch=32M",
                               "--io-direct=off")
    loader = take_bit_exact("big", data, 16, seed=4)
    pf = status()["prefetch"]
    assert pf["cold"] >= 20 and pf["cold"] <= pf["steps"]
    # 24 steps of 16 records of 64 KiB, 24 MiB, gathered by pread: none of
    # their pages is in the daemon's page tables (through the mappings: all)
    assert mapped_rss(pid, ".chunk") < (1 << 20)
    loader.close()


@pytest.mark.no_daemon
def test_cold_large_read_not_mapped(own_daemon, workdir):
    # ds[idx] is not read ahead: a READ of large records mostly not resident
    # is read with pread instead of faulted in through the mappings
    pid, data = cold_big_store(own_daemon)
    ds = DenseDataset("big")
    rng = np.random.default_rng(5)
    for _ in range(4):
        idx = rng.choice(len(data), 64, replace=False)
        np.testing.assert_array_equal(ds[idx], data[idx])
    # 16 MiB read, none of it through the daemon's mappings (through them: all)
    assert mapped_rss(pid, ".chunk") < (1 << 20)
    ds.close()


@pytest.mark.no_daemon
@pytest.mark.parametrize("backend", ["uring", "threads"])
def test_failed_read_fails_its_batch(own_daemon, workdir, backend):
    # a sequential batch of 128 adjacent records is one merged read, and the
    # steps' jobs submit in order: the third read issued is that of step 2, or
    # of a step next to it (the pread threads may begin reads queued together
    # in any order), or of step 0: seen once under load, most likely when some
    # of step 0's pages stayed in the page cache and the others were read in
    # several runs
    own_daemon(f"--io-backend={backend}", "--io-direct=off", env={"ZRECORDD_TEST_IO_FAIL": "3"})
    if status()["prefetch"]["backend"] != backend:
        pytest.skip(f"io-backend={backend} cannot run here")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="sequential", seed=5,
                        prefetch=2)
    good = 0
    with pytest.raises(_errors.ZrecordError) as e:
        for step in range(8):
            batch = next(loader)["x"]
            np.testing.assert_array_equal(batch, data[step * B:(step + 1) * B])
            good += 1
    assert 0 <= good <= 3
    # the batches before it were whole and right (above), and it fails naming its step
    assert f"reading step {good} ahead" in str(e.value) and "[EIO]" in str(e.value)
    loader.close()
    assert released() == 0
    assert status()["prefetch"]["errors"] == 1
    # the daemon lives on (own_daemon checks its exit status), and a loader
    # opened at the failed step reads it and the next ones
    again = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="sequential", seed=5,
                       start_step=good, prefetch=2)
    for step in range(good, good + 4):
        np.testing.assert_array_equal(next(again)["x"], data[step * B:(step + 1) * B])
    again.close()


@pytest.mark.no_daemon
def test_failed_direct_read_fails_its_batch(own_daemon, workdir):
    # read directly, a failed read fails its step with EIO, and the daemon
    # does not read it again through the page cache (its pages would fault);
    # a store this small fits in memory: only `always` reads it directly
    own_daemon("--io-backend=threads", "--io-direct=always", env={"ZRECORDD_TEST_IO_FAIL": "3"})
    if on_tmpfs(str(workdir)):
        pytest.skip("the test directory is on a tmpfs: test-loader-prefetch checks its fallback")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="sequential", seed=5,
                        prefetch=2)
    good = 0
    with pytest.raises(_errors.ZrecordError) as e:
        for step in range(8):
            batch = next(loader)["x"]
            np.testing.assert_array_equal(batch, data[step * B:(step + 1) * B])
            good += 1
    assert good <= 3
    assert f"reading step {good} directly" in str(e.value) and "[EIO]" in str(e.value)
    loader.close()
    pf = status()["prefetch"]
    assert pf["direct_errors"] == 1 and pf["direct_fallbacks"] == 0
    again = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="sequential", seed=5,
                       start_step=good, prefetch=2)
    for step in range(good, good + 4):
        np.testing.assert_array_equal(next(again)["x"], data[step * B:(step + 1) * B])
    again.close()


@pytest.mark.no_daemon
def test_mutation_ends_read_ahead_stale(own_daemon, workdir):
    # reads ahead of a cold store are in flight or done when another handle
    # deletes a record: the loader ends STALE, nothing stays held against the
    # budget, and a loader opened after the change reads the new records
    own_daemon("--prefetch=4M")
    data = records()
    from_numpy("cold", data, codec="raw")
    drop_from_page_cache("cold")
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="iid", seed=8,
                        prefetch=2)
    next(loader)
    assert status()["prefetch"]["records"] > 0
    writer = DenseDataset("cold")
    writer.delete([7])                       # swap-last: record N-1 becomes record 7
    writer.close()
    with pytest.raises(StaleError):
        for _ in range(20):
            next(loader)
    loader.close()
    assert released() == 0
    again = DataLoader({"x": DenseDataset("cold")}, batch_size=B, sampler="iid", seed=8,
                       prefetch=2)
    for _ in range(8):
        batch = next(again)["x"]
        ids = batch[:, :8].copy().view(np.uint64).ravel()
        np.testing.assert_array_equal(batch, data[ids])
        assert 7 not in ids
    again.close()
