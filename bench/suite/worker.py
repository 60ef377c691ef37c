"""worker.py: the child-process side of the suite.

Runs with only the standard library and numpy at import time, so it also runs
under the PyPI loaderx 1.5 virtual environment (whose package is also named
`loaderx`: that process never sees ours). Two modes:

  python -m suite.worker store          JSON-lines server: write / sweep / gather
                                        through PyPI loaderx 1.5 (run in its venv)
  python -m suite.worker loader JSON    one loader run: prints "ready" after the
                                        warm-up, waits for "go" on stdin (unless
                                        params["go"] is false), times `steps`
                                        batches, prints one JSON line

Every consumer reads one byte of each batch, so a batch must really arrive.
make_iter() builds every contender's loader (zrecord, torch, Grain, Streaming,
PyPI loaderx 1.5, and numpy's fancy index on a .npy mapping); the beyond-memory
layer's suite.beyond_worker uses it too.
"""

import json
import os
import sys
import time

import numpy as np

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
PYCLIENT = os.path.join(REPO, "python-client")
STUBS = os.path.join(BENCH, "suite", "stubs")


# ----------------------------------------------------------------- transforms
def augment(x):
    """The CPU-heavy transform: per sample (a Python loop, as augmentations
    are), a 2x downsample to float32, a flip of every other sample, a 3-tap
    blur and a shift. Takes uint8 (B, H, W), gives float32 (B, H/2, W/2)."""
    x = np.asarray(x)
    b, h, w = x.shape
    out = np.empty((b, h // 2, w // 2), np.float32)
    for i in range(b):
        s = x[i, ::2, ::2].astype(np.float32) * (1.0 / 255.0)
        if i & 1:
            s = s[:, ::-1]
        out[i] = (s + np.roll(s, 1, 0) + np.roll(s, 1, 1)) * (1.0 / 3.0) - 0.5
    return out


def augment_dict(batch):
    return {"x": augment(batch["x"])}


def py_features(x):
    """The pure-Python transform: per sample, a 16-bin histogram of every 8th
    pixel of every 8th row, counted in a Python loop (it holds the GIL, as
    tokenizing or parsing does); the images pass on as they came. Takes uint8
    (B, H, W), gives {"x": the images, "hist": int32 (B, 16)}."""
    x = np.asarray(x)
    hist = np.empty((x.shape[0], 16), np.int32)
    for i in range(x.shape[0]):
        h = [0] * 16
        for v in x[i, ::8, ::8].tobytes():
            h[v >> 4] += 1
        hist[i] = h
    return {"x": x, "hist": hist}


def py_features_dict(batch):
    return py_features(batch["x"])


def copy_out(batch):
    """The hop's own transform: a copy of the batch, a new array (written once
    into the arena by a worker process; the batch itself would come back as a
    view of the ring, copied 0 times)."""
    return np.array(batch["x"])


# transforms of the loader layer by name: (zrecord's, on a batch dict; the
# others', on the (B, H, W) array)
TRANSFORMS = {"numpy": (augment_dict, augment), "python": (py_features_dict, py_features),
              "copy": (copy_out, np.asarray)}


def cpu_seconds(pids):
    """User + system CPU seconds of processes (0 for one that is gone)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def descendants():
    """This process's descendants (worker processes of every loader)."""
    sys.path.insert(0, BENCH)
    from suite.common import tree
    return sorted(tree([os.getpid()]) - {os.getpid()})


class NpySource:
    """Grain's random-access data source over a .npy (np.load mmap_mode='r',
    opened in each worker): record i is image i."""

    def __init__(self, path):
        self.path, self.m = path, None
        self.n = int(np.load(path, mmap_mode="r").shape[0])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.m is None:
            self.m = np.load(self.path, mmap_mode="r")
        return np.array(self.m[i])

    def __getstate__(self):
        return {"path": self.path, "m": None, "n": self.n}


class GrainTransform:
    """A grain MapTransform over a batch, by transform name (picklable)."""

    def __init__(self, name):
        self.name = name

    def map(self, x):
        return TRANSFORMS[self.name][1](x)


def identity_collate(x):
    return x


def touch(x):
    """Reads one element: the batch must have arrived."""
    if isinstance(x, dict):
        x = x["x"]
    if hasattr(x, "numpy"):
        x = x.numpy()
    return float(np.asarray(x).reshape(-1)[0])


# ------------------------------------------------------------ PyPI loaderx 1.5
def store_server():
    """JSON lines in, JSON lines out, for the store layer's PyPI loaderx rows."""
    from loaderx.dataset import DenseDataset
    from loaderx.utils import from_numpy
    ds = None
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "write":
            arr = np.load(cmd["npy"], mmap_mode="r")
            arr = np.ascontiguousarray(arr)          # in memory, like every writer's source
            t0 = time.perf_counter()
            from_numpy(cmd["path"], arr, codec=cmd["codec"])
            secs = time.perf_counter() - t0
            del arr
            ds = DenseDataset(cmd["path"])
            reply = {"secs": secs}
        elif op == "sweep":
            n, step = len(ds), int(cmd["step"])
            for s in range(0, n, step):
                ds.__getitems__(np.arange(s, min(n, s + step)))
            reply = {}
        elif op == "gather":
            idx = np.asarray(cmd["idx"], np.int64)
            t0 = time.perf_counter()
            out = ds.__getitems__(idx)
            secs = time.perf_counter() - t0
            reply = {"secs": secs, "sum": int(out.view(np.uint64).sum()) if cmd.get("check") else 0}
        elif op == "close":
            if ds is not None:
                ds.close()
            ds = None
            reply = {}
        else:
            reply = {"error": f"unknown op {op}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


# --------------------------------------------------------------- loader runs
class NpyDataset:
    """A map-style torch dataset over a .npy (np.load mmap_mode='r', opened in
    each worker), batched through __getitems__; `heavy` applies augment()."""

    def __init__(self, path, heavy):
        self.path, self.heavy, self.m = path, heavy, None
        self.n = int(np.load(path, mmap_mode="r").shape[0])

    def __len__(self):
        return self.n

    def _arr(self):
        if self.m is None:
            self.m = np.load(self.path, mmap_mode="r")
        return self.m

    def __getitem__(self, i):
        import torch
        return torch.from_numpy(np.array(self._arr()[i]))

    def __getitems__(self, idxs):
        import torch
        x = self._arr()[np.asarray(idxs, np.int64)]
        if self.heavy in TRANSFORMS:
            out = TRANSFORMS[self.heavy][1](x)
            return {k: torch.from_numpy(v) for k, v in out.items()} if isinstance(out, dict) \
                else torch.from_numpy(out)
        if self.heavy:
            x = augment(x)
        return torch.from_numpy(x)


def grain_python():
    """grain.python, ready to run outside absl's app.run: Grain 0.2.18 reads its
    absl flags when a DataLoader starts worker processes, and an unparsed flag
    set raises UnparsedFlagAccessError, so mark them parsed (their defaults)."""
    import grain.python as gp
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    return gp


def make_iter(p):
    kind, B, heavy, seed = p["kind"], p["batch"], p["heavy"], p["seed"]
    if kind == "zrecord":
        sys.path.insert(0, PYCLIENT)
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        if p.get("transform"):         # the transforms table: workers and k as given
            k = p["workers_k"]
            dl = DataLoader({"x": DenseDataset(p["store"])}, batch_size=B, sampler="iid",
                            seed=seed, transform=TRANSFORMS[p["transform"]][0], num_workers=k,
                            workers=p.get("workers"), prefetch=max(4, 2 * k))
            return dl, dl
        dl = DataLoader({"x": DenseDataset(p["store"])}, batch_size=B, sampler=p.get("sampler", "iid"),
                        seed=seed, start_step=p.get("start_step", 0), prefetch=p.get("prefetch", 4),
                        transform=augment_dict if heavy else None, num_workers=2 if heavy else 0,
                        with_indices=p.get("with_indices", False))
        return dl, dl
    if kind == "npy":
        # numpy's own answer: a fancy index on the .npy's mapping, uniform
        # draws with replacement, on the calling thread
        import mmap
        arr = np.load(p["npy"], mmap_mode="r")
        if p.get("madvise") == "random":
            arr._mmap.madvise(mmap.MADV_RANDOM)
        rng = np.random.default_rng(seed)
        sequential = p.get("sampler") == "sequential"

        def batches():
            step = 0
            while True:
                if sequential:     # a first pass in order: the batch's slice, copied
                    lo = (step * B) % (len(arr) - B + 1)
                    x = np.array(arr[lo:lo + B])
                else:
                    x = arr[rng.integers(0, len(arr), B)]
                step += 1
                yield augment(x) if heavy else x
        return batches(), None
    if kind == "loaderx15":
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        dl = DataLoader({"x": DenseDataset(p["store"])}, num_workers=2, batch_size=B,
                        prefetch_size=4, mode=1, seed=seed,
                        transform=augment_dict if heavy else (lambda b: b))
        return dl, dl
    if kind == "torch":
        import torch
        from torch.utils.data import DataLoader, RandomSampler
        ds = NpyDataset(p["npy"], p.get("transform") or heavy)
        g = torch.Generator()
        g.manual_seed(seed)
        total = (p["steps"] + p.get("warm_max", p["warm"]) + 8) * B
        dl = DataLoader(ds, batch_size=B, sampler=RandomSampler(ds, replacement=True, num_samples=total,
                                                                 generator=g),
                        num_workers=p.get("workers", 2), collate_fn=identity_collate,
                        persistent_workers=p.get("workers", 2) > 0, drop_last=True)
        return iter(dl), dl
    if kind == "grain_npy":
        gp = grain_python()

        class Transform(GrainTransform, gp.MapTransform):
            pass
        dl = gp.DataLoader(data_source=NpySource(p["npy"]),
                           sampler=gp.IndexSampler(num_records=p["n"], shard_options=gp.NoSharding(),
                                                   shuffle=True, num_epochs=None, seed=seed),
                           operations=[gp.Batch(B, drop_remainder=True), Transform(p["transform"])],
                           worker_count=p["workers_k"])
        return iter(dl), dl
    if kind == "grain":
        gp = grain_python()

        class Parse(gp.MapTransform):
            def map(self, rec):
                return np.frombuffer(rec, np.uint8).reshape(p["shape"])

        class Heavy(gp.MapTransform):
            def map(self, batch):
                return augment(batch)

        ops = [Parse(), gp.Batch(B, drop_remainder=True)] + ([Heavy()] if heavy else [])
        dl = gp.DataLoader(data_source=gp.ArrayRecordDataSource(p["arrayrecord"]),
                           sampler=gp.IndexSampler(num_records=p["n"], shard_options=gp.NoSharding(),
                                                   shuffle=True, num_epochs=None, seed=seed),
                           operations=ops, worker_count=p.get("workers", 2))
        return iter(dl), dl
    if kind == "streaming":
        try:
            import torchvision  # noqa: F401
        except Exception:
            sys.path.insert(0, STUBS)
        import torch
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        total = (p["steps"] + p.get("warm_max", p["warm"]) + 8) * B

        def collate(items):
            x = np.stack([it["x"] for it in items])
            return torch.from_numpy(augment(x) if heavy else x)

        ds = StreamingDataset(local=p["mds"], shuffle=True, shuffle_seed=seed, batch_size=B,
                              epoch_size=total)
        dl = torch.utils.data.DataLoader(ds, batch_size=B, num_workers=p.get("workers", 2),
                                         collate_fn=collate, drop_last=True)
        return iter(dl), dl
    raise SystemExit(f"unknown loader kind {kind}")


def loader_run(p):
    t_open = time.monotonic()
    it, owner = make_iter(p)
    first = None
    sink = 0.0
    # warm-up: `warm` batches, and at least `warm_s` seconds if given, at most
    # `warm_max` batches (a loader that is still starting up, e.g. faulting in
    # fresh buffers, is not measured: the tables are about the steady state)
    i = 0
    while i < p["warm"] or (time.monotonic() - t_open < p.get("warm_s", 0) and
                            i < p.get("warm_max", p["warm"])):
        b = next(it)
        sink += touch(b)
        del b
        if first is None:
            first = time.monotonic() - t_open
        i += 1
    if p.get("go", True):
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        sys.stdin.readline()
    # The first batches after the warm-up may already wait in the loader's
    # prefetch buffers (up to 8 here): the rate is taken over the steps after
    # `skip`, so a deeper buffer does not pass for a faster loader.
    steps = p["steps"]
    skip = min(8, steps // 3)
    stamps = []
    cpu0 = None
    for i in range(steps):
        b = next(it)
        sink += touch(b)
        del b
        stamps.append(time.monotonic())
        if i == max(skip - 1, 0):      # CPU from the first timed batch on
            kids = descendants()
            cpu0 = (cpu_seconds([os.getpid()]), cpu_seconds(kids))
    t0 = stamps[skip - 1] if skip else None
    if t0 is None:
        t0, skip = stamps[0], 1
    t1 = stamps[-1]
    n = steps - skip
    kids = descendants()
    res = {"start": t0, "end": t1, "steps": n, "skipped": skip,
           "bps": n / (t1 - t0) if n else float("nan"),
           "first_batch_s": first, "sink": sink,
           "main_cpu_s": cpu_seconds([os.getpid()]) - cpu0[0],
           "workers_cpu_s": cpu_seconds(kids) - cpu0[1], "nworkers": len(kids)}
    if kind_stats(owner):
        res["zr_workers"] = owner.stats()["workers"]
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()
    for obj in (it, owner):
        for name in ("_shutdown_workers", "close"):
            fn = getattr(obj, name, None)
            if fn:
                try:
                    fn()
                except Exception:
                    pass
                break
    # A normal exit, so that atexit handlers run: grain's unlink its shared
    # memory segments (the parent kills what is left after 20 s, and removes
    # segments nobody maps any more).
    del it, owner
    import gc
    gc.collect()
    sys.exit(0)


def kind_stats(owner):
    """True if `owner` is a loaderx DataLoader with worker statistics."""
    return type(owner).__name__ == "DataLoader" and hasattr(owner, "_workers_stats")


# --------------------------------------------------------------- resume runs
def resume_run(p):
    """Time from "resume at step k" (a fresh loader told to continue at step k)
    to its first batch, imports excluded."""
    kind, k, B, n = p["kind"], p["k"], p["batch"], p["n"]
    if kind == "zrecord":
        sys.path.insert(0, PYCLIENT)
        from loaderx.dataloader import DataLoader
        from loaderx.dataset import DenseDataset
        t0 = time.perf_counter()
        dl = DataLoader({"x": DenseDataset(p["store"])}, batch_size=B, sampler="cyclic", seed=0,
                        start_step=k)
        b = next(dl)
        secs = time.perf_counter() - t0
        touch(b)
        note = "O(1): the sampler is a function of (seed, step)"
    elif kind == "torchdata":
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader
        spe = -(-n // B)
        r = k % spe
        ds = NpyDataset(p["npy"], False)

        def make():
            g = torch.Generator()
            g.manual_seed(0)
            return StatefulDataLoader(ds, batch_size=B, shuffle=True, num_workers=2, generator=g,
                                      collate_fn=identity_collate)
        # a checkpoint of step r of an epoch: the state after one step, with the
        # step counters set to r (the sampler state holds the epoch's generator,
        # so this is the state a run that reached step k saves)
        dl = make()
        it = iter(dl)
        next(it)
        sd = dl.state_dict()
        del it, dl
        snap = sd["_snapshot"]
        main = snap["_main_snapshot"]
        snap["_snapshot_step"] = r
        main["_sampler_iter_yielded"] = r
        si = main["_sampler_iter_state"]
        if si is not None:
            si["samples_yielded"] = r * B
            if isinstance(si.get("sampler_iter_state"), dict):
                si["sampler_iter_state"]["yielded"] = r * B
        t0 = time.perf_counter()
        dl = make()
        dl.load_state_dict(sd)
        b = next(iter(dl))
        secs = time.perf_counter() - t0
        touch(b)
        note = f"epoch of {spe} steps: fast-forwards {r} steps ({r * B} indices)"
    elif kind == "grain":
        gp = grain_python()

        class RecParse(gp.MapTransform):
            def map(self, rec):
                return np.frombuffer(rec, np.uint8)

        W = 2
        m = [(k + W - 1 - w) // W for w in range(W)]   # batches each worker has produced
        state = {"version": 2, "last_seen_indices": {str(w): w + W * (m[w] * B - 1) for w in range(W)},
                 "last_worker_index": (k - 1) % W, "worker_count": W}
        t0 = time.perf_counter()
        src = gp.ArrayRecordDataSource(p["arrayrecord"])
        sampler = gp.IndexSampler(num_records=n, shard_options=gp.NoSharding(), shuffle=True,
                                  num_epochs=None, seed=0)
        dl = gp.DataLoader(data_source=src, sampler=sampler,
                           operations=[RecParse(), gp.Batch(B, drop_remainder=True)], worker_count=W)
        it = iter(dl)
        state["sampler"] = repr(sampler)
        state["data_source"] = repr(src)
        it.set_state(json.dumps(state, indent=4).encode())
        b = next(it)
        secs = time.perf_counter() - t0
        touch(b)
        note = "IndexSampler: O(1) seek; worker start included"
    else:
        raise SystemExit(f"unknown resume kind {kind}")
    sys.stdout.write(json.dumps({"secs": secs, "note": note}) + "\n")
    sys.stdout.flush()
    del b
    dl = None
    import gc
    gc.collect()
    sys.exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "resume":
        resume_run(json.loads(sys.argv[2]))
    elif sys.argv[1] == "store":
        store_server()
    elif sys.argv[1] == "loader":
        loader_run(json.loads(sys.argv[2]))
    else:
        raise SystemExit("usage: python -m suite.worker store | loader JSON")
