#!/usr/bin/env python3
"""A small training job on loaderx: make a dataset, train a model, print batches/s.

    python3 python-client/examples/train_loop.py            # loaderx installed (pip)
    PYTHONPATH=python-client ZRECORDD=build/daemon/zrecordd \
        python3 python-client/examples/train_loop.py        # from a source build

It writes a synthetic regression set with ``from_numpy`` (features and targets as
two streams), trains a linear model by minibatch SGD from an endless ``DataLoader``
(cyclic sampler) on the zrecordd the client finds or starts by itself (the embedded
default: no daemon needs to be running), checkpoints the loader mid-run and resumes
from it, and prints the loss, the loader's batches/s and, at its end, what the daemon
measured of the loader (``loader.stats()``: is the loop waiting for data, and why).
numpy only; torch is used for the model when installed and ``--torch`` is given.
"""

import argparse
import contextlib
import os
import shutil
import tempfile
import time

import numpy as np

# loaderx as the user's Python finds it (the installed package, or PYTHONPATH):
# never the checkout this file sits in, whose tree carries no daemon.
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.utils import from_numpy


def arguments(description, **defaults):
    """The examples' command line (examples/jax_train.py shares it)."""
    d = dict(records=16384, features=256, batch_size=256, steps=600, lr=0.05)
    d.update(defaults)
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--records", type=int, default=d["records"])
    ap.add_argument("--features", type=int, default=d["features"])
    ap.add_argument("--batch-size", type=int, default=d["batch_size"])
    ap.add_argument("--steps", type=int, default=d["steps"])
    ap.add_argument("--lr", type=float, default=d["lr"])
    ap.add_argument("--dir", default=None, help="where to write the dataset (default: a temp dir)")
    return ap


def make_dataset(args, work):
    """A synthetic regression set (features x, targets y) written with from_numpy
    under work/train; returns the true weights and the DataLoader's streams."""
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(args.features).astype(np.float32)
    x = rng.standard_normal((args.records, args.features), dtype=np.float32)
    y = (x @ w_true + 0.01 * rng.standard_normal(args.records)).astype(np.float32)

    t0 = time.perf_counter()
    from_numpy(os.path.join(work, "train", "x"), x)
    from_numpy(os.path.join(work, "train", "y"), y)
    t_write = time.perf_counter() - t0
    mib = (x.nbytes + y.nbytes) / 2**20
    print(f"dataset: {args.records} records x {args.features} float32 features "
          f"({mib:.1f} MiB) written in {t_write:.2f} s")
    return w_true, {"x": DenseDataset(os.path.join(work, "train", "x")),
                    "y": DenseDataset(os.path.join(work, "train", "y"))}


@contextlib.contextmanager
def work_dir(args, prefix):
    """--dir, or a temporary directory removed at the end."""
    work = args.dir or tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = arguments(__doc__.split("\n")[0])
    ap.add_argument("--torch", action="store_true", help="train the model with torch (CPU)")
    args = ap.parse_args()

    with work_dir(args, "loaderx-example-") as work:
        w_true, streams = make_dataset(args, work)

        if args.torch:
            import torch
            model = torch.nn.Linear(args.features, 1, bias=False)
            opt = torch.optim.SGD(model.parameters(), lr=args.lr)

            def to_tensors(batch):     # the transform: runs on a background thread
                return {k: torch.from_numpy(np.array(v)) for k, v in batch.items()}

            def train_step(batch):
                opt.zero_grad()
                loss = ((model(batch["x"]).squeeze(1) - batch["y"]) ** 2).mean()
                loss.backward()
                opt.step()
                return float(loss)
            transform = to_tensors
        else:
            w = np.zeros(args.features, dtype=np.float32)

            def train_step(batch):
                nonlocal w
                xb, yb = batch["x"], batch["y"]      # read-only views into the ring
                err = xb @ w - yb
                w -= args.lr * (2.0 / len(yb)) * (xb.T @ err)
                return float((err ** 2).mean())
            transform = None

        half = args.steps // 2
        loader = DataLoader(streams, batch_size=args.batch_size, sampler="cyclic", seed=0,
                            transform=transform, prefetch=4)
        t0 = time.perf_counter()
        for step, batch in enumerate(loader):
            loss = train_step(batch)
            if step % 100 == 0:
                print(f"step {step:5d}  loss {loss:.5f}")
            if step + 1 == half:
                break
        state = loader.state_dict()          # rides in a checkpoint
        t_first = time.perf_counter() - t0
        loader.close()

        # resume from the checkpoint in a new loader: the next batch is step `half`
        loader = DataLoader(streams, batch_size=args.batch_size, sampler="cyclic", seed=0,
                            transform=transform, prefetch=4)
        loader.load_state_dict(state)
        t1 = time.perf_counter()
        for batch in loader:
            step = loader.step - 1
            loss = train_step(batch)
            if step % 100 == 0:
                print(f"step {step:5d}  loss {loss:.5f}")
            if loader.step >= args.steps:
                break
        t_second = time.perf_counter() - t1
        stats = loader.stats()               # the daemon's telemetry of this loader
        loader.close()
        elapsed = t_first + t_second
        print(f"final loss {loss:.5f} after {args.steps} steps (resumed at step {half})")
        print(f"{args.steps / elapsed:.1f} batches/s "
              f"({args.steps * args.batch_size / elapsed:.0f} samples/s, training included)")
        # the verdict is "unknown" for a run too short to judge (under a second past
        # the wait for the first batch); the window is the last 10 s, or the run's life
        print(f"loader: {stats['verdict']} (most of its time: {stats['stage']}); the loop "
              f"waited for data {100 * stats['wait_fraction']['10s']:.1f} % of the last "
              f"{stats['window_s']:.3g} s, {stats['batches_per_s']['10s']:.1f} batches/s; "
              f"wait p99 {1e3 * stats['wait_p99_s']:.2f} ms, "
              f"gather p99 {1e3 * stats['gather_p99_s']:.2f} ms")
        if not args.torch:
            err = float(np.abs(w - w_true).max())
            print(f"max |w - w_true| = {err:.4f}")


if __name__ == "__main__":
    main()
