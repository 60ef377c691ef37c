"""The conversions test_interrupt.py interrupts, and the records they write.

Run as a program (``python3 interrupt_writer.py SPEC``, SPEC a JSON object) it
prints ``ready``, then ``append`` before each APPEND it sends (so the test can
signal it at a chosen point), runs the conversion and prints ``done``. Imported,
:func:`write` runs the same conversion in the test's process and :func:`records`
gives what a conversion of a spec writes, generated again from its seed.

A spec: ``writer`` (``numpy``: from_numpy, dense; ``iterator``: from_iterator,
ragged; ``set``: a multi-stream set of a dense and a ragged stream, through
:func:`loaderx.utils.conversion` and ``MSDataset.append``; ``convert``:
loaderx.utils.convert of ``src``), ``path``, ``codec``, ``seed``, ``n``,
``chunk`` (bytes per append), ``width`` (int32 per dense record, 64), ``dict`` (a file holding a zstd dictionary, for
``zstd_dict`` streams that need one). ``images``: from_images of ``n`` small
JPEGs and PNGs made from the seed (Pillow), written as bytes.

The corpora converters (loaderx.utils, _corpora.py) too: ``parquet``
(from_parquet), ``arrow`` (from_arrow of a RecordBatchReader), ``megatron``
(from_megatron), ``webdataset`` (from_webdataset), each of documents made from
the seed and written as the input beside ``path`` first; ``to_megatron`` (of a
store at ``src``, into the prefix ``path``).
"""

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

def dense(seed, n, width=64):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1000, size=(n, width), dtype=np.int32)


def ragged(seed, n):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 200, size=n)
    return [rng.integers(0, 500, size=(int(k), 2), dtype=np.int16) for k in sizes]


CORPORA = ("parquet", "arrow", "megatron", "webdataset")


def documents(seed, n):
    """Token documents: int32, 1 to 300 tokens."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 300, size=n)
    return [rng.integers(0, 50000, size=int(k), dtype=np.int32) for k in sizes]


def _write_input(spec):
    """The input file(s) a corpora converter of spec reads; returns its argument."""
    w, docs, base = spec["writer"], documents(spec["seed"], spec["n"]), spec["path"] + ".in"
    if w in ("parquet", "arrow"):
        import pyarrow as pa
        import pyarrow.parquet as pq
        t = pa.table({"tokens": pa.array(docs, type=pa.list_(pa.int32()))})
        if w == "arrow":
            return t
        pq.write_table(t, base + ".parquet", row_group_size=max(1, spec["n"] // 8))
        return base + ".parquet"
    if w == "megatron":
        from loaderx import _corpora
        write_megatron(base, docs)
        return base
    if w == "webdataset":
        import io
        import tarfile
        with tarfile.open(base + ".tar", "w") as tf:
            for i, d in enumerate(docs):
                data = d.tobytes()
                m = tarfile.TarInfo(f"s{i:06d}.bin")
                m.size = len(data)
                tf.addfile(m, io.BytesIO(data))
                m = tarfile.TarInfo(f"s{i:06d}.cls")
                m.size = 1
                tf.addfile(m, io.BytesIO(b"7"))
        return base + ".tar"
    raise ValueError(w)


def write_megatron(prefix, docs, dtype_code=4, doc_indices=None):
    """A Megatron-LM indexed dataset pair written from its format (the test's own
    writer: the header, version 1, dtype code, counts, lengths, pointers, document
    indices)."""
    import struct
    lens = np.array([len(d) for d in docs], "<i4")
    item = docs[0].dtype.itemsize
    ptrs = np.zeros(len(docs), "<i8")
    ptrs[1:] = np.cumsum(lens[:-1].astype(np.int64) * item)
    di = np.arange(len(docs) + 1, dtype="<i8") if doc_indices is None else \
        np.asarray(doc_indices, "<i8")
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(d.astype(d.dtype.newbyteorder("<")).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype_code, len(docs), len(di)))
        f.write(lens.tobytes() + ptrs.tobytes() + di.tobytes())


def images(seed, n):
    """n small encoded images (JPEG and PNG, a few sizes), each as bytes."""
    import io
    from PIL import Image
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        h, w = (24, 32) if k % 3 else (30, 20)
        a = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
        b = io.BytesIO()
        Image.fromarray(a).save(b, "PNG" if k % 4 == 0 else "JPEG")
        out.append(b.getvalue())
    return out


def records(spec):
    """What the conversion of spec writes: an array (dense), a list (ragged), or
    {name: either} (set)."""
    w, seed, n = spec["writer"], spec["seed"], spec["n"]
    if w in ("parquet", "arrow", "megatron"):
        return documents(seed, n)
    if w == "webdataset":
        return [d.view(np.uint8) for d in documents(seed, n)]
    if w == "numpy":
        return dense(seed, n, spec.get("width", 64))
    if w == "iterator":
        return ragged(seed, n)
    if w == "set":
        return {"x": dense(seed, n)[:, :16], "y": [r[:, 0].copy() for r in ragged(seed + 1, n)]}
    if w == "images":
        return [np.frombuffer(b, dtype=np.uint8) for b in images(seed, n)]
    raise ValueError(w)


def _dict(spec):
    if spec.get("dict"):
        with open(spec["dict"], "rb") as f:
            return f.read()
    return None


def write(spec):
    from loaderx import utils
    from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
    w, codec = spec["writer"], spec.get("codec", "zstd")
    utils.CHUNK_BYTES = spec.get("chunk", utils.CHUNK_BYTES)
    if w == "numpy":
        return utils.from_numpy(spec["path"], records(spec), codec=codec,
                                dict_bytes=_dict(spec))
    if w == "iterator":
        per = max(1, spec.get("chunk", 1 << 20) // 400)
        utils.RAGGED_CHUNK_RECORDS = per
        return utils.from_iterator(spec["path"], iter(records(spec)), np.int16, codec=codec,
                                   dict_bytes=_dict(spec))
    if w == "set":
        data = records(spec)
        d = _dict(spec)
        with utils.conversion(spec["path"]) as c:
            if c.new:
                DenseDataset(os.path.join(c.path, "x"), dtype=np.int32, item_shape=(16,),
                             codec=codec, dict_bytes=d).close()
                RaggedDataset(os.path.join(c.path, "y"), dtype=np.int16, ndim=1, codec=codec,
                              dict_bytes=d).close()
            ms = c.add(MSDataset(c.path))
            per = max(1, spec.get("chunk", 1 << 20) // 256)
            for s in range(0, spec["n"], per):
                ms.append({"x": data["x"][s:s + per], "y": data["y"][s:s + per]})
        return spec["n"]
    if w == "convert":
        return utils.convert(spec["src"], spec["path"], to=spec.get("to", "loaderx-1.5.7"))
    if w in CORPORA:
        from loaderx import _corpora
        _corpora.CHUNK_BYTES = spec.get("chunk", _corpora.CHUNK_BYTES)
        _corpora.ARROW_BATCH_ROWS = max(1, spec["n"] // 8)
        src = _write_input(spec)
        if w == "parquet":
            return utils.from_parquet(spec["path"], src, "tokens", codec=codec)
        if w == "arrow":
            import pyarrow as pa
            reader = pa.RecordBatchReader.from_batches(
                src.schema, src.to_batches(max_chunksize=max(1, spec["n"] // 8)))
            return utils.from_arrow(spec["path"], reader, "tokens", codec=codec)
        if w == "megatron":
            return utils.from_megatron(spec["path"], src, codec=codec)
        return utils.from_webdataset(spec["path"], src, "bin", codec=codec)
    if w == "images":
        from loaderx import images as im
        im._CHUNK_BYTES = spec.get("chunk", im._CHUNK_BYTES)
        return utils.from_images(spec["path"], images(spec["seed"], spec["n"]), codec=codec)
    raise ValueError(w)


def sigint_at_lock(lock, where):
    """Makes the main thread take a SIGINT the moment it acquires ``lock`` (a
    threading.Lock) in the function named ``where``: a helper thread takes the
    lock, waits until the main thread sleeps in the kernel with ``where`` on its
    stack (waiting for the lock), takes a SIGINT itself, and lets the lock go.
    The main thread runs Python's handler at its next check, at once after its
    acquire returned. Returns once the helper holds the lock."""
    import signal
    import threading
    main = threading.main_thread()
    held = threading.Event()

    def waiting():
        f = sys._current_frames().get(main.ident)
        names = set()
        while f is not None:
            names.add(f.f_code.co_name)
            f = f.f_back
        with open(f"/proc/self/task/{main.native_id}/stat") as st:
            state = st.read().rsplit(")", 1)[1].split()[0]
        return where in names and state == "S"

    def hold():
        with lock:
            held.set()
            pause = threading.Event()
            for _ in range(20000):          # a bound: 10 s
                if waiting():
                    break
                pause.wait(0.0005)
            else:
                print("the main thread never waited for the lock", flush=True)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    threading.Thread(target=hold, daemon=True).start()
    held.wait()


def _announce_appends():
    """Prints ``append`` before each APPEND this process sends."""
    from loaderx import _conn
    orig = _conn.Connection.request

    def request(self, kind, *args, **kw):
        if kind in ("append", "convert"):
            sys.stdout.write(kind + "\n")
            sys.stdout.flush()
        return orig(self, kind, *args, **kw)
    _conn.Connection.request = request


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    _announce_appends()
    print("ready", flush=True)
    write(spec)
    print("done", flush=True)
