"""`zrecord top`: live under a pseudo-terminal (tmux: its pane is a terminal; the
test reads the screen with capture-pane, polling with a deadline), keys change the
order and q quits; -n 1 prints one plain frame; --json one object per frame."""

import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import tool_binary

WAIT = 30


def two_loaders():
    x = np.arange(256 * 8, dtype=np.float32).reshape(256, 8)
    from_numpy("alpha", x, codec="raw")
    from_numpy("beta", x, codec="raw")
    out = []
    for name, n in (("alpha", 3), ("beta", 7)):
        loader = DataLoader({"x": DenseDataset(name)}, batch_size=8, sampler="sequential",
                            prefetch=2)
        for _ in range(n):
            next(loader)
        out.append(loader)
    return out


def zrecord():
    t = tool_binary()
    if not t:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    return t


def test_top_batch_and_json(own_daemon):
    sock = own_daemon()
    tool = zrecord()
    ls = two_loaders()
    r = subprocess.run([tool, "--socket", sock, "top", "-n", "1"], capture_output=True,
                       text=True, timeout=WAIT)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout                  # plain text off a terminal
    lines = r.stdout.splitlines()
    assert lines[0].startswith("zrecord top - zrecordd") and "2 loaders" in lines[0]
    assert lines[3].split()[:3] == ["PID", "USER", "LDR"]
    rows = [l for l in lines[4:] if l.strip()]
    assert len(rows) == 2
    assert all(row.split()[0] == str(os.getpid()) for row in rows)
    # the dataset column keeps a path's end
    assert sorted(n for row in rows for n in ("/alpha", "/beta") if n in row) == ["/alpha",
                                                                                 "/beta"]
    datasets = [os.path.realpath(n) for n in ("alpha", "beta")]
    r = subprocess.run([tool, "--socket", sock, "--json", "top", "-n", "2", "-d", "0.1",
                        "--sort", "step"], capture_output=True, text=True, timeout=WAIT)
    assert r.returncode == 0, r.stderr
    frames = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(frames) == 2
    for f in frames:
        rows = f["loaders"]
        assert [row["dataset"] for row in rows] == [datasets[1], datasets[0]]  # step, high first
        for row in rows:
            assert row["pid"] == os.getpid() and row["uid"] == os.getuid()
            # a loader of a few batches may be too young to judge: unknown
            assert row["verdict"] in ("data-bound", "consumer-bound", "balanced", "idle",
                                      "unknown")
            assert 0 <= row["wait_fraction"] <= 1
            assert row["cache_hit_ratio"] is None   # raw stores: no cache lookups
    assert frames[0]["loaders"][0]["step"] >= 7
    r = subprocess.run([tool, "--socket", sock, "top", "--sort", "bogus"],
                       capture_output=True, text=True, timeout=WAIT)
    assert r.returncode == 2 and "unknown sort key" in r.stderr
    for loader in ls:
        loader.close()


class Tmux:
    """A tmux server of the test's own (-L) with one session."""

    def __init__(self, name):
        self.name = name

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.name, *args], capture_output=True,
                              text=True, timeout=WAIT, check=check)

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "top").stdout

    def wait_for(self, predicate, what):
        deadline = time.monotonic() + WAIT
        while True:
            text = self.screen()
            if predicate(text):
                return text
            assert time.monotonic() < deadline, f"{what}; the screen:\n{text}"


def test_top_live_under_a_terminal(own_daemon, tmp_path):
    if not shutil.which("tmux"):
        pytest.skip("no tmux")
    sock = own_daemon()
    tool = zrecord()
    ls = two_loaders()
    tm = Tmux(f"zrtop{os.getpid()}")
    # the pane exits with top; its status goes to a file the test reads
    status = tmp_path / "status"
    tm.run("new-session", "-d", "-s", "top", "-x", "200", "-y", "30",
           f"{tool} --socket {sock} top -d 0.2; echo $? > {status}")
    try:
        pid = str(os.getpid())
        text = tm.wait_for(lambda t: sum(l.split()[:1] == [pid] for l in t.splitlines()) == 2,
                           "two rows of this process")
        assert "sort wait" in text and "q quit" in text
        def order(t):
            rows = [l for l in t.splitlines() if l.split()[:1] == [pid]]
            return ["alpha" if "/alpha" in r else "beta" if "/beta" in r else "?" for r in rows]
        # S: by step, highest first (beta took more); R: reversed
        tm.run("send-keys", "-t", "top", "S")
        tm.wait_for(lambda t: "sort step" in t and order(t) == ["beta", "alpha"], "sort step")
        tm.run("send-keys", "-t", "top", "R")
        tm.wait_for(lambda t: "(reversed)" in t and order(t) == ["alpha", "beta"], "reversed")
        # a loader that closes leaves the view
        ls[0].close()
        tm.wait_for(lambda t: order(t) == ["beta"], "the closed loader gone")
        tm.run("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + WAIT
        while not (status.exists() and status.read_text().strip()):
            assert time.monotonic() < deadline, tm.screen()
        assert status.read_text().strip() == "0"
    finally:
        tm.run("kill-server", check=False)
        for loader in ls:
            loader.close()


def test_top_dataset_names_every_store(own_daemon, workdir):
    """A loader of two stores deep in a tree: the DATASET cell names both (each
    path keeps its end), where it kept the end of the joined paths, the last
    store's alone (issue 38 item 7)."""
    sock = own_daemon()
    tool = zrecord()
    deep = workdir / "a-rather-long" / "project-directory" / "data"
    deep.mkdir(parents=True)
    x = np.arange(64, dtype=np.int64)
    from_numpy(str(deep / "wine_x"), x, codec="raw")
    from_numpy(str(deep / "wine_y"), x, codec="raw")
    with DataLoader({"x": DenseDataset(str(deep / "wine_x")),
                     "y": DenseDataset(str(deep / "wine_y"))}, batch_size=4) as loader:
        next(loader)
        r = subprocess.run([tool, "--socket", sock, "top", "-n", "1"], capture_output=True,
                           text=True, timeout=WAIT)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    start = lines[3].index("DATASET")
    cell = lines[4][start:start + 28].strip()
    assert cell == ".../wine_x,.../wine_y", lines
