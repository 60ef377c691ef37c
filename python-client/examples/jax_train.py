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

import time

import numpy as np

# loaderx as the user's Python finds it (see train_loop.py); train_loop is this
# directory's, which Python puts first on sys.path for a script.
from loaderx.dataloader import DataLoader
from train_loop import arguments, make_dataset, work_dir


def main():
    args = arguments(__doc__.split("\n")[0], records=8192, features=64, steps=300,
                     lr=0.1).parse_args()

    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    with work_dir(args, "loaderx-jax-") as work:
        w_true, streams = make_dataset(args, work)

        def to_device(batch):
            # device_put copies the ring's views to the device (a read-only view
            # is never aliased: tests/test_jax.py checks), so the slot can go back
            return jax.device_put(batch, device)

        loader = DataLoader(streams, batch_size=args.batch_size, sampler="cyclic", seed=0,
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


if __name__ == "__main__":
    main()
