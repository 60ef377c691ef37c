"""The embedded default: a private zrecordd started on demand.

When no daemon answers at the default paths, the client starts one for the user,
listening in a 0700 directory: ``$XDG_RUNTIME_DIR/zrecord/`` when that variable is
set, else ``/tmp/zrecord-<uid>/`` (both are default paths of PROTOCOL.md section 1,
so every later process of the user, Python or C, finds the same daemon). That
directory must be the user's own: one that another user made first is refused,
and no daemon is started in it. The daemon
runs detached with ``--idle-exit`` and exits by itself once no client has been
connected for that long. Startup is serialized by a lock file, so processes that
start at once share one daemon. Readiness comes from the notify protocol: the client
binds a datagram socket, passes it as ``NOTIFY_SOCKET`` and waits for ``READY=1``.
That socket is ``notify`` beside the daemon's ``zrecordd.sock`` (the lock holder's
alone), so whenever the daemon's socket path fits a Unix socket address (at most
``SUN_PATH_MAX`` bytes) so does it; a longer socket path is refused with an error
that names it and the limit.

The binary is ``$ZRECORDD`` if set, else the one installed with this package (a
wheel or ``pip install ./python-client`` installs it as a script: a repaired
wheel's is in ``site-packages/loaderx.scripts/``, where auditwheel moves ELF
scripts, one built here in the environment's ``bin/``), else
``zrecordd`` on ``PATH``, else a meson build tree's ``daemon/zrecordd`` next to this
package's source checkout. Whichever it is, it runs as the user, so it is started
only if the user or root could have put it there (:func:`check_trusted`): the file
and every directory above it (symbolic links resolved) belong to the user or root,
and none is writable by its group or others, except a root's or the user's own
directory with the sticky bit (``/tmp``), where nobody else may rename or remove
what is the user's. Otherwise nothing is started and the error names the binary and
what is wrong with it: in a checkout a group may write, another member could have
built or planted that binary.
"""

import errno
import fcntl
import grp
import os
import select
import shutil
import socket
import stat
import subprocess
import time

from . import _conn
from ._errors import ZrecordConnectionError

IDLE_EXIT_DEFAULT = 60
READY_TIMEOUT = 15.0
# sun_path of struct sockaddr_un holds 108 bytes: zrecordd and libzrc take paths of
# at most 107 and a terminating NUL.
SUN_PATH_MAX = 107


def private_dir():
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "zrecord")
    return f"/tmp/zrecord-{os.getuid()}"


def _secure_dir(path):
    """Makes the private directory, or checks the one that exists: a directory (not
    a symlink) of this user's, mode 0700. A directory another user made (first, in
    /tmp) is refused: no daemon is started, nothing is connected to in it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ZrecordConnectionError(
            f"cannot make the private daemon's directory {path}: {e.strerror or e}; "
            "set ZRECORD_SOCKET", code=e.errno) from None
    st = os.lstat(path)
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != me or st.st_mode & 0o077:
        what = "directory" if stat.S_ISDIR(st.st_mode) else "non-directory"
        raise _conn.SocketRefused(
            f"refusing {path} for a private daemon: it must be a directory of yours "
            f"({_conn.uid_text(me)}) with mode 0700, and is a {what} owned by "
            f"{_conn.uid_text(st.st_uid)} with mode {stat.S_IMODE(st.st_mode):04o}; "
            "remove it (or have its owner remove it) or set ZRECORD_SOCKET")


HERE = os.path.dirname(os.path.abspath(__file__))
# auditwheel moves a wheel's ELF scripts here (site-packages/<dist>.scripts/) and
# puts a Python shim that runs them in bin/; loaderx/_bin/ is where wheels of before
# the py3-none tag had them
BUNDLED_DIRS = (os.path.join(os.path.dirname(HERE), "loaderx.scripts"),
                os.path.join(HERE, "_bin"))


def _installed_script(name):
    """The script ``name`` the installed loaderx distribution lists (its RECORD), or
    None: an unrepaired wheel's programs are in the environment's bin/."""
    try:
        from importlib import metadata
        files = metadata.distribution("loaderx").files or ()
    except Exception:      # not installed (a source checkout), or no metadata
        return None
    for f in files:
        if f.name == name and f.parent.name == "bin":
            p = os.path.abspath(str(f.locate()))
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return None


def bundled(name):
    """The program ``name`` (zrecordd, zrecord) installed with this package, or
    None."""
    for d in BUNDLED_DIRS:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    if os.path.isfile(os.path.join(os.path.dirname(HERE), "meson.build")):
        return None        # a source checkout: never a loaderx installed elsewhere
    return _installed_script(name)


def in_build_tree(relpath):
    """The newest ``<repo>/build*/<relpath>`` of a source checkout (not a sanitizer
    build), or None: this file is <repo>/python-client/loaderx/_daemon.py."""
    repo = os.path.dirname(os.path.dirname(HERE))
    if not os.path.isfile(os.path.join(repo, "meson.build")):
        return None
    found = []
    for name in sorted(os.listdir(repo)):
        cand = os.path.join(repo, name, relpath)
        if name.startswith("build") and "asan" not in name and os.access(cand, os.X_OK):
            found.append((os.path.getmtime(cand), cand))
    return max(found)[1] if found else None


class UntrustedBinary(ZrecordConnectionError):
    """A program refused by :func:`check_trusted`; nothing was started."""

    def __init__(self, message):
        super().__init__(message, code=errno.EPERM, name="EPERM")


def _owner_text(st):
    return _conn.uid_text(st.st_uid)


def _untrusted(binary, real, what, path, why):
    via = "" if real == binary else f" (the real path of {binary})"
    return UntrustedBinary(
        f"refusing to start {real}{via}: {what} {path} {why}; a program is started only if "
        "it and every directory above it belong to you or root and nobody else may write "
        "them, since anyone who can could have put it there: fix the permissions (for "
        "instance chmod go-w), set $ZRECORDD to a program that qualifies, or point "
        "$ZRECORD_SOCKET at a running daemon")


def check_trusted(binary):
    """The real path of ``binary`` (symbolic links resolved), to execute instead of
    ``binary``, if the user or root could have installed it: a regular file, it and
    every directory above it owned by the user or root, none writable by its group
    or others, except a directory with the sticky bit (``/tmp``): there nobody may
    rename or remove an entry that is not theirs, and the entry below it must pass
    the same checks. Raises :class:`UntrustedBinary` naming the binary, the path at
    fault and why; ``ZrecordConnectionError`` if it is missing or not executable."""
    me = os.geteuid()
    real = os.path.realpath(binary)
    try:
        st = os.stat(real)
    except OSError as e:
        raise ZrecordConnectionError(f"cannot start {binary}: {e.strerror}",
                                     code=e.errno) from None
    if not stat.S_ISREG(st.st_mode) or not os.access(real, os.X_OK):
        raise ZrecordConnectionError(f"cannot start {binary}: not an executable file",
                                     code=errno.EACCES)
    path, what = real, "the file"
    while True:
        if st.st_uid not in (me, 0):
            raise _untrusted(binary, real, what, path,
                             f"belongs to {_owner_text(st)}, not to you ({_conn.uid_text(me)})"
                             + (" or root" if me else ""))
        sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
            who = "its group" if st.st_mode & stat.S_IWGRP else "others"
            if st.st_mode & stat.S_IWGRP:
                try:
                    who = f"its group {grp.getgrgid(st.st_gid).gr_name} (gid {st.st_gid})"
                except KeyError:
                    who = f"its group (gid {st.st_gid})"
                if st.st_mode & stat.S_IWOTH:
                    who += " and others"
            raise _untrusted(binary, real, what, path,
                             f"(mode {stat.S_IMODE(st.st_mode):04o}, owner {_owner_text(st)}) "
                             f"is writable by {who}")
        if path == "/":
            return real
        path, what = os.path.dirname(path), "the directory"
        st = os.lstat(path)     # a real path: no symbolic link is left in it


def find_binary():
    """The daemon binary to start, checked (:func:`check_trusted`): its real path."""
    env = os.environ.get("ZRECORDD")
    if env:
        if not os.access(env, os.X_OK):
            raise ZrecordConnectionError(f"$ZRECORDD={env} is not an executable file")
        return check_trusted(env)
    p = bundled("zrecordd") or shutil.which("zrecordd") or in_build_tree("daemon/zrecordd")
    if p:
        return check_trusted(p)
    raise ZrecordConnectionError(
        "no zrecordd answers and none can be started: this loaderx carries no daemon "
        "(installed without one); set $ZRECORDD to the daemon binary, put zrecordd on "
        "PATH, or point $ZRECORD_SOCKET at a running daemon")


def _try_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def ensure_private_daemon():
    """Starts the private daemon unless one answers; returns its socket path."""
    d = private_dir()
    sock_path = os.path.join(d, "zrecordd.sock")
    n = len(os.fsencode(sock_path))
    if n > SUN_PATH_MAX:
        raise ZrecordConnectionError(
            f"cannot start a private zrecordd: its socket path {sock_path} is {n} bytes, "
            f"and a Unix socket path holds at most {SUN_PATH_MAX}; set XDG_RUNTIME_DIR to "
            "a shorter directory, or ZRECORD_SOCKET to a running daemon's socket",
            code=errno.ENAMETOOLONG)
    _secure_dir(d)
    lock_fd = os.open(os.path.join(d, "start.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if _try_connect(sock_path):
            return sock_path
        binary = find_binary()
        idle = os.environ.get("ZRECORD_IDLE_EXIT", str(IDLE_EXIT_DEFAULT))
        # Shorter than sock_path, and ours alone: the directory is ours, the lock held.
        npath = os.path.join(d, "notify")
        try:
            os.unlink(npath)        # left by a client killed while it waited
        except FileNotFoundError:
            pass
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            ns.bind(npath)
            env = dict(os.environ)
            env["NOTIFY_SOCKET"] = npath
            env.pop("LISTEN_FDS", None)
            env.pop("LISTEN_PID", None)
            log_path = os.path.join(d, "zrecordd.log")
            # sh starts the daemon in the background and exits at once, so the daemon
            # is nobody's child here (no zombie) and outlives this process.
            script = ('"$0" "$@" </dev/null >>"$ZRECORD_LOG" 2>&1 & echo $! >"$ZRECORD_PIDFILE"')
            env["ZRECORD_LOG"] = log_path
            env["ZRECORD_PIDFILE"] = os.path.join(d, "zrecordd.pid")
            subprocess.run(
                ["/bin/sh", "-c", script, binary, f"--socket={sock_path}",
                 "--socket-mode=0600", f"--idle-exit={idle}", "--log-level=notice"],
                env=env, check=True, start_new_session=True, stdin=subprocess.DEVNULL)
            try:
                with open(env["ZRECORD_PIDFILE"]) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                pid = None
            deadline = time.monotonic() + READY_TIMEOUT
            ready = exited = False
            while time.monotonic() < deadline:
                r, _, _ = select.select([ns], [], [], min(0.1, max(0.0, deadline - time.monotonic())))
                if r:
                    data = ns.recv(4096)
                    if any(line == b"READY=1" for line in data.split(b"\n")):
                        ready = True
                        break
                elif pid is not None and not _alive(pid):
                    exited = True
                    break
            if not ready or not _try_connect(sock_path):
                tail = ""
                try:
                    with open(log_path, "rb") as f:
                        f.seek(max(0, os.path.getsize(log_path) - 2000))
                        tail = f.read().decode("utf-8", "replace").strip().splitlines()[-3:]
                        tail = " | ".join(tail)
                except OSError:
                    pass
                what = ("it exited at once" if exited else
                        f"it did not become ready within {READY_TIMEOUT:.0f} s")
                raise ZrecordConnectionError(
                    f"started {binary} on {sock_path} but {what}"
                    + (f"; its log ({log_path}) says: {tail}" if tail else ""))
        finally:
            ns.close()
            try:
                os.unlink(npath)
            except OSError:
                pass
        return sock_path
    finally:
        os.close(lock_fd)
