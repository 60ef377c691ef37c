"""The programs this package carries: zrecordd and the zrecord tool.

``python -m loaderx.daemon ARGS`` runs zrecordd with ARGS: the daemon the client
starts when none answers (``$ZRECORDD``, else the one inside the package, else
``zrecordd`` on ``PATH``; ``loaderx._daemon.find_binary``). For example
``--version``, ``--help``, or ``--socket=PATH`` for a daemon in the foreground.

:func:`zrecord_main` runs the zrecord tool installed with the package (a wheel
installs it as ``zrecord`` beside ``python``: ``zrecord status``, ``zrecord info
DIR``, ...; ``zrecord --help``), or a source checkout's built one. Either program runs only if the user or root could have installed it
(``loaderx._daemon.check_trusted``).
"""

import os
import sys

from . import _daemon
from ._errors import ZrecordError


def _exec(path, argv):
    try:
        os.execv(path, [path, *argv])
    except OSError as e:
        sys.exit(f"cannot run {path}: {e.strerror}")


def main(argv=None):
    """Runs zrecordd with ``argv`` (default: this process's arguments)."""
    try:
        binary = _daemon.find_binary()
    except ZrecordError as e:
        sys.exit(e.message)
    _exec(binary, sys.argv[1:] if argv is None else list(argv))


def zrecord_main(argv=None):
    """Runs the zrecord tool with ``argv``."""
    # Never "zrecord" on PATH: that may be this very script.
    tool = _daemon.bundled("zrecord") or _daemon.in_build_tree("client/zrecord")
    if tool is None:
        sys.exit("this loaderx carries no zrecord tool (installed without it); build "
                 "the repository with meson, or install loaderx from a wheel or with "
                 "pip install ./python-client")
    try:
        tool = _daemon.check_trusted(tool)      # as the daemon: who could have put it there
    except ZrecordError as e:
        sys.exit(e.message)
    _exec(tool, sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    main()
