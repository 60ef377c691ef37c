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
             its own local cache (cache_limit), shuffled in blocks of 4
             shards, through torch's DataLoader in the process (no workers):
             whole shards downloaded per process
  litdata    litdata.StreamingDataset over its optimized chunks at s3://,
             its own cache (max_cache_size), shuffled, through its
             StreamingDataLoader in the process (no workers)
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
    # its shuffle reads a block of shards at a time: a block of 4 shards (2 MiB
    # each) fits a cache of a third of the store; its default (262,144 samples)
    # does not, and it waits for room forever
    per_shard = max(1, (2 << 20) // p["record"])
    ds = StreamingDataset(remote=p["url"], local=p["local"], shuffle=True, batch_size=p["batch"],
                          shuffle_seed=p["seed"], cache_limit=p["cache_bytes"],
                          shuffle_block_size=4 * per_shard, predownload=p["batch"])
    # no loader workers: with a cache this small, two workers that each hold
    # shards wait on each other for room
    dl = torch.utils.data.DataLoader(ds, batch_size=p["batch"], num_workers=0,
                                     collate_fn=lambda rows: rows)
    while True:
        for rows in dl:
            yield len(rows), sum(len(r["x"]) for r in rows)


def litdata_batches(p):
    import torch
    import litdata
    try:
        # its S3 client (obstore) refuses a plain-http endpoint unless told
        from litdata.streaming import downloader
        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
    except (ImportError, AttributeError, TypeError):
        pass
    ds = litdata.StreamingDataset(p["url"], shuffle=True, seed=p["seed"],
                                  max_cache_size=p["cache_bytes"], cache_dir=p["local"],
                                  storage_options={"endpoint_url": p["endpoint"]})
    # no loader workers: with 2, the workers and the loader all wait at the
    # warm-up (for 300 s and more) once the cache of a third of the store is full
    dl = litdata.StreamingDataLoader(ds, batch_size=p["batch"], num_workers=0,
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
