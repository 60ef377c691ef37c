"""The corpora users already have, into stores and back: Parquet and Arrow (pyarrow),
Hugging Face ``datasets`` (their Arrow tables), WebDataset tars and Megatron-LM's
indexed datasets (``prefix.bin`` / ``prefix.idx``).

Every converter streams (memory bounded by a chunk, whatever the input's size),
writes inside :func:`loaderx.utils.conversion` (all or nothing, Ctrl-C included)
and shows a progress bar when the input's size is known (tqdm, on a terminal).
docs/TOKENS.md is the user's guide; what each Arrow type becomes:

- a list (or large list) of integers: a ragged store of that dtype, one record a
  row (a document of token ids);
- a fixed-size list of numbers: a dense store of items of that size;
- binary, large binary, string: a byte store (ragged uint8), one record a row;
- integers, floats, booleans: a dense store of scalars.

A null row is an error naming it; an empty list or string too (a store holds no
empty record) unless ``skip_empty=True``, which leaves it out and counts it.

pyarrow is imported only when a converter that needs it runs: the package stays
importable without it.
"""

import errno
import os
import signal
import struct
import sys
import tarfile

import numpy as np

from . import _shm, _store, _wire
from ._conversion import conversion
from ._errors import ZrecordTypeError, ZrecordValueError

__all__ = ["from_parquet", "from_arrow", "from_hf", "from_webdataset", "from_megatron",
           "to_megatron", "MEGATRON_DTYPES"]

# Bytes of records a converter appends at once (one APPEND request per piece of
# this, then the next): its memory bound beside the input's own reader.
CHUNK_BYTES = 32 << 20
# Rows pyarrow reads at once from a Parquet file or an Arrow stream.
ARROW_BATCH_ROWS = 65536

# Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py): the
# index header, its version, and the dtype codes of its DType enum.
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                   6: np.float64, 7: np.float32, 8: np.uint16}
_MEGATRON_CODES = {np.dtype(v): k for k, v in MEGATRON_DTYPES.items()}
# Above this many entries a non-trivial document index is not kept in the schema.
MEGATRON_DOC_INDEX_MAX = 1 << 20


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ZrecordTypeError("this converter reads Arrow and Parquet through pyarrow, which "
                               "is not installed: pip install pyarrow") from None
    return pyarrow


def _bar(total, desc, unit):
    from .utils import _progress
    return _progress(total, desc, unit)


# ---------------------------------------------------------------- appending

def _has_lengths(ds):
    """Whether the daemon makes the shape headers itself (APPEND's ``lengths``,
    feature "append_lengths"): the records then travel as their values alone."""
    conn = getattr(ds._h, "conn", None)
    return conn is not None and conn.has_feature("append_lengths")


def _append_pieces(ds, pieces, during=None, after=None, at=None):
    """Appends one-dimensional records to ragged store ds in one APPEND per piece
    of ``pieces``: ``(fill, lengths)``, where ``fill(fd)`` writes the piece's values
    back to back into a memfd and ``lengths`` (numpy) holds each record's items;
    the daemon makes each record's shape header. While the daemon appends one
    piece, the next is filled, and ``during()`` runs during the last; ``after(i)``
    when piece i is in. ``at``: more APPEND fields (the level)."""
    if not pieces:
        if during is not None:
            during()
        return

    def make(k):
        fill, _ = pieces[k]
        return _shm.SealedMemfd((), "loaderx-append", fill=fill)

    ready = [make(0)]
    try:
        for i in range(len(pieces)):
            m = ready.pop()

            def work(i=i):
                if i + 1 < len(pieces):
                    ready.append(make(i + 1))
                elif during is not None:
                    during()
            with m:
                lengths = _wire.u64s(np.asarray(pieces[i][1], np.uint64))
                ds._h.request("append", {"offset": 0, "dtype": ds._h.schema["dtype"], "ndim": 1,
                                         "lengths": lengths, **(at or {})}, fds=(m.fd,),
                              during=work)
            if after is not None:
                after(i)
    finally:
        for m in ready:
            m.close()


def _per_request(ds):
    """Records in one APPEND: as many sizes or lengths as a frame holds."""
    return max(1, min(32768, (ds._h.conn.frame_max - 1024) // 8))


def _append_flat(ds, values, offsets, during=None, at=None):
    """Appends the 1-D records values[offsets[i]:offsets[i+1]] to ragged store ds,
    without a Python step per record: the shape headers are woven into the values
    by one masked numpy pass, and the bytes go in one sealed memfd per request.
    While the daemon writes one request's records, the next request's bytes are
    woven, and ``during()`` (the caller's next read) runs during the last one.
    ``at``: more APPEND fields (the level)."""
    item = values.dtype.itemsize
    n = len(offsets) - 1
    if n <= 0:
        if during is not None:
            during()
        return
    lens = np.diff(offsets).astype(np.uint64)
    per = _per_request(ds)
    if _has_lengths(ds):
        # the values as they are, the headers made by the daemon: no pass here
        # but the copy into the memfd
        pieces = []
        for s in range(0, n, per):
            e = min(n, s + per)
            part = values[int(offsets[s]):int(offsets[e])]
            pieces.append((lambda fd, part=part: _shm._write_all(fd, [part]), lens[s:e]))
        _append_pieces(ds, pieces, during, at=at)
        return

    def weave(s):
        e = min(n, s + per)
        lo, hi = int(offsets[s]), int(offsets[e])
        part = np.ascontiguousarray(values[lo:hi])
        hdr = np.empty((e - s, 2), np.uint64)
        hdr[:, 0] = 1
        hdr[:, 1] = lens[s:e]
        sizes = (16 + lens[s:e] * item).astype(np.uint64)
        if item in (1, 2, 4, 8):
            # the output in words of the item: each record's header (16 bytes)
            # then its values; a mask puts the values in one pass (np.insert
            # took five times as long here)
            words, k = 16 // item, e - s
            wt = np.dtype(f"<u{item}")
            buf = np.empty(len(part) + words * k, wt)
            at = (np.asarray(offsets[s:e], np.int64) - lo) + words * np.arange(k)
            hp = (at[:, None] + np.arange(words)).reshape(-1)
            mask = np.ones(len(buf), bool)
            mask[hp] = False
            buf[mask] = part.view(wt)
            buf[hp] = hdr.view(wt).reshape(-1)
        else:
            buf = np.concatenate([x for j in range(e - s) for x in (
                hdr[j].view(np.uint8), part[int(offsets[s + j]) - lo:
                                            int(offsets[s + j + 1]) - lo].view(np.uint8))])
        return buf, sizes

    starts = list(range(0, n, per))
    ready = [weave(0)]
    for i in range(len(starts)):
        buf, sizes = ready.pop()

        def work(i=i):
            if i + 1 < len(starts):
                ready.append(weave(starts[i + 1]))
            elif during is not None:
                during()
        with _shm.SealedMemfd([buf], "loaderx-append") as m:
            ds._h.request("append", {"offset": 0, "dtype": ds._h.schema["dtype"], "ndim": 1,
                                     "sizes": _wire.u64s(sizes), **(at or {})}, fds=(m.fd,),
                          during=work)


class _Writer:
    """One converter's output: the store made at its first chunk from what the
    chunk's Arrow type says, then each chunk appended (all inside `conversion`)."""

    def __init__(self, conv, codec, skip_empty, what, at):
        self.conv = conv
        self.codec = codec
        self.at = at                # APPEND fields: the level
        self.skip_empty = skip_empty
        self.what = what
        self.ds = None
        self.kind = None            # "ragged", "bytes", "dense"
        self.dtype = None
        self.item_shape = None
        self.rows = 0               # rows seen
        self.records = 0            # records written
        self.skipped = 0

    def _open(self, kind, dtype, item_shape=()):
        from .dataset import DenseDataset, RaggedDataset
        if self.ds is None:
            self.kind, self.dtype, self.item_shape = kind, np.dtype(dtype), tuple(item_shape)
            if kind == "dense":
                self.ds = DenseDataset(self.conv.path, dtype=self.dtype,
                                       item_shape=self.item_shape, codec=self.codec)
            else:
                self.ds = RaggedDataset(self.conv.path, dtype=self.dtype, ndim=1, codec=self.codec)
            self.conv.add(self.ds)
            return
        if (kind, np.dtype(dtype), tuple(item_shape)) != (self.kind, self.dtype,
                                                           self.item_shape):
            raise ZrecordValueError(
                f"{self.what}: row {self.rows}: the column is {kind} {np.dtype(dtype)} "
                f"{tuple(item_shape)} here, {self.kind} {self.dtype} {self.item_shape} before",
                name="ZR_E_SCHEMA")

    def _drop_empty(self, values, offsets):
        lens = np.diff(offsets)
        empty = np.flatnonzero(lens == 0)
        if len(empty) == 0:
            return values, offsets
        if not self.skip_empty:
            raise ZrecordValueError(
                f"{self.what}: row {self.rows + int(empty[0])} is empty: a store holds no "
                "empty record; pass skip_empty=True to leave such rows out",
                name="ZR_E_SCHEMA")
        self.skipped += len(empty)
        keep = lens != 0
        new = np.zeros(int(keep.sum()) + 1, np.int64)
        np.cumsum(lens[keep], out=new[1:])
        return values, (offsets[:-1][keep], new)   # starts in values, new offsets

    def ragged(self, values, offsets, kind="ragged", during=None):
        """Rows values[offsets[i]:offsets[i+1]] (numpy); ``during()`` runs while the
        daemon writes the last of them."""
        self._open(kind, values.dtype)
        offsets = np.asarray(offsets, np.int64)
        values, off = self._drop_empty(values, offsets)
        if isinstance(off, tuple):
            starts, new = off
            lens = np.diff(new)
            idx = np.repeat(starts - new[:-1], lens) + np.arange(int(new[-1]))
            values, off = values[idx], new
        n = len(off) - 1
        if n:
            _append_flat(self.ds, values, off, during, at=self.at)
        elif during is not None:
            during()
        self.records += n
        self.rows += len(offsets) - 1

    def dense(self, array):
        self._open("dense", array.dtype, array.shape[1:])
        if len(array):
            self.ds.append(np.ascontiguousarray(array), **self.at)
        self.records += len(array)
        self.rows += len(array)


def _arrow_chunk(pa, w, arr, during=None):
    """Writes one Arrow array (a column's chunk) through writer w; ``during()``
    runs while the daemon writes its last records (or after them)."""
    t = arr.type
    types = pa.types
    if arr.null_count:
        nulls = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        raise ZrecordValueError(f"{w.what}: row {w.rows + int(nulls[0])} is null: a store has "
                                "no null record; fill or drop the nulls first",
                                name="ZR_E_SCHEMA")
    if types.is_list(t) or types.is_large_list(t):
        vt = t.value_type
        if not (types.is_integer(vt) or types.is_floating(vt)):
            raise ZrecordValueError(f"{w.what}: a list of {vt}: only lists of numbers become "
                                    "ragged stores", name="ZR_E_SCHEMA")
        offsets = arr.offsets.to_numpy().astype(np.int64)
        values = arr.values.to_numpy(zero_copy_only=False)
        if values.dtype.byteorder == ">":
            values = values.astype(values.dtype.newbyteorder("<"))
        base = offsets[0]
        w.ragged(values[base:offsets[-1]], offsets - base, during=during)
        return
    if types.is_fixed_size_list(t):
        vt = t.value_type
        if not (types.is_integer(vt) or types.is_floating(vt)):
            raise ZrecordValueError(f"{w.what}: a fixed-size list of {vt}: only numbers become "
                                    "dense stores", name="ZR_E_SCHEMA")
        values = arr.flatten().to_numpy(zero_copy_only=False)
        w.dense(values.reshape(len(arr), t.list_size))
        return
    if types.is_binary(t) or types.is_large_binary(t) or types.is_string(t) or \
            types.is_large_string(t):
        bufs = arr.buffers()
        odt = np.int64 if (types.is_large_binary(t) or types.is_large_string(t)) else np.int32
        offsets = np.frombuffer(bufs[1], odt, count=len(arr) + 1, offset=arr.offset *
                                np.dtype(odt).itemsize).astype(np.int64)
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        base = int(offsets[0])
        w.ragged(data[base:int(offsets[-1])], offsets - base, kind="bytes", during=during)
        return
    if types.is_integer(t) or types.is_floating(t) or types.is_boolean(t):
        w.dense(arr.to_numpy(zero_copy_only=False))
        return
    raise ZrecordValueError(f"{w.what}: a column of {t} has no store kind (lists of numbers, "
                            "fixed-size lists, binary, strings and numbers do)",
                            name="ZR_E_SCHEMA")


def _write_batches(pa, path, batches, column, codec, skip_empty, total_rows, desc, level):
    """Writes the column of an iterable of RecordBatches (or Tables) into a store."""
    at = _store.level_fields(level, codec)
    with conversion(path) as c:
        if not c.new:
            raise ZrecordValueError(f"{desc}: {c.target} exists; these converters make a new "
                                    "store (remove it, or write elsewhere)",
                                    name="ZR_E_EXISTS")
        w = _Writer(c, codec, skip_empty, desc, at)
        bar = _bar(total_rows, os.path.basename(os.fspath(path)), "rows")
        # the next batch is read while the daemon writes the last records of
        # this one (a ragged column; other kinds read it after)
        it = iter(batches)
        ahead = []

        def read_ahead():
            if not ahead:
                ahead.append(next(it, None))
        try:
            while True:
                b = ahead.pop() if ahead else next(it, None)
                if b is None:
                    break
                names = b.schema.names
                if column not in names:
                    raise ZrecordValueError(f"{desc}: no column {column!r} (the columns: "
                                            f"{', '.join(names)})")
                col = b.column(names.index(column))
                arrs = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
                for k, arr in enumerate(arrs):
                    _arrow_chunk(pa, w, arr, read_ahead if k == len(arrs) - 1 else None)
                    bar.update(len(arr))
        finally:
            bar.close()
        if w.ds is None:
            raise ZrecordValueError(f"{desc}: no row to write: a store holds at least one "
                                    "record")
    return w.records


def from_parquet(dst, paths, column, codec="raw", skip_empty=False, level=None):
    """Writes column ``column`` of Parquet file(s) ``paths`` (a path or a list, read
    in order, row group by row group) into a new store at ``dst``; returns the
    number of records. ``codec``: the store's (``'raw'``, the default, is what a
    packed loader reads fastest; ``'zstd'``). ``level``: a compressed store's zstd
    level, 1 to 19 (None: the codec's default; docs/DATASETS.md, "Levels"), as
    every converter here takes it. See the module's doc for the types."""
    pa = _pyarrow()
    import pyarrow.parquet as pq
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    files = [pq.ParquetFile(p) for p in paths]
    total = sum(f.metadata.num_rows for f in files)

    def batches():
        for f in files:
            yield from f.iter_batches(batch_size=ARROW_BATCH_ROWS, columns=[column])

    try:
        return _write_batches(pa, dst, batches(), column, codec, skip_empty, total,
                              "from_parquet", level)
    finally:
        for f in files:
            f.close()


def from_arrow(dst, table_or_batches, column, codec="raw", skip_empty=False, level=None):
    """Writes column ``column`` of a pyarrow Table, RecordBatch, RecordBatchReader
    or iterable of record batches into a new store at ``dst``; returns the number
    of records. A Table's size is known (a progress bar); a stream's is not."""
    pa = _pyarrow()
    src = table_or_batches
    total = None
    if isinstance(src, pa.Table):
        total = src.num_rows
        src = src.select([column]).to_batches(max_chunksize=ARROW_BATCH_ROWS) \
            if column in src.schema.names else [src]
    elif isinstance(src, pa.RecordBatch):
        total = src.num_rows
        src = [src]
    return _write_batches(pa, dst, src, column, codec, skip_empty, total, "from_arrow", level)


def from_hf(dst, dataset, column, codec="raw", skip_empty=False, level=None):
    """Writes column ``column`` of a Hugging Face ``datasets.Dataset`` into a new
    store at ``dst``, through its Arrow table (no Python object per row); rows in
    the dataset's order (a ``select`` or ``shuffle`` taken into account)."""
    pa = _pyarrow()
    if not hasattr(dataset, "with_format") or not hasattr(dataset, "num_rows"):
        raise ZrecordTypeError(f"from_hf takes a datasets.Dataset, not {type(dataset).__name__} "
                               "(a DatasetDict: pick a split, e.g. ds['train'])")
    if getattr(dataset, "_indices", None) is None and hasattr(dataset, "data") and \
            hasattr(dataset.data, "table"):
        return from_arrow(dst, dataset.data.table, column, codec, skip_empty, level)
    batches = dataset.with_format("arrow").iter(batch_size=ARROW_BATCH_ROWS)
    return _write_batches(pa, dst, batches, column, codec, skip_empty, dataset.num_rows,
                          "from_hf", level)


# ---------------------------------------------------------------- WebDataset

def from_webdataset(dst, tars, key, codec="raw", level=None):
    """Writes the members with extension ``key`` (``'txt'``, ``'json'``, ``'cls'``:
    what follows a sample's name, without the dot) of WebDataset tar file(s)
    ``tars`` into a new byte store at ``dst``, one record per sample that has one,
    in the tars' order; returns the number of records. Read as a stream (one
    member in memory at a time); a sample without that member is skipped, an
    empty member is an error. ``level``: as :func:`from_parquet`."""
    at = _store.level_fields(level, codec)
    if isinstance(tars, (str, os.PathLike)):
        tars = [tars]
    tars = [os.fspath(t) for t in tars]
    key = key.lstrip(".")
    total = sum(os.path.getsize(t) for t in tars)
    from .dataset import RaggedDataset
    count = 0
    with conversion(dst) as c:
        if not c.new:
            raise ZrecordValueError(f"from_webdataset: {c.target} exists; this converter makes "
                                    "a new store", name="ZR_E_EXISTS")
        ds = RaggedDataset(c.path, dtype=np.uint8, ndim=1, codec=codec)
        c.add(ds)
        bar = _bar(total, os.path.basename(os.fspath(dst)), "B")
        recs, nbytes = [], 0
        try:
            for t in tars:
                done = 0
                with open(t, "rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as tf:
                    for m in tf:
                        pos = raw.tell()
                        bar.update(pos - done)
                        done = pos
                        if not m.isfile():
                            continue
                        base = os.path.basename(m.name)
                        dot = base.find(".")
                        if dot < 0 or base[dot + 1:] != key:
                            continue
                        data = tf.extractfile(m).read()
                        if not data:
                            raise ZrecordValueError(f"from_webdataset: {t}: {m.name} is empty: "
                                                    "a store holds no empty record",
                                                    name="ZR_E_SCHEMA")
                        recs.append(np.frombuffer(data, np.uint8))
                        nbytes += len(data)
                        if nbytes >= CHUNK_BYTES:
                            ds.append(recs, **at)
                            count += len(recs)
                            recs, nbytes = [], 0
            if recs:
                ds.append(recs, **at)
                count += len(recs)
        finally:
            bar.close()
        if count == 0:
            raise ZrecordValueError(f"from_webdataset: no member with extension {key!r} in "
                                    f"{', '.join(tars)}")
    return count


# ---------------------------------------------------------------- Megatron-LM

def read_megatron_index(path):
    """The ``.idx`` of a Megatron-LM indexed dataset: (dtype, sequence lengths,
    pointers, document indices), each checked against the file's size."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(len(MEGATRON_HEADER) + 8 + 1 + 8 + 8)
    if len(head) < len(MEGATRON_HEADER) + 25 or not head.startswith(MEGATRON_HEADER):
        raise ZrecordValueError(f"{path}: not a Megatron-LM index (no MMIDIDX header)",
                                name="ZR_E_BAD_MAGIC")
    at = len(MEGATRON_HEADER)
    version, code, nseq, ndoc = struct.unpack_from("<QBQQ", head, at)
    if version != MEGATRON_VERSION:
        raise ZrecordValueError(f"{path}: index version {version}, this reads {MEGATRON_VERSION}",
                                name="ZR_E_BAD_VERSION")
    if code not in MEGATRON_DTYPES:
        raise ZrecordValueError(f"{path}: dtype code {code} is none of Megatron-LM's",
                                name="ZR_E_SCHEMA")
    at += 25
    need = at + 4 * nseq + 8 * nseq + 8 * ndoc
    if need > size:
        raise ZrecordValueError(f"{path}: {nseq} sequences and {ndoc} documents need {need} "
                                f"bytes, the file has {size}", name="ZR_E_CORRUPT")
    if size not in (need, need + nseq):
        raise ZrecordValueError(f"{path}: {size - need} bytes past the document indices",
                                name="ZR_E_CORRUPT")
    if size == need + nseq and nseq:
        raise ZrecordValueError(f"{path}: a multimodal index (sequence modes) is not "
                                "converted", name="ZR_E_SCHEMA")
    mm = np.memmap(path, np.uint8, "r")
    lens = mm[at:at + 4 * nseq].view("<i4")
    ptrs = mm[at + 4 * nseq:at + 12 * nseq].view("<i8")
    docs = mm[at + 12 * nseq:need].view("<i8")
    return np.dtype(MEGATRON_DTYPES[code]), lens, ptrs, docs


def _copy_range(dst_fd, src_fd, offset, count, what):
    """Copies bytes [offset, offset + count) of file src_fd to the end of dst_fd
    (a memfd): by the kernel (sendfile), without a buffer in this process."""
    end = offset + count
    while offset < end:
        try:
            got = os.sendfile(dst_fd, src_fd, offset, min(end - offset, 1 << 30))
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            got = os.write(dst_fd, os.pread(src_fd, min(end - offset, 8 << 20), offset))
        if got == 0:
            raise ZrecordValueError(f"{what}: short read at {offset}", name="ZR_E_CORRUPT")
        offset += got


def from_megatron(dst, prefix, codec="raw", level=None):
    """Writes Megatron-LM's indexed dataset ``prefix.bin`` / ``prefix.idx`` into a
    new ragged store at ``dst``, one record per sequence, in order; returns the
    number of records. The ``.bin`` is read front to back in large pieces. The
    document boundaries, when they are not one document per sequence, are kept in
    the store's schema (``megatron_document_indices``) so that :func:`to_megatron`
    writes the pair back bit for bit. Zero-length sequences are an error (a store
    holds no empty record). ``level``: as :func:`from_parquet`."""
    at = _store.level_fields(level, codec)
    prefix = os.fspath(prefix)
    dt, lens, ptrs, docs = read_megatron_index(prefix + ".idx")
    n = len(lens)
    binsize = os.path.getsize(prefix + ".bin")
    if n == 0:
        raise ZrecordValueError(f"{prefix}.idx holds no sequence")
    lens64 = lens.astype(np.int64)
    if (lens64 <= 0).any():
        j = int(np.flatnonzero(lens64 <= 0)[0])
        raise ZrecordValueError(f"{prefix}.idx: sequence {j} has {int(lens64[j])} tokens: a "
                                "store holds no empty record", name="ZR_E_SCHEMA")
    ends = ptrs.astype(np.int64) + lens64 * dt.itemsize
    if (ptrs < 0).any() or int(ends.max()) > binsize:
        raise ZrecordValueError(f"{prefix}.idx points past the end of {prefix}.bin "
                                f"({binsize} bytes)", name="ZR_E_CORRUPT")
    trivial = len(docs) == n + 1 and np.array_equal(docs, np.arange(n + 1))
    schema = None
    if not trivial:
        if len(docs) > MEGATRON_DOC_INDEX_MAX:
            raise ZrecordValueError(f"{prefix}.idx: {len(docs)} document indices that group "
                                    "several sequences: too many to keep beside the store",
                                    name="ZR_E_LIMIT")
        schema = {"megatron_document_indices": [int(x) for x in docs]}
    contiguous = n == 1 or bool((ptrs[1:] == ends[:-1]).all())
    from .dataset import RaggedDataset
    bar = _bar(int(lens64.sum()) * dt.itemsize, os.path.basename(os.fspath(dst)), "B")
    with conversion(dst) as c:
        if not c.new:
            raise ZrecordValueError(f"from_megatron: {c.target} exists; this converter makes a "
                                    "new store", name="ZR_E_EXISTS")
        ds = RaggedDataset(c.path, dtype=dt, ndim=1, codec=codec, schema=schema)
        c.add(ds)
        try:
            with open(prefix + ".bin", "rb", buffering=0) as f:
                if contiguous and _has_lengths(ds) and (sys.byteorder == "little" or
                                                        dt.itemsize == 1):
                    # the .bin's bytes straight into each APPEND's memfd (the
                    # daemon makes the records' headers): no pass over them here
                    per = _per_request(ds)
                    pieces, sizes, s = [], [], 0
                    while s < n:
                        lo = int(ptrs[s])
                        e = int(np.searchsorted(ends, lo + CHUNK_BYTES, side="right"))
                        e = min(max(e, s + 1), s + per)
                        hi = int(ends[e - 1])
                        pieces.append((lambda fd, lo=lo, hi=hi: _copy_range(
                            fd, f.fileno(), lo, hi - lo, prefix + ".bin"), lens64[s:e]))
                        sizes.append(hi - lo)
                        s = e
                    _append_pieces(ds, pieces, after=lambda i: bar.update(sizes[i]), at=at)
                    return n

                def read(s):
                    """Sequences [s, e): about CHUNK_BYTES, at least one; (e, values,
                    offsets)."""
                    lo = int(ptrs[s])
                    e = int(np.searchsorted(ends, lo + CHUNK_BYTES, side="right"))
                    e = max(e, s + 1) if contiguous else min(n, s + max(1, CHUNK_BYTES //
                                                                      max(1, dt.itemsize * int(
                                                                          lens64[s]))))
                    if contiguous:
                        hi = int(ends[e - 1])
                        buf = np.empty(hi - lo, np.uint8)
                        f.seek(lo)
                        got = f.readinto(buf)
                        if got != hi - lo:
                            raise ZrecordValueError(f"{prefix}.bin: short read at {lo}",
                                                    name="ZR_E_CORRUPT")
                        values = buf.view(dt)
                    else:
                        parts = []
                        for j in range(s, e):
                            f.seek(int(ptrs[j]))
                            parts.append(np.frombuffer(f.read(int(lens64[j]) * dt.itemsize), dt))
                        values = np.concatenate(parts)
                    off = np.zeros(e - s + 1, np.int64)
                    np.cumsum(lens64[s:e], out=off[1:])
                    return e, values, off

                # the next chunk is read from the .bin while the daemon writes this one
                ahead = [read(0)] if n else []
                while ahead:
                    e, values, off = ahead.pop()

                    def read_ahead(e=e):
                        if e < n:
                            ahead.append(read(e))
                    _append_flat(ds, values.astype(dt.newbyteorder("<"), copy=False), off,
                                 read_ahead, at=at)
                    bar.update(int(off[-1]) * dt.itemsize)
        finally:
            bar.close()
    return n


def to_megatron(src, prefix):
    """Writes the ragged store at ``src`` (one-dimensional records of a dtype
    Megatron-LM knows) as ``prefix.bin`` / ``prefix.idx``, one sequence per record,
    in order, as Megatron-LM's own builder writes them (a store made by
    :func:`from_megatron` gives back its pair bit for bit). Both files are written
    beside their names and renamed at the end, the ``.idx`` last (the old ``.idx``
    removed first): an interruption leaves the old pair, the new one, or a
    ``.bin`` without an index, never a ``.bin`` under another's index. Returns
    the number of sequences."""
    from .dataset import RaggedDataset
    prefix = os.fspath(prefix)
    ds = RaggedDataset(src)
    dt = np.dtype(ds.dtype)
    if dt.newbyteorder("=") not in _MEGATRON_CODES and dt not in _MEGATRON_CODES:
        raise ZrecordValueError(f"to_megatron: dtype {dt} is none of Megatron-LM's "
                                f"({', '.join(str(np.dtype(v)) for v in MEGATRON_DTYPES.values())})",
                                name="ZR_E_SCHEMA")
    code = _MEGATRON_CODES[np.dtype(dt.str.replace("<", "=").replace("|", "="))]
    n = len(ds)
    from .dataset import _read_schema_file
    docs = (_read_schema_file(os.fspath(src)) or {}).get("megatron_document_indices")
    tag = f".partial-{os.getpid()}"
    tmp_bin, tmp_idx = prefix + ".bin" + tag, prefix + ".idx" + tag
    lens = np.empty(n, np.int32)
    done = False
    try:
        with open(tmp_bin, "wb") as fb:
            per = max(1, min(4096, CHUNK_BYTES // max(1, 4096)))
            bar = _bar(None, os.path.basename(prefix), "rec")
            try:
                for s in range(0, n, per):
                    recs = ds[s:min(n, s + per)]
                    for j, r in enumerate(recs):
                        if r.ndim != 1:
                            raise ZrecordValueError(f"to_megatron: record {s + j} has shape "
                                                    f"{r.shape}: sequences are one dimension",
                                                    name="ZR_E_SCHEMA")
                        if len(r) > np.iinfo(np.int32).max:
                            raise ZrecordValueError(f"to_megatron: record {s + j} is longer "
                                                    "than an int32 length", name="ZR_E_LIMIT")
                        lens[s + j] = len(r)
                        fb.write(np.ascontiguousarray(r, dtype=dt.newbyteorder("<")).data)
                    bar.update(len(recs))
            finally:
                bar.close()
            fb.flush()
            os.fsync(fb.fileno())
        ptrs = np.zeros(n, np.int64)
        if n > 1:
            np.cumsum(lens[:-1].astype(np.int64) * dt.itemsize, out=ptrs[1:])
        doc = np.asarray(docs if docs is not None else np.arange(n + 1), dtype="<i8")
        with open(tmp_idx, "wb") as fi:
            fi.write(MEGATRON_HEADER)
            fi.write(struct.pack("<Q", MEGATRON_VERSION))
            fi.write(struct.pack("<B", code))
            fi.write(struct.pack("<Q", n))
            fi.write(struct.pack("<Q", len(doc)))
            fi.write(lens.astype("<i4").tobytes(order="C"))
            fi.write(ptrs.astype("<i8").tobytes(order="C"))
            fi.write(doc.tobytes(order="C"))
            fi.flush()
            os.fsync(fi.fileno())
        # the commit: no .idx while the .bin changes, so a reader finds the old
        # pair, the new one, or no index; never a new .bin under an old .idx
        # (Ctrl-C held for the three steps)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            try:
                os.unlink(prefix + ".idx")
            except FileNotFoundError:
                pass
            os.replace(tmp_bin, prefix + ".bin")
            os.replace(tmp_idx, prefix + ".idx")
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        d = os.open(os.path.dirname(os.path.abspath(prefix)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(d)
        finally:
            os.close(d)
        done = True
    finally:
        if not done:
            for p in (tmp_bin, tmp_idx):
                try:
                    os.unlink(p)
                except OSError:
                    pass
    return n

