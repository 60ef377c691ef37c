"""Shared parts of the suite: paths, the machine block, data, timing, memory,
the private daemon, tables, JSON and plots.

Nothing here imports a contender: each layer module imports its peers itself
and skips a missing one with a line saying so.
"""

import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import socket
import select
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
PYCLIENT = os.path.join(REPO, "python-client")
RESULTS = os.path.join(BENCH, "results")
STUBS = os.path.join(BENCH, "suite", "stubs")

GiB = float(1 << 30)
MiB = float(1 << 20)


def say(*a):
    print(*a, flush=True)


_said = set()


def say_once(line):
    if line not in _said:
        _said.add(line)
        say(line)


# --------------------------------------------------------------------- builds
def find_build(explicit=None):
    """The meson build dir holding daemon/zrecordd and bench/limits: --build,
    $ZRECORD_BUILD, else the newest non-sanitizer build*/ of the tree."""
    if explicit:
        return os.path.abspath(explicit)
    env = os.environ.get("ZRECORD_BUILD")
    if env:
        return os.path.abspath(env)
    best = None
    for d in os.listdir(REPO):
        p = os.path.join(REPO, d)
        if not d.startswith("build") or "asan" in d or not os.path.isdir(p):
            continue
        z = os.path.join(p, "daemon", "zrecordd")
        lim = os.path.join(p, "bench", "limits")
        if os.access(z, os.X_OK) and os.access(lim, os.X_OK):
            t = os.path.getmtime(z)
            if best is None or t > best[0]:
                best = (t, p)
    if best is None:
        sys.exit("no build found: meson setup build && meson compile -C build (or --build DIR)")
    return best[1]


# --------------------------------------------------------------- peer environs
PEERS = [  # (label, distribution, import name)
    ("torch", "torch", "torch"),
    ("torchdata", "torchdata", "torchdata"),
    ("h5py", "h5py", "h5py"),
    ("lmdb", "lmdb", "lmdb"),
    ("blosc2", "blosc2", "blosc2"),
    ("array_record", "array-record", "array_record"),
    ("grain", "grain", "grain"),
    ("mosaicml-streaming", "mosaicml-streaming", "streaming"),
    ("matplotlib", "matplotlib", "matplotlib"),
]


def dist_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


_avail = {}


def have(mod):
    """True if `mod` imports here (cached); a broken install counts as missing."""
    if mod not in _avail:
        try:
            if mod == "streaming":
                ensure_torchvision_stub()
            importlib.import_module(mod)
            _avail[mod] = None
        except Exception as e:   # ImportError, or a broken extension
            _avail[mod] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return _avail[mod] is None


def why_missing(mod):
    have(mod)
    return _avail.get(mod) or ""


_skipped = set()


def skip(what, mod):
    if what not in _skipped:
        _skipped.add(what)
        say(f"  skipped {what}: {mod} is not installed ({why_missing(mod)})")


def add_if(out, present, what, mod, make):
    """out += make() (a list of contenders) when `present`; else says `what` is
    skipped because `mod` is not installed. The one shape of an optional
    contender."""
    if present:
        out += make()
    else:
        skip(what, mod)


def ensure_torchvision_stub():
    """mosaicml-streaming imports torchvision at import time (for its vision
    datasets, unused here). Where torchvision does not import (no CPU wheel for
    this torch), a stub of the two names it needs goes first on sys.path."""
    try:
        import torchvision  # noqa: F401
        return False
    except Exception:
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
        if STUBS not in sys.path:
            sys.path.insert(0, STUBS)
        return True


def loaderx15_python():
    """The interpreter of the venv holding PyPI loaderx 1.5 ($LOADERX15_PYTHON,
    else /tmp/venv-loaderx/bin/python), with its version, or (None, reason)."""
    py = os.environ.get("LOADERX15_PYTHON", "/tmp/venv-loaderx/bin/python")
    if not os.access(py, os.X_OK):
        return None, f"no {py} (python3 -m venv /tmp/venv-loaderx && " \
                     "/tmp/venv-loaderx/bin/pip install 'loaderx==1.5.*' numpy)"
    try:
        v = subprocess.run([py, "-c", "import loaderx, numpy; print(loaderx.__version__)"],
                           capture_output=True, text=True, timeout=60, cwd="/",
                           env=peer_env()).stdout.strip()
    except Exception as e:
        return None, str(e)
    if not v.startswith("1.5"):
        return None, f"{py} has loaderx {v or '(none)'}, not 1.5.*"
    return (py, v), None


def peer_env():
    """Environment for a PyPI-loaderx subprocess: our package not on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = BENCH
    env.pop("PYTHONHOME", None)
    return env


# ------------------------------------------------------------------ machine
def machine_block(build):
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    try:
        zv = subprocess.run([os.path.join(build, "daemon", "zrecordd"), "--version"],
                            capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        zv = "?"
    m = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem / GiB, 1), "kernel": platform.release(),
        "python": platform.python_version(), "numpy": np.__version__,
        "msgpack": dist_version("msgpack"), "zrecordd": zv, "build": build,
        "loadavg_start": os.getloadavg(),
        "tmp_fs": fs_kind(os.environ.get("TMPDIR", "/tmp")),
    }
    vers = {}
    for label, dist, mod in PEERS:
        vers[label] = dist_version(dist)
    lx, why = loaderx15_python()
    vers["loaderx (PyPI)"] = lx[1] if lx else None
    m["contenders"] = vers
    say(f"machine: {cpu}, {m['cores']} cores ({m['usable_cores']} usable), "
        f"{m['memory_gib']} GiB, Linux {m['kernel']}")
    say(f"         Python {m['python']}, numpy {m['numpy']}, msgpack {m['msgpack']}; "
        f"{zv} ({os.path.relpath(build, REPO)}); {m['date']}; load average "
        f"{' '.join(f'{x:.2f}' for x in m['loadavg_start'])}; stores in {m['tmp_fs']}")
    say("         contenders: " + ", ".join(f"{k} {v or '(not installed)'}" for k, v in vers.items()))
    return m


def fs_kind(path):
    try:
        out = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True,
                             text=True).stdout.strip()
    except Exception:
        return "?"
    return f"{path} ({out}{', IN MEMORY' if out == 'tmpfs' else ', disk'})"


# ---------------------------------------------------------------------- data
_images = {}


def images(n, side, seed=0x5EED):
    """n smooth-gradient uint8 images of side x side plus 2 bits of noise per
    pixel (the same kind of data as bench/workload.c: mildly compressible).
    Made once per run (read-only: callers must not write to it)."""
    key = (n, side, seed)
    if key not in _images:
        _images.clear()
        _images[key] = _make_images(n, side, seed)
        _images[key].flags.writeable = False
    return _images[key]


def _make_images(n, side, seed):
    """Vectorized over blocks of records (64 x 64 tiles one at a time took
    minutes for the beyond-memory layer's 400,000)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, side, side), np.uint8)
    y = np.arange(side, dtype=np.float32)[None, :, None]
    x = np.arange(side, dtype=np.float32)[None, None, :]
    block = max(1, (8 << 20) // (side * side))
    for s in range(0, n, block):
        k = min(block, n - s)
        base = (48 + rng.integers(0, 160, k) - 80).astype(np.float32)[:, None, None]
        sl = (rng.uniform(-160, 160, (k, 2)) / side).astype(np.float32)
        img = base + sl[:, 0, None, None] * x + sl[:, 1, None, None] * y
        img += rng.integers(0, 4, (k, side, side), dtype=np.uint8)
        np.clip(img, 0, 255, out=img)
        out[s:s + k] = img
    return out


def draws(nbatches, batch, n, seed=0xBA7C4):
    """The fixed list of random batches (uniform with replacement) every store
    contender gathers."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, batch, dtype=np.int64) for _ in range(nbatches)]


def disk_bytes(path):
    """Allocated bytes (st_blocks * 512) of a file or a directory tree."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def drop_pages(path):
    """Drops the page-cache pages of the file at path, or of every file below
    it (fdatasync, then POSIX_FADV_DONTNEED: clean pages no process maps go;
    no root needed)."""
    files = [path] if os.path.isfile(path) else \
        [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def drop_path(path):
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)


# -------------------------------------------------------------------- memory
def children_of(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def tree(pids):
    seen, todo = set(), list(pids)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += children_of(p)
    return seen


def pss_rss(pid):
    """(PSS, RSS, PSS not backed by files) bytes of one process from
    smaps_rollup; zeros if gone. The third leaves out mapped page cache (a
    store's or a .npy's file pages), which the kernel can drop at will."""
    pss = rss = pss_file = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss_File:"):
                    pss_file = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss, pss - pss_file


class MemSampler:
    """Samples the total PSS (and RSS) of the process trees under `roots`, plus
    `extra` pids (the daemon), every `period` s from a thread; keeps the peaks."""

    def __init__(self, roots, extra=(), period=0.05):
        self.roots, self.extra, self.period = list(roots), list(extra), period
        self.peak_pss = self.peak_rss = self.peak_anon = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)

    def sample(self):
        pss = rss = anon = 0
        for p in tree(self.roots) | set(self.extra):
            a, b, c = pss_rss(p)
            pss += a
            rss += b
            anon += c
        self.peak_anon = max(self.peak_anon, anon)
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_rss = max(self.peak_rss, rss)
        self.samples += 1

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()
        return self


# -------------------------------------------------------------------- daemon
class Daemon:
    """A private zrecordd on a socket in `tmp`, ready by the notify protocol."""

    def __init__(self, build, tmp, threads=0, cache=None, extra=()):
        self.binary = os.path.join(build, "daemon", "zrecordd")
        self.sock = os.path.join(tmp, "zrecordd.sock")
        npath = os.path.join(tmp, "notify")
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(npath)
        env = dict(os.environ, NOTIFY_SOCKET=npath)
        self.log = os.path.join(tmp, "zrecordd.log")
        args = [self.binary, f"--socket={self.sock}", "--log-level=warning",
                f"--threads={threads}", "--idle-exit=0", "--max-shm=16G",
                f"--token-index-dir={os.path.join(tmp, 'token-index')}"]
        if cache:
            args.append(f"--cache={cache}")
        args.extend(extra)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline:
                r, _, _ = select.select([ns], [], [], 0.2)
                if r and b"READY=1" in ns.recv(4096).split(b"\n"):
                    break
                if self.proc.poll() is not None:
                    raise RuntimeError(f"zrecordd exited with {self.proc.returncode}; see {self.log}")
            else:
                self.proc.kill()
                raise RuntimeError("zrecordd did not become ready in 20 s")
        finally:
            ns.close()
            os.unlink(npath)
        self._prev_socket = os.environ.get("ZRECORD_SOCKET")
        os.environ["ZRECORD_SOCKET"] = self.sock
        self.pid = self.proc.pid

    def status(self):
        from loaderx import _conn
        return _conn.default().request("status")

    def stop(self):
        # the layers after this one talk to the daemon that was there before
        if os.environ.get("ZRECORD_SOCKET") == self.sock:
            if self._prev_socket is None:
                os.environ.pop("ZRECORD_SOCKET", None)
            else:
                os.environ["ZRECORD_SOCKET"] = self._prev_socket
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def import_loaderx():
    if PYCLIENT not in sys.path:
        sys.path.insert(0, PYCLIENT)
    import loaderx  # noqa: F401
    return loaderx


# ------------------------------------------------------------------- tables
def med(v):
    return statistics.median(v) if v else float("nan")


def fmt(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, str):
        return v
    if v != v:
        return "nan"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.{nd}f}"


MARKDOWN = []


def table(title, cols, rows):
    """Prints rows (dicts) under `cols` [(key, header)], right-aligned numbers
    (and keeps a Markdown copy for results/tables.md)."""
    say("")
    say(title)
    cells = [[fmt(r.get(k)) for k, _ in cols] for r in rows]
    MARKDOWN.append(f"**{title}**\n\n| " + " | ".join(h or " " for _, h in cols) + " |\n|"
                    + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|\n"
                    + "".join("| " + " | ".join(c) + " |\n" for c in cells))
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, (_, h) in enumerate(cols)]
    say("  " + "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                        for i, ((_, h), w) in enumerate(zip(cols, widths))))
    for c in cells:
        say("  " + "  ".join(x.ljust(w) if i == 0 else x.rjust(w)
                            for i, (x, w) in enumerate(zip(c, widths))))


def write_json(name, data):
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{name}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=float)
        f.write("\n")
    return path


_plot_note = []


def bar_plot(name, title, labels, series, unit, log=False):
    """One PNG per table: a horizontal bar panel per series {panel title:
    [value per label]}, each on its own scale."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        if not _plot_note:
            _plot_note.append(1)
            say("  (plots skipped: matplotlib is not installed)")
        return None
    os.makedirs(RESULTS, exist_ok=True)
    k = len(series)
    fig, axes = plt.subplots(1, k, figsize=(4.2 * k + 1.5, 0.3 * len(labels) + 1.3), dpi=72,
                             sharey=True, squeeze=False)
    for j, (ax, (leg, vals)) in enumerate(zip(axes[0], series.items())):
        ys = list(range(len(labels)))
        ax.barh(ys, [v if v is not None and v == v else 0 for v in vals], color=f"C{j}")
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis() if j == 0 else None
        ax.set_xlabel(leg if k > 1 else unit, fontsize=8)
        if log:
            ax.set_xscale("log")
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = os.path.join(RESULTS, f"{name}.png")
    fig.savefig(path)
    plt.close(fig)
    return path


def rounds_robin(contenders, nrounds, fn):
    """Calls fn(contender, round) for round r of every contender before round
    r + 1 of any, so a change of load moves them alike."""
    for r in range(nrounds):
        for c in contenders:
            fn(c, r)


def limit(lim, key):
    """A limit for fractions: the best batch of the probe (on a shared machine
    the median is the load's as much as the machine's); None if not measured."""
    if not lim:
        return None
    return lim.get(key + "_best") or lim.get(key)
