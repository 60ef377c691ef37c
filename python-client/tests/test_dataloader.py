"""The DataLoader against the daemon's loaders: resume, zero copy, batch lifetime,
slot exhaustion, transforms, stale stores, sharding, the sampler vectors."""

import gc
import json
import os
import sys
import threading
import time

import numpy as np
import pytest

from loaderx import StaleError, _wire
from loaderx.dataloader import INDEX_KEY, DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy

from conftest import REPO

pytestmark = pytest.mark.usefixtures("loader_feature")

N = 100
DATA = np.arange(N * 12, dtype=np.float32).reshape(N, 3, 4)
SEQS = [np.arange(k % 7 + 1, dtype=np.int32) + 1000 * k for k in range(N)]


@pytest.fixture
def streams(workdir):
    from_numpy("x", DATA)
    from_numpy("y", np.arange(N))
    from_iterator("t", SEQS, np.int32)
    return {"x": DenseDataset("x"), "y": DenseDataset("y"), "t": RaggedDataset("t")}


def snap(batch):
    out = {}
    for k, v in batch.items():
        out[k] = [np.array(r) for r in v] if isinstance(v, list) else np.array(v)
    return out


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], list):
            assert len(a[k]) == len(b[k]) and all(np.array_equal(p, q) for p, q in zip(a[k], b[k]))
        else:
            np.testing.assert_array_equal(a[k], b[k])


def check_aligned(batch):
    y = batch["y"]
    np.testing.assert_array_equal(batch["x"], DATA[y])
    for r, i in zip(batch["t"], y):
        np.testing.assert_array_equal(r, SEQS[i])


@pytest.mark.parametrize("sampler", ["sequential", "iid", "cyclic"])
def test_resume_equivalence(streams, sampler):
    long = DataLoader(streams, batch_size=16, sampler=sampler, seed=11, prefetch=3)
    ref = [snap(next(long)) for _ in range(12)]
    assert long.step == 12
    long.close()
    for b in ref:
        check_aligned(b)
    # a fresh loader at step 7 gives steps 7.. exactly
    fresh = DataLoader(streams, batch_size=16, sampler=sampler, seed=11, start_step=7)
    for k in range(7, 12):
        same(snap(next(fresh)), ref[k])
    fresh.close()
    # state_dict / load_state_dict mid-run, in a new loader
    a = DataLoader(streams, batch_size=16, sampler=sampler, seed=11)
    for _ in range(4):
        next(a)
    state = a.state_dict()
    a.close()
    b = DataLoader(streams, batch_size=16, sampler=sampler, seed=11)
    next(b)
    b.load_state_dict(state)
    assert b.step == 4
    for k in range(4, 9):
        same(snap(next(b)), ref[k])
    b.close()


def test_cyclic_covers_without_replacement(streams):
    loader = DataLoader({"y": streams["y"]}, batch_size=10, sampler="cyclic", seed=5)
    seen = np.concatenate([np.array(next(loader)["y"]) for _ in range(10)])
    assert sorted(seen) == list(range(N))
    second = np.concatenate([np.array(next(loader)["y"]) for _ in range(10)])
    assert sorted(second) == list(range(N)) and not np.array_equal(seen, second)
    loader.close()


def test_open_far_step(streams):
    loader = DataLoader({"y": streams["y"]}, batch_size=8, sampler="iid", seed=1, start_step=10**12)
    t = time.monotonic()
    b = next(loader)
    assert time.monotonic() - t < 5 and loader.step == 10**12 + 1 and b["y"].shape == (8,)
    loader.close()


def test_zero_copy_views(streams):
    loader = DataLoader(streams, batch_size=8, prefetch=2)
    b = next(loader)
    x = b["x"]
    assert x.shape == (8, 3, 4) and x.dtype == np.float32
    assert not x.flags.writeable and not x.flags.owndata
    with pytest.raises(ValueError):
        x[0, 0, 0] = 1
    assert all(not r.flags.writeable for r in b["t"])
    # the array's memory lies inside the mapping of the ring that holds the batch
    # (the loader's own, alone in its group): no copy on this side
    ((rid, slot),) = loader._session.held
    ring = loader._session.rings[rid][0]
    assert ring.address <= x.ctypes.data < ring.address + ring.nbytes
    assert rid == loader._session.own and ring is loader._session.mapped
    lo = ring.address + slot * loader._session.slot_bytes
    assert lo <= x.ctypes.data < lo + loader._session.slot_bytes
    loader.close()
    assert loader._session is None
    np.testing.assert_array_equal(x, DATA[b["y"]])      # still mapped after the close


def test_release_names_ring_and_slot(streams, conn):
    """RELEASE carries the (ring, slot) the BATCH named, once the batch is garbage."""
    loader = DataLoader(streams, batch_size=8, prefetch=2)
    sent = []
    fs = conn._fs
    orig = fs.send

    orig_frames = fs.send_frames

    def spy(msg, fds=()):
        sent.append(dict(msg))
        return orig(msg, fds)

    def spy_frames(frames):        # notifications, encoded, in one write
        sent.extend(_wire.decode(f[4:]) for f in frames)
        return orig_frames(frames)
    fs.send = spy
    fs.send_frames = spy_frames
    try:
        b = next(loader)
        ((rid, slot),) = loader._session.held
        assert not [m for m in sent if m["kind"] == "release"]
        del b
        gc.collect()
        next(loader)
    finally:
        del fs.send
        del fs.send_frames
    rel = [m for m in sent if m["kind"] == "release"]
    # and the loop's wait and the batch's take time, for the daemon's telemetry
    assert rel and set(rel[0]) == {"kind", "loader", "ring", "slot", "wait_ns", "taken_ns"}
    assert (rel[0]["kind"], rel[0]["loader"], rel[0]["ring"], rel[0]["slot"]) == (
        "release", loader._session.loader, rid, slot)
    assert rel[0]["wait_ns"] >= 0 and rel[0]["taken_ns"] <= time.monotonic_ns()
    loader.close()
    assert not conn.faults


def test_held_batch_stays_valid(streams):
    """A held batch keeps its slot: newer batches arrive in the other slots and
    never overwrite it, and the slot goes back once the batch is garbage."""
    loader = DataLoader(streams, batch_size=8, sampler="iid", seed=2, prefetch=3)
    held = next(loader)
    keep = snap(held)
    ring = loader._session
    for _ in range(40):
        b = next(loader)
        check_aligned(b)
        del b
        same(snap(held), keep)
    # small slots' releases may be held back (set_lazy_release): pending ones are
    # free on this side already
    assert len(ring.held) - len(ring.pending) <= 2
    held_slot_count = len(ring.held) - len(ring.pending)
    del held
    gc.collect()
    ring.flush()
    assert len(ring.held) == held_slot_count - 1
    next(loader)
    loader.close()


def test_small_slots_release_in_pairs(streams):
    """A DataLoader without worker processes sends the RELEASEs of small slots two
    at a time (half its slots), and never holds one back while it waits: the
    batches keep coming whatever the consumer keeps."""
    loader = DataLoader(streams, batch_size=8, sampler="iid", seed=3, prefetch=4)
    s = loader._session
    assert s.release_batch == 2
    sent = []
    orig = s.conn.send_notifications

    def counting(next_msg, blocking=True):
        def counted():
            m = next_msg()
            if m is not None:
                sent[-1].append(m["slot"])
            return m
        sent.append([])
        return orig(counted, blocking)
    s.conn.send_notifications = counting
    try:
        kept = [next(loader), next(loader), next(loader)]   # 3 of 4 slots
        assert sent == []
        slots = [b["x"].base.owner.key[1] for b in kept]    # _shm.View's Owner
        del kept[0]
        assert sent == [] and len(s.pending) == 1          # held back
        del kept[0]
        assert [sorted(x) for x in sent] == [sorted(slots[:2])]   # both in one send
        assert not s.pending
        del kept[0]
        assert len(s.pending) == 1
        for _ in range(20):                                 # flushed before any wait
            b = next(loader)
            check_aligned(b)
        del b
    finally:
        s.conn.send_notifications = orig
    loader.close()
    # with prefetch 2 every release goes at once
    loader = DataLoader(streams, batch_size=8, sampler="iid", seed=3, prefetch=2)
    assert loader._session.release_batch == 1
    loader.close()

def test_one_view_keeps_the_slot(streams):
    loader = DataLoader(streams, batch_size=8, sampler="sequential", prefetch=2)
    b = next(loader)
    row = b["x"][3]            # a view of a view
    tok = b["t"][5]
    want_row, want_tok = row.copy(), tok.copy()
    del b
    for _ in range(10):
        try:
            next(loader)
        except RuntimeError:
            pytest.fail("a slot was not released although only one slot is held")
    np.testing.assert_array_equal(row, want_row)
    np.testing.assert_array_equal(tok, want_tok)
    loader.close()


def test_holding_every_slot_is_an_error(streams):
    loader = DataLoader(streams, batch_size=8, prefetch=2)
    kept = [next(loader), next(loader)]
    with pytest.raises(RuntimeError, match="prefetch") as ei:
        next(loader)
    assert "Drop references" in str(ei.value)
    assert loader.step == 2
    kept.pop(0)
    b = next(loader)            # a slot came back: the loader goes on at step 2
    assert loader.step == 3
    check_aligned(b)
    loader.close()


def test_release_after_close_is_silent(streams, conn):
    loader = DataLoader(streams, batch_size=8, prefetch=2)
    b = next(loader)
    loader.close()
    np.testing.assert_array_equal(b["x"], DATA[b["y"]])   # still readable after close
    del b
    gc.collect()
    faults = len(conn.faults)
    conn.request("status")
    assert len(conn.faults) == faults


def test_transform_in_order_on_threads(streams):
    seen_threads = set()

    def slow(batch):
        seen_threads.add(threading.current_thread().name)
        time.sleep(0.002 * (int(batch["y"][0]) % 3))
        return {"y": np.array(batch["y"]), "sum": float(batch["x"].sum())}

    ref = DataLoader(streams, batch_size=8, sampler="iid", seed=9)
    expect = [np.array(next(ref)["y"]) for _ in range(20)]
    ref.close()
    loader = DataLoader(streams, batch_size=8, sampler="iid", seed=9, transform=slow,
                        num_workers=3, prefetch=5)
    for k in range(20):
        out = next(loader)
        np.testing.assert_array_equal(out["y"], expect[k])
        assert out["sum"] == pytest.approx(float(DATA[expect[k]].sum()))
    assert loader.step == 20
    assert all(n.startswith("loaderx-transform") for n in seen_threads)
    state = loader.state_dict()
    assert state["step"] == 20
    loader.close()


def test_identity_transform_keeps_views(streams):
    loader = DataLoader(streams, batch_size=8, transform=lambda b: b, prefetch=4)
    for _ in range(30):
        b = next(loader)
        check_aligned(b)
    loader.close()


def test_transform_error_propagates(streams):
    def bad(batch):
        raise KeyError("boom")
    loader = DataLoader(streams, batch_size=8, transform=bad)
    with pytest.raises(KeyError, match="boom"):
        next(loader)
    loader.close()


def test_store_changed_under_loader(streams):
    loader = DataLoader({"x": streams["x"], "y": streams["y"]}, batch_size=8, prefetch=2)
    next(loader)
    streams["y"].append(np.arange(3))
    with pytest.raises(StaleError, match="allow_length_change"):
        for _ in range(10):
            next(loader)
    loader.close()


def test_sharding(streams):
    ranks = [DataLoader({"y": streams["y"]}, batch_size=10, sampler="cyclic", seed=4,
                        rank=r, world_size=3) for r in range(3)]
    whole = DataLoader({"y": streams["y"]}, batch_size=30, sampler="cyclic", seed=4)
    for _ in range(3):
        parts = [np.array(next(l)["y"]) for l in ranks]
        assert len(set(np.concatenate(parts))) == 30            # disjoint
        np.testing.assert_array_equal(np.concatenate(parts), np.array(next(whole)["y"]))
    for l in ranks + [whole]:
        l.close()


def test_context_manager_and_iteration(streams):
    with DataLoader(streams, batch_size=4) as loader:
        for i, b in enumerate(loader):
            check_aligned(b)
            if i == 5:
                break
    with pytest.raises(StopIteration):
        next(loader)


def _vectors():
    path = os.path.join(REPO, "proto", "vectors", "sampler.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        v = json.loads(line)
        if v["n"] <= 1000 and v["batch_size"] <= v["n"] and v["step"] < 2**64 - 1:
            if v["mode"] == "cyclic" and v["batch_size"] * v["world_size"] > v["n"]:
                continue
            out.append(v)
    return out


def test_sampler_vectors(workdir):
    """The batches the daemon serves are the indices of proto/vectors/sampler.jsonl,
    and proto/vectors/sampler.py (numpy) computes the same on this side."""
    vectors = _vectors()
    if not vectors:
        pytest.skip("proto/vectors/sampler.jsonl not found")
    sys.path.insert(0, os.path.join(REPO, "proto", "vectors"))
    try:
        import sampler as ref
    finally:
        sys.path.pop(0)
    stores = {}
    for v in vectors:
        n = v["n"]
        if n not in stores:
            from_numpy(f"n{n}", np.arange(n, dtype=np.int64), codec="raw")
            stores[n] = DenseDataset(f"n{n}")
        fn = {"sequential": lambda: ref.sequential(n, v["batch_size"], v["step"], v["rank"], v["world_size"]),
              "iid": lambda: ref.iid(n, v["batch_size"], v["seed"], v["step"], v["rank"], v["world_size"]),
              "cyclic": lambda: ref.cyclic(n, v["batch_size"], v["seed"], v["step"], v["rank"], v["world_size"])}
        np.testing.assert_array_equal(np.asarray(fn[v["mode"]]()).astype(np.int64), v["indices"])
        with DataLoader({"i": stores[n]}, batch_size=v["batch_size"], sampler=v["mode"],
                        seed=v["seed"], start_step=v["step"], rank=v["rank"],
                        world_size=v["world_size"], prefetch=1, with_indices=True) as l:
            b = next(l)
            np.testing.assert_array_equal(b[INDEX_KEY], v["indices"])
            np.testing.assert_array_equal(b["i"], v["indices"])


def test_dropped_objects_give_handles_back(streams, conn):
    import gc as _gc
    before = conn.request("status")["handles"]
    for _ in range(5):
        l = DataLoader(streams, batch_size=4, prefetch=2)
        b = next(l)
        del l, b
        d = DenseDataset("x")
        d[0]
        del d
    _gc.collect()
    time.sleep(0.05)
    after = conn.request("status")["handles"]
    assert after <= before + 1       # (the read buffer may have been opened meanwhile)
    assert not conn.faults


def test_ragged_batch_over_capacity_reopens(workdir):
    seqs = [np.arange(2, dtype=np.int64) + k for k in range(60)]
    seqs[13] = np.arange(200_000, dtype=np.int64)           # 1.6 MB among 16-byte records
    from_iterator("skew", seqs, np.int64, codec="raw")
    loader = DataLoader({"s": RaggedDataset("skew")}, batch_size=4, sampler="sequential",
                        prefetch=2)
    for step in range(8):
        b = next(loader)
        for j, r in enumerate(b["s"]):
            np.testing.assert_array_equal(r, seqs[step * 4 + j])
    assert loader.step == 8
    loader.close()


def test_threads_share_the_connection(streams):
    """Reads from several threads while a loader runs with a transform that reads too."""
    errors = []

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                idx = rng.integers(0, N, 7)
                np.testing.assert_array_equal(streams["x"][idx], DATA[idx])
                got = streams["t"][idx]
                for g, i in zip(got, idx):
                    np.testing.assert_array_equal(g, SEQS[i])
        except BaseException as e:    # pragma: no cover - reported below
            errors.append(e)

    def transform(batch):
        y = np.array(batch["y"])
        np.testing.assert_array_equal(streams["x"][y[:3]], DATA[y[:3]])
        return y

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    loader = DataLoader(streams, batch_size=8, sampler="iid", seed=8, transform=transform,
                        num_workers=2)
    for _ in range(30):
        next(loader)
    for t in threads:
        t.join()
    loader.close()
    assert not errors, errors


def test_raw_records_stream(workdir):
    from loaderx.zrecord import Zrecord
    z = Zrecord("raw")
    recs = [bytes([k % 256]) * (k + 1) for k in range(40)]
    z.append(recs)
    with DataLoader({"z": z}, batch_size=5, sampler="sequential") as loader:
        b = next(loader)
        assert [r.tobytes() for r in b["z"]] == recs[:5]


def test_inline_transform(streams):
    seen = []

    def t(b):
        seen.append(threading.current_thread() is threading.main_thread())
        return b["y"].sum()
    with DataLoader(streams, batch_size=8, sampler="sequential", transform=t, num_workers=0) as l:
        assert next(l) == sum(range(8)) and l.step == 1
    assert seen == [True]
    with pytest.raises(TypeError):
        DataLoader(streams, batch_size=8, transform=t, num_workers=-1)
