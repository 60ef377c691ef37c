"""One rank of a multi-node job (torchrun), for test_multinode.py and as the
recipe of python-client/README.md ("Several nodes").

Each node runs its own zrecordd (here: the one ``ZRECORD_SOCKET`` names) over its
own copy of the stores (``--stores``, a path on the node). Rank 0 opens its loader
first and broadcasts its streams' fingerprint; every other rank opens with that
fingerprint, so a node whose stores hold other records refuses (StaleError) instead
of training on other batches. Every rank then reports whether its open worked (one
all_gather, so that no rank waits forever for a failed one), takes ``--steps``
batches from ``--start`` (or from ``--resume``, a state_dict saved by rank 0 of a
run of any world size with the same global batch), and rank 0 writes each step's
global batch, the ranks' slices in rank order, to ``--out`` (JSON), with its
state_dict after the last step.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loaderx.dataloader import DataLoader      # noqa: E402
from loaderx.dataset import DenseDataset        # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stores", required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--resume", default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"global batch {args.global_batch} does not split over {world} ranks")
    streams = {"x": DenseDataset(os.path.join(args.stores, "x")),
               "y": DenseDataset(os.path.join(args.stores, "y"))}
    state = None
    if args.resume:
        with open(args.resume) as f:
            state = json.load(f)

    def open_loader(fingerprint):
        loader = DataLoader(streams, batch_size=args.global_batch // world, sampler="cyclic",
                            seed=11, rank=rank, world_size=world, start_step=args.start,
                            fingerprint=fingerprint)
        if state is not None:
            loader.load_state_dict(state)     # checks the state's fingerprint too
        return loader

    loader, error = None, None
    fp = [None]
    if rank == 0:
        try:
            loader = open_loader(None)
            fp[0] = loader.fingerprint
        except Exception as e:                # reported below, with every rank's
            error = f"rank 0: {type(e).__name__}: {e}"
    dist.broadcast_object_list(fp, src=0)
    if rank != 0 and fp[0] is not None:
        try:
            loader = open_loader(fp[0])
        except Exception as e:
            error = f"rank {rank} (node {os.environ.get('GROUP_RANK', '?')}): {type(e).__name__}: {e}"
    errors = [None] * world
    dist.all_gather_object(errors, error)
    errors = [e for e in errors if e]
    if errors or fp[0] is None:
        if rank == 0:
            with open(args.out, "w") as f:
                json.dump({"errors": errors or ["rank 0 has no fingerprint"]}, f)
        dist.destroy_process_group()
        raise SystemExit(3)

    steps = []
    for _ in range(args.steps):
        b = next(loader)
        mine = {"x": np.asarray(b["x"]).tolist(), "y": np.asarray(b["y"]).tolist()}
        slices = [None] * world
        dist.all_gather_object(slices, mine)
        if rank == 0:
            steps.append({k: [row for s in slices for row in s[k]] for k in ("x", "y")})
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"world": world, "fingerprint": loader.fingerprint,
                       "state": loader.state_dict(), "steps": steps}, f)
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
