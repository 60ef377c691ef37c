"""Conversions and dictionaries: chunked from_numpy, from_iterator, train_dict sources."""

import os

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx.dataset import DICT_TIERS, DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy, train_dict
from loaderx.zrecord import Zrecord


def test_dict_tiers():
    assert set(DICT_TIERS) == {"small", "balanced", "max"}
    assert DICT_TIERS["balanced"]["dict_bytes"] == 128 << 10
    assert DICT_TIERS["max"]["dict_bytes"] == 256 << 10
    assert all(t["sample_bytes"] == 128 * t["dict_bytes"] for t in DICT_TIERS.values())


def test_from_numpy_streams_in_chunks(monkeypatch):
    from loaderx import utils
    monkeypatch.setattr(utils, "CHUNK_BYTES", 1000)
    np.save("a.npy", np.arange(500 * 7, dtype=np.int64).reshape(500, 7))
    arr = np.load("a.npy", mmap_mode="r")
    calls = []
    orig = DenseDataset.append

    def spy(self, records):
        calls.append(len(records))
        assert not isinstance(records, np.memmap) or records.shape[0] <= 18
        return orig(self, records)
    monkeypatch.setattr(DenseDataset, "append", spy)
    from_numpy("a", arr)
    assert len(calls) == 500 // 17 + 1 and max(calls) == 17      # 1000 // 56 bytes
    np.testing.assert_array_equal(DenseDataset("a")[:], np.load("a.npy"))


def test_from_numpy_replaces_a_store():
    from_numpy("s", np.arange(10))
    ds_old = DenseDataset("s")
    from_numpy("s", np.arange(4.0).reshape(2, 2))
    ds = DenseDataset("s")
    assert len(ds) == 2 and ds.item_shape == (2,) and ds.dtype == np.float64
    assert not [n for n in os.listdir(".") if n.startswith(".s.")]   # no leftovers
    ds_old.close()


def test_from_numpy_scalars_and_codecs():
    for codec in ("raw", "zstd"):
        from_numpy(f"l_{codec}", np.arange(30, dtype=np.uint16), codec=codec)
        ds = DenseDataset(f"l_{codec}")
        assert ds.item_shape == () and ds.codec == codec
        assert ds[3] == 3 and ds[3].shape == ()
        np.testing.assert_array_equal(ds[[1, 2]], [1, 2])


def test_from_iterator_generator_and_empty():
    def gen():
        for k in range(1000):
            yield np.full((k % 3 + 1, 2), k, dtype=np.float32)
    from_iterator("g", gen(), np.float32)
    rs = RaggedDataset("g")
    assert len(rs) == 1000 and rs.ndim == 2
    assert rs[-1].shape == (999 % 3 + 1, 2)
    np.testing.assert_array_equal(rs[5], np.full((3, 2), 5, np.float32))
    from_iterator("e", iter([]), np.int32)
    assert len(RaggedDataset("e")) == 0


def test_train_dict_sources():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 20, 256).astype(np.int16)
    arr = np.stack([np.roll(base, k) for k in range(800)])
    d1 = train_dict(arr, tier="small")
    d2 = train_dict((np.roll(base, k)[: 100 + k % 50] for k in range(800)), tier="small")
    from_numpy("src", arr)
    d3 = train_dict(DenseDataset("src"), tier="small")
    z = Zrecord("raw")
    z.append([np.roll(base, k).tobytes() for k in range(800)])
    d4 = train_dict(z, tier="small")
    for d in (d1, d2, d3, d4):
        assert isinstance(d, bytes) and 0 < len(d) <= DICT_TIERS["small"]["dict_bytes"]
    with pytest.raises(ValueError):
        train_dict(iter([]))
    with pytest.raises(ValueError):
        train_dict(np.zeros((2, 4), np.uint8))          # too little data for zstd


def test_from_numpy_zstd_dict_trains_on_the_array():
    tiles = np.tile(np.arange(64, dtype=np.uint8), (300, 1)) + (np.arange(300) % 7)[:, None].astype(np.uint8)
    from_numpy("t", tiles, codec="zstd_dict")
    ds = DenseDataset("t")
    assert ds.has_dict() and ds.codec == "zstd_dict"
    np.testing.assert_array_equal(ds[:], tiles)
    st = ds.stats()
    assert st["live_bytes"] < tiles.nbytes


def test_error_attributes():
    with pytest.raises(ZrecordError) as ei:
        DenseDataset("missing")
    assert isinstance(ei.value, FileNotFoundError)
    ds = DenseDataset("n", dtype=np.int8, item_shape=(2,))
    with pytest.raises(IndexError) as ei:
        ds._h.request("delete", {"indices": np.array([5], "<u8").tobytes()})
    assert ei.value.name == "ZR_E_RANGE" and ei.value.code == 1007 and ei.value.extra.get("index") == 5


def test_progress_bar_on_a_terminal(monkeypatch):
    import sys
    import types
    from loaderx import utils
    updates = []

    class FakeTqdm:
        def __init__(self, total=None, **kw):
            updates.append(("total", total))

        def update(self, n):
            updates.append(n)

        def close(self):
            updates.append("closed")
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    monkeypatch.setattr(utils, "PROGRESS_MIN_BYTES", 0)
    monkeypatch.setattr(utils, "CHUNK_BYTES", 800)
    arr = np.arange(100 * 10, dtype=np.int64).reshape(100, 10)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    from_numpy("quiet", arr)
    assert updates == []                         # not a terminal: silent
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    from_numpy("loud", arr)
    assert updates[0] == ("total", arr.nbytes) and updates[-1] == "closed"
    assert sum(u for u in updates if isinstance(u, int)) == arr.nbytes


def test_failed_conversion_leaves_nothing(monkeypatch):
    from loaderx import utils
    monkeypatch.setattr(utils, "RAGGED_CHUNK_RECORDS", 4)

    def gen(fail_at):
        for k in range(20):
            if k == fail_at:
                raise RuntimeError("source broke")
            yield np.arange(k + 1, dtype=np.int32)
    with pytest.raises(RuntimeError, match="source broke"):
        from_iterator("new", gen(10), np.int32)
    assert not os.path.exists("new")
    os.mkdir("empty")
    with pytest.raises(RuntimeError):
        from_iterator("empty", gen(10), np.int32)
    assert os.path.isdir("empty") and os.listdir("empty") == []
    from_iterator("old", gen(99), np.int32)
    with pytest.raises(RuntimeError):
        from_iterator("old", gen(10), np.int32)           # the old store is untouched
    assert len(RaggedDataset("old")) == 20
    assert sorted(os.listdir(".")) == ["empty", "old"]


def test_zero_d_index():
    from_numpy("z", np.arange(5) * 2)
    ds = DenseDataset("z")
    assert ds[np.array(3)] == 6 and ds[np.int32(-1)] == 8


def test_large_deletes_and_set_appends_split_into_frames(monkeypatch):
    from loaderx import _conn
    from loaderx.dataset import MSDataset
    c = _conn.default()
    monkeypatch.setattr(c._fs, "frame_max", 4096 + 8 * 64 + 16384)   # tiny frames
    data = np.arange(500)
    from_numpy("one", data)
    ref = data.tolist()
    ds = DenseDataset("one")
    rng = np.random.default_rng(0)
    victims = rng.choice(500, 300, replace=False)
    ds.delete(victims)                                  # 5 requests of 64
    for i in sorted(victims, reverse=True):             # one swap-last batch, by hand
        ref[i] = ref[-1]
        ref.pop()
    assert ds[:].tolist() == ref
    from_numpy("set/a", np.arange(10))
    from_iterator("set/b", [np.arange(k % 3 + 1) for k in range(10)], np.int64)
    ms = MSDataset("set")
    ms.append({"a": np.arange(10, 1010), "b": [np.arange(k % 5 + 1) for k in range(1000)]})
    assert len(ms) == 1010
    np.testing.assert_array_equal(ms["b"][1009], np.arange(999 % 5 + 1))
    assert ms["a"][1009] == 1009


def test_train_dict_on_many_tiny_records():
    labels = (np.arange(300_000) % 97).astype(np.int64)        # 2.4 MB of 8-byte records
    d = train_dict(labels, tier="small")
    assert 0 < len(d) <= DICT_TIERS["small"]["dict_bytes"]
    d2 = train_dict((np.array([k % 13], np.int32) for k in range(400_000)), tier="small")
    assert len(d2) > 0
