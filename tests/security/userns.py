"""A user and mount namespace of the snippet's own, as ``unshare -Urm`` gives any
user where unprivileged user namespaces are on, and bind mounts in it: what the
attacker of finding 1 uses (``from userns import enter, bind``). The mounts are
seen only inside (a namespace an unprivileged user makes gets its mounts as
slaves of the parent's, and they are made private here too), so only descriptors
the snippet opens after mounting see them: it opens the store's directory inside
and passes it to the daemon, as the attacker did.
"""

import ctypes
import os

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def enter():
    """Becomes root of a new user namespace (mapping only this uid and gid) with a
    mount namespace of its own. Supplementary groups keep granting access."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")


def bind(src, dst, readonly=False):
    """Mounts src over dst (a file over a file, a directory over a directory),
    read-only if asked."""
    _check(_libc.mount(os.fsencode(src), os.fsencode(dst), None, MS_BIND, None),
           f"bind {src} over {dst}")
    if readonly:
        _check(_libc.mount(None, os.fsencode(dst), None, MS_BIND | MS_REMOUNT | MS_RDONLY,
                           None), f"remount {dst} read-only")
