"""The daemon pins its worker threads, one CPU each, when they fit
(``pin-workers``, daemon/util/pool.h), and leaves them to the kernel when told not
to or when there are more workers than CPUs."""
import os
import shutil
import tempfile

import pytest

from conftest import daemon_binary, start_daemon, stop_daemon


def masks(pid):
    """The CPU list each thread of pid may run on, by thread name."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        out.append(_cpus(fields["Cpus_allowed_list"]))
    return out


def _cpus(text):
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


@pytest.fixture
def own_daemon():
    if not daemon_binary():
        pytest.skip("no zrecordd binary")
    procs, dirs = [], []

    def start(*args):
        dirs.append(tempfile.mkdtemp(prefix="loaderx-pin-"))
        proc, _ = start_daemon(dirs[-1], *args)
        procs.append(proc)
        return proc
    yield start
    for p in procs:
        assert stop_daemon(p) == 0
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def test_workers_pinned_one_cpu_each(own_daemon):
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU: a pinned worker's mask is the whole set")
    proc = own_daemon("--threads=2")
    ms = masks(proc.pid)
    single = [m for m in ms if len(m) == 1]
    assert len(single) == 2, ms                      # the workers, and only they
    assert len(set(single)) == 2                     # no two on one CPU
    assert all(m <= allowed for m in single)
    # the loop and the other threads keep the whole set
    assert all(m == allowed for m in ms if len(m) != 1), ms


def test_not_pinned_when_told_or_when_they_do_not_fit(own_daemon):
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU: a pinned worker's mask is the whole set")
    proc = own_daemon("--threads=2", "--pin-workers=no")
    assert all(m == allowed for m in masks(proc.pid))
    proc = own_daemon(f"--threads={len(allowed) + 1}")
    assert all(m == allowed for m in masks(proc.pid))
