"""Processes: fork safety, two processes on one daemon, the auto-started daemon."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from loaderx import _conn
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import (PKG, binary_for_auto_start, has_loader, in_forked_child, run_example,
                      skip_if_a_default_daemon_answers)

DATA = np.arange(64 * 4, dtype=np.int32).reshape(64, 4)


def run_py(code, env=None, timeout=60):
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = PKG + os.pathsep + e.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=os.getcwd(),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"child failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_fork_gets_a_fresh_connection(workdir):
    from_numpy("d", DATA)
    ds = DenseDataset("d")
    parent_conn = _conn.default()
    loader = DataLoader({"d": ds}, batch_size=4, sampler="sequential") if has_loader() else None
    if loader:
        next(loader)

    def child():   # everything reconnects by itself
        out = {"rows": ds[[1, 2]].tolist()}
        c = _conn.default()
        out["fresh"] = c is not parent_conn and c.pid == os.getpid()
        if loader:
            out["loader"] = np.array(next(loader)["d"]).tolist()
        ds.append(DATA[:1])
        out["len"] = len(ds)
        return out

    out, status = in_forked_child(child)
    assert status == 0, out
    assert out["fresh"] and out["rows"] == DATA[[1, 2]].tolist() and out["len"] == 65
    # the parent's connection is untouched and sees the child's append
    assert _conn.default() is parent_conn
    assert len(ds) == 65
    np.testing.assert_array_equal(ds[64], DATA[0])
    if loader:
        assert out["loader"] == DATA[4:8].tolist()        # the child resumed at step 1
        with pytest.raises(Exception, match="changed|stale|STALE"):
            for _ in range(8):
                next(loader)                              # the append ended the parent's loader
        loader.close()


def test_two_processes_share_one_daemon(workdir, loader_feature, conn):
    from_numpy("d", DATA)
    code = """
        import json, numpy as np
        from loaderx import _conn
        from loaderx.dataset import DenseDataset
        from loaderx.dataloader import DataLoader
        ds = DenseDataset('d')
        l = DataLoader({'d': ds}, batch_size=8, sampler='iid', seed=42)
        rows = [np.array(next(l)['d']).tolist() for _ in range(5)]
        st = _conn.default().request('status')
        ds.append(np.full((2, 4), 7, dtype=np.int32))
        print(json.dumps({'rows': rows, 'clients': st['clients']}))
    """
    before = conn.request("status")["clients"]
    out = json.loads(run_py(code))
    assert out["clients"] >= before + 1
    ds = DenseDataset("d")
    assert len(ds) == 66 and (ds[-1] == 7).all()
    l = DataLoader({"d": ds}, batch_size=8, sampler="iid", seed=42)
    # same seed and steps, but the store grew: the batches are drawn over 66 now;
    # over the same length they were identical, which the child proved against DATA:
    for rows in out["rows"]:
        for r in rows:
            assert r in DATA.tolist()
    l.close()
    # bit-identical across processes on an unchanged store
    from_numpy("e", DATA)
    code2 = """
        import json, numpy as np
        from loaderx.dataset import DenseDataset
        from loaderx.dataloader import DataLoader
        l = DataLoader({'e': DenseDataset('e')}, batch_size=8, sampler='cyclic', seed=5, start_step=3)
        print(json.dumps([np.array(next(l)['e']).tolist() for _ in range(4)]))
    """
    theirs = json.loads(run_py(code2))
    mine = DataLoader({"e": DenseDataset("e")}, batch_size=8, sampler="cyclic", seed=5, start_step=3)
    assert [np.array(next(mine)["e"]).tolist() for _ in range(4)] == theirs
    mine.close()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.no_daemon
def test_auto_start_trusts_only_what_the_user_could_install(tmp_path, monkeypatch):
    """A binary is started only if it and every directory above it are the user's
    or root's and nobody else may write them (a sticky directory, /tmp, may be
    writable by all); the error names the binary and the path at fault.
    tests/security/test_autostart.py tries it as another user."""
    from loaderx import _daemon
    base = tmp_path / "t"
    (base / "bin").mkdir(parents=True)
    for d in (tmp_path, base, base / "bin"):
        os.chmod(d, 0o755)
    exe = base / "bin" / "zrecordd"
    exe.write_bytes(b"#!/bin/sh\nexit 0\n")
    os.chmod(exe, 0o755)
    link = base / "link"
    os.symlink(exe, link)
    assert _daemon.check_trusted(str(exe)) == str(exe)
    assert _daemon.check_trusted(str(link)) == str(exe)      # what runs is checked
    monkeypatch.setenv("ZRECORDD", str(link))
    assert _daemon.find_binary() == str(exe)

    def refused(match):
        with pytest.raises(_daemon.UntrustedBinary, match=match) as e:
            _daemon.check_trusted(str(link))
        assert str(exe) in str(e.value) and e.value.code == 1       # EPERM
        with pytest.raises(_daemon.UntrustedBinary):
            _daemon.find_binary()

    os.chmod(base, 0o775)
    refused(f"the directory {base} \\(mode 0775, .*\\) is writable by its group")
    os.chmod(base, 0o757)
    refused(f"the directory {base} .* is writable by others")
    os.chmod(base, 0o1777)      # sticky: nobody else may rename or remove bin/
    assert _daemon.check_trusted(str(link)) == str(exe)
    os.chmod(base, 0o755)
    os.chmod(exe, 0o775)
    refused(f"the file {exe} .* is writable by its group")
    os.chmod(exe, 0o755)
    if os.geteuid() == 0:
        os.chown(base / "bin", 65534, 65534)
        refused(f"the directory {base / 'bin'} belongs to uid 65534")
        os.chown(base / "bin", 0, 0)
    assert _daemon.check_trusted(str(exe)) == str(exe)


@pytest.mark.no_daemon
def test_auto_started_daemon(tmp_path):
    binary = binary_for_auto_start()
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = dict(os.environ)
    env.pop("ZRECORD_SOCKET", None)
    env.update(XDG_RUNTIME_DIR=str(run), ZRECORDD=binary, ZRECORD_IDLE_EXIT="2")
    code = """
        import numpy as np, json
        from loaderx import _conn
        from loaderx.utils import from_numpy
        from loaderx.dataset import DenseDataset
        import shutil
        shutil.rmtree('auto', ignore_errors=True)    # from_numpy appends to a store there
        from_numpy('auto', np.arange(40, dtype=np.int64))
        c = _conn.default()
        out = {'path': c.path, 'len': len(DenseDataset('auto')), 'loader': c.has_feature('loader')}
        if out['loader']:
            from loaderx.dataloader import DataLoader
            l = DataLoader({'a': DenseDataset('auto')}, batch_size=4, sampler='sequential')
            out['batch'] = np.array(next(l)['a']).tolist()
        print(json.dumps(out))
    """
    out1 = json.loads(run_py(code, env))
    sock = run / "zrecord" / "zrecordd.sock"
    assert out1["path"] == str(sock) and out1["len"] == 40
    if out1["loader"]:
        assert out1["batch"] == [0, 1, 2, 3]
    assert (os.stat(run / "zrecord").st_mode & 0o777) == 0o700
    pid = int((run / "zrecord" / "zrecordd.pid").read_text())
    try:
        assert _alive(pid)
        # a second process finds the same daemon (no second start)
        out2 = json.loads(run_py(code, env))
        assert out2["path"] == str(sock)
        assert int((run / "zrecord" / "zrecordd.pid").read_text()) == pid
        # idle: it exits by itself
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), "the private daemon did not exit when idle"
        # and the next client starts a new one
        out3 = json.loads(run_py(code, env))
        assert out3["len"] == 40
        pid = int((run / "zrecord" / "zrecordd.pid").read_text())
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)


def test_example_train_loop(workdir, loader_feature):
    out, err = run_example(workdir, "train_loop.py", "--records", "2048", "--features", "32",
                           "--steps", "60", timeout=120)
    assert "resumed at step 30" in out
    # the loader's telemetry, printed at its end (DataLoader.stats())
    line = [x for x in out.splitlines() if x.startswith("loader: ")]
    assert len(line) == 1, out
    # a run this short may be too short to judge (issue 38 item 2): "unknown"
    assert line[0].split()[1] in ("data-bound", "consumer-bound", "balanced", "idle",
                                  "unknown"), line
    # the window as it is, not rounded to "the last 0 s" (main printed :.0f)
    window = re.search(r"of the last ([0-9.e-]+) s,", line[0])
    assert window and float(window.group(1)) > 0, line
    assert err < 0.05


@pytest.mark.no_daemon
def test_daemon_restart_mid_run(tmp_path, monkeypatch):
    """The loader reconnects and goes on at the next step, bit-identical; datasets
    reopen themselves on the new connection."""
    from conftest import daemon_binary, start_daemon, stop_daemon
    if not daemon_binary():
        pytest.skip("no zrecordd binary: set ZRECORDD")
    sockdir = tmp_path / "d"
    sockdir.mkdir()
    proc, sock = start_daemon(str(sockdir))
    saved = _conn._default
    _conn._default = None
    monkeypatch.setenv("ZRECORD_SOCKET", sock)
    try:
        if not _conn.default().has_feature("loader"):
            pytest.skip("this zrecordd's HELLO does not list the \"loader\" feature")
        from_numpy("r", DATA)
        ds = DenseDataset("r")
        ref = DataLoader({"r": ds}, batch_size=8, sampler="cyclic", seed=1)
        want = [np.array(next(ref)["r"]) for _ in range(10)]
        ref.close()
        loader = DataLoader({"r": ds}, batch_size=8, sampler="cyclic", seed=1, prefetch=2)
        got = [np.array(next(loader)["r"]) for _ in range(4)]
        assert stop_daemon(proc) == 0
        proc, _ = start_daemon(str(sockdir))
        got += [np.array(next(loader)["r"]) for _ in range(6)]
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(ds[3], DATA[3])      # the dataset reopened itself
        loader.close()
    finally:
        c = _conn._default
        if c is not None:
            c.close()
        _conn._default = saved
        stop_daemon(proc)


def test_datasets_pickle_for_spawned_processes(workdir):
    import multiprocessing as mp
    import pickle
    from loaderx.dataset import MSDataset
    from loaderx.zrecord import Zrecord
    from_numpy("p", DATA)
    from_numpy("set/a", np.arange(5))
    ds = pickle.loads(pickle.dumps(DenseDataset("p")))
    np.testing.assert_array_equal(ds[7], DATA[7])
    assert list(pickle.loads(pickle.dumps(MSDataset("set"))).streams) == ["a"]
    z = Zrecord("z")
    z.append([b"abc"])
    assert pickle.loads(pickle.dumps(z))[0] == b"abc"
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        rows = pool.apply(_read_rows, (DenseDataset("p"), [1, 2]))
    assert rows == DATA[[1, 2]].tolist()


def _read_rows(ds, idx):
    return ds[idx].tolist()


def _fresh_env(tmp_path, **extra):
    run = tmp_path / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.pop("ZRECORD_SOCKET", None)
    env.update(XDG_RUNTIME_DIR=str(run), ZRECORD_IDLE_EXIT="2", **extra)
    return run, env


@pytest.mark.no_daemon
def test_auto_start_races_share_one_daemon(tmp_path):
    binary = binary_for_auto_start()
    run, env = _fresh_env(tmp_path, ZRECORDD=binary)
    env["PYTHONPATH"] = PKG
    code = ("from loaderx import _conn; import os; c = _conn.default(); "
            "print(c.request('status')['daemon'], open(os.path.dirname(c.path) + '/zrecordd.pid').read().strip())")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    pids = {o.split()[-1] for o, _ in outs}
    assert len(pids) == 1, outs
    pid = int(pids.pop())
    deadline = time.monotonic() + 15
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        pytest.fail("the private daemon did not exit when idle")


@pytest.mark.no_daemon
def test_auto_start_reports_a_broken_binary(tmp_path):
    skip_if_a_default_daemon_answers()
    run, env = _fresh_env(tmp_path, ZRECORDD="/bin/false")
    env["PYTHONPATH"] = PKG
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", "from loaderx import _conn; _conn.default()"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "exited at once" in r.stderr
    assert time.monotonic() - t < 10
