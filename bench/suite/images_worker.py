"""One contender of the images layer in a process of its own (bench/suite/images.py):

    python3 images_worker.py [SPEC]     SPEC a JSON object; without it, on stdin
                                        (a list of 20,000 paths is past the
                                        kernel's 128 KiB limit on one argument)

Prints one JSON line: images/s over the timed batches, the CPU seconds this process
tree and (zrecord) the daemon spent, the batch shape, each timed batch's wall-clock
end and, for zrecord, the fraction of the time the daemon's pool slept. Jobs run
together (SPEC's `window`) take batches until one ends past the window's end
and count those of a common wall-clock window. Every contender makes
(B, 224, 224, 3) uint8 batches with RandomResizedCrop (scale (0.08, 1), ratio
(3/4, 4/3)) and a flip, from the same images.
"""

import io
import json
import math
import os
import sys
import time

import numpy as np

SIZE = 224


def cpu_of(pid):
    """User + system seconds of a process and its reaped children (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(parts[i]) for i in (11, 12, 13, 14)) / tick


def tree_cpu(pid):
    """CPU seconds of pid and its live descendants."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_of(p)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return total


def rrc_box(rng, w, h, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, with numpy's generator."""
    area = w * h
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        t = area * rng.uniform(*scale)
        a = math.exp(rng.uniform(*lr))
        cw, ch = round(math.sqrt(t * a)), round(math.sqrt(t / a))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch
    r = w / h
    if r < ratio[0]:
        cw, ch = w, round(w / ratio[0])
    elif r > ratio[1]:
        cw, ch = round(h * ratio[1]), h
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def pil_transform(img, rng):
    """PIL + numpy: RandomResizedCrop (Image.resize with a box, bilinear,
    antialiased as torchvision's) and a flip."""
    from PIL import Image
    img = img.convert("RGB")
    x, y, cw, ch = rrc_box(rng, *img.size)
    img = img.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + cw, y + ch), reducing_gap=None)
    a = np.asarray(img)
    if rng.random() < 0.5:
        a = a[:, ::-1]
    return np.ascontiguousarray(a)


def threads_of(pid):
    """Per thread of pid: (ns on a CPU, ns runnable but waiting for one), from
    /proc/PID/task/TID/schedstat."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
            out[tid] = (int(run), int(wait))
        except (OSError, ValueError):
            pass
    return out


def pool_asleep(before, after, wall_ns, n):
    """The fraction of `wall_ns` the `n` busiest threads (the daemon's pool:
    one a core) were asleep, neither on a CPU nor waiting for one: time they
    had no work. The box's load moves the split between running and waiting,
    not this."""
    busy = sorted(((after[t][0] - before[t][0], after[t][1] - before[t][1])
                   for t in after if t in before), reverse=True)[:n]
    if not busy or wall_ns <= 0:
        return None
    return max(0.0, 1 - sum(r + w for r, w in busy) / (len(busy) * wall_ns))


def timed(it, warm, steps, B, pids, daemon=None):
    """The timed batches: images/s, CPU, and each batch's wall-clock end
    (time.time(), so that jobs in other processes line up); with `daemon`, how
    much of the time its pool slept."""
    for _ in range(warm):
        next(it)
    c0 = sum(tree_cpu(p) for p in pids)
    th0 = threads_of(daemon) if daemon else None
    w0 = time.time()
    t0 = time.monotonic()
    shape = None
    stamps = []
    for _ in range(steps):
        b = next(it)
        shape = tuple(b.shape)
        stamps.append(time.time())
    dt = time.monotonic() - t0
    cpu = sum(tree_cpu(p) for p in pids) - c0
    r = {"images_per_s": steps * B / dt, "seconds": dt, "cpu_s": cpu, "images": steps * B,
         "shape": shape, "start": w0, "stamps": stamps}
    if daemon:
        r["pool_asleep"] = pool_asleep(th0, threads_of(daemon), int(dt * 1e9), os.cpu_count())
    return r


def windowed(it, window, B):
    """Batches until one ends past window[1] (wall clock, shared by jobs run
    together): each batch's end, and the images/s within the window (the
    parts of the batches at its edges counted by time)."""
    start = time.time()
    stamps = []
    while not stamps or stamps[-1] < window[1]:
        next(it)
        stamps.append(time.time())
    return {"start": start, "stamps": stamps,
            "images_per_s": in_window([start] + stamps, window) * B / (window[1] - window[0])}


def in_window(ends, window):
    """Batches in `window` of a job whose batches end at `ends` (the first
    entry its start): a batch across an edge counts for the part inside."""
    lo, hi = window
    n = 0.0
    for a, b in zip(ends, ends[1:]):
        if b > lo and a < hi:
            n += (min(b, hi) - max(a, lo)) / (b - a)
    return n


def run_zrecord(s):
    sys.path.insert(0, s["pyclient"])
    from loaderx.dataloader import DataLoader
    from loaderx.images import ImageDataset
    ds = ImageDataset(s["store"], size=(SIZE, SIZE), crop="random_resized", flip=True)
    dl = DataLoader({"img": ds}, batch_size=s["batch"], sampler="iid", seed=s["seed"],
                    prefetch=s.get("prefetch", 4))
    it = (b["img"] for b in iter(dl))
    if s.get("start_at"):                 # several jobs: start together
        while time.time() < s["start_at"]:
            time.sleep(0.005)
    if s.get("window"):
        r = windowed(it, s["window"], s["batch"])
    else:
        r = timed(it, s["warm"], s["steps"], s["batch"], [os.getpid(), s["daemon_pid"]],
                  daemon=s["daemon_pid"])
    dl.close()
    return r


def run_torch(s):
    import torch
    from PIL import Image
    torch.set_num_threads(1)
    files = s["files"]

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            rng = np.random.default_rng((s["seed"], i))
            with open(files[i], "rb") as f:
                img = Image.open(io.BytesIO(f.read()))
                return pil_transform(img, rng)

    dl = torch.utils.data.DataLoader(
        DS(), batch_size=s["batch"], shuffle=True, num_workers=s["workers"],
        persistent_workers=s["workers"] > 0, collate_fn=np.stack,
        generator=torch.Generator().manual_seed(s["seed"]))
    def forever():
        while True:
            yield from dl
    return timed(forever(), s["warm"], s["steps"], s["batch"], [os.getpid()])


def run_wds(s):
    import torch
    import webdataset as wds
    rng = np.random.default_rng(s["seed"])

    def tf(sample):
        return pil_transform(sample["jpg"], rng)
    ds = (wds.WebDataset(s["shards"], shardshuffle=False, empty_check=False).repeat()
          .decode("pil").map(tf).batched(s["batch"], collation_fn=np.stack))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=s["workers"])
    return timed(iter(dl), s["warm"], s["steps"], s["batch"], [os.getpid()])


def run_dali(s):
    from nvidia.dali import fn, pipeline_def, types
    files = s["files"]

    @pipeline_def(batch_size=s["batch"], num_threads=s["threads"], device_id=None,
                  seed=s["seed"])
    def pipe():
        jpegs, _ = fn.readers.file(files=files, random_shuffle=True, name="r")
        imgs = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                             random_area=[0.08, 1.0],
                                             random_aspect_ratio=[3 / 4, 4 / 3])
        imgs = fn.resize(imgs, resize_x=SIZE, resize_y=SIZE)
        return fn.flip(imgs, horizontal=fn.random.coin_flip())
    p = pipe()
    p.build()

    def forever():
        while True:
            out, = p.run()
            yield np.asarray(out.as_tensor())
    return timed(forever(), s["warm"], s["steps"], s["batch"], [os.getpid()])


if __name__ == "__main__":
    spec = json.loads(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read())
    fn_ = {"zrecord": run_zrecord, "torch": run_torch, "wds": run_wds, "dali": run_dali}[spec["kind"]]
    print(json.dumps(fn_(spec)), flush=True)
