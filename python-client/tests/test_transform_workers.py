"""Transforms in worker processes (issue 35): the choice between processes and
threads, zero copy in (ring views) and out (the arena), step order, resume,
the generators, faults, Ctrl-C, start-up, and steps served with a stride."""

import gc
import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xforms
from loaderx.dataloader import INDEX_KEY, SOURCE_KEY, DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy

from conftest import PKG

pytestmark = pytest.mark.usefixtures("loader_feature")

N = 200
X = np.arange(N * 16, dtype=np.float32).reshape(N, 16)
SEQS = [np.arange(k % 5 + 1, dtype=np.int64) + 100 * k for k in range(N)]
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def streams(workdir):
    from_numpy("x", X)
    from_numpy("y", np.arange(N))
    return {"x": DenseDataset("x"), "y": DenseDataset("y")}


def ys(loader, n):
    return [np.array(next(loader)["y"]) for _ in range(n)]


def reference(streams, n, **kw):
    with DataLoader(streams, num_workers=0, **kw) as ref:
        return ys(ref, n)


def pids_gone(pids, timeout=20):
    """Waits (on pidfds, bounded) until every process of `pids` has exited."""
    fds = []
    for p in pids:
        try:
            fds.append(os.pidfd_open(p))
        except ProcessLookupError:
            pass
    try:
        for fd in fds:
            r, _, _ = select.select([fd], [], [], timeout)
            if not r:
                return False
        return True
    finally:
        for fd in fds:
            os.close(fd)


def run_script(code, timeout=120, env=None):
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join([PKG, HERE, e.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=os.getcwd(),
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ the choice
def test_default_is_processes_for_a_module_function_threads_for_a_lambda(streams):
    with DataLoader(streams, batch_size=8, transform=xforms.double, num_workers=2) as p:
        assert p.workers == "process"
        w = p.stats()["workers"]
        assert w["kind"] == "process" and "pickled" in w["why"] and w["count"] == 2
        assert next(p)["sum"] >= 0
    k = 3

    def closure(b):
        return b["y"] * k
    for f in (lambda b: b, closure):
        with DataLoader(streams, batch_size=8, transform=f, num_workers=2) as t:
            assert t.workers == "thread"
            why = t.stats()["workers"]["why"]
            assert "cannot be pickled" in why and "lambda" in why
            next(t)
    with DataLoader(streams, batch_size=8, transform=xforms.Scale(3), num_workers=1) as o:
        assert o.workers == "process"
        b = next(o)
    np.testing.assert_array_equal(b % 3, 0)
    with DataLoader(streams, batch_size=8, transform=xforms.double, workers="thread") as t:
        assert t.workers == "thread" and t.stats()["workers"]["why"] == "workers='thread'"
    with DataLoader(streams, batch_size=8, transform=xforms.double, num_workers=0) as i:
        assert i.workers == "inline"


def test_process_refuses_what_cannot_be_pickled(streams):
    with pytest.raises(TypeError, match="top level of a module"):
        DataLoader(streams, batch_size=8, transform=lambda b: b, workers="process")
    with pytest.raises(ValueError, match="workers must be"):
        DataLoader(streams, batch_size=8, transform=xforms.double, workers="fork")


# ------------------------------------------------------------------ zero copy
def test_input_is_the_ring_mapped_read_only_in_the_worker(streams):
    with DataLoader(streams, batch_size=8, sampler="sequential", transform=xforms.where,
                    num_workers=2) as loader:
        seen = [next(loader) for _ in range(6)]
    for k, r in enumerate(seen):
        assert r["pid"] != os.getpid()
        assert r["writeable"] is False
        assert r["mapping"].startswith("/memfd:zrecord-ring"), r["mapping"]
        np.testing.assert_array_equal(r["y"], np.arange(8 * k, 8 * k + 8))
    assert len({r["pid"] for r in seen}) == 2


def test_output_arrays_live_in_the_arena_written_once(streams):
    loader = DataLoader(streams, batch_size=16, sampler="iid", seed=4, transform=xforms.big,
                        num_workers=2)
    want = reference(streams, 30, batch_size=16, sampler="iid", seed=4)
    for k in range(30):
        b = next(loader)
        np.testing.assert_array_equal(b["y"], want[k])
        np.testing.assert_array_equal(b["x"], xforms.wide(X[want[k]]) + 1)
        assert b["n"] == 16
        assert xforms.mapping_of(b["x"].ctypes.data).startswith("/memfd:loaderx-arena")
        assert b["x"].flags.writeable
        b["x"][0, 0] = -1                  # the result is the caller's
        assert xforms.mapping_of(b["y"].ctypes.data) != "/memfd:loaderx-arena"   # small: pickled
        del b
    w = loader.stats()["workers"]
    arena = w["arena"]
    assert arena["results"] == 30 + (w["batches"] - 30)
    assert arena["written_bytes"] >= 30 * 16 * 16 * 64 * 8
    # dropped results give their buffers back: a few buffers serve every step
    assert arena["made"] <= 2 * 2 + 2, arena
    assert arena["over_budget"] == 0
    assert w["hop_s"] is not None and w["hop_s"] > 0
    loader.close()


def test_input_passed_on_comes_back_as_ring_views(streams):
    from_numpy("big", np.repeat(X, 64, axis=1))         # 4 KiB records of float32
    st = {"x": DenseDataset("big"), "y": streams["y"]}
    with DataLoader(st, batch_size=20, sampler="sequential", transform=xforms.identity,
                    num_workers=2, prefetch=4) as loader:
        held = []
        for k in range(3):
            b = next(loader)        # x: 80 KiB, a view of the ring; y: small, pickled
            assert xforms.mapping_of(b["x"].ctypes.data).startswith("/memfd:zrecord-ring")
            assert not b["x"].flags.writeable
            np.testing.assert_array_equal(b["x"], np.repeat(X[20 * k:20 * k + 20], 64, axis=1))
            held.append(b)
        w = loader.stats()["workers"]
        assert w["arena"]["written_bytes"] == 0    # copied 0 times
        # each held batch keeps its slot, as without a transform (the fourth
        # may be in a worker's task)
        assert len(loader._session.held) >= 3
        del held, b
        gc.collect()
        loader._session.flush()
        assert len(loader._session.held) <= 1
        for k in range(3, 9):
            np.testing.assert_array_equal(next(loader)["x"][:, ::64], X[20 * k:20 * k + 20])
    # a view with other strides (flipped, cropped) comes back the same
    with DataLoader(st, batch_size=20, sampler="sequential", transform=xforms.flipped,
                    num_workers=1) as loader:
        for k in range(2):
            b = next(loader)
            assert xforms.mapping_of(b["x"].ctypes.data).startswith("/memfd:zrecord-ring")
            want = np.repeat(X[20 * k:20 * k + 20], 64, axis=1)[::-1, :0:-1]
            assert b["x"].strides == want.strides
            np.testing.assert_array_equal(b["x"], want)
        assert loader.stats()["workers"]["arena"]["written_bytes"] == 0


def test_an_array_or_a_dict_of_arrays_crosses_without_a_pickle(streams):
    with DataLoader(streams, batch_size=16, sampler="sequential", transform=xforms.bare,
                    num_workers=1) as loader:
        for k in range(3):
            a = next(loader)
            np.testing.assert_array_equal(a, xforms.wide(X[16 * k:16 * k + 16]) * 3)
            assert xforms.mapping_of(a.ctypes.data).startswith("/memfd:loaderx-arena")
        assert loader.stats()["workers"]["pickled_bytes"] == 0
    from_numpy("big", np.repeat(X, 64, axis=1))         # 4 KiB records of float32
    st = {"x": DenseDataset("big"), "y": streams["y"]}
    with DataLoader(st, batch_size=20, sampler="sequential", transform=xforms.arrays_only,
                    num_workers=1) as loader:
        for k in range(3):
            b = next(loader)
            x = np.repeat(X[20 * k:20 * k + 20], 64, axis=1)
            assert list(b) == ["w", "v"]
            np.testing.assert_array_equal(b["w"], x * 2)
            assert xforms.mapping_of(b["w"].ctypes.data).startswith("/memfd:loaderx-arena")
            np.testing.assert_array_equal(b["v"], x[::-1])
            assert xforms.mapping_of(b["v"].ctypes.data).startswith("/memfd:zrecord-ring")
            assert b["v"].strides == x[::-1].strides
        assert loader.stats()["workers"]["pickled_bytes"] == 0


@pytest.mark.parametrize("k", [1, 2])
def test_outputs_whose_form_changes_keep_their_arrays(streams, k):
    """Outputs that change form from step to step (the answers that name a form
    described before, the arrays made ahead for the answer expected) come back
    right, and the batches kept stay as they came while later ones reuse the
    arena's buffers."""
    def check(b, want):
        if isinstance(want, dict):
            assert list(b) == list(want)
            for key in want:
                np.testing.assert_array_equal(b[key], want[key])
        else:
            np.testing.assert_array_equal(b, want)

    with DataLoader(streams, batch_size=16, sampler="sequential", transform=xforms.shifting,
                    num_workers=0) as ref:
        wants = [next(ref) for _ in range(36)]
    kept = []
    with DataLoader(streams, batch_size=16, sampler="sequential", transform=xforms.shifting,
                    num_workers=k, workers="process") as loader:
        for want in wants:
            kept = kept[-2:] + [(next(loader), want)]
            for b, w in kept:
                check(b, w)
        assert loader.stats()["workers"]["arena"]["buffers"] <= 2 * k + 4
    del kept, b
    gc.collect()


def test_arrays_at_any_depth_and_tensors(streams):
    with DataLoader(streams, batch_size=16, sampler="sequential", transform=xforms.nested,
                    num_workers=1) as loader:
        out = next(loader)
    x = xforms.wide(X[:16])
    np.testing.assert_array_equal(out[0], x)
    np.testing.assert_array_equal(out[1][0], x * 2)
    np.testing.assert_array_equal(out[1][1]["deep"][0], x * 3)
    assert out[2] == "text"
    np.testing.assert_array_equal(out[3]["y"], np.arange(16))
    for a in (out[0], out[1][0], out[1][1]["deep"][0]):
        assert xforms.mapping_of(a.ctypes.data).startswith("/memfd:loaderx-arena")
    torch = pytest.importorskip("torch")
    with DataLoader(streams, batch_size=16, sampler="sequential", transform=xforms.tensors,
                    num_workers=1) as loader:
        out = next(loader)
    assert isinstance(out["x"], torch.Tensor) and out["x"].dtype == torch.float64
    torch.testing.assert_close(out["x"], torch.from_numpy(x))
    out["x"].add_(1)                       # writable: arena memory is the caller's


def test_over_budget_results_come_pickled(streams):
    with DataLoader(streams, batch_size=16, sampler="sequential", transform=xforms.big,
                    num_workers=2, arena_bytes=0) as loader:
        for k in range(5):
            b = next(loader)
            np.testing.assert_array_equal(b["x"], xforms.wide(X[16 * k:16 * k + 16]) + 1)
        arena = loader.stats()["workers"]["arena"]
    assert arena["bytes"] == 0 and arena["over_budget"] >= 5 and arena["results"] == 0


# ------------------------------------------------------------------ order, resume, generators
@pytest.mark.parametrize("sampler", ["iid", "cyclic"])
def test_step_order_and_exact_resume(streams, sampler):
    want = reference(streams, 40, batch_size=8, sampler=sampler, seed=11)
    loader = DataLoader(streams, batch_size=8, sampler=sampler, seed=11, transform=xforms.uneven,
                        num_workers=3)
    got = []
    for k in range(25):
        b = next(loader)
        got.append(b["y"])
        np.testing.assert_array_equal(b["x0"], X[want[k], 0])
    state = loader.state_dict()
    assert state["step"] == 25
    for k in range(25, 40):
        got.append(next(loader)["y"])
    loader.close()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    again = DataLoader(streams, batch_size=8, sampler=sampler, seed=11, transform=xforms.uneven,
                       num_workers=2)
    again.load_state_dict(state)
    for k in range(25, 40):
        np.testing.assert_array_equal(next(again)["y"], want[k])
    again.close()


def test_generators_keyed_by_seed_step_rank(streams):
    def run(n, start=0, **kw):
        with DataLoader(streams, batch_size=16, sampler="iid", seed=5, start_step=start,
                        transform=xforms.draws, **kw) as loader:
            return [next(loader) for _ in range(n)]
    proc = run(6, num_workers=2)
    thread = run(6, num_workers=2, workers="thread")
    inline = run(6, num_workers=0)
    resumed = run(3, start=3, num_workers=2)
    for a, b, c in zip(proc, thread, inline):
        for k in ("y", "batch", "records"):
            np.testing.assert_array_equal(a[k], b[k])
            np.testing.assert_array_equal(a[k], c[k])
    for a, b in zip(proc[3:], resumed):
        np.testing.assert_array_equal(a["batch"], b["batch"])
        np.testing.assert_array_equal(a["records"], b["records"])
    assert not np.array_equal(proc[0]["batch"], proc[1]["batch"])
    # per record: the same numbers for a record's place in the global batch, at
    # any world size (ranks 0 and 1 of 2, batch 8, against one rank of 16)
    for rank in (0, 1):
        with DataLoader(streams, batch_size=8, sampler="iid", seed=5, rank=rank, world_size=2,
                        transform=xforms.draws, num_workers=1) as shard:
            for k in range(3):
                b = next(shard)
                np.testing.assert_array_equal(b["y"], proc[k]["y"][8 * rank:8 * rank + 8])
                np.testing.assert_array_equal(b["records"],
                                              proc[k]["records"][8 * rank:8 * rank + 8])


# ------------------------------------------------------------------ faults
def test_exception_carries_the_worker_traceback_and_step(streams):
    with DataLoader(streams, batch_size=8, sampler="sequential", transform=xforms.raises,
                    num_workers=2) as loader:
        with pytest.raises(KeyError) as ei:
            next(loader)                   # step 0: record 0, even
        e = ei.value
        assert "step 0" in " ".join(getattr(e, "__notes__", []))
        assert "in raises" in str(e.__cause__) and "KeyError" in str(e.__cause__)
        assert loader.step == 1            # the step is consumed: the loader goes on
        with pytest.raises(KeyError, match="record 8"):
            next(loader)
        assert loader.step == 2
    with DataLoader(streams, batch_size=8, sampler="sequential",
                    transform=xforms.raises_unpicklable, num_workers=1) as loader:
        with pytest.raises(Exception, match="Unpicklable: an exception holding a file") as ei:
            next(loader)
        assert "raises_unpicklable" in str(ei.value.__cause__)


def test_a_step_that_kills_its_worker_twice_fails_naming_step_and_signal(streams):
    with DataLoader(streams, batch_size=8, sampler="sequential", transform=xforms.dies_at,
                    num_workers=2) as loader:
        np.testing.assert_array_equal(next(loader), np.arange(8))
        with pytest.raises(RuntimeError, match=r"step 1 killed its worker process 2 times.*SIGKILL"):
            next(loader)
        for k in range(2, 6):               # the loader goes on, workers started again
            np.testing.assert_array_equal(next(loader), np.arange(8 * k, 8 * k + 8))
        w = loader.stats()["workers"]
        assert w["restarts"] == 2 and len(w["pids"]) == 2


def test_a_worker_killed_once_is_replaced_and_its_step_redone(streams, tmp_path, monkeypatch):
    monkeypatch.setenv("XFORMS_MARK", str(tmp_path / "mark"))
    with DataLoader(streams, batch_size=8, sampler="sequential", transform=xforms.dies_once,
                    num_workers=2) as loader:
        for k in range(6):
            np.testing.assert_array_equal(next(loader), np.arange(8 * k, 8 * k + 8))
        assert loader.stats()["workers"]["restarts"] == 1
    assert os.path.exists(tmp_path / "mark")


def test_close_leaves_no_worker_no_shm_and_nothing_in_the_daemon(streams, conn):
    shm = set(os.listdir("/dev/shm"))
    loader = DataLoader(streams, batch_size=8, transform=xforms.big, num_workers=2)
    for _ in range(5):
        next(loader)
    pids = loader.stats()["workers"]["pids"]
    mine = loader._session.loader
    loader.close()
    assert pids_gone(pids)
    # names of what Python's multiprocessing and shared_memory leave there (other
    # programs on the machine may create files of their own meanwhile)
    assert not [f for f in set(os.listdir("/dev/shm")) - shm
                if f.startswith(("psm_", "sem.", "mp-", "loaderx"))]
    with pytest.raises(Exception, match="ZR_E_NO_HANDLE"):     # the daemon holds nothing of it
        conn.request("status", {"loader": mine})


def test_ctrl_c_stops_every_worker_at_once(streams):
    code = """
        import json, signal, sys, os
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        import xforms
        if __name__ == "__main__":
            loader = DataLoader({"y": DenseDataset("y")}, batch_size=8, transform=xforms.slow,
                                num_workers=2, workers="process")
            pids = loader.stats()["workers"]["pids"]
            signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGINT))
            signal.setitimer(signal.ITIMER_REAL, 1.0)
            try:
                next(loader)
            except KeyboardInterrupt:
                print(json.dumps({"pids": pids}), flush=True)
                sys.exit(0)
            sys.exit(3)
    """
    r = run_script(code)
    assert r.returncode == 0, r.stderr
    pids = json.loads(r.stdout.strip().splitlines()[-1])["pids"]
    assert len(pids) == 2 and pids_gone(pids)


def test_workers_end_with_the_training_process(streams):
    code = """
        import json, sys
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        import xforms
        if __name__ == "__main__":
            loader = DataLoader({"y": DenseDataset("y")}, batch_size=8, transform=xforms.slow,
                                num_workers=2)
            print(json.dumps({"pids": loader.stats()["workers"]["pids"]}), flush=True)
            sys.stdin.read()
    """
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, HERE, os.environ.get("PYTHONPATH",
                                                                                 "")]))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=os.getcwd(),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(p.stdout.readline())["pids"]
        assert len(pids) == 2
    finally:
        p.kill()
        p.wait()
    assert pids_gone(pids)


# ------------------------------------------------------------------ start-up
def test_main_module_transform_needs_the_main_guard(streams):
    guarded = """
        import numpy as np
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset

        def t(b):
            return np.array(b["y"]) + 1

        if __name__ == "__main__":
            with DataLoader({"y": DenseDataset("y")}, batch_size=8, sampler="sequential",
                            transform=t, num_workers=2) as loader:
                print(loader.workers, int(next(loader)[0]))
    """
    unguarded = """
        import numpy as np
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset

        def t(b):
            return np.array(b["y"]) + 1

        loader = DataLoader({"y": DenseDataset("y")}, batch_size=8, sampler="sequential",
                            transform=t, num_workers=2, workers=WORKERS)
        print(loader.workers, int(next(loader)[0]))
        print(loader.stats()["workers"]["why"])
        loader.close()
    """
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, os.environ.get("PYTHONPATH", "")]))
    for name, src, want in (("g.py", guarded, "process 1"), ("u.py", unguarded, "thread 1")):
        with open(name, "w") as f:
            f.write(textwrap.dedent(src).replace("WORKERS", "None"))
        r = subprocess.run([sys.executable, name], env=e, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0] == want
    assert "not under" in r.stdout
    with open("u.py", "w") as f:
        f.write(textwrap.dedent(unguarded).replace("WORKERS", "'process'"))
    r = subprocess.run([sys.executable, "u.py"], env=e, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "__name__ == '__main__'" in r.stderr


def test_worker_that_cannot_import_the_transform_breaks_the_loader(streams, tmp_path):
    # a module that imports here but not in a worker (started with "python -c")
    (tmp_path / "homebound.py").write_text(
        "import sys\nimport numpy as np\nif sys.argv[0] == '-c':\n"
        "    raise ModuleNotFoundError('homebound stays in the training process')\n"
        "def t(b):\n    return np.array(b['y'])\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import homebound
        loader = DataLoader(streams, batch_size=8, transform=homebound.t, num_workers=2)
        with pytest.raises(ModuleNotFoundError, match="homebound stays") as ei:
            next(loader)
        assert "when a worker process started" in " ".join(getattr(ei.value, "__notes__", []))
        assert "homebound.py" in str(ei.value.__cause__)
        with pytest.raises(ModuleNotFoundError):
            next(loader)
        loader.close()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("homebound", None)


def test_output_that_must_stay_moves_to_threads(streams):
    with DataLoader(streams, batch_size=8, sampler="sequential", transform=xforms.to_device,
                    num_workers=2) as loader:
        for k in range(5):
            b = next(loader)
            assert isinstance(b["y"], xforms.DeviceArray)
            np.testing.assert_array_equal(b["y"].a, np.arange(8 * k, 8 * k + 8))
        assert loader.workers == "thread"
        assert "jax.xforms" in loader.stats()["workers"]["why"]
    with DataLoader(streams, batch_size=8, transform=xforms.to_device, workers="process") as l2:
        with pytest.raises(ValueError, match="must stay in the process"):
            next(l2)


# ------------------------------------------------------------------ layouts
def test_ragged_mixture_indices_sources(workdir):
    from_iterator("t", SEQS, np.int64)
    from_numpy("y", np.arange(N))
    t, y = RaggedDataset("t"), DenseDataset("y")
    with DataLoader({"t": t, "y": y}, batch_size=6, sampler="iid", seed=2,
                    transform=xforms.ragged, num_workers=2) as loader, \
            DataLoader({"t": t, "y": y}, batch_size=6, sampler="iid", seed=2,
                       num_workers=0) as ref:
        for _ in range(8):
            out, r = next(loader), next(ref)
            assert len(out) == 6
            for a, i in zip(out, r["y"]):
                np.testing.assert_array_equal(a, SEQS[i] * 2)
    from_numpy("y2", np.arange(N, 2 * N))
    srcs = [({"y": y}, 1), ({"y": DenseDataset("y2")}, 1)]
    with DataLoader(srcs, batch_size=8, sampler="cyclic", seed=1, with_indices=True,
                    with_sources=True, transform=xforms.with_meta, num_workers=2) as loader, \
            DataLoader(srcs, batch_size=8, sampler="cyclic", seed=1, with_indices=True,
                       with_sources=True, num_workers=0) as ref:
        for _ in range(6):
            out, r = next(loader), next(ref)
            np.testing.assert_array_equal(out["idx"], r[INDEX_KEY])
            np.testing.assert_array_equal(out["y"], r["y"])
            assert set(np.asarray(r[SOURCE_KEY])) <= {0, 1}


def test_forked_child_starts_its_own_workers(streams):
    from conftest import in_forked_child
    loader = DataLoader(streams, batch_size=8, sampler="sequential", transform=xforms.double,
                        num_workers=2)
    next(loader)
    parent_pids = loader.stats()["workers"]["pids"]

    def child():
        b = next(loader)
        return {"y0": int(b["y"][0]), "pids": loader.stats()["workers"]["pids"]}
    out, status = in_forked_child(child)
    assert os.waitstatus_to_exitcode(status) == 0, out
    assert out["y0"] == 8 and not set(out["pids"]) & set(parent_pids)
    np.testing.assert_array_equal(next(loader)["y"], np.arange(8, 16))
    loader.close()


# ------------------------------------------------------------------ stride
def test_step_stride_serves_every_kth_step(streams):
    want = reference(streams, 12, batch_size=8, sampler="cyclic", seed=3)
    with DataLoader(streams, batch_size=8, sampler="cyclic", seed=3, start_step=2,
                    step_stride=3, num_workers=0) as loader:
        for k in (2, 5, 8, 11):
            np.testing.assert_array_equal(next(loader)["y"], want[k])
        assert loader.step == 14 and loader.state_dict()["step"] == 14
    with DataLoader(streams, batch_size=8, sampler="cyclic", seed=3, start_step=1,
                    step_stride=2, transform=xforms.double, num_workers=2) as loader:
        for k in (1, 3, 5, 7, 9):
            np.testing.assert_array_equal(next(loader)["y"], want[k])
    with pytest.raises(ValueError, match="step_stride"):
        DataLoader(streams, batch_size=8, step_stride=0)
