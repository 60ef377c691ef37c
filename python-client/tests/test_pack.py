"""Packed token sequences (issue 34): the daemon's rows against a reference in
numpy written from proto/SAMPLERS.md ("Packed token sequences"), resume,
ranks, the index kept on disk, refusals."""

import os
import sys

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx.dataloader import DataLoader
from loaderx.dataset import RaggedDataset
from loaderx.utils import from_iterator

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "proto", "vectors"))
import sampler as S  # noqa: E402  the spec's numpy reference

pytestmark = pytest.mark.usefixtures("loader_feature")


def _docs(n, seed=1, hi=40, dtype=np.int32):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, hi, size=n)
    return [(np.arange(k, dtype=np.int64) + 1000 * i).astype(dtype) for i, k in enumerate(lens)]


def _order(mode, n, seed, c):
    if mode == "sequential":
        return np.arange(n)
    f = S.cyclic if mode == "cyclic" else S.cyclic_lx157
    return np.asarray(f(n, n, seed, c, 0, 1), dtype=np.int64)


def _stream(docs, mode, seed, eos):
    """The endless stream of (token, doc, start-of-doc offset) of the cycles."""
    c = 0
    while True:
        for q in _order(mode, len(docs), seed, c):
            d = list(docs[q]) + ([eos] if eos is not None else [])
            for k, t in enumerate(d):
                yield t, q, k
        c += 1


def ref_concat(docs, mode, seed, L, rows, eos=None):
    """rows [0, rows): tokens, segment ids, positions."""
    it = _stream(docs, mode, seed, eos)
    toks = np.zeros((rows, L), np.int64)
    segs = np.zeros((rows, L), np.int32)
    pos = np.zeros((rows, L), np.int32)
    for r in range(rows):
        prev, seg, start = None, 0, 0
        for j in range(L):
            t, q, k = next(it)
            if (q, k - 1) != prev:          # a new piece: another document, or a new cycle
                seg += 1
                start = j
            prev = (q, k)
            toks[r, j], segs[r, j], pos[r, j] = t, seg, j - start
    return toks, segs, pos


def ref_best_fit(docs, mode, seed, L, window, cycles, eos=None, pad=0):
    """The rows of cycles [0, cycles), as lists of (tokens, segs, pos)."""
    out = []
    for c in range(cycles):
        order = _order(mode, len(docs), seed, c)
        for w0 in range(0, len(order), window):
            items, rows = [], []
            for q in order[w0:w0 + window]:
                d = list(docs[q]) + ([eos] if eos is not None else [])
                full = len(d) // L
                for f in range(full):
                    rows.append([d[f * L:(f + 1) * L]])
                if len(d) % L:
                    items.append(d[full * L:])
            # longest first, stable; each into the open row with the least room
            # that holds it, among equals the one placed into last
            bins = []                  # [free, pieces, last placement]
            for tick, it_ in enumerate(sorted(items, key=lambda x: -len(x))):
                best = None
                for b in bins:
                    if b[0] >= len(it_) and (best is None or (b[0], -b[2]) < (best[0], -best[2])):
                        best = b
                if best is None:
                    best = [L, [], 0]
                    bins.append(best)
                best[0] -= len(it_)
                best[1].append(it_)
                best[2] = tick
            rows += [b[1] for b in bins]
            for pieces in rows:
                t = np.full(L, pad, np.int64)
                s = np.zeros(L, np.int32)
                p = np.zeros(L, np.int32)
                j = 0
                for k, pc in enumerate(pieces):
                    t[j:j + len(pc)] = pc
                    s[j:j + len(pc)] = k + 1
                    p[j:j + len(pc)] = np.arange(len(pc))
                    j += len(pc)
                out.append((t, s, p))
    return out


@pytest.fixture(params=["raw", "zstd"])
def corpus(workdir, request):
    """Raw records are read piece by piece; compressed ones decoded whole."""
    docs = _docs(57)
    from_iterator("docs", docs, np.int32, codec=request.param)
    return docs


def _batches(loader, k):
    out = []
    for _ in range(k):
        b = next(loader)
        out.append({key: np.array(v) for key, v in b.items()})
    return out


@pytest.mark.parametrize("mode", ["sequential", "cyclic", "cyclic-lx157"])
def test_concat_is_the_reference(corpus, mode):
    B, L, steps = 3, 16, 40          # 40 × 3 × 16 tokens: several cycles
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=B, sampler=mode, seed=5,
                    pack={"tokens": L}, num_workers=0) as dl:
        got = _batches(dl, steps)
    toks, segs, pos = ref_concat(corpus, mode, 5, L, B * steps)
    for s, b in enumerate(got):
        assert b["tokens"].dtype == np.int32 and b["tokens"].shape == (B, L)
        np.testing.assert_array_equal(b["tokens"], toks[s * B:(s + 1) * B])
        np.testing.assert_array_equal(b["tokens_segment_ids"], segs[s * B:(s + 1) * B])
        np.testing.assert_array_equal(b["tokens_positions"], pos[s * B:(s + 1) * B])


def test_concat_from_a_store_out_of_the_page_cache(workdir):
    """A store whose pages are not in the page cache: the fills take major
    faults and read the next steps' pieces ahead (docs/TOKENS.md, "Reading
    ahead"); the rows are the reference's all the same."""
    import glob
    docs = _docs(3000, seed=3, hi=900)
    from_iterator("cold", docs, np.int32, codec="raw")
    os.sync()
    for path in glob.glob(os.path.join("cold", "*.chunk")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    B, L, steps = 4, 256, 30
    with DataLoader({"tokens": RaggedDataset("cold")}, batch_size=B, sampler="cyclic", seed=9,
                    pack={"tokens": L}, num_workers=0) as dl:
        got = _batches(dl, steps)
    toks, segs, pos = ref_concat(docs, "cyclic", 9, L, B * steps)
    for s, b in enumerate(got):
        np.testing.assert_array_equal(b["tokens"], toks[s * B:(s + 1) * B])
        np.testing.assert_array_equal(b["tokens_segment_ids"], segs[s * B:(s + 1) * B])
        np.testing.assert_array_equal(b["tokens_positions"], pos[s * B:(s + 1) * B])


def test_concat_with_eos(corpus):
    B, L = 2, 24
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=B, sampler="cyclic", seed=9,
                    pack={"tokens": L}, eos_id=7, num_workers=0) as dl:
        got = _batches(dl, 30)
    toks, segs, pos = ref_concat(corpus, "cyclic", 9, L, B * 30, eos=7)
    np.testing.assert_array_equal(np.concatenate([b["tokens"] for b in got]), toks)
    np.testing.assert_array_equal(np.concatenate([b["tokens_segment_ids"] for b in got]), segs)
    np.testing.assert_array_equal(np.concatenate([b["tokens_positions"] for b in got]), pos)


@pytest.mark.parametrize("mode", ["sequential", "cyclic", "cyclic-lx157"])
@pytest.mark.parametrize("eos", [None, 3])
def test_concat_of_short_documents(workdir, mode, eos):
    """Hundreds of documents a row: a fill finds each row's first document
    from where the row before it ended, and draws the documents of its rows'
    pieces in runs of rising positions (more than 256 of them, and across the
    end of a cycle within a row) once the pack's mutex is released."""
    docs = _docs(301, seed=4, hi=4)
    from_iterator("short", docs, np.int32, codec="raw")
    B, L, steps = 8, 128, 6          # a fill: about 500 documents, two cycles
    with DataLoader({"tokens": RaggedDataset("short")}, batch_size=B, sampler=mode, seed=21,
                    pack={"tokens": L}, eos_id=eos, num_workers=0) as dl:
        got = _batches(dl, steps)
    toks, segs, pos = ref_concat(docs, mode, 21, L, B * steps, eos=eos)
    np.testing.assert_array_equal(np.concatenate([b["tokens"] for b in got]), toks)
    np.testing.assert_array_equal(np.concatenate([b["tokens_segment_ids"] for b in got]), segs)
    np.testing.assert_array_equal(np.concatenate([b["tokens_positions"] for b in got]), pos)


@pytest.mark.parametrize("mode,window", [("sequential", 1024), ("cyclic", 8),
                                         ("cyclic-lx157", 5)])
def test_best_fit_is_the_reference(corpus, mode, window):
    L = 32
    ref = ref_best_fit(corpus, mode, 3, L, window, 3, eos=1, pad=99)
    B = 4
    steps = len(ref) // B
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=B, sampler=mode, seed=3,
                    pack={"tokens": L}, pack_mode="best_fit", pack_window=window, eos_id=1,
                    pad_id=99, num_workers=0) as dl:
        got = _batches(dl, steps)
    for s, b in enumerate(got):
        for j in range(B):
            t, sg, p = ref[s * B + j]
            np.testing.assert_array_equal(b["tokens"][j], t, err_msg=f"step {s} row {j}")
            np.testing.assert_array_equal(b["tokens_segment_ids"][j], sg)
            np.testing.assert_array_equal(b["tokens_positions"][j], p)


def test_resume_anywhere_in_a_large_cycle(workdir):
    """A cycle of 20,000 documents: its index is built in several shards of the
    pool (4,096 positions a piece), each shard's running sums moved by the
    shards before it. A loader started at a step anywhere in the cycle finds
    its rows' first documents in that index: its batches are the reference's
    rows there (a wrong sum in any shard moves every row after it)."""
    docs = _docs(20000, seed=5, hi=7)
    from_iterator("many", docs, np.int32, codec="raw")
    B, L = 4, 16
    steps = sum(len(d) for d in docs) // (B * L)
    at = [1, steps // 5, steps // 3, steps // 2, 2 * steps // 3, 4 * steps // 5, steps - 1]
    toks, segs, pos = ref_concat(docs, "cyclic", 21, L, B * (steps + 1))
    for s in at:
        with DataLoader({"tokens": RaggedDataset("many")}, batch_size=B, sampler="cyclic",
                        seed=21, start_step=s, pack={"tokens": L}, num_workers=0) as dl:
            b = _batches(dl, 1)[0]
        np.testing.assert_array_equal(b["tokens"], toks[s * B:(s + 1) * B], err_msg=f"step {s}")
        np.testing.assert_array_equal(b["tokens_segment_ids"], segs[s * B:(s + 1) * B])
        np.testing.assert_array_equal(b["tokens_positions"], pos[s * B:(s + 1) * B])


@pytest.mark.parametrize("pack_mode", ["concat", "best_fit"])
def test_resume_ranks_and_world_sizes(corpus, pack_mode):
    kw = dict(sampler="cyclic", seed=11, pack={"tokens": 8}, pack_mode=pack_mode,
              num_workers=0)
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=4, **kw) as dl:
        whole = _batches(dl, 30)
        state = None
    # resume at step 17 from a state_dict
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=4, **kw) as dl:
        _batches(dl, 17)
        state = dl.state_dict()
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=4, **kw) as dl:
        dl.load_state_dict(state)
        for s, b in zip(range(17, 30), _batches(dl, 13)):
            np.testing.assert_array_equal(b["tokens"], whole[s]["tokens"])
            np.testing.assert_array_equal(b["tokens_segment_ids"], whole[s]["tokens_segment_ids"])
    # two ranks of batch 2 split each global batch of 4, disjoint and whole
    for rank in range(2):
        with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, rank=rank,
                        world_size=2, **kw) as dl:
            for s, b in enumerate(_batches(dl, 30)):
                np.testing.assert_array_equal(b["tokens"],
                                              whole[s]["tokens"][2 * rank:2 * rank + 2])


def _index_metrics():
    """The daemon's zrecord_token_index_* figures (`zrecord metrics`), by their suffix."""
    import subprocess
    from conftest import tool_binary
    t = tool_binary()
    if not t:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    r = subprocess.run([t, "--socket", os.environ["ZRECORD_SOCKET"], "metrics"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    out = {}
    for line in text.splitlines():
        if line.startswith("zrecord_token_index_"):
            name, v = line.split()
            out[name[len("zrecord_token_index_"):]] = float(v)
    return out


@pytest.mark.parametrize("pack_mode", ["concat", "best_fit"])
def test_index_kept_on_disk(own_daemon, tmp_path, pack_mode):
    """A second open loads the index the first built (the file is not written
    again); a damaged file is refused, removed and built again, same rows."""
    index_dir = tmp_path / "idx"
    own_daemon(f"--token-index-dir={index_dir}")
    from_iterator("docs", _docs(57), np.int32, codec="raw")
    kw = dict(sampler="cyclic", seed=21, pack={"tokens": 8}, pack_mode=pack_mode,
              num_workers=0)
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, **kw) as dl:
        a = _batches(dl, 3)
    m0 = _index_metrics()
    assert m0["builds_total"] >= 1 and m0["build_seconds_total"] > 0 and m0["files"] >= 1
    files = sorted(f for f in os.listdir(index_dir) if f.endswith(".zti"))
    assert files, "no index file was written"
    assert oct(os.stat(index_dir).st_mode & 0o777) == "0o700"
    inodes = {f: os.stat(index_dir / f).st_ino for f in files}
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, **kw) as dl:
        b = _batches(dl, 3)
    assert {f: os.stat(index_dir / f).st_ino for f in files} == inodes, "an index was rebuilt"
    m1 = _index_metrics()
    assert m1["builds_total"] == m0["builds_total"] and m1["loads_total"] > m0["loads_total"]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["tokens"], y["tokens"])
    whole = {f: (index_dir / f).read_bytes() for f in files}
    for f in files:
        with open(index_dir / f, "r+b") as fh:
            fh.seek(136)
            v = fh.read(8)
            fh.seek(136)
            fh.write(bytes(x ^ 0x5A for x in v))
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, **kw) as dl:
        c = _batches(dl, 3)
    for x, y in zip(a, c):
        np.testing.assert_array_equal(x["tokens"], y["tokens"])
        np.testing.assert_array_equal(x["tokens_positions"], y["tokens_positions"])
    m2 = _index_metrics()   # waits for the files still being written
    assert {f: (index_dir / f).read_bytes() for f in files} == whole, \
        "a damaged index was not built again"
    assert m2["rejected_total"] >= 1 and m2["builds_total"] > m1["builds_total"]


def _daemon_on(index_dir, monkeypatch, sock_dir):
    """A daemon of this test's own (stopped by the test: SIGTERM or SIGKILL)
    with the index directory index_dir, this process connected to it."""
    from loaderx import _conn
    from conftest import start_daemon
    os.makedirs(sock_dir, exist_ok=True)
    proc, sock = start_daemon(str(sock_dir), f"--token-index-dir={index_dir}")
    if _conn._default is not None:
        _conn._default.close()
    _conn._default = None
    monkeypatch.setenv("ZRECORD_SOCKET", sock)
    return proc


@pytest.mark.parametrize("pack_mode", ["concat", "best_fit"])
@pytest.mark.parametrize("how", ["stop", "kill"])
def test_index_written_after_the_reply(own_daemon, tmp_path, monkeypatch, pack_mode, how):
    """docs/TOKENS.md, "when": an index's file is written after the open that
    built it answered. A daemon stopped after the first batch has written every
    file it built, whole (the next daemon loads them, no build); one killed then
    leaves each file whole or absent, and no partial file under any name (they
    are written unnamed and linked when whole)."""
    import signal
    from loaderx import _conn
    from conftest import restore_connection, stop_daemon
    own_daemon()                          # makes the store, on a daemon of its own
    from_iterator("docs", _docs(3000, hi=400), np.int32, codec="raw")
    index_dir = tmp_path / "idx"
    saved = _conn._default
    kw = dict(sampler="cyclic", seed=23, pack={"tokens": 64}, pack_mode=pack_mode,
              num_workers=0)
    procs = []
    try:
        procs.append(_daemon_on(index_dir, monkeypatch, tmp_path / "a"))
        with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=4, **kw) as dl:
            a = _batches(dl, 2)
        _conn._default.close()
        _conn._default = None
        if how == "stop":
            assert stop_daemon(procs[0]) == 0
        else:
            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
        procs.pop()
        names = sorted(os.listdir(index_dir))
        assert all(f.endswith(".zti") and not f.startswith(".") for f in names), names
        if how == "stop":
            kinds = {f[0] for f in names}
            assert kinds == ({"l", "c"} if pack_mode == "concat" else {"l", "c", "b"}), names
        whole = {f: (index_dir / f).read_bytes() for f in names}
        procs.append(_daemon_on(index_dir, monkeypatch, tmp_path / "b"))
        with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=4, **kw) as dl:
            b = _batches(dl, 2)
        m = _index_metrics()
        for x, y in zip(a, b):
            for k in x:
                np.testing.assert_array_equal(x[k], y[k])
        assert m["rejected_total"] == 0, m
        assert m["builds_total"] == len({"l", "c", "b"} if pack_mode == "best_fit"
                                        else {"l", "c"}) - len(names), (names, m)
        assert {f: (index_dir / f).read_bytes() for f in names} == whole
    finally:
        restore_connection(saved)
        for p in procs:
            assert stop_daemon(p) == 0


def _v1_checksum(payload):
    """The payload checksum of index files of version 1 (a word at a time)."""
    m = (1 << 64) - 1
    h = 0x9E3779B97F4A7C15 ^ len(payload)
    n8 = len(payload) // 8 * 8
    for w in np.frombuffer(payload[:n8], "<u8").tolist():
        h = ((h ^ w) * 0xFF51AFD7ED558CCD) & m
        h ^= h >> 32
    for c in payload[n8:]:
        h = ((h ^ c) * 0x100000001B3) & m
    return h ^ (h >> 29)


@pytest.mark.parametrize("pack_mode", ["concat", "best_fit"])
def test_index_of_another_version_is_built_again(own_daemon, tmp_path, pack_mode):
    """docs/TOKENS.md, "The index files": a file of version 1 (whole and with
    its own checksum) or of a later version is never read: it is removed and
    built again, the same rows served."""
    import struct
    index_dir = tmp_path / "idx"
    own_daemon(f"--token-index-dir={index_dir}")
    from_iterator("docs", _docs(57), np.int32, codec="raw")
    kw = dict(sampler="cyclic", seed=22, pack={"tokens": 8}, pack_mode=pack_mode,
              num_workers=0)
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, **kw) as dl:
        a = _batches(dl, 3)
    _index_metrics()    # counts the files: waits for those still being written
    files = sorted(f for f in os.listdir(index_dir) if f.endswith(".zti"))
    kinds = {f[0] for f in files}
    assert kinds == ({"l", "c"} if pack_mode == "concat" else {"l", "c", "b"}), files
    whole = {f: (index_dir / f).read_bytes() for f in files}
    for f, data in whole.items():
        assert data[:8] == b"ZRTOKIX\0" and struct.unpack_from("<I", data, 8)[0] == 2
    for version in (1, 3):
        for f, data in whole.items():
            old = bytearray(data)
            struct.pack_into("<I", old, 8, version)
            struct.pack_into("<Q", old, 120, _v1_checksum(bytes(old[128:])))
            (index_dir / f).write_bytes(bytes(old))
        m0 = _index_metrics()
        with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, **kw) as dl:
            b = _batches(dl, 3)
        m1 = _index_metrics()
        for x, y in zip(a, b):
            for k in x:
                np.testing.assert_array_equal(x[k], y[k])
        # the best-fit file is refused first and built from the concat one, refused
        # in turn, built from the length table, refused too
        assert m1["rejected_total"] - m0["rejected_total"] == len(files), (version, m0, m1)
        assert m1["builds_total"] - m0["builds_total"] == len(files)
        assert {f: (index_dir / f).read_bytes() for f in files} == whole, \
            f"a file of version {version} was not built again"


def test_refusals(workdir, corpus):
    from loaderx.utils import from_numpy
    from_numpy("dense", np.zeros((10, 4), np.int32))
    from loaderx.dataset import DenseDataset
    with pytest.raises(ZrecordError, match="not a RaggedDataset"):
        DataLoader({"x": DenseDataset("dense")}, batch_size=2, pack={"x": 8})
    with pytest.raises(ZrecordError, match="iid"):
        DataLoader({"t": RaggedDataset("docs")}, batch_size=2, sampler="iid", pack={"t": 8})
    from_iterator("floats", [np.zeros(3, np.float32)] * 4, np.float32)
    with pytest.raises(ZrecordError, match="integers"):
        DataLoader({"t": RaggedDataset("floats")}, batch_size=2, sampler="cyclic", pack={"t": 8})
    from_iterator("small", [np.zeros(3, np.int8)] * 4, np.int8)
    with pytest.raises(ZrecordError, match="eos_id 300 does not fit"):
        DataLoader({"t": RaggedDataset("small")}, batch_size=2, sampler="cyclic", pack={"t": 8},
                   eos_id=300)
    with pytest.raises(ZrecordError, match="pad_id"):
        DataLoader({"t": RaggedDataset("docs")}, batch_size=2, sampler="cyclic", pack={"t": 8},
                   pad_id=1)


def _docs_of_rows_concat(docs, mode, seed, L, rows, eos=None):
    """For each row of the concat reference, the set of documents with a piece in it."""
    it = _stream(docs, mode, seed, eos)
    return [{next(it)[1] for _ in range(L)} for _ in range(rows)]


def _docs_of_rows_best_fit(docs, mode, seed, L, window, cycles, eos=None):
    """The same for best fit: the reference packs documents whose every token
    (and end-of-document token) is the document's number."""
    extra = 1 if eos is not None else 0
    tagged = [np.full(len(d) + extra, q, np.int64) for q, d in enumerate(docs)]
    rows = ref_best_fit(tagged, mode, seed, L, window, cycles, pad=-1)
    return [set(t[s > 0].tolist()) for t, s, _ in rows]


def _want_hits(row_docs, q, B, W, start, stop):
    G = B * W
    return [(g // G, g % G // B, g % B) for g in range(start * G, stop * G) if q in row_docs[g]]


EOS = 999_999   # no document's token (theirs are 1000 × doc + k)


@pytest.mark.parametrize("pack_mode,mode", [("concat", "cyclic"), ("concat", "sequential"),
                                            ("best_fit", "cyclic-lx157"), ("best_fit", "cyclic")])
def test_steps_of(corpus, pack_mode, mode):
    """steps_of on a packed loader: the rows (step, rank, position) that hold a
    piece of a document, against the reference's rows, over several cycles,
    from a start past step 0, for two world sizes (a document spanning rows is
    a hit in each, its end-of-document token alone included); and against the
    rows the loader serves."""
    L, B, steps, window = 8, 3, 60, 5
    far = 6000      # past the cycles one request walks: answered in pieces
    kw = dict(sampler=mode, seed=7, pack={"tokens": L}, pack_mode=pack_mode, eos_id=EOS,
              num_workers=0)
    if pack_mode == "concat":
        row_docs = _docs_of_rows_concat(corpus, mode, 7, L, B * far, eos=EOS)
    else:
        kw["pack_window"] = window
        row_docs = _docs_of_rows_best_fit(corpus, mode, 7, L, window, 160, eos=EOS)
        assert len(row_docs) >= B * far
    for W in (1, 2):
        with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=B, rank=W - 1,
                        world_size=W, **kw) as dl:
            next(dl)
            seen = 0
            for q in range(len(corpus)):
                for start, stop in ((0, steps),) + (((11, steps - 3),) if q % 8 == 0 else ()):
                    got = dl.steps_of(q, start=start, stop=stop)
                    assert got == _want_hits(row_docs, q, B, W, start, stop), (q, W, start, stop)
                    seen += len(got)
            assert seen > len(corpus)
            if W == 1:
                ticks = []
                got = dl.steps_of(9, start=5, stop=far, progress=lambda d, t: ticks.append(d))
                assert got == _want_hits(row_docs, 9, B, W, 5, far)
                assert len(ticks) > 1 and ticks[-1] == far - 5, ticks
    # the loader's own rows: every row whose tokens are the document's is a
    # hit, and every other hit holds only the document's end-of-document token
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=B, **kw) as dl:
        batches = _batches(dl, 20)
        q = 17
        hits = set(dl.steps_of(q, stop=20))
    served = set()
    for s, b in enumerate(batches):
        for j in range(B):
            toks, segs = b["tokens"][j], b["tokens_segment_ids"][j]
            if np.any((toks // 1000 == q) & (toks != EOS) & (segs > 0)):
                served.add((s, 0, j))
    assert served and served <= hits
    for s, _, j in hits - served:
        toks, segs = batches[s]["tokens"][j], batches[s]["tokens_segment_ids"][j]
        assert any(np.array_equal(toks[segs == k], [EOS]) for k in range(1, segs.max() + 1))


def test_steps_of_mixture_by_tokens(workdir):
    """steps_of on a mixture of packed sources: the places (step, rank,
    position) whose row, row c of source k's own packed stream, holds a piece
    of document q of source k, against the loader's own __source__ and
    __index__ and the reference's rows; a long range answered in pieces."""
    docs = [_docs(40, seed=7), _docs(23, seed=8, hi=90), _docs(61, seed=9, hi=12)]
    modes = ["cyclic", "sequential", "cyclic-lx157"]
    for k, d in enumerate(docs):
        from_iterator(f"d{k}", d, np.int32, codec="raw")
    weights, B, L, seed, far = (5, 2, 3), 6, 16, 13, 4000
    srcs = [({"tokens": RaggedDataset(f"d{k}")}, weights[k], modes[k]) for k in range(3)]
    with DataLoader(srcs, batch_size=B, seed=seed, pack={"tokens": L}, eos_id=EOS,
                    with_sources=True, with_indices=True, num_workers=0) as dl:
        where = []
        for _ in range(far):
            b = next(dl)
            where.append((np.array(b["__source__"]), np.array(b["__index__"])))
        rows = [1 + max(int(c) for src, idx in where for k2, c in zip(src, idx) if k2 == k)
                for k in range(3)]
        row_docs = [_docs_of_rows_concat(docs[k], modes[k], int(S.key(seed, S.DOMAIN_SOURCE, k)),
                                         L, rows[k], eos=EOS) for k in range(3)]

        places = [{} for _ in range(3)]         # source, document: its (step, 0, j)s
        for s_, (src, idx) in enumerate(where):
            for j, (k2, c) in enumerate(zip(src.tolist(), idx.tolist())):
                for q in row_docs[k2][c]:
                    places[k2].setdefault(q, []).append((s_, 0, j))

        def want(k, q, start, stop):
            return [p for p in places[k].get(q, []) if start <= p[0] < stop]

        seen = 0
        for k in range(3):
            for q in range(len(docs[k])):
                got = dl.steps_of(q, stream=k, stop=60)
                assert got == want(k, q, 0, 60), (k, q)
                seen += len(got)
        assert seen > 100
        assert dl.steps_of(5, stream=2, start=17, stop=59) == want(2, 5, 17, 59)
        for k in (0, 1):                      # every piece's border holds some document
            for q in range(len(docs[k])):
                ticks = []
                got = dl.steps_of(q, stream=k, start=7, stop=far,
                                  progress=lambda d, t: ticks.append(d))
                assert got == want(k, q, 7, far), (k, q)
                assert len(ticks) > 1, ticks


def test_steps_of_refusals(corpus):
    """Asked in a way the daemon cannot answer: a clear error, not a wrong answer."""
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, sampler="cyclic",
                    pack={"tokens": 8}, num_workers=0) as dl:
        next(dl)
        with pytest.raises(ZrecordError, match="no such record"):
            dl.steps_of(57, stop=5)


def test_packed_mixture_refusals(corpus):
    """A packed mixture weighted by records, and weight_by without packing."""
    with pytest.raises(ZrecordError, match="weighted by tokens"):
        DataLoader([({"tokens": RaggedDataset("docs")}, 1), ({"tokens": RaggedDataset("docs")}, 1)],
                   batch_size=2, sampler="cyclic", pack={"tokens": 8}, weight_by="records")
    with pytest.raises(ZrecordError, match="weighs a mixture of packed sources"):
        DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, weight_by="tokens")


def test_mixture_by_tokens(workdir):
    """weight_by='tokens': each batch's rows go to the sources by the record
    mixture's own apportionment and layout (the same sources, row for row, as an
    unpacked mixture of the same weights and seed), and each source's rows are
    its own packed stream in order: row c of source k is the reference's row c
    of k's documents in k's cycles (its seed the mixture's seed of the source)."""
    docs = [_docs(40, seed=7), _docs(23, seed=8, hi=90), _docs(61, seed=9, hi=12)]
    modes = ["cyclic", "sequential", "cyclic-lx157"]
    for k, d in enumerate(docs):
        from_iterator(f"d{k}", d, np.int32, codec="raw")
    weights = (5, 2, 3)
    B, L, steps, seed = 6, 16, 25, 13
    srcs = [({"tokens": RaggedDataset(f"d{k}")}, weights[k], modes[k]) for k in range(3)]
    with DataLoader(srcs, batch_size=B, seed=seed, pack={"tokens": L}, eos_id=1,
                    with_sources=True, with_indices=True, weight_by="tokens",
                    num_workers=0) as dl:
        got = _batches(dl, steps)
    plain = [({"tokens": RaggedDataset(f"d{k}")}, weights[k], modes[k]) for k in range(3)]
    with DataLoader(plain, batch_size=B, seed=seed, with_sources=True, num_workers=0) as dl:
        want_src = [np.array(next(dl)["__source__"]) for _ in range(steps)]
    rows_needed = [0, 0, 0]
    for b, ws in zip(got, want_src):
        np.testing.assert_array_equal(b["__source__"], ws)
        for k, c in zip(b["__source__"], b["__index__"]):
            rows_needed[k] = max(rows_needed[k], int(c) + 1)
    refs = []
    for k in range(3):
        ks = int(S.key(seed, S.DOMAIN_SOURCE, k))
        refs.append(ref_concat(docs[k], modes[k], ks, L, rows_needed[k], eos=1))
    for s, b in enumerate(got):
        for j, (k, c) in enumerate(zip(b["__source__"], b["__index__"])):
            toks, segs, pos = refs[k]
            np.testing.assert_array_equal(b["tokens"][j], toks[c], err_msg=f"step {s} row {j}")
            np.testing.assert_array_equal(b["tokens_segment_ids"][j], segs[c])
            np.testing.assert_array_equal(b["tokens_positions"][j], pos[c])
    # the share of tokens: every row holds L, so a source's share is its rows'
    counts = np.bincount(np.concatenate([b["__source__"] for b in got]), minlength=3)
    share = counts / counts.sum()
    assert np.all(np.abs(share - np.array(weights) / sum(weights)) < 2 / (B * steps)), share


def test_rows_are_the_same_in_every_process(corpus):
    """Packed rows are a function of the step: two processes, one after the
    other (the second loading the index the first built), and this one get the
    same rows."""
    import subprocess
    import sys as _sys
    from conftest import PKG
    code = f"""
import sys, numpy as np
sys.path.insert(0, {PKG!r})
from loaderx.dataloader import DataLoader
from loaderx.dataset import RaggedDataset
with DataLoader({{"tokens": RaggedDataset("docs")}}, batch_size=2, sampler="cyclic", seed=4,
                pack={{"tokens": 16}}, num_workers=0) as dl:
    print(np.concatenate([next(dl)["tokens"].reshape(-1).copy() for _ in range(20)]).tobytes().hex())
"""
    outs = [subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    for r in outs:
        assert r.returncode == 0, r.stderr
    assert outs[0].stdout == outs[1].stdout
    with DataLoader({"tokens": RaggedDataset("docs")}, batch_size=2, sampler="cyclic", seed=4,
                    pack={"tokens": 16}, num_workers=0) as dl:
        mine = np.concatenate([next(dl)["tokens"].reshape(-1).copy() for _ in range(20)])
    assert mine.tobytes().hex() == outs[0].stdout.strip()
