"""Conversions and dictionaries: chunked from_numpy, from_iterator, train_dict sources."""

import os

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx.dataset import DICT_TIERS, DenseDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy, train_dict
from loaderx.zrecord import Zrecord


def test_dict_tiers():
    from loaderx.dataset import DICT_TIER_DEFAULT
    assert set(DICT_TIERS) == {"fast", "balanced", "max"} and DICT_TIER_DEFAULT == "balanced"
    assert DICT_TIERS["balanced"]["size"] == 128 << 10
    assert DICT_TIERS["max"]["size"] == 256 << 10
    assert all(t["samples"] == 128 * t["size"] for t in DICT_TIERS.values())


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


def test_from_numpy_appends_to_a_store():
    """loaderx 1.5.7: from_numpy on a store of the same schema appends (a conversion
    in pieces keeps every piece); another dtype, shape or codec is a ValueError."""
    assert from_numpy("s", np.arange(10)) == 10
    ds_old = DenseDataset("s")
    assert from_numpy("s", np.arange(10, 25)) == 15
    np.testing.assert_array_equal(ds_old[:], np.arange(25))
    for bad in ({"array": np.arange(4.0)}, {"array": np.arange(4).reshape(2, 2)},
                {"array": np.arange(4), "codec": "raw"}):
        with pytest.raises(ValueError, match="cannot open as"):
            from_numpy("s", **bad)
    assert len(DenseDataset("s")) == 25
    with pytest.raises(TypeError):
        from_numpy("t", [1, 2, 3])               # loaderx 1.5.7: an ndarray only
    ds_old.close()


def test_from_numpy_schema_keys():
    """schema= keys are the caller's: written into a new store's schema.msgpack
    beside the store's own (loaderx 1.5.7 keeps them there too)."""
    import msgpack
    from_numpy("k", np.arange(6).reshape(3, 2), schema={"source": "test", "kind": "ragged"})
    with open("k/schema.msgpack", "rb") as f:
        s = msgpack.unpackb(f.read())
    assert s["source"] == "test" and s["kind"] == "dense" and s["format"] == "loaderx-zrecord"
    np.testing.assert_array_equal(DenseDataset("k")[:], np.arange(6).reshape(3, 2))


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
    assert len(rs) == 1000 and rs.ndim is None            # each record its own ndim
    assert rs[-1].shape == (999 % 3 + 1, 2)
    np.testing.assert_array_equal(rs[5], np.full((3, 2), 5, np.float32))
    assert from_iterator("e", iter([]), np.int32) == 0
    assert len(RaggedDataset("e")) == 0
    assert from_iterator("e", iter([np.arange(3, dtype=np.int32)]), np.int32) == 1   # appends
    assert from_iterator("b", b"\x01\x02", np.uint8) == 1        # a bytes source is one record
    assert RaggedDataset("b")[0].tolist() == [1, 2]


def test_ragged_records_of_any_ndim():
    """A ragged store keeps each record's own shape whatever its ndim, through
    reads, a loader, deletes and compaction."""
    shapes = [(2, 4), (5,), (3, 3, 3), (7, 2), (1, 1), (2, 1, 1, 2)]
    recs = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) + k for k, s in enumerate(shapes)]
    assert from_iterator("m", iter(recs), np.float32) == len(recs)
    ds = RaggedDataset("m")
    got = ds[[5, 0, 2, 2, 1]]
    for g, k in zip(got, [5, 0, 2, 2, 1]):
        assert g.shape == shapes[k] and np.array_equal(g, recs[k])
    assert ds[2].shape == (3, 3, 3)
    assert ds.lengths([0, 1, 2]).tolist() == [32, 20, 108]
    ds.delete([1])
    ds.compact()
    assert [r.shape for r in ds[:]] == [shapes[0], shapes[5], shapes[2], shapes[3], shapes[4]]


def test_train_dict_sources():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 20, 256).astype(np.int16)
    arr = np.stack([np.roll(base, k) for k in range(800)])
    d1 = train_dict(arr, tier="fast")
    d2 = train_dict((np.roll(base, k)[: 100 + k % 50] for k in range(800)), tier="fast")
    from_numpy("src", arr)
    d3 = train_dict(DenseDataset("src"), tier="fast")
    z = Zrecord("raw")
    z.append([np.roll(base, k).tobytes() for k in range(800)])
    d4 = train_dict(z, tier="fast", path="d4.dict")
    for d in (d1, d2, d3, d4):
        assert isinstance(d, bytes) and 0 < len(d) <= DICT_TIERS["fast"]["size"]
    assert open("d4.dict", "rb").read() == d4
    assert 0 < len(train_dict(arr)) <= DICT_TIERS["balanced"]["size"]     # tier None
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
    d = open("t/dict.zr", "rb").read()
    from_numpy("t", tiles[:10], codec="zstd_dict")               # appends with its dictionary
    from_numpy("t", tiles[:5], codec="zstd_dict", dict_bytes=d)   # the same one: appends
    assert len(ds) == 315 and open("t/dict.zr", "rb").read() == d
    with pytest.raises(ValueError, match="another zstd dictionary"):
        from_numpy("t", tiles[:5], codec="zstd_dict", dict_bytes=train_dict(tiles[::-1], "fast"))
    assert len(ds) == 315


def test_error_attributes():
    with pytest.raises(ZrecordError) as ei:
        DenseDataset("missing")
    assert isinstance(ei.value, FileNotFoundError)
    ds = DenseDataset("n", dtype=np.int8, item_shape=(2,))
    with pytest.raises(IndexError) as ei:
        ds._h.request("delete", {"indices": np.array([5], "<u8").tobytes()})
    assert ei.value.name == "ZR_E_RANGE" and ei.value.zr_code == 1007 and ei.value.code == -3
    assert ei.value.extra.get("index") == 5


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
        from_iterator("old", gen(10), np.int32)           # what it appended is deleted again
    old = RaggedDataset("old")
    assert len(old) == 20 and [len(r) for r in old[:]] == list(range(1, 21))
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
    d = train_dict(labels, tier="fast")
    assert 0 < len(d) <= DICT_TIERS["fast"]["size"]
    d2 = train_dict((np.array([k % 13], np.int32) for k in range(400_000)), tier="fast")
    assert len(d2) > 0


def test_progress_on_a_terminal_without_tqdm(workdir):
    """A long write shows progress on a terminal though tqdm is not installed (issue
    38 item 3): from_iterator of 40,000 records with stderr a pseudo-terminal and
    tqdm hidden draws a line that counts them, and clears it; before, nothing."""
    import pty
    import select
    import subprocess
    import sys
    import textwrap
    from conftest import PKG
    script = textwrap.dedent("""
        import sys
        sys.modules["tqdm"] = None          # as if tqdm were not installed
        import numpy as np
        from loaderx.utils import from_iterator
        n = from_iterator("many", (np.full(1, k, np.int32) for k in range(40000)), np.int32)
        print(n)
    """)
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=PKG)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=slave,
                         cwd=workdir, env=env)
    os.close(slave)
    seen = b""
    while True:
        r, _, _ = select.select([master], [], [], 120)
        assert r, f"no end within 120 s: {seen!r}"
        try:
            chunk = os.read(master, 4096)
        except OSError:                     # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = p.communicate(timeout=120)
    os.close(master)
    assert p.returncode == 0 and out.strip() == b"40000", (out, seen)
    assert b"many: 32768 rec" in seen and b"rec/s" in seen, seen
    assert seen.rstrip(b" ").endswith(b"\r"), seen     # the line cleared at the end
