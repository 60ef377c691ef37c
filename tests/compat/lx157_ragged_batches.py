#!/usr/bin/env python3
"""lx157_ragged_batches.py: batches of PyPI loaderx 1.5.7's own DataLoader over a
ragged store, as JSON.

    /tmp/lx157/bin/python tests/compat/lx157_ragged_batches.py DIR B MODE SEED STEP...

prints one JSON list per STEP: the batch's records, each [shape, values], read by
loaderx 1.5.7 from its RaggedDataset at DIR. Steps 0 and 1 come from its
DataLoader itself (one worker, so in step order); a later step from what that
loader's gather thread does at that step, `ds.__getitems__(sampler.next())` after
`Sampler.seek(STEP)` (its loader cannot seek). python-client/tests/
test_lx157_interop.py compares zrecord's DataLoader with them.
"""
import json
import sys

import loaderx
from loaderx.dataloader import DataLoader
from loaderx.dataset import RaggedDataset
from loaderx.sampler import Sampler


def records(batch):
    return [[list(r.shape), r.reshape(-1).tolist()] for r in batch]


def main():
    if getattr(loaderx, "__version__", None) != "1.5.7" or not hasattr(loaderx, "_lib"):
        sys.exit("this needs PyPI loaderx 1.5.7 (a venv of its own), not %s" % loaderx.__file__)
    path, b, mode, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    steps = [int(s) for s in sys.argv[5:]]
    ds = RaggedDataset(path)
    loader = DataLoader({"x": ds}, num_workers=1, batch_size=b, prefetch_size=2, mode=mode,
                        seed=seed)
    first = [next(loader)["x"], next(loader)["x"]]
    loader.close()
    for s in steps:
        if s < 2:
            print(json.dumps(records(first[s])))
            continue
        sampler = Sampler(len(ds), b, mode, seed)
        sampler.seek(s)
        print(json.dumps(records(ds.__getitems__(sampler.next()))))
    ds.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
