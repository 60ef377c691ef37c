"""loaderx 1.5.7's API beyond its own test suite (docs/LOADERX-1.5.7.md): the
DataLoader's signature and keywords, its sequences against loaderx.sampler.Sampler,
the Sampler itself, MSDataset(path, names), records of any ndim through a loader,
and loaderx._lib."""

import os

import numpy as np
import pytest

from loaderx import _lib
from loaderx.dataloader import INDEX_KEY, MODES, DataLoader
from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
from loaderx.sampler import Sampler
from loaderx.utils import from_iterator, from_numpy

N = 90


@pytest.fixture
def dense(workdir, loader_feature):
    from_numpy("x", np.arange(N * 2, dtype=np.int32).reshape(N, 2))
    return DenseDataset("x")


def indices(loader, k=1):
    out = []
    for _ in range(k):
        out.append(np.array(next(loader)[INDEX_KEY]))
    loader.close()
    return out


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_loader_batches_are_the_samplers(dense, mode):
    """DataLoader(mode=m) serves Sampler(n, B, m, seed)'s batches, at steps 0, 1 and
    a far step, so a run that counted its steps under loaderx 1.5.7 resumes here."""
    s = Sampler(N, 8, mode, seed=7)
    far = 10 ** 9 + 3
    got = indices(DataLoader({"x": dense}, batch_size=8, mode=mode, seed=7, with_indices=True), 2)
    got += indices(DataLoader({"x": dense}, batch_size=8, mode=mode, seed=7, start_step=far,
                              with_indices=True))
    want = [s.next(), s.next()]
    s.seek(far)
    want.append(s.next())
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()
    b = np.array(next(DataLoader({"x": dense}, batch_size=8, mode=mode, seed=7))["x"])
    np.testing.assert_array_equal(b, DenseDataset("x")[want[0]])


def test_loader_defaults_and_keywords(dense):
    """The defaults are loaderx 1.5.7's: mode 2 (cyclic-lx157), seed 42, batch 256 of
    at most the length, prefetch 4; its positional order; both keywords of a pair
    agree or are refused; len() is 1.5.7's TypeError."""
    loader = DataLoader({"x": dense}, 0, 16, with_indices=True)       # num_workers, batch_size
    assert loader.sampler == "cyclic-lx157" and loader.seed == 42 and loader.prefetch == 4
    assert loader.batch_size == 16 and loader.num_workers == 0
    s = Sampler(N, 16, Sampler.Mode.CYCLIC, 42)
    assert np.array(next(loader)[INDEX_KEY]).tolist() == s.next().tolist()
    with pytest.raises(TypeError, match="Eternal loader has no length"):
        len(loader)
    assert bool(loader)
    loader.close()
    assert MODES == {0: "sequential", 1: "iid", 2: "cyclic-lx157"}
    ok = DataLoader({"x": dense}, batch_size=8, mode=2, sampler="cyclic-lx157", prefetch_size=3,
                    prefetch=3)
    assert ok.prefetch == 3
    ok.close()
    z = DataLoader({"x": dense}, batch_size=8, sampler="cyclic")     # zrecord's own names stay
    assert z.sampler == "cyclic"
    z.close()
    with pytest.raises(ValueError, match=r"mode=2 \(cyclic-lx157\) and sampler='cyclic' disagree"):
        DataLoader({"x": dense}, batch_size=8, mode=2, sampler="cyclic")
    with pytest.raises(ValueError, match="prefetch_size=4 and prefetch=8 disagree"):
        DataLoader({"x": dense}, batch_size=8, prefetch_size=4, prefetch=8)
    with pytest.raises(ValueError, match="unknown mode"):
        DataLoader({"x": dense}, batch_size=8, mode=3)
    with pytest.raises(ValueError, match="need at least one stream"):
        DataLoader({}, batch_size=8)


def test_transform_and_workers(dense):
    seen = []
    loader = DataLoader({"x": dense}, num_workers=4, batch_size=8, mode=0,
                        transform=lambda b: seen.append(1) or {"y": np.array(b["x"]) + 1})
    first = next(loader)
    np.testing.assert_array_equal(first["y"], np.arange(16).reshape(8, 2) + 1)
    loader.close()
    assert seen


@pytest.mark.no_daemon
def test_sampler_api():
    """next() advances, seek() positions, iteration is next(); a fresh uint64 array
    each time; cyclic gives every index once per cycle, and a short batch of all
    of them when length < batch_size."""
    s = Sampler(10, 3, Sampler.Mode.CYCLIC)
    first = [s.next() for _ in range(3)]
    assert all(a.dtype == np.uint64 and a.shape == (3,) for a in first)
    assert len(set(np.concatenate(first).tolist())) == 9
    s.seek(1)
    assert next(s).tolist() == first[1].tolist()
    assert next(iter(s)).tolist() == first[2].tolist()
    short = Sampler(5, 8, 2, seed=1)
    a, b = short.next(), short.next()
    assert sorted(a.tolist()) == list(range(5)) and sorted(b.tolist()) == list(range(5))
    assert a.tolist() != b.tolist()                  # each step its own cycle
    seq = Sampler(10, 4, 0)
    seq.seek(2)
    assert seq.next().tolist() == [8, 9, 0, 1]
    with pytest.raises(ValueError):
        Sampler(10, 4, 3)
    with pytest.raises(OverflowError):
        Sampler(-1, 4, 0)


def test_msdataset_names(workdir):
    from_numpy("set/b", np.arange(5))
    from_numpy("set/a", np.arange(5.0))
    from_iterator("set/c", [np.arange(k + 1) for k in range(5)], np.int64)
    os.makedirs("set/not-a-store")
    ms = MSDataset("set")
    assert ms.names == ["a", "b", "c"] and list(ms.streams) == ms.names
    ms.streams.pop("a")                              # a new dict each time
    assert "a" in ms.streams
    picked = MSDataset("set", names=["c", "a"])
    assert picked.names == ["c", "a"] and len(picked) == 5
    with pytest.raises(KeyError):                    # loaderx 1.5.7: KeyError; ValueError too
        picked.append({"c": [np.arange(2)]})
    picked.append({"c": [np.arange(2)], "a": np.arange(1.0)})
    picked.compact()
    assert len(MSDataset("set", names=["a", "c"])) == 6
    with pytest.raises(FileNotFoundError):
        MSDataset("set", names=["zz"])


def test_loader_over_records_of_any_ndim(workdir, loader_feature):
    shapes = [(2, 3), (4,), (1, 2, 2), (3, 1)] * 5
    recs = [np.full(s, k, np.int16) for k, s in enumerate(shapes)]
    from_iterator("r", recs, np.int16)
    loader = DataLoader({"r": RaggedDataset("r")}, batch_size=6, mode=0, with_indices=True)
    for _ in range(4):
        b = next(loader)
        for i, r in zip(b[INDEX_KEY].tolist(), b["r"]):
            assert r.shape == shapes[i] and (r == i).all()
    loader.close()


@pytest.mark.no_daemon
def test_lib_is_harmless():
    assert _lib.LIB_DIR.name == "lib"
    try:
        p = _lib.path("zrecord")
    except ImportError as e:
        assert "zrecordd" in str(e)
    else:
        assert os.path.basename(p) == "zrecordd"
