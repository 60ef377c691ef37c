"""Compression levels (issue 38 item 3): a writer's ``level=`` reaches the daemon
and is applied (level 19 stores less than level 1 for both compressed codecs),
records written at any level read back bit-exact, appends at several levels mix
in one store, a bad level is refused with a message naming the range before
anything is written, and a store written at the old fixed level 19 reads as
before."""

import os

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy, train_dict
from loaderx.zrecord import Zrecord


def tiles(n, side=32, seed=0):
    """Smooth uint8 images (a gradient plus a little noise, repeated runs):
    what a level changes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side]
    base = ((x * 3 + y * 5) % 256).astype(np.int16)
    noise = rng.integers(-2, 3, (n, side, side // 4)).repeat(4, axis=2)
    return np.clip(base[None] + noise, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
def test_level_round_trips_and_is_applied(codec):
    a = tiles(800)
    sizes = {}
    for level in (1, None, 19):
        path = f"{codec}-{level}"
        assert from_numpy(path, a, codec=codec, level=level) == len(a)
        ds = DenseDataset(path)
        np.testing.assert_array_equal(ds[:], a)
        sizes[level] = ds.stats()["live_bytes"]
        ds.close()
    assert sizes[19] < sizes[1], sizes


def test_levels_mix_in_one_store():
    a = tiles(600, seed=1)
    d = train_dict(a, "balanced")
    from_numpy("mixed", a[:1], codec="zstd_dict", dict_bytes=d)
    ds = DenseDataset("mixed", dtype=np.uint8, item_shape=a.shape[1:], codec="zstd_dict")
    # more levels than the daemon keeps prepared (4), and back to freed ones
    for k, level in enumerate((1, 19, 3, 9, 2, 1, 13, 19, None)):
        ds.append(a[1 + k * 60:1 + (k + 1) * 60], level=level)
    np.testing.assert_array_equal(ds[:], a[:541])
    assert ds._h.request("verify")["ok"]
    ds.close()
    r = RaggedDataset("r", dtype=np.int32, codec="zstd")
    recs = [np.arange(k * 50, dtype=np.int32) % 97 for k in range(1, 40)]
    r.append(recs[:20], level=19)
    r.append(recs[20:], level=1)
    for got, want in zip(r[:], recs):
        np.testing.assert_array_equal(got, want)
    r.close()
    z = Zrecord("z", codec="zstd", level=12)
    z.append([b"abc" * 100, b"xyz" * 7])
    assert z[0] == b"abc" * 100 and z[1] == b"xyz" * 7
    recs = [np.full(k + 1, k, dtype=np.int16) for k in range(100)]
    assert from_iterator("it", recs, np.int16, level=5) == 100
    assert all(np.array_equal(g, w) for g, w in zip(RaggedDataset("it")[:], recs))


@pytest.mark.parametrize("level,kind", [(0, ValueError), (20, ValueError), (-3, ValueError),
                                        ("3", TypeError), (True, TypeError), (3.0, TypeError)])
def test_bad_level_refused_before_writing(level, kind):
    a = tiles(10)
    with pytest.raises(kind, match="level"):
        from_numpy("bad", a, level=level)
    assert not os.path.exists("bad")
    with pytest.raises(kind, match="level"):
        from_iterator("bad", [a[0]], np.uint8, level=level)
    assert not os.path.exists("bad")
    with pytest.raises(kind, match="level"):
        Zrecord("bad", level=level)
    assert not os.path.exists("bad")


def test_level_refused_for_raw_and_by_the_daemon():
    a = tiles(10)
    with pytest.raises(ValueError, match="raw store"):
        from_numpy("raw", a, codec="raw", level=3)
    assert not os.path.exists("raw")
    ds = DenseDataset("z", dtype=np.uint8, item_shape=a.shape[1:], codec="zstd")
    ds.append(a[:2])
    with pytest.raises(ValueError, match="1 to 19"):
        ds.append(a, level=20)
    # the daemon's own check, past the client's: EINVAL naming the range, nothing written
    from loaderx import _shm, _store
    arr = np.ascontiguousarray(a)
    with _shm.SealedMemfd([arr], "test-append") as m:
        with pytest.raises(ZrecordError, match="level 25: a level is 1 to 19") as e:
            ds._h.request("append", dict(_store.dense_fields(ds._h.schema, arr), offset=0,
                                         level=25), fds=(m.fd,))
    assert e.value.name == "EINVAL", e.value.name
    assert len(ds) == 2
    np.testing.assert_array_equal(ds[:], a[:2])
    ds.close()


OLD = os.path.join(os.path.dirname(__file__), "data", "zstd-dict-level19")


def test_a_store_of_the_fixed_level_19_reads_unchanged():
    """data/zstd-dict-level19: 96 tiles of 16x16 uint8 written by a zrecordd of
    before the levels (zstd_dict at its fixed level 19; a "fast" dictionary of
    16 KiB), its chunk and table cut to their data:

        rng = np.random.default_rng(38); y, x = np.mgrid[0:16, 0:16]
        base = ((x * 3 + y * 5) % 256).astype(np.int16)
        a = np.clip(base[None] + rng.integers(-6, 7, (400, 16, 16)), 0, 255).astype(np.uint8)
        from_numpy("store", a[:96], codec="zstd_dict", dict_bytes=train_dict(a, "fast"))

    It reads back to the same bytes (their SHA-256, taken when it was written),
    verifies, and takes appends at the new default beside its old frames."""
    import hashlib
    import shutil
    shutil.copytree(OLD, "old")
    ds = DenseDataset("old")
    assert ds.codec == "zstd_dict" and len(ds) == 96 and ds.has_dict()
    got = ds[:]
    assert got.shape == (96, 16, 16) and got.dtype == np.uint8
    assert hashlib.sha256(got.tobytes()).hexdigest() == \
        "357ec7401db7002db065378307502ee092321df4b3dea08b2e3ba781fd7075b3"
    assert ds._h.request("verify")["ok"]
    ds.close()
    ds = DenseDataset("old", dtype=np.uint8, item_shape=(16, 16), codec="zstd_dict")
    ds.append(got[:10])
    np.testing.assert_array_equal(ds[:], np.concatenate([got, got[:10]]))
    ds.close()
