"""A progress line on a terminal for a long write, when tqdm is not installed.

The conversions (from_numpy, from_iterator, the corpora) show a tqdm bar when tqdm
is there; without it a write of minutes (a zstd_dict store, a large corpus) said
nothing at all. This line is the fallback: one line on stderr, rewritten in place
(a carriage return) at the first update and then at most every half second, with
what is done, the total when known, the rate, and cleared at the end. It is drawn only on a terminal.
"""

import sys
import time

__all__ = ["ProgressLine"]

_EVERY_S = 0.5
_UNITS = ("", "K", "M", "G", "T")


def _scaled(n, unit):
    """n with a binary prefix for bytes ('12.0 MiB'), or as a count ('1200 rec')."""
    if unit != "B":
        return f"{n:.0f} {unit}"
    k = 0
    while n >= 1024 and k < len(_UNITS) - 1:
        n /= 1024
        k += 1
    return f"{n:.1f} {_UNITS[k]}iB" if k else f"{n:.0f} B"


class ProgressLine:
    """update(n) and close(), as a tqdm bar: a line on `stream` (stderr)."""

    def __init__(self, total, desc, unit="B", stream=None):
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = stream or sys.stderr
        self.done = 0
        self.start = time.monotonic()
        self.shown = self.start - _EVERY_S      # the first update draws at once
        self.width = 0

    def update(self, n):
        self.done += n
        now = time.monotonic()
        if now - self.shown >= _EVERY_S:
            self.shown = now
            self._draw(now)

    def _draw(self, now):
        rate = self.done / max(now - self.start, 1e-9)
        text = f"{self.desc}: {_scaled(self.done, self.unit)}"
        if self.total:
            text += (f" of {_scaled(self.total, self.unit)} "
                     f"({100 * self.done / self.total:.0f} %)")
        text += f", {_scaled(rate, self.unit)}/s"
        pad = max(0, self.width - len(text))
        self.width = len(text)
        try:
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def close(self):
        if self.width:
            try:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self.width = 0
