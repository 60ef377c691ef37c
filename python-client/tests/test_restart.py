"""A daemon restart under a process whose connection is idle: its datasets and
loaders go on, bit-exact, on a fresh connection.

Before, a dataset opened before the restart failed its first request with
``sending info to zrecordd failed: [Errno 32] Broken pipe``: only a new
connection noticed that the daemon had closed the old one. Now a handle looks
(``peer_closed``) before it sends, and a request that finds the connection lost
anyway (the daemon closed it between the look and the send) is sent once more on
a fresh connection when that cannot act twice: it never left, or it changes
nothing (``_conn.IDEMPOTENT``)."""

import numpy as np
import pytest

from loaderx import _conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_numpy

from conftest import daemon_binary, restore_connection, start_daemon, stop_daemon

SMALL = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
LARGE = np.arange(64 * 4096, dtype=np.uint32).reshape(64, 4096)     # 1 MiB: one pass
RAGGED = [np.arange(i % 9 + 1, dtype=np.int16) * i for i in range(64)]


class Daemon:
    """A daemon on one socket directory, restarted in place."""

    def __init__(self, sockdir):
        self.sockdir = str(sockdir)
        self.proc, self.sock = start_daemon(self.sockdir)

    def restart(self):
        assert stop_daemon(self.proc) == 0
        self.proc, _ = start_daemon(self.sockdir)

    def stop(self):
        stop_daemon(self.proc)


@pytest.fixture
def restartable(tmp_path, monkeypatch):
    if not daemon_binary():
        pytest.skip("no zrecordd binary: set ZRECORDD")
    d = tmp_path / "d"
    d.mkdir()
    saved = _conn._default
    _conn._default = None
    daemon = Daemon(d)
    monkeypatch.setenv("ZRECORD_SOCKET", daemon.sock)
    yield daemon
    restore_connection(saved)
    daemon.stop()


def make_stores():
    from_numpy("small", SMALL)
    from_numpy("large", LARGE, codec="raw")
    r = RaggedDataset("ragged", dtype=np.int16)
    r.append(RAGGED)
    r.close()
    return DenseDataset("small"), DenseDataset("large"), RaggedDataset("ragged")


def check_reads(small, large, ragged):
    assert len(small) == 64
    np.testing.assert_array_equal(small[[5, 1, 60]], SMALL[[5, 1, 60]])
    np.testing.assert_array_equal(large[:], LARGE)
    out = np.empty((2, 8), dtype=np.float32)
    np.testing.assert_array_equal(small.read([3, 4], out=out), SMALL[[3, 4]])
    for got, want in zip(ragged[[0, 63, 7]], [RAGGED[0], RAGGED[63], RAGGED[7]]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.no_daemon
def test_idle_datasets_go_on_after_a_restart(restartable, workdir):
    small, large, ragged = make_stores()
    check_reads(small, large, ragged)
    old = _conn.default()
    restartable.restart()
    check_reads(small, large, ragged)           # was: Broken pipe
    assert small._h.conn is not old and old.broken
    assert small.stats()["records"] == 64


@pytest.mark.no_daemon
def test_a_close_not_seen_yet_is_retried_once(restartable, workdir, monkeypatch):
    """The daemon closes the connection between the look and the send: the request
    fails, and goes again on a fresh connection."""
    small, large, ragged = make_stores()
    restartable.restart()
    monkeypatch.setattr(_conn.Connection, "peer_closed", lambda self: False)
    check_reads(small, large, ragged)           # idempotent: read, info
    restartable.restart()
    n = small.append(SMALL[:4])                 # its send failed: it never left
    assert n == 64 and len(small) == 68
    np.testing.assert_array_equal(small[64:], SMALL[:4])


def test_what_may_be_sent_again():
    lost_at_send = _conn.ConnectionLost("sending x failed", sent=False)
    lost_after = _conn.ConnectionLost("broke", sent=True)
    assert lost_at_send.may_retry("append") and lost_at_send.may_retry("read")
    assert lost_after.may_retry("read") and lost_after.may_retry("dataset_open")
    assert not lost_after.may_retry("append") and not lost_after.may_retry("delete")
    assert not lost_after.may_retry("compact") and not lost_after.may_retry("loader_open")


def copy(batch):
    """A batch as plain values (the ring's slots are reused)."""
    return {k: [np.array(r).tolist() for r in v] if isinstance(v, list) else np.array(v).tolist()
            for k, v in batch.items()}


@pytest.mark.no_daemon
@pytest.mark.parametrize("sampler", ["cyclic", "iid", "sequential"])
def test_an_idle_loader_goes_on_bit_exact_after_restarts(restartable, workdir, sampler):
    small, large, ragged = make_stores()
    streams = {"s": small, "l": large, "r": ragged}
    ref = DataLoader(streams, batch_size=6, sampler=sampler, seed=7, prefetch=2)
    want = [copy(next(ref)) for _ in range(18)]
    ref.close()
    loader = DataLoader(streams, batch_size=6, sampler=sampler, seed=7, prefetch=2)
    got = []
    for _ in range(3):
        got += [copy(next(loader)) for _ in range(6)]
        restartable.restart()                  # the loader holds no batch, waits for none
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"step {step}"
    loader.close()
