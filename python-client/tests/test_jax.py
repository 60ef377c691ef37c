"""JAX: examples/jax_train.py trains from batches put on the device by the
DataLoader's transform, and a device array made from a batch does not change when
the batch's ring slot is refilled (device_put copies the ring's read-only views).
Skipped without jax (scripts/setup.sh installs its CPU build; scripts/test.sh
runs this file in a pytest process of its own)."""

import gc

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy

from conftest import run_example

jax = pytest.importorskip("jax")


def test_device_arrays_outlive_their_slots(workdir, loader_feature):
    a = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    from_numpy("s", a)
    device = jax.devices()[0]
    loader = DataLoader({"s": DenseDataset("s")}, batch_size=8, sampler="sequential",
                        prefetch=2, transform=lambda b: jax.device_put(b, device))
    first = next(loader)["s"]
    assert first.devices() == {device}
    for _ in range(16):                  # every slot refilled many times over
        next(loader)
        gc.collect()
    np.testing.assert_array_equal(np.asarray(first), a[:8])
    loader.close()


def test_example_jax_train(workdir, loader_feature):
    out, err = run_example(workdir, "jax_train.py", "--records", "2048", "--features", "16",
                           "--steps", "150")
    assert err < 0.05, out
