"""Mixtures of weighted sources and which steps saw a record, through the
DataLoader against the daemon: batches bit-exact to the numpy reference of
proto/SAMPLERS.md (proto/vectors/sampler.py), each record its own source's;
``__source__``; weights as written; resume; identical mixtures sharing one group;
refusals naming the stream and the difference; and steps_of() holding a step
exactly when that step's batch holds the record, for plain loaders of every rank
and for a mixture's sources, on random cases."""

import os
import random
import sys

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx._conn import default as default_conn
from loaderx.dataloader import INDEX_KEY, SOURCE_KEY, DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "proto", "vectors"))
import sampler as S  # noqa: E402  the spec's numpy reference

pytestmark = pytest.mark.usefixtures("loader_feature")

# three sources: lengths, weights, samplers; source k's image i is full of k*1000+i
LENS = (40, 9, 130)
WEIGHTS = (0.5, 0.2, 0.3)
INT_WEIGHTS = (5, 2, 3)
SAMPLERS = ("cyclic", "iid", "sequential")


def _img(k, i):
    return np.full((2, 3), k * 1000 + i, dtype=np.float32)


@pytest.fixture
def sources(workdir):
    out = []
    for k, n in enumerate(LENS):
        from_numpy(f"img{k}", np.stack([_img(k, i) for i in range(n)]))
        from_numpy(f"lab{k}", np.arange(n, dtype=np.int64) + 10 ** 6 * k)
        from_iterator(f"seq{k}", [np.arange(i % 5 + 1, dtype=np.int16) + k * 100 for i in range(n)],
                      np.int16)
        out.append({"img": DenseDataset(f"img{k}"), "lab": DenseDataset(f"lab{k}"),
                    "seq": RaggedDataset(f"seq{k}")})
    return out


def _need(feature):
    if not default_conn().has_feature(feature):
        pytest.skip(f"this zrecordd has no \"{feature}\" feature")


def _mixture(sources, **kw):
    kw.setdefault("batch_size", 12)
    kw.setdefault("seed", 31)
    kw.setdefault("num_workers", 0)
    return DataLoader([(src, w, smp) for src, w, smp in zip(sources, WEIGHTS, SAMPLERS)], **kw)


def _reference(batch_size=12, world_size=1, seed=31):
    return S.Mixture([(smp, n, w) for smp, n, w in zip(SAMPLERS, LENS, INT_WEIGHTS)],
                     batch_size, world_size, seed)


def _check_records(batch):
    """Every record of every stream is its source's record of its index."""
    for j, (k, i) in enumerate(zip(batch[SOURCE_KEY], batch[INDEX_KEY])):
        k, i = int(k), int(i)
        np.testing.assert_array_equal(batch["img"][j], _img(k, i))
        assert batch["lab"][j] == i + 10 ** 6 * k
        np.testing.assert_array_equal(batch["seq"][j], np.arange(i % 5 + 1, dtype=np.int16) + k * 100)


def test_batches_are_the_reference(sources):
    _need("mixture")
    ref = _reference()
    with _mixture(sources, with_indices=True, with_sources=True) as loader:
        assert loader.weights == list(INT_WEIGHTS)
        assert loader.source_lengths == list(LENS) and loader.length == sum(LENS)
        for step in range(40):
            b = next(loader)
            src, idx = ref.batch(step, 0)
            np.testing.assert_array_equal(b[SOURCE_KEY], src)
            np.testing.assert_array_equal(b[INDEX_KEY], idx)
            assert b[SOURCE_KEY].dtype == np.uint8
            _check_records(b)


def test_sources_only_when_asked(sources):
    _need("mixture")
    with _mixture(sources) as loader:
        b = next(loader)
        assert set(b) == {"img", "lab", "seq"}
    with pytest.raises(ZrecordError, match="with_sources=True is a mixture's"):
        DataLoader(sources[0], with_sources=True)


def test_resume_and_ranks(sources):
    """A resume from state_dict gives the same batches; ranks of world size 2
    slice the batch of world size 1 with twice the batch size."""
    _need("mixture")
    def copy(b):
        return {k: ([np.array(r) for r in v] if isinstance(v, list) else np.array(v))
                for k, v in b.items()}

    with _mixture(sources, with_indices=True, with_sources=True) as a:
        seen = [copy(next(a)) for _ in range(9)]
        state = a.state_dict()
        more = [copy(next(a)) for _ in range(5)]
    assert [s["weight"] for s in state["sources"]] == list(INT_WEIGHTS)
    with _mixture(sources, with_indices=True, with_sources=True) as b:
        b.load_state_dict(state)
        for want in more:
            got = next(b)
            np.testing.assert_array_equal(got[INDEX_KEY], want[INDEX_KEY])
            np.testing.assert_array_equal(got[SOURCE_KEY], want[SOURCE_KEY])
            np.testing.assert_array_equal(got["img"], want["img"])
    whole = [np.concatenate([s[SOURCE_KEY] for s in seen])]
    ranks = [_mixture(sources, batch_size=6, world_size=2, rank=r, with_indices=True,
                      with_sources=True) for r in range(2)]
    wide = _mixture(sources, batch_size=12, with_indices=True, with_sources=True)
    try:
        for _ in range(6):
            w = next(wide)
            parts = [next(r) for r in ranks]
            np.testing.assert_array_equal(np.concatenate([p[SOURCE_KEY] for p in parts]), w[SOURCE_KEY])
            np.testing.assert_array_equal(np.concatenate([p[INDEX_KEY] for p in parts]), w[INDEX_KEY])
            for p in parts:
                _check_records(p)
    finally:
        for r in ranks:
            r.close()
        wide.close()
    assert whole[0].size == 9 * 12
    # a state of another mixture is refused
    with _mixture(sources) as c:
        other = dict(state, sources=[dict(s, weight=1) for s in state["sources"]])
        with pytest.raises(ZrecordError, match="sources"):
            c.load_state_dict(other)


def test_identical_mixtures_share_one_group(sources):
    _need("mixture")
    a = _mixture(sources, with_indices=True, with_sources=True, prefetch=2)
    b = _mixture(sources, with_indices=True, with_sources=True, prefetch=2)
    try:
        for _ in range(10):
            x, y = next(a), next(b)
            np.testing.assert_array_equal(x[INDEX_KEY], y[INDEX_KEY])
            del x, y
        st = default_conn().request("status")
        shared = sum(int(p.get("shared", 0)) for p in st.get("per_loader", []))
        assert shared >= 7
    finally:
        a.close()
        b.close()


def test_refusals_name_the_stream(sources, workdir):
    _need("mixture")
    from_numpy("wide", np.zeros((9, 2, 4), dtype=np.float32))
    bad = dict(sources[1], img=DenseDataset("wide"))
    with pytest.raises(ZrecordError) as e:
        DataLoader([(sources[0], 1), (bad, 1)], batch_size=4)
    assert e.value.name == "ZR_E_SCHEMA"
    assert "stream 0 (img): source 1 has item shape (2, 4), source 0 (2, 3)" in str(e.value)
    from_numpy("i4", np.zeros((9, 2, 3), dtype=np.int32))
    bad = dict(sources[1], img=DenseDataset("i4"))
    with pytest.raises(ZrecordError, match="source 1 has dtype '<i4', source 0 '<f4'"):
        DataLoader([(sources[0], 1), (bad, 1)], batch_size=4)
    with pytest.raises(ZrecordError, match="every source of a mixture holds the same streams"):
        DataLoader([(sources[0], 1), ({"img": sources[1]["img"]}, 1)], batch_size=4)
    with pytest.raises(ZrecordError, match="weight must be positive"):
        DataLoader([(sources[0], 1), (sources[1], 0)], batch_size=4)
    with pytest.raises(ZrecordError, match="unknown sampler"):
        DataLoader([(sources[0], 1), (sources[1], 1, "shuffle")], batch_size=4)


def test_weights_as_written(sources):
    _need("mixture")
    for ws, want in (((0.7, 0.2, 0.1), [7, 2, 1]), ((3, 6, 9), [1, 2, 3]),
                     ((0.25, 0.5, 0.25), [1, 2, 1])):
        with DataLoader([(s, w) for s, w in zip(sources, ws)], batch_size=4, num_workers=0) as l:
            assert l.weights == want


def _seen(batches, key_src=None):
    """{(source, record): [(step, rank, position)]} of batches[(step, rank)]."""
    out = {}
    for (step, rank), b in batches.items():
        srcs = b[key_src] if key_src else np.zeros(len(b[INDEX_KEY]), dtype=np.uint8)
        for j, (k, i) in enumerate(zip(srcs, b[INDEX_KEY])):
            out.setdefault((int(k), int(i)), []).append((step, rank, j))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("case", range(4))
def test_steps_of_plain_property(workdir, case):
    """Random (sampler, seed, N, B, W, range): steps_of(r) holds (step, rank, j)
    exactly when rank's batch of that step holds r at j, for every record."""
    _need("steps_of")
    rng = random.Random(1000 + case)
    sampler = ("sequential", "iid", "cyclic", "cyclic-lx157")[case]
    n, b, w = rng.randrange(20, 60), rng.randrange(1, 6), rng.randrange(1, 4)
    seed, start = rng.randrange(2 ** 64), rng.randrange(0, 5)
    stop = start + rng.randrange(5, 20)
    from_numpy("d", np.arange(n, dtype=np.int64))
    loaders = [DataLoader({"d": DenseDataset("d")}, batch_size=b, sampler=sampler, seed=seed,
                          world_size=w, rank=r, start_step=start, with_indices=True, num_workers=0)
               for r in range(w)]
    try:
        batches = {}
        for step in range(start, stop):
            for r, ld in enumerate(loaders):
                bt = next(ld)
                batches[(step, r)] = {INDEX_KEY: bt[INDEX_KEY].copy()}
                np.testing.assert_array_equal(bt["d"], bt[INDEX_KEY])
                del bt
        seen = _seen(batches)
        for rec in range(n):
            got = loaders[0].steps_of(rec, start=start, stop=stop)
            assert got == seen.get((0, rec), []), (sampler, n, b, w, seed, rec)
        assert loaders[0].steps_of(0, stream="d", start=start, stop=start) == []
        # stop defaults to the step this loader reached
        assert loaders[0].step == stop
        assert loaders[0].steps_of(3, start=start) == seen.get((0, 3), [])
    finally:
        for ld in loaders:
            ld.close()


@pytest.mark.parametrize("case", range(3))
def test_steps_of_mixture_property(sources, case):
    """For random seeds, world sizes and ranges, each record of each source:
    steps_of holds exactly the places the mixture's batches (every rank) held it."""
    _need("mixture")
    _need("steps_of")
    rng = random.Random(2000 + case)
    w, b = rng.randrange(1, 3), rng.randrange(2, 8)
    seed, start = rng.randrange(2 ** 64), rng.randrange(0, 50)
    stop = start + rng.randrange(5, 15)
    loaders = [_mixture(sources, batch_size=b, world_size=w, rank=r, seed=seed, start_step=start,
                        with_indices=True, with_sources=True) for r in range(w)]
    progress = []
    try:
        batches = {}
        for step in range(start, stop):
            for r, ld in enumerate(loaders):
                bt = next(ld)
                _check_records(bt)
                batches[(step, r)] = {INDEX_KEY: bt[INDEX_KEY].copy(),
                                      SOURCE_KEY: bt[SOURCE_KEY].copy()}
                del bt
        seen = _seen(batches, SOURCE_KEY)
        for k, n in enumerate(LENS):
            for rec in range(n):
                got = loaders[0].steps_of(rec, stream=k, start=start, stop=stop,
                                          progress=lambda d, t: progress.append((d, t)))
                assert got == seen.get((k, rec), []), (k, rec)
        # a source named by one of its datasets
        assert loaders[0].steps_of(0, stream=sources[2]["lab"], start=start, stop=stop) == \
            seen.get((2, 0), [])
        assert progress and progress[-1] == (stop - start, stop - start)
        with pytest.raises(ZrecordError, match="a record of a mixture is a record of one source"):
            loaders[0].steps_of(0)
        with pytest.raises(ZrecordError, match="no such record"):
            loaders[0].steps_of(LENS[1], stream=1, start=0, stop=5)
    finally:
        for ld in loaders:
            ld.close()


def test_steps_of_long_iid_range(workdir):
    """An iid range of 2^26 positions comes in the daemon's pieces, with progress."""
    _need("steps_of")
    from_numpy("d", np.arange(20000, dtype=np.int64))
    calls = []
    with DataLoader({"d": DenseDataset("d")}, batch_size=1 << 14, sampler="iid", seed=3,
                    num_workers=0) as ld:
        hits = ld.steps_of(7, start=0, stop=1 << 12, progress=lambda d, t: calls.append(d))
    assert len(calls) >= 4 and calls[-1] == 1 << 12
    assert calls == sorted(calls)
    # 2^26 draws of 20 000 records: about 3355 of record 7
    assert 3000 < len(hits) < 3700
    assert hits == sorted(hits)


def test_sources_of_both_ragged_layouts(workdir):
    """A mixture of a ragged store of zrecord's layout and one of loaderx 1.5.7's
    (its shapes in schema.msgpack): each record read as its own store reads it."""
    _need("mixture")
    if not default_conn().has_feature("convert"):
        pytest.skip("this zrecordd has no \"convert\" feature")
    from loaderx.utils import convert
    from_iterator("r0", [np.arange(i % 4 + 1, dtype=np.int16) + 100 * i for i in range(20)], np.int16)
    from_iterator("r1src", [np.arange(i % 3 + 1, dtype=np.int16) - 100 * i for i in range(11)],
                  np.int16)
    convert("r1src", "r1", to="loaderx-1.5.7")
    with DataLoader([({"t": RaggedDataset("r0")}, 1), ({"t": RaggedDataset("r1")}, 1)],
                    batch_size=6, sampler="cyclic", with_sources=True, with_indices=True,
                    num_workers=0) as loader:
        for _ in range(8):
            b = next(loader)
            assert set(b[SOURCE_KEY].tolist()) <= {0, 1}
            for k, i, rec in zip(b[SOURCE_KEY], b[INDEX_KEY], b["t"]):
                k, i = int(k), int(i)
                want = (np.arange(i % 4 + 1, dtype=np.int16) + 100 * i if k == 0 else
                        np.arange(i % 3 + 1, dtype=np.int16) - 100 * i)
                np.testing.assert_array_equal(rec, want)
