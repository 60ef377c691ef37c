#!/usr/bin/env python3
"""augment.py: the crop boxes and flips of proto/AUGMENT.md, from that page alone,
checked against proto/vectors/augment.jsonl.

    python3 proto/vectors/augment.py [proto/vectors/augment.jsonl]

prints how many lines it reproduced and exits 0, or exits 1 at the first line it
does not. Pure Python: integers for the generator, floats (IEEE doubles) and the
math module for the box, round() for rounding (ties to even).
"""
import json
import math
import os
import sys

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
DELTA = 0xD1B54A32D192ED03
DOMAIN_IMAGE = 0x7A722D696D670005


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def key_of(seed, step):
    return mix64((mix64(seed ^ DOMAIN_IMAGE) + step * GAMMA) & M64)


def draw(key, p, k):
    return mix64((key + p * GAMMA + k * DELTA) & M64)


def unit(d):
    return (d >> 11) * 2.0 ** -53


def below(d, n):
    return (d * n) >> 64


def box(v, key, p, W, H):
    crop = v["crop"]
    if crop == "random_resized":
        s0, s1 = v["scale"]
        r0, r1 = v["ratio"]
        area = float(W) * float(H)
        lr0, lr1 = math.log(r0), math.log(r1)
        for t in range(10):
            target = area * (s0 + (s1 - s0) * unit(draw(key, p, 4 * t)))
            aspect = math.exp(lr0 + (lr1 - lr0) * unit(draw(key, p, 4 * t + 1)))
            w = round(math.sqrt(target * aspect))
            h = round(math.sqrt(target / aspect))
            if 0 < w <= W and 0 < h <= H:
                y = below(draw(key, p, 4 * t + 2), H - h + 1)
                x = below(draw(key, p, 4 * t + 3), W - w + 1)
                return [x, y, w, h]
        if W / H < r0:
            w, h = W, min(max(round(W / r0), 1), H)
        elif W / H > r1:
            w, h = min(max(round(H * r1), 1), W), H
        else:
            w, h = W, H
        return [(W - w) // 2, (H - h) // 2, w, h]
    if crop == "center":
        oh, ow = v["out_h"], v["out_w"]
        if W * oh >= H * ow:
            hb, wb = float(H), H * ow / oh
        else:
            wb, hb = float(W), W * oh / ow
        w = min(max(round(wb * v["fraction"]), 1), W)
        h = min(max(round(hb * v["fraction"]), 1), H)
        return [(W - w) // 2, (H - h) // 2, w, h]
    return [0, 0, W, H]


def main(paths):
    n = 0
    for path in paths:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                v = json.loads(line)
                key = key_of(v["seed"], v["step"])
                got = box(v, key, v["pos"], v["width"], v["height"])
                flipped = bool(v["flip"]) and draw(key, v["pos"], 40) >> 63 == 1
                if got != v["box"] or flipped != v["flipped"]:
                    print(f"{path}:{lineno}: box {got} flipped {flipped}, the file says "
                          f"{v['box']} {v['flipped']}")
                    return 1
                n += 1
    print(f"augment vectors: {n} reproduced")
    return 0 if n else 1


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(main(sys.argv[1:] or [os.path.join(here, "augment.jsonl")]))
