"""One training process of the remote layer (remote.py): reads batches of one
contender from object storage, warms up, waits at the barrier, times its steps.

    python3 remote_worker.py JSON_PARAMS

Prints "ready" after the warm-up, reads one line ("go"), then prints one JSON
line: {"steps": n, "t0": ..., "t1": ..., "records": ..., "bytes": ...}
(times CLOCK_MONOTONIC, so that the parent can take the union of windows).

Contenders:
  zrecord    loaderx DataLoader over DenseDataset("s3://..."), sampler iid;
             the daemon (ZRECORD_SOCKET) fetches ahead into its disk cache
  streaming  MosaicML Streaming StreamingDataset over MDS shards at s3://,
             its own local cache (cache_limit), shuffled, through torch's
             DataLoader with 2 workers: whole shards downloaded per process
  litdata    litdata.StreamingDataset over its optimized chunks at s3://,
             its own cache (max_cache_size), shuffled, torch DataLoader with 2
             workers
"""

import json
import os
import sys
import time


def zrecord_batches(p):
    sys.path.insert(0, p["pyclient"])
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset
    loader = DataLoader({"x": DenseDataset(p["url"])}, batch_size=p["batch"], sampler="iid",
                        seed=p["seed"], prefetch=4)
    while True:
        b = next(loader)
        x = b["x"]
        yield x.shape[0], x.nbytes
        del b, x


def streaming_batches(p):
    import torch
    from streaming import StreamingDataset
    ds = StreamingDataset(remote=p["url"], local=p["local"], shuffle=True, batch_size=p["batch"],
                          shuffle_seed=p["seed"], cache_limit=p["cache_bytes"],
                          predownload=8 * p["batch"])
    dl = torch.utils.data.DataLoader(ds, batch_size=p["batch"], num_workers=2,
                                     collate_fn=lambda rows: rows)
    while True:
        for rows in dl:
            yield len(rows), sum(len(r["x"]) for r in rows)


def litdata_batches(p):
    import torch
    import litdata
    ds = litdata.StreamingDataset(p["url"], shuffle=True, seed=p["seed"],
                                  max_cache_size=p["cache_bytes"], cache_dir=p["local"],
                                  storage_options={"endpoint_url": p["endpoint"]})
    dl = litdata.StreamingDataLoader(ds, batch_size=p["batch"], num_workers=2,
                                     collate_fn=lambda rows: rows)
    del torch
    while True:
        for rows in dl:
            yield len(rows), sum(len(r) for r in rows)


def main():
    p = json.loads(sys.argv[1])
    gen = {"zrecord": zrecord_batches, "streaming": streaming_batches,
           "litdata": litdata_batches}[p["kind"]](p)
    for _ in range(p["warm"]):
        next(gen)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    t0 = time.monotonic()
    records = nbytes = steps = 0
    deadline = t0 + p["seconds"]
    while steps < p["steps"] and (steps < 2 or time.monotonic() < deadline):
        n, b = next(gen)
        records += n
        nbytes += b
        steps += 1
    t1 = time.monotonic()
    print(json.dumps({"steps": steps, "t0": t0, "t1": t1, "records": records, "bytes": nbytes}),
          flush=True)
    os._exit(0)   # the peers' loader workers: gone with the process


if __name__ == "__main__":
    sys.exit(main())
