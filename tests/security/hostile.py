"""What a hostile user tries on a daemon-made memfd (a ring or a read buffer), for
snippets run as that user (``from hostile import attempts``): every way to change
its size or bytes that the seals must refuse. The C twin, run as the daemon's own
user, is tests/hardening/hostile-fds.c.
"""

import ctypes
import errno
import mmap
import os

F_ADD_SEALS, F_GET_SEALS = 1033, 1034
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 1, 2, 4, 8, 16
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
PROT_READ, PROT_WRITE = 1, 2
MAP_SHARED = 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
_libc.fcntl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value

SUCCEEDED = "succeeded"


def _name(e):
    return errno.errorcode.get(e, str(e))


def _py(fn):
    try:
        fn()
        return SUCCEEDED
    except OSError as e:
        return _name(e.errno)


def _c(rc):
    return SUCCEEDED if rc == 0 else _name(ctypes.get_errno())


def seals(fd):
    return _libc.fcntl(fd, F_GET_SEALS, 0)


def _map(fd, size, prot):
    p = _libc.mmap(None, size, prot, MAP_SHARED, fd, 0)
    return None if p in (None, _MAP_FAILED) else p


def attempts(fd, size, label):
    """{label + attempt: outcome}, the outcome an errno name or "succeeded"."""
    out = {}

    def put(what, outcome):
        out[f"{label}: {what}"] = outcome

    put("ftruncate to 0", _py(lambda: os.ftruncate(fd, 0)))
    put("ftruncate to half", _py(lambda: os.ftruncate(fd, size // 2)))
    put("ftruncate to twice", _py(lambda: os.ftruncate(fd, size * 2)))
    put("write", _py(lambda: os.write(fd, b"\x5a" * 64)))
    put("pwrite", _py(lambda: os.pwrite(fd, b"\x5a" * 64, 4096)))
    put("fallocate to grow", _c(_libc.fallocate(fd, 0, 0, size + 4096)))
    put("fallocate punching a hole",
        _c(_libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096)))
    p = _map(fd, size, PROT_READ | PROT_WRITE)
    put("a shared writable mapping", SUCCEEDED if p else _name(ctypes.get_errno()))
    if p:
        _libc.munmap(p, size)
    p = _map(fd, size, PROT_READ)
    if p is None:
        put("a read-only mapping (must work)", "failed: " + _name(ctypes.get_errno()))
    else:
        put("mprotect of a read-only mapping to writable",
            _c(_libc.mprotect(p, size, PROT_READ | PROT_WRITE)))
        _libc.munmap(p, size)
    put("mmap module, writable", _py(lambda: mmap.mmap(fd, size, mmap.MAP_SHARED,
                                                        mmap.PROT_READ | mmap.PROT_WRITE)))
    put("adding F_SEAL_WRITE (a reseal)", _c(0 if _libc.fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0
                                            else -1))
    return out


def attempts_reopened(fd, size, label):
    """The same through /proc/self/fd/N reopened O_RDWR (where the kernel lets it)."""
    try:
        rw = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return {f"{label}: reopening /proc/self/fd O_RDWR (refused, fine)": "refused "
                + _name(e.errno)}
    try:
        return attempts(rw, size, label + " reopened O_RDWR")
    finally:
        os.close(rw)


def other_process_fds(pid, label):
    """Opening another user's process's descriptors through /proc/PID/fd."""
    out = {f"{label}: listing /proc/{pid}/fd": _py(lambda: os.listdir(f"/proc/{pid}/fd"))}
    for n in range(3, 40):
        r = _py(lambda: os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDONLY)))
        if r != "ENOENT":
            out[f"{label}: opening /proc/{pid}/fd/{n}"] = r
    return out


def not_refused(results):
    """The attempts that worked (an attack that succeeded, or a read-only mapping
    that failed): must be empty."""
    return {k: v for k, v in results.items() if v == SUCCEEDED or v.startswith("failed")}
