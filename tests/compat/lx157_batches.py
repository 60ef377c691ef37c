#!/usr/bin/env python3
"""lx157_batches.py: batches of PyPI loaderx 1.5.7's own Sampler, as JSON.

    /tmp/lx157/bin/python tests/compat/lx157_batches.py 'N B MODE SEED STEP' ...

prints one JSON list per argument: the indices `Sampler(N, B, MODE, SEED)` gives
after `seek(STEP)`, from loaderx 1.5.7 itself (its compiled sampler), so that
python-client/tests/test_lx157_interop.py compares zrecord's DataLoader with them.
"""
import json
import sys

import loaderx
from loaderx.sampler import Sampler


def main():
    if getattr(loaderx, "__version__", None) != "1.5.7" or not hasattr(loaderx, "_lib"):
        sys.exit("this needs PyPI loaderx 1.5.7 (a venv of its own), not %s" % loaderx.__file__)
    for arg in sys.argv[1:]:
        n, b, mode, seed, step = (int(x) for x in arg.split())
        s = Sampler(n, b, mode, seed)
        s.seek(step)
        print(json.dumps([int(x) for x in s.next()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
