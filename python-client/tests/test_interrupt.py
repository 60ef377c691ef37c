"""Conversions all or nothing, Ctrl-C included (issue 32, item 7 and case 8).

A conversion runs in a child process (interrupt_writer.py) and is signalled at a
chosen point: after its k-th APPEND was announced (k drawn from a seeded
generator, plus a few random milliseconds), or a random time into a `zrecord`
run. The process must exit within PROMPT seconds of the signal, and the path must
then hold what it held before or the whole result, nothing else: no record of the
interrupted append, no `.partial` directory, no `append.undo`. Running the same
conversion again must then give the intended result. A second SIGINT soon after
the first, or SIGKILL, may leave the undo to the next run: it must then be there
(the `.partial` directory or `append.undo`), and the next run must finish the job.

Main's client failed case 8 at its first step: Ctrl-C hung in `_write_into` →
`ds.close()` → `Connection._wait` (a reader mark left set by the interrupted
receive), a second Ctrl-C left part of the append, and running again appended.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import interrupt_writer as iw
from conftest import PKG, tool_binary
from loaderx import _conn
from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
from loaderx.utils import from_numpy, train_dict

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = 30.0   # s from the signal to the exit (main's client: over 10 minutes)
TRIALS = int(os.environ.get("ZR_SIGINT_TRIALS", "40"))
SEED = int(os.environ.get("ZR_SIGINT_SEED", "32"))


# ----------------------------------------------------------------- processes
def start(spec):
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, os.path.join(HERE, "interrupt_writer.py"),
                             json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def line(p, timeout=PROMPT):
    """The child's next line, or None at its end (within timeout: it must come)."""
    r, _, _ = select.select([p.stdout], [], [], timeout)
    assert r, f"no line from pid {p.pid} within {timeout} s"
    got = p.stdout.readline()
    return got.rstrip("\n") if got else None


def pause(p, seconds):
    """Up to seconds, or until the child writes or ends (a bounded wait on it)."""
    select.select([p.stdout], [], [], seconds)


def signal_at(p, k, extra=None):
    """Signals SIGINT once the child announced its k-th request and extra
    seconds passed (None: half the time between its last two announcements, the
    middle of a request, where a conversion spends most of its time); False if
    it finished first."""
    assert line(p) == "ready"
    seen, times = 0, [time.monotonic()]
    while seen < k:
        got = line(p)
        if got in (None, "done"):
            return False
        seen += 1
        times.append(time.monotonic())
    if extra is None:
        extra = (times[-1] - times[-2]) / 2 if k > 1 else 0.0
    if extra:
        pause(p, extra)
    if p.poll() is not None:
        return False
    p.send_signal(signal.SIGINT)
    return True


def finish(p, sig_time, second=None):
    """Waits for the exit, at most PROMPT after the signal; a second SIGINT
    ``second`` seconds after the first when given. Returns the exit status; the
    end of the process's stderr is kept as ``p.err_tail`` for the failure
    messages (a writer that exits 1 says why)."""
    if second is not None:
        pause(p, second)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    try:
        p.wait(max(0.1, sig_time + PROMPT - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)        # what the user did next
        try:
            p.wait(PROMPT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        out, err = p.communicate()
        pytest.fail(f"the conversion did not stop within {PROMPT:.0f} s of Ctrl-C; "
                    f"stderr:\n{err[-3000:]}")
    _, err = p.communicate()
    p.err_tail = (err or "")[-3000:]
    return p.returncode


# --------------------------------------------------------------------- state
def leftovers(path):
    parent, name = os.path.split(path)
    left = [n for n in os.listdir(parent) if n.startswith(f".{name}.partial-")]
    if os.path.exists(os.path.join(path, "append.undo")):
        left.append("append.undo")
    return left


def read(path, writer):
    """What the store (or set) at path holds, or None if there is none."""
    if not os.path.exists(path):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # an interrupted conversion's undo warns
        if writer == "numpy":
            with DenseDataset(path) as ds:
                return ds[:]
        if writer in ("iterator", "convert", "images") + iw.CORPORA:
            with RaggedDataset(path) as ds:
                return ds[:]
        with MSDataset(path) as ms:
            return {name: ms[name][:] for name in ms.names}


def same(a, b):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and bool((a == b).all())
    return len(a) == len(b) and all(x.shape == y.shape and (x == y).all() for x, y in zip(a, b))


def joined(a, b):
    """Records a then records b, as a store holds them after two conversions."""
    if a is None:
        return b
    if isinstance(a, dict):
        return {k: joined(a[k], b[k]) for k in a}
    if isinstance(a, np.ndarray):
        return np.concatenate([a, b])
    return list(a) + list(b)


def fresh_connection():
    """The parent's connection after a child used the daemon: its own, as it was."""
    return _conn.default()


# --------------------------------------------------------------------- case 8
def test_ctrl_c_during_from_numpy_of_200000_records(workdir):
    """Case 8: Ctrl-C during from_numpy of 200,000 records returns promptly and
    leaves the path as it was, for a new store and for one appended to; running
    the same from_numpy again gives exactly the intended store."""
    n = 200_000
    spec = {"writer": "numpy", "path": str(workdir / "train_data"), "codec": "zstd",
            "seed": 8, "n": n, "chunk": 1 << 20, "width": 16}
    want = iw.records(spec)                          # 200,000 records of 64 bytes
    for k in (2, 6):                                 # during the 2nd, the 6th of 13 appends
        p = start(spec)
        assert signal_at(p, k), "from_numpy finished before the signal"
        t = time.monotonic()
        rc = finish(p, t)
        assert rc == -signal.SIGINT, rc
        assert not os.path.exists(spec["path"]) and leftovers(spec["path"]) == []
    assert from_numpy(spec["path"], want) == n       # again: the intended store
    assert same(read(spec["path"], "numpy"), want)
    more = dict(spec, seed=9)
    p = start(more)
    assert signal_at(p, 4)
    rc = finish(p, time.monotonic())
    assert rc == -signal.SIGINT, rc
    got = read(spec["path"], "numpy")
    assert len(got) == n and same(got, want), f"{len(got)} records after Ctrl-C, not {n}"
    assert leftovers(spec["path"]) == []
    from_numpy(spec["path"], iw.records(more))
    assert same(read(spec["path"], "numpy"), joined(want, iw.records(more)))


def test_interrupted_request_leaves_the_connection_usable(workdir):
    """The cause of case 8's hang, alone: KeyboardInterrupt while a request waits
    for its reply left the connection's reader mark set, and the next request
    waited forever. Now the next request is answered (run in a child, bounded)."""
    from_numpy("s", np.arange(10))
    code = f"""
        import os, signal, threading, numpy as np, sys
        sys.path.insert(0, {PKG!r})
        from loaderx.dataset import DenseDataset
        ds = DenseDataset("s")
        big = np.random.default_rng(1).integers(0, 2**62, size=(1 << 20,), dtype=np.int64)
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            while True:
                DenseDataset("x", dtype=np.int64).append(big)   # waits on the daemon
        except KeyboardInterrupt:
            pass
        print(len(ds), flush=True)
    """
    import textwrap
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=PROMPT + 30, cwd=str(workdir))
    assert r.returncode == 0 and r.stdout.strip() == "10", r


def test_sigint_as_the_connection_lock_is_taken(workdir):
    """The sweep's rare hang of a set writer, made certain: the SIGINT is taken
    the moment the main thread gets the connection's lock for its next APPEND. A
    ``with`` of a threading.Condition takes the lock in Condition.__enter__, a
    Python function, so the KeyboardInterrupt left the lock held and the undo's
    first request waited for it forever, a third Ctrl-C held as the undo holds
    them. Now the conversion stops at once and leaves nothing (run in a child,
    bounded; the SIGINT placed by interrupt_writer.sigint_at_lock)."""
    path = str(workdir / "s")
    code = f"""
        import os, sys, numpy as np
        sys.path.insert(0, {PKG!r})
        sys.path.insert(0, {HERE!r})
        import interrupt_writer as iw
        from loaderx import _conn, utils
        from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
        batch = {{"x": np.arange(64, dtype=np.int32), "y": [np.arange(3, dtype=np.int16)] * 64}}
        with utils.conversion({path!r}) as c:
            DenseDataset(os.path.join(c.path, "x"), dtype=np.int32, codec="zstd").close()
            RaggedDataset(os.path.join(c.path, "y"), dtype=np.int16, codec="zstd").close()
            ms = c.add(MSDataset(c.path))
            ms.append(batch)
            iw.sigint_at_lock(_conn.default()._cv._lock, "request")
            ms.append(batch)
        print("not interrupted", flush=True)
    """
    import textwrap
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=str(workdir))
    try:
        out, err = p.communicate(timeout=PROMPT)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the conversion did not stop within {PROMPT:.0f} s of the SIGINT; "
                    f"stdout {out!r}, stderr:\n{err[-3000:]}")
    assert p.returncode == -signal.SIGINT, (p.returncode, out, err[-3000:])
    assert out == "" and "KeyboardInterrupt" in err, (out, err[-3000:])
    assert not os.path.exists(path) and leftovers(path) == []


# ------------------------------------------------------- the random sweep
PY_CONFIGS = [(w, codec, existing) for w in ("numpy", "iterator", "set")
              for codec in ("raw", "zstd", "zstd_dict") for existing in (False, True)]
# the corpora converters make new stores (issue 34), when pyarrow is there for
# the two that need it
try:
    import pyarrow  # noqa: F401
    _ARROW = ("parquet", "arrow")
except ImportError:
    _ARROW = ()
PY_CONFIGS += [(w, codec, False) for w in _ARROW + ("megatron", "webdataset")
               for codec in ("raw", "zstd")]
# from_images (issue 36): new and existing image stores
PY_CONFIGS += [("images", codec, existing) for codec in ("raw", "zstd")
               for existing in (False, True)]
TOOL_CONFIGS = [("import", codec, False) for codec in ("raw", "zstd", "zstd_dict")] + \
               [("tool-convert", "zstd", False), ("convert", "zstd", False)]
MODES = ("int", "int", "int2", "kill")
SIZES = {"numpy": 8192, "iterator": 5000, "set": 4096, "parquet": 4000, "arrow": 4000,
         "megatron": 4000, "webdataset": 3000, "images": 900}
CHUNK = 128 << 10


@pytest.fixture
def dict_file(workdir):
    path = workdir / "sweep.dict"
    path.write_bytes(train_dict(iter(iw.ragged(99, 2000)), tier="fast"))
    return str(path)


def _py_trial(workdir, i, rng, cfg, mode, dict_file, stats):
    writer, codec, existing = cfg
    path = str(workdir / f"t{i}")
    spec = {"writer": writer, "path": path, "codec": codec, "seed": 1000 + i,
            "n": SIZES[writer], "chunk": CHUNK}
    if codec == "zstd_dict" and writer != "numpy":
        spec["dict"] = dict_file
    before = None
    if existing:
        iw.write(dict(spec, seed=500 + i, n=spec["n"] // 4))
        before = read(path, writer)
    new = iw.records(spec)
    after = joined(before, new)
    appends = {"numpy": 8, "iterator": 8, "set": 8}.get(writer, 8)
    p = start(spec)
    sig = signal.SIGKILL if mode == "kill" else signal.SIGINT
    assert line(p) == "ready"
    k = int(rng.integers(1, appends + 1))
    seen, signalled = 0, False
    while seen < k:
        got = line(p)
        if got in (None, "done"):
            break
        seen += 1
    else:
        pause(p, float(rng.uniform(0, 0.02)))
        if p.poll() is None:
            p.send_signal(sig)
            signalled = True
    t = time.monotonic()
    rc = finish(p, t, second=float(rng.uniform(0, 0.03)) if mode == "int2" else None)
    left = leftovers(path)
    what = f"trial {i} {cfg} {mode} k={k}: rc {rc}" + (f"; stderr:\n{p.err_tail}" if p.err_tail else "")
    # What is left for the next run may be a request the daemon still runs for the
    # dead process (an APPEND, a set's half-way: its streams' lengths read apart),
    # which only the next run waits for; without it, nothing can be in flight.
    got = read(path, writer) if not left or mode == "int" else None
    if same(got, after) and not left:
        stats["complete"] += 1                  # it finished before the signal did harm
        assert rc in (0, -sig), what
        return
    assert signalled, what
    if mode == "int":
        assert rc == -signal.SIGINT, what
        assert left == [], f"{what}: left {left}"
        assert same(got, before), f"{what}: the path is neither as it was nor complete"
        stats["undone"] += 1
    elif not left:
        assert same(got, before), f"{what}: the path is neither as it was nor complete"
        stats["undone"] += 1
    else:
        assert left, f"{what}: the path changed and nothing tells the next run ({left})"
        stats["left"] += 1
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        iw.write(spec)                          # again: the intended result
    assert same(read(path, writer), after), f"{what}: running it again"
    assert leftovers(path) == [], what
    stats["again"] += 1


def _tool_trial(workdir, i, rng, cfg, mode, stats, t_est):
    kind, codec, _ = cfg
    tool = tool_binary()
    path = str(workdir / f"t{i}")
    if kind == "import":
        data = iw.dense(2000 + i, 16384)
        src = str(workdir / f"t{i}.npy")
        np.save(src, data)
        argv = [tool, "import", src, path, "--codec", codec, "--chunk", "512"]
        writer, after = "numpy", data
    else:
        src = str(workdir / "convert-src")
        if not os.path.exists(src):
            iw.write({"writer": "iterator", "path": src, "codec": codec, "seed": 7, "n": 4000})
        writer, after = "convert", read(src, "iterator")
        if kind == "tool-convert":
            argv = [tool, "convert", "--to", "loaderx157", src, path]
        else:
            spec = {"writer": "convert", "path": path, "src": src}
            argv = [sys.executable, os.path.join(HERE, "interrupt_writer.py"), json.dumps(spec)]
    sig = signal.SIGKILL if mode == "kill" else signal.SIGINT
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=PKG))
    if kind == "convert":
        # the Python writer's run starts at "ready": a SIGINT while the
        # interpreter still imports its site module exits 1, before any conversion
        assert line(p) == "ready"
    pause(p, float(rng.uniform(0, t_est.get(kind, 0.5))))
    signalled = p.poll() is None
    if signalled:
        p.send_signal(sig)
    t = time.monotonic()
    rc = finish(p, t, second=float(rng.uniform(0, 0.03)) if mode == "int2" else None)
    left = leftovers(path)
    got = read(path, writer) if not os.path.exists(path) or not left else None
    what = f"trial {i} {cfg} {mode}: rc {rc}" + (f"; stderr:\n{p.err_tail}" if p.err_tail else "")
    if same(got, after) and not left:
        stats["complete"] += 1
        return
    assert signalled and not os.path.exists(path), f"{what}: {path} holds a part"
    if mode == "kill":
        stats["left" if left else "undone"] += 1
    else:
        assert rc == -signal.SIGINT and left == [], f"{what}: left {left}"
        stats["undone"] += 1
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=PKG))
    t_est[kind] = 1.2 * (time.monotonic() - t0)
    assert r.returncode == 0, r.stderr
    assert same(read(path, writer), after) and leftovers(path) == [], what
    stats["again"] += 1


def test_sigint_at_random_points(workdir, dict_file):
    """Every writer (from_numpy, from_iterator, a multi-stream set through
    conversion(), from_images, utils.convert, `zrecord import` and `zrecord convert`), every
    codec, new stores and existing ones (dense, ragged, sets), signalled at
    seeded random points: SIGINT, SIGINT twice, SIGKILL."""
    if tool_binary() is None:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    rng = np.random.default_rng(SEED)
    configs = PY_CONFIGS + TOOL_CONFIGS
    stats = {"complete": 0, "undone": 0, "left": 0, "again": 0}
    t_est = {}
    t0 = time.monotonic()
    for i in range(TRIALS):
        cfg = configs[i % len(configs)]
        mode = MODES[(i // len(configs) + i) % len(MODES)]
        if cfg in PY_CONFIGS:
            _py_trial(workdir, i, rng, cfg, mode, dict_file, stats)
        else:
            _tool_trial(workdir, i, rng, cfg, mode, stats, t_est)
    print(f"sigint sweep: {TRIALS} trials (seed {SEED}): {stats['undone']} undone at once, "
          f"{stats['left']} left to the next run, {stats['complete']} complete before the "
          f"signal; {stats['again']} run again to the intended result; "
          f"{time.monotonic() - t0:.1f} s")
    assert stats["undone"] + stats["left"] >= TRIALS // 2, stats


# ------------------------------------------------------- the helper itself
def test_conversion_helper(workdir):
    """conversion(): a new store appears whole or not at all; an existing one is
    cut back on a failure; an undo left by a dead process is done by the next
    conversion and reported to readers."""
    from loaderx.utils import conversion
    class Boom(Exception):
        pass
    # new: nothing at the path until the end, nothing left after a failure
    with pytest.raises(Boom):
        with conversion("n") as c:
            assert c.new and os.path.basename(c.path) == "n" and not os.path.exists("n")
            ds = c.add(DenseDataset(c.path, dtype=np.int64))
            ds.append(np.arange(5))
            raise Boom
    assert not os.path.exists("n") and os.listdir(".") == []
    with conversion("n") as c:
        c.add(DenseDataset(c.path, dtype=np.int64)).append(np.arange(5))
    assert list(DenseDataset("n")[:]) == list(range(5)) and os.listdir(".") == ["n"]
    # an empty directory is replaced, keeping its mode
    os.mkdir("e", 0o751)
    os.chmod("e", 0o751)
    with conversion("e") as c:
        c.add(DenseDataset(c.path, dtype=np.int64)).append(np.arange(3))
    assert os.stat("e").st_mode & 0o777 == 0o751 and len(DenseDataset("e")) == 3
    # existing: cut back, the other records untouched
    with pytest.raises(Boom):
        with conversion("n") as c:
            assert not c.new and c.path == os.path.realpath("n")
            ds = c.add(DenseDataset(c.path))
            ds.append(np.arange(100, 110))
            assert os.path.exists("n/append.undo")
            raise Boom
    assert list(DenseDataset("n")[:]) == list(range(5)) and not os.path.exists("n/append.undo")
    # a dead conversion's undo: readers are told, the next conversion does it
    spec = {"writer": "numpy", "path": os.path.realpath("m"), "codec": "raw", "seed": 2,
            "n": 1024, "chunk": 1 << 14}
    iw.write(spec)
    before = read("m", "numpy")
    p = start(dict(spec, seed=3, n=8192))
    assert line(p) == "ready" and [line(p) for _ in range(5)] == ["append"] * 5
    p.kill()
    p.wait()
    p.communicate()
    assert os.path.exists("m/append.undo")
    with pytest.warns(RuntimeWarning, match="was interrupted"):
        DenseDataset("m").close()
    with pytest.warns(RuntimeWarning, match="undid the append"):
        with conversion("m"):
            pass
    assert same(read("m", "numpy"), before) and not os.path.exists("m/append.undo")


def test_undo_of_a_live_or_foreign_conversion_is_refused(workdir):
    from loaderx import ZrecordError
    from loaderx._conversion import UNDO_FILE
    from loaderx.utils import conversion
    from_numpy("s", np.arange(4))
    with conversion("s") as c:
        c.add(DenseDataset(c.path))
        # a second conversion while this one runs (its lock held)
        with pytest.raises(ZrecordError, match="another conversion") as e:
            with conversion("s") as c2:
                c2.add(DenseDataset(c2.path)).append(np.arange(2))
        assert e.value.name == "ZR_E_LOCKED"
    assert len(DenseDataset("s")) == 4
    if os.geteuid() == 0:
        undo = os.path.join("s", UNDO_FILE)
        with open(undo, "w") as f:
            f.write("zrecord append undo 1\npid 1 host elsewhere started 0\nstore 0 .\n")
        os.chown(undo, 65534, 65534)
        with pytest.raises(ZrecordError, match="not a file of yours"):
            with conversion("s"):
                pass
        with pytest.warns(RuntimeWarning, match="the file is uid 65534 .*'s"):
            assert len(DenseDataset("s")) == 4   # nothing cut; a reader is told
