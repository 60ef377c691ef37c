"""Loader telemetry against the real daemon (docs/TELEMETRY.md): is the loop waiting
for data, and whose fault is it.

- A consumer that sleeps is consumer-bound; its rates, waits and sizes agree with
  what this process measured itself.
- A fast consumer of a zstd_dict store with the cache off is data-bound, and the
  stage to blame is decode.
- A store whose pages are not in the page cache (dropped with POSIX_FADV_DONTNEED
  after it was written and closed: each first read of a record goes to the
  device, as for a store larger than memory) is data-bound on I/O.
- warn_stalls warns once (not once per check) when data-bound, never when not.
- The journal gets one warning for a loader data-bound past --stall-warning, and
  the STATUS= line counts it.

The consumers' sleeps are their simulated training steps; every wait for the
daemon polls with a deadline.
"""

import ctypes
import mmap
import os
import select
import socket
import subprocess
import time
import warnings

import numpy as np
import pytest

from loaderx import _conn, _errors
from loaderx import dataloader as dlmod
from loaderx.dataloader import DataLoader, LoaderStallWarning
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import daemon_binary

WAIT = 60   # bound on any wait for the daemon, s


def run_for(loader, seconds, step_s=0.0):
    """Takes batches for `seconds` after the first one, sleeping step_s per batch
    (the consumer's work); returns the number taken and the time it took."""
    next(loader)
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        b = next(loader)
        del b
        if step_s:
            time.sleep(step_s)
        n += 1
    return n, time.monotonic() - t0


def zstd_dict_store(path, n=128, words=4096):
    """A zstd_dict dense store of n int32 records of `words` words: compressible,
    so decoding costs more than copying."""
    rng = np.random.default_rng(0)
    base = (np.arange(words) % 251).astype(np.int32)
    x = np.stack([np.roll(base, i) + rng.integers(0, 4, words, dtype=np.int32)
                  for i in range(n)])
    from_numpy(path, x, codec="zstd_dict")
    return DenseDataset(path)


def test_sleeping_consumer_is_consumer_bound(own_daemon, monkeypatch):
    own_daemon()
    monkeypatch.setattr(dlmod, "_STALL_CHECK_S", 0.5)
    x = np.random.default_rng(1).standard_normal((1024, 256), dtype=np.float32)
    from_numpy("x", x, codec="raw")
    loader = DataLoader({"x": DenseDataset("x")}, batch_size=32, sampler="cyclic", prefetch=4,
                        warn_stalls=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        n, took = run_for(loader, 3.0, step_s=0.02)
    st = loader.stats()
    assert not [w for w in caught if issubclass(w.category, LoaderStallWarning)]
    assert st["verdict"] == "consumer-bound", st
    assert st["reports"]
    # the figures: the rate is what this loop did, at most one batch per step
    local_rate = n / took
    rate = st["batches_per_s"]["10s"]
    assert 0.75 * local_rate <= rate <= 1.25 * local_rate, (rate, local_rate)
    assert rate <= 1 / 0.02 * 1.1
    assert st["wait_fraction"]["10s"] <= 0.05
    assert st["mib_per_s"]["10s"] == pytest.approx(rate * 32 * 256 * 4 / 2**20, rel=1e-9)
    # ready batches waited for the loop: most of a step
    assert st["ready_p50_s"] >= 0.01
    assert st["wait_p50_s"] <= st["wait_p99_s"]
    # the daemon counted the waits this process told it (all but those of the
    # batches still held), and announced at most a ring ahead of this loop
    assert st["waited_s"] <= st["local"]["wait_s"] + 1e-9
    assert st["local"]["batches"] <= st["batches"] <= st["local"]["batches"] + 4
    assert st["cache_hit_ratio"] is None          # raw: no cache lookups
    loader.close()


def test_decode_bound_without_cache(own_daemon, monkeypatch):
    own_daemon("--cache=0", "--threads=1")
    monkeypatch.setattr(dlmod, "_STALL_CHECK_S", 0.3)
    ds = zstd_dict_store("z")
    loader = DataLoader({"z": ds}, batch_size=32, sampler="cyclic", seed=1, prefetch=4,
                        warn_stalls=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_for(loader, 3.0)
    st = loader.stats()
    assert st["verdict"] == "data-bound", st
    assert st["stage"] == "decode", st
    assert st["wait_fraction"]["10s"] > 0.5, st
    stages = st["stages_s"]
    assert stages["decode"] > 2 * max(v for k, v in stages.items() if k != "decode"), stages
    assert st["cache_hit_ratio"] == 0.0
    assert 0 < st["gather_p50_s"] <= st["gather_p99_s"]
    # checks every 0.3 s, warns at most once a minute: once
    stalls = [w for w in caught if issubclass(w.category, LoaderStallWarning)]
    assert len(stalls) == 1, [str(w.message) for w in stalls]
    assert "decode" in str(stalls[0].message)
    loader.close()


# ---- a store out of the page cache --------------------------------------------

def stage_of(stages):
    """The stage docs/TELEMETRY.md names from stats()'s stages_s: the largest of
    lookup, io (reads and waits for reads ahead), decode, copy, contention."""
    by = {"lookup": stages["lookup"], "io": stages["read"] + stages["io_wait"],
          "decode": stages["decode"], "copy": stages["copy"], "contention": stages["queue"]}
    return max(by, key=by.get)


def test_in_memory_store_is_not_blamed_on_io(own_daemon):
    """The quick start's case (issue 38 item 2): a 16 MiB zstd store in memory read
    by a loop that does nothing is data-bound, and the stage named is the largest
    of the gathers' stages, not io: locating records in the table and the cache is a
    stage of its own (lookup). Before, lookups counted as io, and the advice for io
    is faster storage."""
    own_daemon()
    x = np.random.default_rng(2).standard_normal((16384, 256), dtype=np.float32)
    from_numpy("x", x)                      # zstd, from_numpy's default, as the example
    loader = DataLoader({"x": DenseDataset("x")}, batch_size=256, sampler="cyclic", prefetch=4)
    run_for(loader, 1.0)                    # warm: every record decoded into the cache
    run_for(loader, 3.0)
    st = loader.stats()
    loader.close()
    assert st["verdict"] == "data-bound", st
    assert st["stage"] != "io", st
    assert st["stage"] == stage_of(st["stages_s"]), st
    assert st["stages_s"]["read"] + st["stages_s"]["io_wait"] < st["stages_s"]["lookup"], st


def test_no_verdict_before_there_is_enough_to_judge(own_daemon):
    """Two batches after the open: too little past the wait for the first batch to
    judge, so the verdict is unknown (before: a verdict from a fraction of a
    second, start-up included); a second of a loop sleeping 20 ms a step later, it
    is consumer-bound."""
    own_daemon()
    x = np.random.default_rng(3).standard_normal((1024, 64), dtype=np.float32)
    from_numpy("x", x, codec="raw")
    loader = DataLoader({"x": DenseDataset("x")}, batch_size=32, sampler="cyclic", prefetch=4)
    next(loader)
    next(loader)
    st = loader.stats()
    assert st["verdict"] == "unknown", st
    assert st["window_s"] < 10, st
    run_for(loader, 2.0, step_s=0.02)
    st = loader.stats()
    loader.close()
    assert st["verdict"] == "consumer-bound", st


def _fs_type(path):
    best, fstype = "", None
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1].replace("\\040", " ")
            if os.path.realpath(path).startswith(mnt.rstrip("/") + "/") and len(mnt) > len(best):
                best, fstype = mnt, parts[2]
    return fstype


def _resident(path):
    """The share of the file's pages in the page cache: mincore() of a mapping that
    nothing touches (made and unmade through libc), or None if it cannot tell."""
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        return None
    try:
        if libc.mincore(addr, size, vec) != 0:
            return None
    finally:
        libc.munmap(addr, size)
    return sum(v & 1 for v in vec) / pages


def drop_from_page_cache(store):
    """Drops the store's chunk files' pages (POSIX_FADV_DONTNEED: clean pages
    that no process maps go). Returns False where the page cache keeps them."""
    chunks = [os.path.join(store, f) for f in os.listdir(store) if f.endswith(".chunk")]
    deadline = time.monotonic() + WAIT
    while True:
        for path in chunks:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        left = [_resident(p) for p in chunks]
        if all(r is not None and r < 0.01 for r in left):
            return True
        if any(r is None for r in left) or time.monotonic() > deadline:
            return False
        # the daemon may still map the store it closed (its last sync): ask again


def test_store_out_of_the_page_cache_is_io_bound(own_daemon, tmp_path):
    if _fs_type(str(tmp_path)) in ("tmpfs", "ramfs"):
        pytest.skip("the page cache keeps this file system's pages (tmpfs)")
    own_daemon()
    n = 16384                                    # 4 KiB records: 64 MiB
    x = np.random.default_rng(2).integers(0, 255, (n, 4096), dtype=np.uint8)
    from_numpy("cold", x, codec="raw")
    del x
    if not drop_from_page_cache(str(tmp_path / "cold")):
        pytest.skip("could not drop the store's pages from the page cache")
    # each batch of 256 random records: mostly first reads, from the device
    loader = DataLoader({"x": DenseDataset("cold")}, batch_size=256, sampler="iid", seed=3,
                        prefetch=4)
    next(loader)
    for _ in range(24):
        next(loader)
    st = loader.stats()
    assert st["verdict"] == "data-bound", st
    assert st["stage"] == "io", st
    stages = st["stages_s"]
    io = stages["lookup"] + stages["read"] + stages["io_wait"]
    assert io > stages["decode"] + stages["copy"] + stages["queue"], stages
    # what came from the device: at least a good part of the records taken
    assert st["device_bytes"] >= 25 * 256 * 4096 // 4, st["device_bytes"]
    loader.close()


# ---- the journal and STATUS= -----------------------------------------------------

def test_journal_warning_and_status_line(tmp_path, monkeypatch):
    """--stall-warning=1: one warning for the episode, naming the loader's client and
    stage; STATUS= counts the data-bound loader."""
    binary = daemon_binary()
    if not binary:
        pytest.skip("no zrecordd binary: set ZRECORDD")
    sock = str(tmp_path / "zrecordd.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    ns.bind(str(tmp_path / "notify"))
    log_path = tmp_path / "zrecordd.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([binary, f"--socket={sock}", "--threads=1", "--cache=0",
                                 "--stall-warning=1", "--log-level=warning"],
                                env=dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify")),
                                stdout=log, stderr=subprocess.STDOUT)
    saved = _conn._default
    try:
        deadline = time.monotonic() + WAIT
        while b"READY=1" not in ns.recv(4096):
            assert time.monotonic() < deadline and proc.poll() is None
        _conn._default = None
        monkeypatch.setenv("ZRECORD_SOCKET", sock)
        monkeypatch.chdir(tmp_path)
        loader = DataLoader({"z": zstd_dict_store("z")}, batch_size=32, sampler="iid",
                            seed=4, prefetch=4)
        warned = counted = False
        deadline = time.monotonic() + WAIT
        while not (warned and counted):
            assert time.monotonic() < deadline, (warned, counted, log_path.read_text())
            next(loader)                          # a loop that never waits for itself
            while select.select([ns], [], [], 0)[0]:
                msg = ns.recv(4096).decode()
                counted |= "(1 data-bound)" in msg
            warned = "has been data-bound for" in log_path.read_text()
        lines = [l for l in log_path.read_text().splitlines() if "data-bound for" in l]
        assert len(lines) == 1, lines
        assert f"pid {os.getpid()}" in lines[0] and "decode" in lines[0], lines
        loader.close()
    finally:
        if _conn._default is not None:
            _conn._default.close()
        _conn._default = saved
        ns.close()
        proc.terminate()
        assert proc.wait(WAIT) == 0


def test_status_for_one_loader(own_daemon):
    own_daemon()
    from_numpy("s", np.arange(64, dtype=np.int64), codec="raw")
    loader = DataLoader({"s": DenseDataset("s")}, batch_size=8, sampler="sequential")
    next(loader)
    conn = _conn.default()
    r = conn.request("status", {"loader": loader._session.loader})
    assert [e["loader"] for e in r["per_loader"]] == [loader._session.loader]
    assert r["per_loader"][0]["pid"] == os.getpid()
    assert r["per_loader"][0]["uid"] == os.getuid()
    assert r["per_loader"][0]["dataset"] == os.path.realpath("s")
    with pytest.raises(_errors.ZrecordError) as e:
        conn.request("status", {"loader": 999})
    assert e.value.name == "ZR_E_NO_HANDLE"
    loader.close()
