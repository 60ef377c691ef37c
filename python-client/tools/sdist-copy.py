"""meson dist script of the loaderx sdist: replaces the links of subprojects/zrecord/
(to this repository's meson project: meson.build, proto/, s3/, daemon/, client/) by copies
of what they name, as committed (git archive HEAD), so that the sdist builds alone.
meson dist takes the rest of the sdist from HEAD as well."""

import io
import os
import shutil
import subprocess
import sys
import tarfile


def main():
    src = os.environ["MESON_PROJECT_SOURCE_ROOT"]
    dist = os.environ["MESON_PROJECT_DIST_ROOT"]
    sub = os.path.join(dist, "subprojects", "zrecord")
    names = sorted(n for n in os.listdir(sub) if os.path.islink(os.path.join(sub, n)))
    if not names:
        sys.exit(f"{sub} holds no links to copy")
    targets = [os.path.realpath(os.path.join(src, "subprojects", "zrecord", n)) for n in names]
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=src, check=True,
                         capture_output=True, text=True).stdout.strip()
    rel = [os.path.relpath(t, top) for t in targets]
    if any(r.startswith("..") for r in rel):
        sys.exit(f"links of {sub} lead outside the repository {top}: {rel}")
    tar = subprocess.run(["git", "archive", "--format=tar", "HEAD", "--", *rel], cwd=top,
                         check=True, capture_output=True).stdout
    for n in names:
        os.unlink(os.path.join(sub, n))
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        for m in t.getmembers():
            # each member lies under one of rel: put it under sub by its link's name
            for n, r in zip(names, rel):
                if m.name == r or m.name.startswith(r + "/"):
                    m.name = n + m.name[len(r):]
                    t.extract(m, sub, filter="data")
                    break
    for n in names:
        if not os.path.exists(os.path.join(sub, n)):
            sys.exit(f"{n} (from {top}) is not committed: the sdist would lack it")


if __name__ == "__main__":
    main()
