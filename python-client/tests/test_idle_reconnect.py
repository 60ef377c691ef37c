"""A connection the daemon closed while it was idle (``idle-timeout``, PROTOCOL.md
section 12) is noticed before the next request and replaced: a process that opened
a dataset, closed it and did other work for longer than the timeout opens the next
one without a "Broken pipe"."""

import select

import numpy as np
import pytest

from loaderx import _conn
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy


def wait_for_close(conn, timeout=30):
    """Blocks until the daemon closes its end (an event, not a sleep)."""
    p = select.poll()
    p.register(conn._fs.sock.fileno(), select.POLLRDHUP)
    ev = p.poll(timeout * 1000)
    assert ev and ev[0][1] & (select.POLLHUP | select.POLLRDHUP), \
        f"the daemon did not close the idle connection in {timeout} s"


@pytest.mark.no_daemon
def test_idle_closed_connection_is_replaced(own_daemon, workdir):
    own_daemon("--idle-timeout=1")
    a = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    from_numpy("s", a)
    old = _conn.default()
    with DenseDataset("s") as ds:             # opened and closed: no handle is left
        assert len(ds) == 64
    wait_for_close(old)
    assert old.usable, "nothing was sent yet, so nothing has failed"
    ds = DenseDataset("s")        # would raise "Broken pipe" on the old connection
    assert np.array_equal(ds[[3, 60]], a[[3, 60]])
    new = _conn.default()
    assert new is not old
    assert old.broken and "daemon closed the connection" in old.broken
    assert any("idle" in (f.get("message") or "") for f in old.faults), old.faults


@pytest.mark.no_daemon
def test_live_connection_is_kept(own_daemon, workdir):
    own_daemon()
    from_numpy("s", np.ones((8, 4), dtype=np.uint8))
    c = _conn.default()
    DenseDataset("s")
    assert _conn.default() is c and not c.peer_closed()
