"""The corpora users already have (issue 34): Parquet, Arrow, Hugging Face
datasets, WebDataset tars and Megatron-LM's .bin/.idx, into stores, and a store
back into Megatron-LM's pair, bit for bit. Interruptions are test_interrupt.py's."""

import io
import os
import tarfile

import numpy as np
import pytest

import interrupt_writer as iw
from loaderx import ZrecordError
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.utils import (from_arrow, from_hf, from_megatron, from_parquet, from_webdataset,
                           from_iterator, to_megatron)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _same(recs, want):
    assert len(recs) == len(want)
    for a, b in zip(recs, want):
        assert a.dtype == b.dtype and a.shape == b.shape and (a == b).all()


def test_parquet_kinds(workdir):
    docs = iw.documents(1, 500)
    t = pa.table({
        "tokens": pa.array(docs, type=pa.list_(pa.int32())),
        "big": pa.array([d.astype(np.int64) for d in docs], type=pa.large_list(pa.int64())),
        "emb": pa.array([np.arange(4, dtype=np.float32) + i for i in range(500)],
                        type=pa.list_(pa.float32(), 4)),
        "text": pa.array([f"doc {i} é" for i in range(500)]),
        "blob": pa.array([bytes([i % 256]) * (i % 7 + 1) for i in range(500)], type=pa.binary()),
        "label": pa.array(np.arange(500, dtype=np.int16)),
    })
    pq.write_table(t, "c.parquet", row_group_size=64)
    assert from_parquet("tok", "c.parquet", "tokens") == 500
    _same(RaggedDataset("tok")[:], docs)
    assert from_parquet("big", ["c.parquet"], "big", codec="zstd") == 500
    _same(RaggedDataset("big")[:], [d.astype(np.int64) for d in docs])
    assert from_parquet("emb", "c.parquet", "emb") == 500
    np.testing.assert_array_equal(DenseDataset("emb")[:],
                                  np.arange(4, dtype=np.float32)[None] + np.arange(500)[:, None])
    assert from_parquet("text", "c.parquet", "text") == 500
    assert bytes(RaggedDataset("text")[7]) == "doc 7 é".encode()
    assert from_parquet("blob", "c.parquet", "blob") == 500
    assert bytes(RaggedDataset("blob")[9]) == bytes([9]) * 3
    assert from_parquet("label", "c.parquet", "label") == 500
    np.testing.assert_array_equal(DenseDataset("label")[:], np.arange(500, dtype=np.int16))
    # two files in order
    assert from_parquet("two", ["c.parquet", "c.parquet"], "tokens") == 1000
    _same(RaggedDataset("two")[:], docs + docs)


def test_parquet_refusals(workdir):
    t = pa.table({"tokens": pa.array([[1, 2], None, [3]], type=pa.list_(pa.int32())),
                  "e": pa.array([[1], [], [2]], type=pa.list_(pa.int32())),
                  "m": pa.array([{"a": 1}] * 3)})
    pq.write_table(t, "bad.parquet")
    with pytest.raises(ZrecordError, match="row 1 is null"):
        from_parquet("x", "bad.parquet", "tokens")
    with pytest.raises(ZrecordError, match="row 1 is empty"):
        from_parquet("x", "bad.parquet", "e")
    assert not os.path.exists("x") and os.listdir(".") == ["bad.parquet"]
    assert from_parquet("x", "bad.parquet", "e", skip_empty=True) == 2
    _same(RaggedDataset("x")[:], [np.array([1], np.int32), np.array([2], np.int32)])
    with pytest.raises(ZrecordError, match="no column 'nope'"):
        from_parquet("y", "bad.parquet", "nope")
    with pytest.raises(ZrecordError, match="has no store kind"):
        from_parquet("y", "bad.parquet", "m")
    with pytest.raises(ZrecordError, match="exists"):
        from_parquet("x", "bad.parquet", "e", skip_empty=True)
    assert not os.path.exists("y")


def test_arrow_table_and_stream(workdir):
    docs = iw.documents(2, 300)
    t = pa.table({"tokens": pa.array(docs, type=pa.list_(pa.uint16()))})
    want = [d.astype(np.uint16) for d in docs]
    t = pa.table({"tokens": pa.array(want, type=pa.list_(pa.uint16()))})
    assert from_arrow("a", t, "tokens") == 300
    _same(RaggedDataset("a")[:], want)
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=37))
    assert from_arrow("b", reader, "tokens") == 300
    _same(RaggedDataset("b")[:], want)
    # a slice of a table: its arrays start at an offset
    assert from_arrow("c", t.slice(11, 50), "tokens") == 50
    _same(RaggedDataset("c")[:], want[11:61])


def test_hf_dataset(workdir):
    datasets = pytest.importorskip("datasets")
    docs = iw.documents(3, 200)
    ds = datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in docs]})
    # the store keeps the Arrow type the library chose (int64, or int32 in newer ones)
    dt = np.dtype(ds.data.table.schema.field("input_ids").type.value_type.to_pandas_dtype())
    assert from_hf("h", ds, "input_ids") == 200
    _same(RaggedDataset("h")[:], [d.astype(dt) for d in docs])
    sub = ds.select(range(10, 30))                    # through its indices
    assert from_hf("s", sub, "input_ids") == 20
    _same(RaggedDataset("s")[:], [d.astype(dt) for d in docs[10:30]])
    shuf = ds.shuffle(seed=3)
    assert from_hf("u", shuf, "input_ids") == 200
    want = [np.asarray(r, dt) for r in shuf["input_ids"]]   # the library's own rows
    assert not all(np.array_equal(a, b) for a, b in zip(want, docs))
    _same(RaggedDataset("u")[:], want)


def test_webdataset(workdir):
    with tarfile.open("shard-0.tar", "w") as tf:
        for i in range(20):
            for ext, data in (("txt", f"text {i}".encode()), ("cls", b"%d" % (i % 3))):
                if ext == "cls" and i == 5:
                    continue            # a sample without it: skipped
                m = tarfile.TarInfo(f"dir/s{i:04d}.{ext}")
                m.size = len(data)
                tf.addfile(m, io.BytesIO(data))
    assert from_webdataset("w", "shard-0.tar", "txt") == 20
    assert [bytes(r) for r in RaggedDataset("w")[:]] == [f"text {i}".encode() for i in range(20)]
    assert from_webdataset("c", ["shard-0.tar"], ".cls") == 19
    with pytest.raises(ZrecordError, match="no member with extension 'jpg'"):
        from_webdataset("j", "shard-0.tar", "jpg")
    assert not os.path.exists("j")


@pytest.mark.parametrize("code,dtype", [(4, np.int32), (8, np.uint16), (5, np.int64)])
def test_megatron_both_ways_bit_for_bit(workdir, code, dtype):
    docs = [d.astype(dtype) for d in iw.documents(4, 700)]
    iw.write_megatron("m", docs, dtype_code=code)
    assert from_megatron("store", "m") == 700
    _same(RaggedDataset("store")[:], docs)
    assert to_megatron("store", "back") == 700
    for ext in (".bin", ".idx"):
        assert open("m" + ext, "rb").read() == open("back" + ext, "rb").read(), ext
    # documents of several sequences: kept, and written back the same
    iw.write_megatron("g", docs[:10], dtype_code=code, doc_indices=[0, 3, 4, 10])
    assert from_megatron("gs", "g") == 10
    to_megatron("gs", "gback")
    for ext in (".bin", ".idx"):
        assert open("g" + ext, "rb").read() == open("gback" + ext, "rb").read(), ext


@pytest.mark.parametrize("headers", ["daemon", "client"])
def test_converters_in_pieces(workdir, monkeypatch, headers):
    """A corpus that takes several reads and several APPENDs: the next read
    runs while the daemon writes (_corpora._append_flat's ``during``), and
    every record lands once, in order. 33,000 records are two APPENDs of one
    chunk; small chunks and batches are many reads of one APPEND each. The
    records' shape headers made by the daemon (APPEND's ``lengths``; the .bin
    copied into the memfd by sendfile), or by the client (a daemon without
    the "append_lengths" feature)."""
    from loaderx import _corpora
    if headers == "client":
        monkeypatch.setattr(_corpora, "_has_lengths", lambda ds: False)
    rng = np.random.default_rng(7)
    docs = [rng.integers(0, 1000, int(k), dtype=np.int32)
            for k in rng.integers(1, 6, size=33_000)]
    iw.write_megatron("m", docs, dtype_code=4)
    offsets = np.zeros(len(docs) + 1, np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    pq.write_table(pa.table({"t": pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(np.concatenate(docs)))}), "c.parquet",
        row_group_size=9_000)
    for chunk, rows in ((_corpora.CHUNK_BYTES, _corpora.ARROW_BATCH_ROWS), (4096, 3_000)):
        monkeypatch.setattr(_corpora, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(_corpora, "ARROW_BATCH_ROWS", rows)
        for name, convert in (("meg", lambda p: from_megatron(p, "m")),
                              ("pq", lambda p: from_parquet(p, "c.parquet", "t"))):
            path = f"{name}-{chunk}"
            assert convert(path) == len(docs)
            to_megatron(path, path + "-back")
            for ext in (".bin", ".idx"):
                assert open("m" + ext, "rb").read() == open(path + "-back" + ext, "rb").read(), \
                    (path, ext)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_append_lengths(workdir, codec):
    """APPEND's ``lengths`` (proto/PROTOCOL.md): the memfd holds the values
    alone and the daemon makes each record's header; the same records as with
    ``sizes``. Refused: both fields, a store of two dimensions, a memfd shorter
    than the lengths say; nothing appended then."""
    from loaderx import _shm, _wire
    ds = RaggedDataset("s", dtype=np.int16, ndim=1, codec=codec)
    h = ds._ds._h if hasattr(ds, "_ds") else ds._h
    if not h.conn.has_feature("append_lengths"):
        pytest.skip("this zrecordd has no \"append_lengths\"")
    docs = [np.arange(k, dtype=np.int16) * (i + 1) for i, k in enumerate([1, 5, 300, 2, 77])]
    vals = np.concatenate(docs)
    lens = _wire.u64s([len(d) for d in docs])

    def append(fields, data=vals):
        with _shm.SealedMemfd([data]) as m:
            return h.request("append", dict({"offset": 0, "dtype": "<i2", "ndim": 1}, **fields),
                             fds=(m.fd,))
    r = append({"lengths": lens})
    assert (r["first"], r["count"], r["length"]) == (0, 5, 5)
    _same(ds[:], docs)
    with pytest.raises(ZrecordError) as e:
        append({"lengths": lens, "sizes": _wire.u64s([16 + 2 * len(d) for d in docs])})
    assert e.value.name == "ZR_E_PROTO"
    with pytest.raises(ZrecordError) as e:
        append({"lengths": lens}, vals[:-1])
    assert e.value.name == "ZR_E_BUFFER"
    assert len(ds) == 5
    d2 = RaggedDataset("two", dtype=np.int16, ndim=2, codec=codec)
    h2 = d2._ds._h if hasattr(d2, "_ds") else d2._h
    with _shm.SealedMemfd([vals]) as m, pytest.raises(ZrecordError) as e:
        h2.request("append", {"offset": 0, "dtype": "<i2", "ndim": 2, "lengths": lens},
                   fds=(m.fd,))
    assert e.value.name == "ZR_E_SCHEMA"
    assert len(d2) == 0


def test_megatron_refusals(workdir):
    docs = iw.documents(5, 10)
    iw.write_megatron("m", docs)
    raw = bytearray(open("m.idx", "rb").read())
    open("bad.idx", "wb").write(b"NOTANIDX" + raw[8:])
    open("bad.bin", "wb").write(open("m.bin", "rb").read())
    with pytest.raises(ZrecordError, match="no MMIDIDX header"):
        from_megatron("x", "bad")
    open("short.idx", "wb").write(raw[:-8])
    open("short.bin", "wb").write(b"")
    with pytest.raises(ZrecordError, match="need"):
        from_megatron("x", "short")
    open("cut.idx", "wb").write(raw)
    open("cut.bin", "wb").write(open("m.bin", "rb").read()[:-4])
    with pytest.raises(ZrecordError, match="points past the end"):
        from_megatron("x", "cut")
    assert not os.path.exists("x")
    from_iterator("f", [np.zeros(3, np.float16)], np.float16)
    with pytest.raises(ZrecordError, match="none of Megatron-LM's"):
        to_megatron("f", "fout")
    assert not os.path.exists("fout.bin") and not os.path.exists("fout.idx")


def test_converted_corpus_packs(workdir):
    """A Parquet corpus, converted, is a packed loader's stream."""
    from loaderx.dataloader import DataLoader
    docs = iw.documents(6, 100)
    pq.write_table(pa.table({"tokens": pa.array(docs, type=pa.list_(pa.int32()))}), "p.parquet")
    from_parquet("corpus", "p.parquet", "tokens")
    with DataLoader({"tokens": RaggedDataset("corpus")}, batch_size=4, sampler="sequential",
                    pack={"tokens": 64}, num_workers=0) as dl:
        b = next(dl)
    np.testing.assert_array_equal(b["tokens"].reshape(-1), np.concatenate(docs)[:256])


def test_zrecord_import_from(workdir):
    """`zrecord import --from` runs the same converters; usage errors exit 2,
    a missing package 1 with what to install."""
    import subprocess
    import sys
    from conftest import PKG, tool_binary
    tool = tool_binary()
    if tool is None:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    env = dict(os.environ, PYTHONPATH=PKG, ZRECORD_PYTHON=sys.executable)
    docs = iw.documents(7, 64)
    iw.write_megatron("m", docs)
    pq.write_table(pa.table({"t": pa.array(docs, type=pa.list_(pa.int32()))}), "p.parquet")
    r = subprocess.run([tool, "import", "--from", "megatron", "m", "sm"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "64", r
    _same(RaggedDataset("sm")[:], docs)
    r = subprocess.run([tool, "import", "--from=parquet", "p.parquet", "sp", "--column", "t"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    _same(RaggedDataset("sp")[:], docs)
    r = subprocess.run([tool, "import", "--from", "parquet", "p.parquet", "sx"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--column" in r.stderr and not os.path.exists("sx"), r
    r = subprocess.run([tool, "import", "--from", "megatron", "nope", "sx"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "nope" in r.stderr and not os.path.exists("sx"), r
    bare = dict(env, PYTHONPATH=str(workdir))       # no loaderx there
    if subprocess.run([sys.executable, "-c", "import loaderx"], env=bare, cwd="/",
                      capture_output=True).returncode == 0:
        return                                      # installed on this machine
    r = subprocess.run([tool, "import", "--from", "megatron", "m", "sx"], env=bare,
                       capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 1 and "needs the loaderx Python package" in r.stderr, r


def _text_like(n, seed=7):
    """Token documents that compress, and better at a higher level: repeated
    phrases of a small vocabulary with a little noise."""
    rng = np.random.default_rng(seed)
    phrases = [rng.integers(0, 3000, size=int(k), dtype=np.int32)
               for k in rng.integers(4, 40, size=64)]
    docs = []
    for _ in range(n):
        parts = [phrases[j] for j in rng.integers(0, len(phrases), size=int(rng.integers(4, 40)))]
        d = np.concatenate(parts)
        d[rng.integers(0, len(d), size=max(1, len(d) // 50))] = rng.integers(0, 50000)
        docs.append(d)
    return docs


def test_converters_take_a_level(workdir):
    """``level=`` reaches the daemon from every converter (docs/DATASETS.md,
    "Levels"): the records read back the same and level 19 stores fewer bytes
    than level 1; a level for a raw store or outside 1..19 is refused before
    anything is written; ``zrecord import --from ... --level`` passes it on."""
    docs = _text_like(1500)
    pq.write_table(pa.table({"tokens": pa.array(docs, type=pa.list_(pa.int32()))}), "p.parquet")
    iw.write_megatron("m", docs)
    with tarfile.open("w.tar", "w") as tf:
        for i, d in enumerate(docs[:400]):
            data = d.tobytes()
            info = tarfile.TarInfo(f"s{i:04d}.bin")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    convert = {
        "parquet": lambda dst, lv: from_parquet(dst, "p.parquet", "tokens", codec="zstd",
                                                level=lv),
        "arrow": lambda dst, lv: from_arrow(dst, pa.table({"tokens": pa.array(
            docs, type=pa.list_(pa.int32()))}), "tokens", codec="zstd", level=lv),
        "megatron": lambda dst, lv: from_megatron(dst, "m", codec="zstd", level=lv),
        "webdataset": lambda dst, lv: from_webdataset(dst, "w.tar", "bin", codec="zstd",
                                                      level=lv),
    }
    every = {}
    for name, conv in convert.items():
        sizes = every[name] = {}
        for lv in (1, 19):
            dst = f"{name}-{lv}"
            conv(dst, lv)
            ds = RaggedDataset(dst)
            got = ds[:]
            if name == "webdataset":
                _same(got, [np.frombuffer(d.tobytes(), np.uint8) for d in docs[:400]])
            else:
                _same(got, docs)
            sizes[lv] = ds.stats()["live_bytes"]
            ds.close()
        assert sizes[19] < sizes[1], (name, sizes)
    with pytest.raises(ZrecordError, match="raw store"):
        from_parquet("raw-lv", "p.parquet", "tokens", level=5)
    with pytest.raises(ZrecordError, match="1 to 19"):
        from_megatron("bad-lv", "m", codec="zstd", level=20)
    assert not os.path.exists("raw-lv") and not os.path.exists("bad-lv")
    import subprocess
    import sys
    from conftest import PKG, tool_binary
    tool = tool_binary()
    if tool is None:
        return
    env = dict(os.environ, PYTHONPATH=PKG, ZRECORD_PYTHON=sys.executable)
    r = subprocess.run([tool, "import", "--from", "megatron", "m", "cli-19", "--codec", "zstd",
                        "--level", "19"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == str(len(docs)), r.stderr
    ds = RaggedDataset("cli-19")
    _same(ds[:], docs)
    assert ds.stats()["live_bytes"] == every["megatron"][19]
    ds.close()
    r = subprocess.run([tool, "import", "--from", "megatron", "m", "cli-raw", "--level", "3"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "raw store" in r.stderr and not os.path.exists("cli-raw")
