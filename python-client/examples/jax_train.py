#!/usr/bin/env python3
"""Batches on the device with jax: a linear model trained by jax.jit from a DataLoader.

    pip install jax jaxlib        # CPU jax from PyPI; a GPU build the same way
    python3 python-client/examples/jax_train.py

It writes a synthetic regression set with ``from_numpy``, and the DataLoader's
transform puts each batch on the device with ``jax.device_put``: the transform runs
on the loader's threads, so the copy to the device overlaps the next gather, and the
batch's ring slot goes back to the daemon once the copy is made. The training step
is one ``jax.jit`` function of (weights, batch). It prints the loss, the distance to
the true weights and batches/s.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from loaderx.dataloader import DataLoader   # noqa: E402
from loaderx.dataset import DenseDataset     # noqa: E402
from loaderx.utils import from_numpy         # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=8192)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--dir", default=None, help="where to write the dataset (default: a temp dir)")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    work = args.dir or tempfile.mkdtemp(prefix="loaderx-jax-")
    try:
        rng = np.random.default_rng(0)
        w_true = rng.standard_normal(args.features).astype(np.float32)
        x = rng.standard_normal((args.records, args.features), dtype=np.float32)
        y = (x @ w_true + 0.01 * rng.standard_normal(args.records)).astype(np.float32)
        from_numpy(os.path.join(work, "x"), x)
        from_numpy(os.path.join(work, "y"), y)

        def to_device(batch):
            # device_put copies the ring's views to the device (a read-only view
            # is never aliased: tests/test_jax.py checks), so the slot can go back
            return jax.device_put(batch, device)

        loader = DataLoader({"x": DenseDataset(os.path.join(work, "x")),
                             "y": DenseDataset(os.path.join(work, "y"))},
                            batch_size=args.batch_size, sampler="cyclic", seed=0,
                            transform=to_device, num_workers=2)

        @jax.jit
        def step(w, batch):
            def loss(w):
                return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
            value, grad = jax.value_and_grad(loss)(w)
            return w - args.lr * grad, value

        w = jax.device_put(jnp.zeros(args.features, jnp.float32), device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            batch = next(loader)
            assert all(v.devices() == {device} for v in batch.values())
            w, value = step(w, batch)
        value.block_until_ready()
        dt = time.perf_counter() - t0
        loader.close()
        err = float(np.max(np.abs(np.asarray(w) - w_true)))
        print(f"device {device}: final loss {float(value):.5f} after {args.steps} steps")
        print(f"{args.steps / dt:.1f} batches/s (training included)")
        print(f"max |w - w_true| = {err:.4f}")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
