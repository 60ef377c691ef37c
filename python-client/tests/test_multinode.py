"""Beyond one machine, on one box: two zrecordd, each with its own runtime
directory and its own copy of the stores, stand for two nodes; torchrun runs
``--nnodes=2 --nproc_per_node=2`` with a c10d rendezvous on localhost, one agent
per "node", each pointed at its node's daemon (``ZRECORD_SOCKET``) and copy.

- every global batch of the 4-rank job equals the single-process one of the same
  global batch size;
- rank 0's state_dict, resumed by a job of another node count (1 node, 2 ranks),
  goes on with the same sequence;
- a node whose copy holds other records (the same length and schema) is refused
  by the fingerprint, and the job fails with a message naming it;
- both nodes' daemons read one store (a shared file system's view: the same
  files), writable by the user the job runs as, without a change of its
  permissions, and the job's batches are the single-process ones.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from loaderx import _conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import HERE, daemon_binary, restore_connection, start_daemon, stop_daemon

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

N, FEATURES, GLOBAL_BATCH, STEPS = 96, 6, 8, 6
WORKER = os.path.join(HERE, "multinode_worker.py")


def use_daemon(monkeypatch, sock):
    """This process's connection from now on: the daemon at sock."""
    if _conn._default is not None:
        _conn._default.close()
    _conn._default = None
    monkeypatch.setenv("ZRECORD_SOCKET", sock)


def make_stores(tmp_path, monkeypatch, name, seed):
    """Stores written by a daemon of their own, which then exits (and lets them go)."""
    run = tmp_path / f"writer-{name}"
    run.mkdir()
    proc, sock = start_daemon(str(run))
    try:
        use_daemon(monkeypatch, sock)
        path = str(tmp_path / name)
        rng = np.random.default_rng(seed)
        from_numpy(os.path.join(path, "x"), rng.standard_normal((N, FEATURES), dtype=np.float32))
        from_numpy(os.path.join(path, "y"), np.arange(N, dtype=np.int64) * 3 + seed)
        _conn._default.close()
        _conn._default = None
    finally:
        assert stop_daemon(proc) == 0
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """A "node": its own daemon (own runtime directory) and its own copy of the
    stores, or (``shared``) the stores themselves, as a shared file system shows
    every node the same files."""

    def __init__(self, root, name, stores, shared=False):
        self.dir = os.path.join(root, name)
        os.makedirs(os.path.join(self.dir, "run"))
        if shared:
            self.stores = stores
        else:
            self.stores = os.path.join(self.dir, "stores")
            # as a user copies stores to a node (docs/MULTINODE.md)
            subprocess.run(["cp", "-r", "--sparse=always", stores, self.stores], check=True)
        self.proc, self.sock = start_daemon(os.path.join(self.dir, "run"))

    def stop(self):
        assert stop_daemon(self.proc) == 0


def torchrun(nodes, nproc, out, *extra, timeout=240):
    """One torchrun agent per node, all at once, on one c10d rendezvous."""
    port = free_port()
    procs = []
    for i, node in enumerate(nodes):
        env = dict(os.environ, ZRECORD_SOCKET=node.sock, GLOO_SOCKET_IFNAME="lo",
                   OMP_NUM_THREADS="1")
        env.pop("ZRECORD_IDLE_EXIT", None)
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(nodes)}",
               f"--nproc_per_node={nproc}", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=zr-multinode",
               "--max_restarts=0", "--monitor_interval=0.2", WORKER,
               "--stores", node.stores, "--global-batch", str(GLOBAL_BATCH),
               "--out", out, *extra]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    return [p.returncode for p in procs], outs


def job(nodes, out, *extra):
    """A job that must succeed on every node: what rank 0 wrote to ``out``."""
    codes, logs = torchrun(nodes, 2, out, "--steps", str(STEPS), *extra)
    assert codes == [0] * len(nodes), "\n".join(logs)
    with open(out) as f:
        return json.load(f)


def reference(stores, start, steps):
    """The single-node sequence: one process, world size 1, the same global batch."""
    loader = DataLoader({"x": DenseDataset(os.path.join(stores, "x")),
                         "y": DenseDataset(os.path.join(stores, "y"))},
                        batch_size=GLOBAL_BATCH, sampler="cyclic", seed=11, start_step=start)
    out = [{k: np.asarray(v).tolist() for k, v in next(loader).items()} for _ in range(steps)]
    fp = loader.fingerprint
    loader.close()
    return out, fp


@pytest.fixture
def nodes(tmp_path, monkeypatch):
    if not daemon_binary():
        pytest.skip("no zrecordd binary: set ZRECORDD")
    started = []
    saved = _conn._default
    _conn._default = None

    def make(name, stores, shared=False):
        node = Node(str(tmp_path), name, stores, shared)
        started.append(node)
        return node

    yield make
    restore_connection(saved)
    for node in started:
        node.stop()


@pytest.mark.no_daemon
def test_two_nodes_match_one_and_resume_on_another_count(nodes, tmp_path, monkeypatch):
    src = make_stores(tmp_path, monkeypatch, "src", seed=1)
    a = nodes("a", src)
    b = nodes("b", src)
    use_daemon(monkeypatch, a.sock)
    want, fp = reference(a.stores, 0, 2 * STEPS)

    got = job([a, b], str(tmp_path / "two-nodes.json"))
    assert got["world"] == 4 and got["fingerprint"] == fp
    assert got["steps"] == want[:STEPS]          # every global batch, both streams

    # rank 0's checkpoint, resumed on one node of 2 ranks (other batch per rank)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(got["state"]))
    assert got["state"]["step"] == STEPS and got["state"]["world_size"] == 4
    got1 = job([b], str(tmp_path / "one-node.json"), "--resume", str(state))
    assert got1["world"] == 2
    assert got1["steps"] == want[STEPS:]


def modes(root):
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_mode
            for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.no_daemon
def test_two_nodes_read_one_store_their_user_may_write(nodes, tmp_path, monkeypatch):
    # one store for both nodes' daemons (a shared file system), left as its
    # owner wrote it: every file writable by the user all four ranks run as
    src = make_stores(tmp_path, monkeypatch, "src", seed=1)
    before = modes(src)
    assert all(m & 0o200 for m in before.values()), before
    a = nodes("a", src, shared=True)
    b = nodes("b", src, shared=True)
    use_daemon(monkeypatch, a.sock)
    want, fp = reference(a.stores, 0, STEPS)    # node a's daemon reads it too, meanwhile

    got = job([a, b], str(tmp_path / "shared.json"))
    assert got["world"] == 4 and got["fingerprint"] == fp
    assert got["steps"] == want
    assert modes(src) == before                   # no permission changed, no file added


@pytest.mark.no_daemon
def test_a_node_with_other_records_is_refused(nodes, tmp_path, monkeypatch):
    src = make_stores(tmp_path, monkeypatch, "src", seed=1)
    other = make_stores(tmp_path, monkeypatch, "other", seed=2)   # same length and schema
    a = nodes("a", src)
    b = nodes("b", other)
    out = str(tmp_path / "refused.json")
    codes, logs = torchrun([a, b], 2, out, "--steps", str(STEPS))
    assert codes != [0, 0], "\n".join(logs)
    with open(out) as f:
        errors = json.load(f)["errors"]
    # both ranks of node b, none of node a
    assert len(errors) == 2, errors
    for e in errors:
        assert "StaleError" in e and "fingerprint" in e, e
    ranks = sorted(int(e.split()[1]) for e in errors)
    assert ranks == [2, 3], errors       # the node without rank 0, whichever it is
