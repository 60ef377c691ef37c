"""A new user's small stumbles, each answered clearly (issue 38 item 7): integers past
the protocol's 64 bits, a path where a dataset belongs, a full disk as an OSError,
no ResourceWarning at exit, a state_dict() that survives JSON read as doubles, and
the README's defaults equal to the signature's."""

import errno
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from loaderx import ZrecordError
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import PKG

pytestmark = pytest.mark.usefixtures("loader_feature")


@pytest.fixture
def wine(workdir):
    from_numpy("wine_x", np.arange(40, dtype=np.float32).reshape(20, 2))
    return {"x": DenseDataset("wine_x")}


@pytest.mark.parametrize("what", ["start_step", "seed"])
def test_integers_past_64_bits(wine, what):
    # before: a bare OverflowError from the wire encoder, naming nothing
    with pytest.raises(ValueError, match=f"{what} must be below 2\\*\\*64, got {2**64}"):
        DataLoader(wine, batch_size=4, **{what: 2 ** 64})
    with DataLoader(wine, batch_size=4, **{what: 2 ** 64 - 1}) as dl:
        next(dl)


def test_a_path_where_a_dataset_belongs(wine):
    # before: "DataLoader takes a mapping {name: dataset}, ..., not dict"
    with pytest.raises(TypeError, match=r"stream 'x' is the path 'wine_x', not a dataset: "
                                        r"open it first, \{'x': DenseDataset\('wine_x'\)\}"):
        DataLoader({"x": "wine_x"}, batch_size=4)
    with pytest.raises(TypeError, match="stream 'x': expected a DenseDataset or RaggedDataset, "
                                        "got int"):
        DataLoader({"x": 3}, batch_size=4)
    with pytest.raises(TypeError, match="takes a mapping .* not int"):
        DataLoader(3, batch_size=4)


def test_full_disk_is_an_oserror(workdir):
    """A store written on a full file system (a tmpfs of 256 KiB): an OSError whose
    errno is ENOSPC, still a ZrecordError (a RuntimeError); before, a RuntimeError
    only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = workdir / "small"
    small.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        with pytest.raises(OSError) as e:
            from_numpy(str(small / "big"), np.ones((64, 8192), dtype=np.float32), codec="raw")
        assert e.value.errno == errno.ENOSPC, e.value
        assert isinstance(e.value, ZrecordError) and isinstance(e.value, RuntimeError)
        assert "ENOSPC" in str(e.value)
        assert not os.path.exists(small / "big")      # all or nothing
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_no_resource_warning_at_exit(wine, workdir):
    """A script that leaves its datasets and loader open exits without Python's
    "ResourceWarning: unclosed socket" (before: the default connection's)."""
    script = textwrap.dedent("""
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        ds = DenseDataset("wine_x")
        print(ds[3])
        dl = DataLoader({"x": ds}, batch_size=4)
        next(dl)
    """)
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True,
                       text=True, timeout=120, cwd=workdir, env=env)
    assert r.returncode == 0, r.stderr
    assert "ResourceWarning" not in r.stderr, r.stderr


def test_state_survives_json_read_as_doubles(wine):
    """The fingerprint (64 bits) is kept as 16 hexadecimal digits: a state_dict()
    written as JSON and read by a reader whose numbers are doubles resumes; before,
    the int lost its low bits and the resume was refused as other records."""
    with DataLoader(wine, batch_size=4, seed=5) as dl:
        next(dl)
        state = dl.state_dict()
        after = next(dl)["x"].copy()
    assert state["fingerprint"] == f"{dl.fingerprint:016x}"
    as_doubles = json.loads(json.dumps(state), parse_int=float)
    as_doubles = {k: int(v) if isinstance(v, float) else v for k, v in as_doubles.items()}
    with DataLoader(wine, batch_size=4, seed=5) as dl:
        dl.load_state_dict(as_doubles)
        np.testing.assert_array_equal(next(dl)["x"], after)
    # the int form (a loader's .fingerprint, older states) is taken as before
    with DataLoader(wine, batch_size=4, seed=5, fingerprint=dl.fingerprint) as again:
        again.load_state_dict(dict(state, fingerprint=dl.fingerprint))
        np.testing.assert_array_equal(next(again)["x"], after)
    with pytest.raises(ValueError, match="16 hexadecimal digits"):
        DataLoader(wine, batch_size=4, fingerprint="not-a-fingerprint")


def test_readme_defaults_match_the_signature():
    """The README's DataLoader signature names the code's parameters with their
    defaults (where the code's is not None: a default chosen at run time), and its
    transforms' num_workers default is the code's."""
    readme = open(os.path.join(PKG, "README.md")).read()
    sig = inspect.signature(DataLoader).parameters
    written = re.search(r"`DataLoader\(streams, ([^`]*)\)`", readme).group(1)
    for p in written.split(", "):
        if p == "*":
            continue
        name, value = p.split("=")
        assert name in sig, name
        if sig[name].default is not None:
            assert value == repr(sig[name].default), (name, value, sig[name].default)
    m = re.search(r"`transform` runs on `num_workers` workers \(default (\d+)\)", readme)
    assert m and int(m.group(1)) == sig["num_workers"].default
