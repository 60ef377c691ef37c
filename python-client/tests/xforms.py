"""Transforms for test_transform_workers.py, at module level so that a worker
process can import them (a DataLoader runs them in processes by default)."""

import os
import signal
import time

import numpy as np


def mapping_of(address):
    """The /proc/self/maps name of the mapping that holds `address`."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= address < hi:
                return parts[5] if len(parts) > 5 else ""
    return None


def double(b):
    return {"x": b["x"] * 2, "y": np.array(b["y"]), "sum": int(b["y"].sum())}


def identity(b):
    return b


def flipped(b):
    """A view of the batch with negative strides and an offset (a flip of both
    axes, a crop of a column)."""
    return {"x": b["x"][::-1, :0:-1], "y": b["y"]}


def uneven(b):
    """Takes longer for some steps than others, so workers finish out of order."""
    y = np.array(b["y"])
    t = time.monotonic() + 0.004 * (int(y[0]) % 3)
    while time.monotonic() < t:
        pass
    return {"y": y, "x0": b["x"][:, 0].copy()}


def where(b):
    """Where the batch lives in this process: (pid, writable, mapping)."""
    x = b["x"]
    return {"pid": os.getpid(), "writeable": bool(x.flags.writeable),
            "mapping": mapping_of(x.ctypes.data), "y": np.array(b["y"])}


def wide(x):
    """x as float64, each row 64 times as long: arrays large enough for the arena."""
    return np.repeat(np.asarray(x, dtype=np.float64), 64, axis=1)


def big(b):
    """An output of a large array (into the arena), a small one and a scalar."""
    return {"x": wide(b["x"]) + 1, "y": np.array(b["y"]), "n": len(b["y"])}


def bare(b):
    """A large array alone: described in the worker's answer, not pickled."""
    return wide(b["x"]) * 3


def arrays_only(b):
    """A dict of large arrays alone, one new (into the arena), one a view of
    the batch (back as that view of the ring)."""
    return {"w": b["x"] * 2, "v": b["x"][::-1]}


def nested(b):
    x = wide(b["x"])
    return [x, (x * 2, {"deep": [x * 3]}), "text", {"y": np.array(b["y"])}]


def draws(b, rng, rngs):
    return {"y": np.array(b["y"]), "batch": rng.random(4),
            "records": np.array([rngs[j].random() for j in range(len(rngs))])}


def raises(b):
    y = int(b["y"][0])
    if y % 2 == 0:
        raise KeyError(f"record {y}")
    return y


class Unpicklable(Exception):
    def __init__(self, fh):
        super().__init__("an exception holding a file")
        self.fh = fh

    def __reduce__(self):
        raise TypeError("cannot pickle this exception")


def raises_unpicklable(b):
    raise Unpicklable(open(os.devnull))


def dies_at(b):
    """Kills its own worker at the step whose first record is 8."""
    if int(b["y"][0]) == 8:
        os.kill(os.getpid(), signal.SIGKILL)
    return np.array(b["y"])


def dies_once(b):
    """Kills its worker the first time it meets record 8 (a file marks it)."""
    mark = os.environ["XFORMS_MARK"]
    if int(b["y"][0]) == 8 and not os.path.exists(mark):
        open(mark, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return np.array(b["y"])


def slow(b):
    t = time.monotonic() + 30
    while time.monotonic() < t:
        pass
    return b["y"].sum()


class DeviceArray:
    """Stands for an array on an accelerator (its module says so)."""
    def __init__(self, a):
        self.a = a


DeviceArray.__module__ = "jax.xforms"


def to_device(b):
    return {"y": DeviceArray(np.array(b["y"]))}


def ragged(b):
    return [np.asarray(r, dtype=np.int64) * 2 for r in b["t"]]


def tensors(b):
    import torch
    return {"x": torch.from_numpy(wide(b["x"])),
            "y": torch.from_numpy(np.array(b["y"]))}


def with_meta(b):
    from loaderx.dataloader import INDEX_KEY
    return {"idx": np.array(b[INDEX_KEY]), "y": np.array(b["y"])}


class Scale:
    """A picklable object as a transform."""
    def __init__(self, k):
        self.k = k

    def __call__(self, b):
        return np.asarray(b["y"]) * self.k


def shifting(b):
    """Outputs whose form changes with the step (batches of 16 in order), each
    of 128 KiB: an array, a dict of two arrays, an array of another shape, a
    view of a new array."""
    x = wide(b["x"])
    y0 = int(b["y"][0])
    k = (y0 // 16) % 4
    if k == 0:
        return x + y0
    if k == 1:
        return {"a": x[:8] * 2, "b": x[8:] + y0}
    if k == 2:
        return x.reshape(8, 2048) + 1
    return (x - y0)[::-1]
