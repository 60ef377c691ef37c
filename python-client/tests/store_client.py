"""A client of one daemon, driven line by line, for test_shared_store.py: it stands
for a training process of its own (its own connection to the daemon that
``ZRECORD_SOCKET`` names) and holds what it opened until told to close it.

Each line on stdin is a JSON command; each answer is one JSON line on stdout,
``{"ok": ...}`` or ``{"error": name, "message": ...}``:

- ``{"op": "open", "path": P}``: ``open_dataset(P)``; ``{"writable", "length"}``
- ``{"op": "msset", "path": P}``: ``MSDataset(P)``; ``{"names", "length"}``
- ``{"op": "loader", "paths": {stream: P}, "batch": B, "seed": S, "steps": K}``
  (or ``"set": P`` for the streams of an MSDataset): K batches of an iid
  DataLoader, each stream's bytes as hex; the loader stays open
- ``{"op": "read", "path": P}``: every record of the dataset opened at P, as hex
- ``{"op": "append", "path": P, "value": V}`` (or ``"set": P``): one record of
  V's (float32, the dataset's item shape) to the dataset (each stream) opened
  at P; the new length
- ``{"op": "close"}``: closes every loader and dataset it holds
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loaderx.dataloader import DataLoader                 # noqa: E402
from loaderx.dataset import MSDataset, open_dataset       # noqa: E402
from loaderx._errors import ZrecordError                  # noqa: E402

held = {}      # path -> dataset or MSDataset
loaders = []


def one_record(ds, value):
    shape = tuple(ds.item_shape)
    return np.full((1,) + shape, value, dtype=ds.dtype)


def run(cmd):
    op = cmd["op"]
    if op == "open":
        ds = held[cmd["path"]] = open_dataset(cmd["path"])
        return {"writable": ds.writable, "length": len(ds)}
    if op == "msset":
        ms = held[cmd["path"]] = MSDataset(cmd["path"])
        return {"names": ms.names, "length": len(ms.streams[ms.names[0]])}
    if op == "loader":
        if "set" in cmd:
            streams = held[cmd["set"]].streams
        else:
            streams = {k: held[p] for k, p in cmd["paths"].items()}
        loader = DataLoader(streams, batch_size=cmd["batch"], sampler="iid", seed=cmd["seed"])
        loaders.append(loader)
        out = []
        for _ in range(cmd["steps"]):
            b = next(loader)
            out.append({k: np.ascontiguousarray(v).tobytes().hex() for k, v in b.items()})
        return out
    if op == "read":
        ds = held[cmd["path"]]
        return np.ascontiguousarray(ds[:]).tobytes().hex()
    if op == "append":
        if "set" in cmd:
            ms = held[cmd["set"]]
            ms.append({n: one_record(ms.streams[n], cmd["value"]) for n in ms.names})
            return len(ms.streams[ms.names[0]])
        ds = held[cmd["path"]]
        ds.append(one_record(ds, cmd["value"]))
        return len(ds)
    if op == "close":
        for loader in loaders:
            loader.close()
        loaders.clear()
        for ds in held.values():
            ds.close()
        held.clear()
        return None
    raise ValueError(f"unknown op {op!r}")


def main():
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            answer = {"ok": run(cmd)}
        except ZrecordError as e:
            answer = {"error": e.name, "message": e.message}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
