"""A loader's depth against the real daemon (docs/DESIGN.md, "Depth"): the slots
the daemon fills ahead of the consumer grow only while the consumer waits and the
depth, not the fill, holds it back.

- A slow consumer (a sleep per batch: its simulated training step) never waits:
  its depth stays at 2 whatever the slots (prefetch 6).
- A fast consumer of fills that take one worker each, on a daemon of 4 workers,
  waits while workers are idle: its depth grows past 2.
- A client that keeps two batches alive and asks for a third is not left waiting
  for ever at depth 2 (the relief).
- Every batch is the right one all along (records are their own index).

Each wait for the daemon is bounded by a deadline, and STATUS is read between
batches.
"""

import time

import numpy as np
import pytest

from loaderx import _conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

WAIT = 60                   # bound on any loop, s
N, WORDS = 32, 256 << 10    # 32 records of 2 MiB (int64 words): batches of 2 are 4 MiB
STRIDE = 4096               # the words checked of each record


def store(path):
    """Record i is WORDS int64 words, each i: a batch shows which records it holds."""
    x = np.repeat(np.arange(N, dtype=np.int64)[:, None], WORDS, axis=1)
    from_numpy(path, x, codec="raw")
    return DenseDataset(path)


def loader_status(loader):
    r = _conn.default().request("status", {"loader": loader._session.loader})
    return r["per_loader"][0]


def check(batch, step, batch_size=2):
    """The batch of `step` of a sequential loader: records step*B .. +B, mod N."""
    x = batch["x"]
    want = (np.arange(batch_size) + step * batch_size) % N
    got = x[:, ::STRIDE]
    assert (got == want[:, None]).all(), f"step {step}: records {got[:, 0]}, want {want}"


def test_slow_consumer_keeps_depth_low(own_daemon):
    own_daemon("--threads=4")
    loader = DataLoader({"x": store("x")}, batch_size=2, sampler="sequential", prefetch=6)
    for step in range(40):
        b = next(loader)
        check(b, step)
        time.sleep(0.03)
    st = loader_status(loader)
    assert st["depth"] == 2, st
    assert st["depth_raises"] == 0, st
    loader.close()


def test_fast_consumer_of_slow_fills_deepens(own_daemon):
    own_daemon("--threads=4")
    loader = DataLoader({"x": store("x")}, batch_size=2, sampler="sequential", prefetch=6)
    assert loader_status(loader)["depth"] == 2
    deadline = time.monotonic() + WAIT
    step, st = 0, None
    while time.monotonic() < deadline:
        b = next(loader)
        check(b, step)
        step += 1
        if step % 16 == 0:
            st = loader_status(loader)
            if st["depth"] > 2 and step >= 64:
                break
    assert st["depth"] > 2, st
    assert st["depth"] <= 6 and st["depth_raises"] == st["depth"] - 2, st
    for _ in range(32):             # and the batches stay right at the new depth
        b = next(loader)
        check(b, step)
        step += 1
    loader.close()


def test_holding_every_batch_is_relieved(own_daemon):
    own_daemon("--threads=4")
    loader = DataLoader({"x": store("x")}, batch_size=2, sampler="sequential", prefetch=4)
    kept = [next(loader), next(loader)]     # the depth's two, both kept alive
    b = next(loader)                        # a third: filled past the depth
    for step, x in enumerate(kept + [b]):
        check(x, step)
    st = loader_status(loader)
    assert st["depth"] == 3 and st["depth_raises"] == 1, st
    del kept, b
    loader.close()
