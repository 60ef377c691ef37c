"""loaderx 1.5.7's ``_lib``, kept so that code importing it still imports.

loaderx 1.5.7 bundles native libraries (``lib/libzrecord.so``, ``libsampler.so``)
and ``_lib.path(stem)`` finds them. This client has none: zrecordd serves the
stores and computes the samplers. ``path(stem)`` therefore names the daemon this
process would start when none answers (``$ZRECORDD``, the one inside the package,
``zrecordd`` on ``PATH``, or a meson build), or raises ``ImportError`` as 1.5.7 does
when its library is missing. Nothing here loads a library or starts a process.
"""

from pathlib import Path

LIB_DIR = Path(__file__).resolve().parent / "lib"


def path(stem):
    """The zrecordd executable that serves what loaderx 1.5.7's ``lib{stem}`` did."""
    from ._daemon import find_binary
    from ._errors import ZrecordError
    try:
        return find_binary()
    except ZrecordError as e:
        raise ImportError(f"loaderx (zrecord's client) has no {stem} library: zrecordd serves "
                          f"the stores, and none is found here ({e.message})") from None
