"""The images layer (issue 36): encoded images decoded, cropped and flipped to
(256, 224, 224, 3) uint8 batches.

Data: N synthetic photograph-like images (smooth three-colour gradients plus
Gaussian noise of sigma 8, each of a size drawn around 500 x 375: width 450-550,
height 340-410), made by numpy and encoded by Pillow as JPEG q90 (about 50 KB
each) and, the first P of them, as PNG (compress_level 1; about 400 KB each).
Every contender makes RandomResizedCrop (scale (0.08, 1), ratio (3/4, 4/3),
torchvision's box) to 224 x 224 and a random flip, batch 256, from a warm page
cache, in a process of its own (suite.images_worker):

  zrecord           an image store (loaderx.utils.from_images) and
                    DataLoader({'img': ImageDataset(size=(224, 224),
                    crop='random_resized', flip=True)}), the daemon on every core
  torch + PIL       torch.utils.data.DataLoader over the files, PIL decode, the
                    crop by Image.resize(box=, bilinear, antialiased) and a numpy
                    flip, num_workers k = 1 and 2
  WebDataset        tar shards of 1,000, .decode("pil"), the same transform,
                    a torch DataLoader of k = 2 workers
  DALI (CPU)        fn.decoders.image_random_crop + fn.resize + fn.flip on the
                    CPU (device_id=None), when nvidia-dali-cuda120 imports
                    ($DALI_PYTHON: an interpreter that has it), num_threads = cores

and the limit: bench/image-probe, JPEG decode alone with libjpeg-turbo's DCT
scaling (each image at the smallest M/8 that keeps both sides >= 224) on every
core; and bench/image-decode, the daemon's per-record path alone (decode at
the box's DCT scale, resize, flip: image/image.h) on as many threads, which
tells the daemon's own cost per image (the gather, the pool, the ring) from
the decode's. Then 4 zrecord jobs at once over the one store, each its own seed,
counted over one wall-clock window all four run in (together()).

Columns: images/s, images/s per core (the box's cores: every contender may use
all of them), the fraction of the probe, CPU ms per image (the process tree,
and zrecord's daemon), and for zrecord the fraction of the time its daemon's
pool threads slept (neither running nor waiting for a CPU: no work to do),
which the box's load does not move as it moves images/s.
"""

import io
import json
import os
import subprocess
import sys
import tarfile
import time

import numpy as np

from . import common as C
from .common import say

BATCH = 256
FFCV_PER_CORE = 326.0   # FFCV's published 31,278 images/s on 96 vCPUs (issue 36)
HERE = os.path.dirname(os.path.abspath(__file__))


def _noise_bank(seed=7):
    return np.random.default_rng(seed).normal(0, 8, (512, 640, 3)).astype(np.float32)


def photo(i, bank):
    r = np.random.default_rng(1000 + i)
    w, h = int(r.integers(450, 551)), int(r.integers(340, 411))
    y = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    c = r.uniform(0, 255, (3, 3)).astype(np.float32)
    img = np.stack([c[k, 0] + (c[k, 1] - c[k, 0]) * x + (c[k, 2] - c[k, 0]) * y * x
                    for k in range(3)], -1)
    oy, ox = int(r.integers(0, 512 - h)), int(r.integers(0, 640 - w))
    img += bank[oy:oy + h, ox:ox + w]
    return np.clip(img, 0, 255).astype(np.uint8)


def _make(args):
    lo, hi, png_n, d = args
    from PIL import Image
    bank = _noise_bank()
    for i in range(lo, hi):
        a = photo(i, bank)
        Image.fromarray(a).save(os.path.join(d, "jpg", f"{i:06d}.jpg"), quality=90)
        if i < png_n:
            Image.fromarray(a).save(os.path.join(d, "png", f"{i:06d}.png"), compress_level=1)


def prepare(ctx, n, png_n, tmp):
    """The layer's data in tmp/images, or in --images-dir when given: made once
    there (a "made.json" of its sizes marks it complete) and reused by later
    runs of the same sizes."""
    import multiprocessing
    keep = getattr(ctx, "images_dir", None)
    d = os.path.abspath(keep) if keep else os.path.join(tmp, "images")
    mark = os.path.join(d, "made.json")
    if keep and os.path.exists(mark):
        with open(mark) as f:
            made = json.load(f)
        if made.get("n") == n and made.get("png_n") == png_n:
            say(f"images: reusing the {n} JPEGs and {png_n} PNGs in {d}")
            return made["p"]
        raise RuntimeError(f"{d} holds {made.get('n')} JPEGs and {made.get('png_n')} PNGs, "
                           f"not {n} and {png_n}: give another --images-dir")
    if keep and os.path.isdir(d) and os.listdir(d):
        raise RuntimeError(f"{d} is not empty and was not made by the images layer")
    os.makedirs(os.path.join(d, "jpg"), exist_ok=True)
    os.makedirs(os.path.join(d, "png"), exist_ok=True)
    t0 = time.monotonic()
    step = 500
    with multiprocessing.get_context("spawn").Pool(os.cpu_count()) as pool:
        pool.map(_make, [(s, min(n, s + step), png_n, d) for s in range(0, n, step)])
    jpgs = sorted(os.path.join(d, "jpg", f) for f in os.listdir(os.path.join(d, "jpg")))
    pngs = sorted(os.path.join(d, "png", f) for f in os.listdir(os.path.join(d, "png")))
    say(f"images: made {len(jpgs)} JPEGs and {len(pngs)} PNGs in {time.monotonic() - t0:.0f} s")
    # the probe's file: the JPEGs back to back, and their offsets
    offs = [0]
    with open(os.path.join(d, "all.jpg"), "wb") as f:
        for p in jpgs:
            with open(p, "rb") as g:
                b = g.read()
            f.write(b)
            offs.append(offs[-1] + len(b))
    np.asarray(offs, dtype="<u8").tofile(os.path.join(d, "all.jpg.idx"))
    # WebDataset shards of 1,000
    shards = []
    for s in range(0, len(jpgs), 1000):
        t = os.path.join(d, f"shard-{s // 1000:04d}.tar")
        with tarfile.open(t, "w") as tf:
            for p in jpgs[s:s + 1000]:
                tf.add(p, arcname=os.path.basename(p))
        shards.append(t)
    from loaderx.utils import from_images
    t0 = time.monotonic()
    from_images(os.path.join(d, "store-jpg"), jpgs)
    from_images(os.path.join(d, "store-png"), pngs)
    say(f"images: the stores written in {time.monotonic() - t0:.0f} s "
        f"({offs[-1] / len(jpgs) / 1e3:.0f} KB a JPEG on average)")
    p = {"dir": d, "jpgs": jpgs, "pngs": pngs, "shards": shards, "jpg_bytes": offs[-1]}
    if keep:
        with open(mark + ".tmp", "w") as f:
            json.dump({"n": n, "png_n": png_n, "p": p}, f)
        os.replace(mark + ".tmp", mark)
    return p


def warm_cache(paths):
    """Reads every file under `paths` (files or directories) once, so that the
    contender that reads them next starts from a warm page cache whatever
    reclaimed them since they were written: a kernel's proactive reclaim
    (DAMON's pageout scheme on this machine's VM pages out what was not
    touched for a minute, page cache included) made a store written minutes
    before a cold one. Returns the bytes read."""
    n = 0
    todo = list(paths)
    while todo:
        x = todo.pop()
        if os.path.isdir(x):
            todo += [os.path.join(x, f) for f in os.listdir(x)]
            continue
        with open(x, "rb", buffering=0) as f:
            while True:
                b = f.read(8 << 20)
                if not b:
                    break
                n += len(b)
    return n


def dali_python():
    """The interpreter that has DALI: $DALI_PYTHON (a venv of its own, as the
    wheel is large), else this one."""
    return os.environ.get("DALI_PYTHON") or sys.executable


def worker(spec, timeout=1800, python=None):
    env = dict(os.environ, PYTHONPATH=C.PYCLIENT)
    # the spec on stdin: its list of files is past the 128 KiB an argument may be
    r = subprocess.run([python or sys.executable, os.path.join(HERE, "images_worker.py")],
                       input=json.dumps(spec), capture_output=True, text=True, timeout=timeout,
                       env=env)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def probe(ctx, p, cores, seconds, name="image-probe"):
    """bench/image-probe (decode alone) or bench/image-decode (the daemon's
    per-record path alone) over the JPEGs on `cores` threads, with its CPU ms
    an image (the child's rusage)."""
    import resource
    exe = os.path.join(ctx.build, "bench", name)
    if not os.access(exe, os.X_OK):
        return None
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([exe, os.path.join(p["dir"], "all.jpg"), str(cores), "224", str(seconds)],
                       capture_output=True, text=True, timeout=600)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        return None
    out = json.loads(r.stdout)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    out["cpu_ms"] = cpu * 1e3 / out["images"] if out.get("images") else None
    return out


def have_dali():
    try:
        r = subprocess.run([dali_python(), "-c", "import nvidia.dali"], capture_output=True,
                           timeout=120)
        return r.returncode == 0
    except Exception:
        return False


def run(ctx):
    n = 600 if ctx.quick else ctx.images
    png_n = 300 if ctx.quick else min(ctx.png_images, n)
    steps = 3 if ctx.quick else ctx.image_steps
    # more warm-up batches than any contender holds ahead (a ring of 4 slots;
    # torch's 2 batches a worker), so that the timed ones were made in the window
    warm = 2 if ctx.quick else 6
    cores = os.cpu_count()
    tmp = ctx.tmp
    p = prepare(ctx, n, png_n, tmp)
    out = {"n": n, "png_n": png_n, "cores": cores, "batch": BATCH, "steps": steps, "rows": []}
    load0 = os.getloadavg()[0]
    pr = probe(ctx, p, cores, 3 if ctx.quick else 20)
    out["probe"] = pr
    if pr:
        say(f"image-probe: {pr['images_per_s']:.0f} images/s on {cores} cores (decode alone, DCT "
            f"scaling), {pr['cpu_ms']:.2f} ms of CPU an image")
    dec = probe(ctx, p, cores, 3 if ctx.quick else 20, name="image-decode")
    out["decode_alone"] = dec
    if dec:
        say(f"image-decode: {dec['images_per_s']:.0f} images/s on {cores} cores (the daemon's "
            f"decode, crop, resize and flip alone), {dec['cpu_ms']:.2f} ms of CPU an image")
    base = {"batch": BATCH, "seed": 1, "steps": steps, "warm": warm, "pyclient": C.PYCLIENT}
    rows = out["rows"]

    def add(name, fmt, res):
        load = os.getloadavg()[0]
        row = {"contender": name, "format": fmt, "load": load}
        if "error" in res:
            row["error"] = res["error"]
            say(f"images: {name} ({fmt}) failed: {res['error']}")
        else:
            ips = res["images_per_s"]
            row.update(images_per_s=ips, per_core=ips / cores,
                       of_probe=ips / pr["images_per_s"] if pr and fmt == "jpeg" else None,
                       cpu_ms=res["cpu_s"] * 1e3 / res["images"],
                       pool_asleep=res.get("pool_asleep"))
        rows.append(row)
        return row

    if dec:
        add("zrecord's per-record path alone (image-decode)", "jpeg",
            {"images_per_s": dec["images_per_s"], "images": dec["images"],
             "cpu_s": dec["cpu_ms"] * dec["images"] / 1e3})
    if pr:
        add("the probe: decode alone (image-probe)", "jpeg",
            {"images_per_s": pr["images_per_s"], "images": pr["images"],
             "cpu_s": pr["cpu_ms"] * pr["images"] / 1e3})
    for fmt, store in (("jpeg", "store-jpg"), ("png", "store-png")):
        warm_cache([os.path.join(p["dir"], store)])
        add("zrecord", fmt, worker(dict(base, kind="zrecord", store=os.path.join(p["dir"], store),
                                        daemon_pid=ctx.daemon.pid)))
        files = p["jpgs"] if fmt == "jpeg" else p["pngs"]
        if C.have("torch"):
            for k in (1, 2):
                warm_cache(files)
                add(f"torch + PIL, {k} worker{'s' if k > 1 else ''}", fmt,
                    worker(dict(base, kind="torch", files=files, workers=k)))
        else:
            C.skip("torch DataLoader + PIL (images)", "torch")
    if C.have("webdataset") and C.have("torch"):
        warm_cache(p["shards"])
        add("WebDataset .decode('pil'), 2 workers", "jpeg",
            worker(dict(base, kind="wds", shards=p["shards"], workers=2)))
    else:
        say("skipped: WebDataset (pip install webdataset)")
    if have_dali():
        warm_cache(p["jpgs"])
        add("DALI CPU pipeline", "jpeg",
            worker(dict(base, kind="dali", files=p["jpgs"], threads=cores),
                   python=dali_python()))
    else:
        say("skipped: DALI's CPU pipeline (nvidia-dali-cuda120 does not import here; "
            "$DALI_PYTHON names an interpreter that has it)")
    # 4 jobs over the one store, started together, each its own seed, timed
    # over one wall-clock window: past the warm-up batches and as long as the
    # timed batches take at a quarter of one job's rate
    one = next((r.get("images_per_s") for r in rows if r["contender"] == "zrecord" and
                r["format"] == "jpeg"), None) or 400.0
    per_batch = 4 * BATCH / one
    warm_cache([os.path.join(p["dir"], "store-jpg")])
    start_at = time.time() + 8
    window = (start_at + (warm + 1) * per_batch, start_at + (warm + 1 + steps) * per_batch)
    procs = []
    env = dict(os.environ, PYTHONPATH=C.PYCLIENT)
    for j in range(4):
        spec = dict(base, kind="zrecord", store=os.path.join(p["dir"], "store-jpg"),
                    daemon_pid=ctx.daemon.pid, seed=100 + j, start_at=start_at, window=window)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "images_worker.py"),
                                       json.dumps(spec)], stdout=subprocess.PIPE, text=True,
                                      env=env))
    res4 = []
    for pp in procs:
        o, _ = pp.communicate(timeout=3600)
        res4.append(json.loads(o.strip().splitlines()[-1]) if pp.returncode == 0 else None)
    out["jobs4"] = together(res4, window)
    out["load"] = (load0, os.getloadavg()[0])
    C.table(f"images: (256, 224, 224, 3) uint8, RandomResizedCrop + flip, {n} JPEGs "
            f"(~500 x 375, q90), {png_n} PNGs; {cores} cores; load {load0:.1f}",
            [("contender", "contender"), ("format", "format"), ("images_per_s", "images/s"),
             ("per_core", "per core"), ("of_probe", "of probe"), ("cpu_ms", "CPU ms/image"),
             ("pool_asleep", "pool asleep"), ("load", "load")], rows)
    single = next((r for r in rows if r["contender"] == "zrecord" and r["format"] == "jpeg" and
                   "images_per_s" in r), None)
    if single:
        say(f"images: one zrecord job: {single['images_per_s']:.0f} images/s, its daemon's pool "
            f"asleep {100 * (single.get('pool_asleep') or 0):.1f} % of the time (no work)")
    j = out["jobs4"]
    if j.get("each"):
        say(f"images: 4 jobs over one store, over a window of {j['window_s']:.1f} s they all ran in: "
            f"{', '.join(f'{x:.0f}' for x in j['each'])} images/s each, {j['sum']:.0f} together "
            f"(one job alone: {single['images_per_s'] if single else float('nan'):.0f})")
    return out


def together(res, window):
    """Jobs run at once, over one wall-clock window all of them were taking
    batches in: each job's images/s in it and their sum, the box's rate with
    4 jobs (comparable with one job's alone). A rate per job over its own
    timed batches would not be: jobs whose timed batches do not overlap each
    had the pool to themselves for part of them."""
    each = [r["images_per_s"] if r else float("nan") for r in res]
    return {"each": each, "sum": sum(each), "window_s": window[1] - window[0]}


def targets(res):
    """(target, got, need) of issue 36, as ratios."""
    rows = res["rows"]
    cores = res["cores"]

    def rate(name, fmt="jpeg"):
        return next((r["images_per_s"] for r in rows if r["contender"] == name and
                     r["format"] == fmt and "images_per_s" in r), None)
    z = rate("zrecord")
    t = rate("torch + PIL, 2 workers" if cores >= 2 else "torch + PIL, 1 worker")
    out = []
    if z and res.get("probe"):
        out.append(("images: zrecord / the decode probe", z / res["probe"]["images_per_s"], 0.8))
    if z and t:
        out.append((f"images: zrecord / torch DataLoader + PIL at {cores} cores", z / t, 3.0))
    if z:
        out.append((f"images: zrecord images/s per core / FFCV's {FFCV_PER_CORE:g}",
                    z / cores / FFCV_PER_CORE, 1.0))
    j = res.get("jobs4") or {}
    if z and j.get("each"):
        out.append(("images: slowest of 4 jobs / (one job's rate / 4)", min(j["each"]) / (z / 4),
                    0.9))
    return out
