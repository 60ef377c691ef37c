"""DataLoaders under data parallelism given no rank or world size: each takes them
from the torch.distributed group (gloo, two processes) or from RANK and
WORLD_SIZE, says so in stats(), and refuses an explicit value that disagrees.
Before, every rank read rank 0's batches (issue 38 item 4)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx.dataloader import INDEX_KEY, DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import PKG

pytestmark = pytest.mark.usefixtures("loader_feature")

N, BATCH, STEPS = 64, 4, 6

# One rank of a gloo job of two processes (a FileStore: no TCP port): its loader's
# indices by step, stats()["ranks"], and the errors of explicit values that disagree.
RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    from loaderx import ZrecordError
    from loaderx.dataloader import INDEX_KEY, DataLoader
    from loaderx.dataset import DenseDataset
    path, init, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    out = {}
    with DataLoader({"x": DenseDataset(path)}, batch_size=%d, sampler="iid", seed=7,
                    with_indices=True) as dl:
        out["indices"] = [next(dl)[INDEX_KEY].tolist() for _ in range(%d)]
        out["ranks"] = dl.stats()["ranks"]
    out["errors"] = []
    for kw in ({"rank": 1 - rank}, {"world_size": 3}, {"rank": rank, "world_size": 4}):
        try:
            DataLoader({"x": DenseDataset(path)}, batch_size=4, **kw).close()
            out["errors"].append(None)
        except ZrecordError as e:
            out["errors"].append(str(e))
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps(out))
""" % (BATCH, STEPS))


@pytest.fixture
def store(workdir):
    from_numpy("x", np.arange(N, dtype=np.int64))
    return str(workdir / "x")


def global_batches(store):
    """The global batches a single process reads (batch_size x 2 per step)."""
    with DataLoader({"x": DenseDataset(store)}, batch_size=2 * BATCH, sampler="iid", seed=7,
                    with_indices=True, rank=0, world_size=1) as dl:
        return [next(dl)[INDEX_KEY].tolist() for _ in range(STEPS)]


def test_torch_distributed_group(store, workdir):
    pytest.importorskip("torch.distributed")
    env = dict(os.environ, PYTHONPATH=PKG)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    init = f"file://{workdir}/gloo-store"
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, store, init, str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for r in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    for r, out in enumerate(outs):
        assert out["ranks"] == {"rank": r, "world_size": 2, "from": "torch.distributed"}
        assert out["errors"][0] is not None and f"rank={1 - r}" in out["errors"][0] \
            and "process group has rank" in out["errors"][0], out["errors"][0]
        assert out["errors"][1] is not None and "world_size=3" in out["errors"][1], out["errors"]
        # both given, a data-parallel group that does not divide the job's: refused
        assert out["errors"][2] is not None and "world_size=4" in out["errors"][2], out["errors"]
    # the two ranks' batches are disjoint halves of the single process's global batches
    for step, whole in enumerate(global_batches(store)):
        a, b = outs[0]["indices"][step], outs[1]["indices"][step]
        assert not set(a) & set(b), (step, a, b)
        assert a + b == whole, (step, a, b, whole)


def test_environment(store, monkeypatch):
    whole = global_batches(store)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with DataLoader({"x": DenseDataset(store)}, batch_size=BATCH, sampler="iid", seed=7,
                    with_indices=True) as dl:
        assert (dl.rank, dl.world_size) == (1, 2)
        assert dl.stats()["ranks"] == {"rank": 1, "world_size": 2, "from": "environment"}
        for step in range(STEPS):
            assert next(dl)[INDEX_KEY].tolist() == whole[step][BATCH:]
    # an explicit pair that agrees, and a data-parallel group inside the job's
    for kw, want in (({"rank": 1, "world_size": 2}, (1, 2)),
                     ({"rank": 0, "world_size": 1}, (0, 1))):
        with DataLoader({"x": DenseDataset(store)}, batch_size=BATCH, **kw) as dl:
            assert (dl.rank, dl.world_size) == want
            assert dl.stats()["ranks"]["from"] == "given"
    with pytest.raises(ZrecordError, match=r"rank=0, but the environment \(RANK, WORLD_SIZE\) "
                                           r"has rank 1"):
        DataLoader({"x": DenseDataset(store)}, batch_size=BATCH, rank=0)
    monkeypatch.setenv("WORLD_SIZE", "one")
    with pytest.raises(ZrecordError, match="WORLD_SIZE='one'"):
        DataLoader({"x": DenseDataset(store)}, batch_size=BATCH)


def test_neither(store, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with DataLoader({"x": DenseDataset(store)}, batch_size=BATCH) as dl:
        assert dl.stats()["ranks"] == {"rank": 0, "world_size": 1, "from": "default"}
