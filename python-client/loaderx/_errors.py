"""Errors of the loaderx package.

Every error the daemon reports becomes a :class:`ZrecordError` (a
``RuntimeError``, as in loaderx 1.5.7) carrying the daemon's code and symbolic
name. Where a Python exception type fits (an index out of range is an
``IndexError``, a missing store a ``FileNotFoundError``, a schema mismatch a
``ValueError``), the raised class subclasses that type too, so callers can catch
either.

``code`` is loaderx 1.5.7's negative code (:data:`LX157_CODES`: -3 for an index out
of range, ...) for the errors that have one there, zrecord's own otherwise;
``zr_code`` is always zrecord's (``zr-errors.h``).
"""

import errno as _errno
from typing import Any, Optional

# zr-errors.h: codes from 1000 are zrecord's own, below 1000 Linux errno values.
CODES = {
    1000: "ZR_E_NOT_STORE", 1001: "ZR_E_BAD_MAGIC", 1002: "ZR_E_BAD_VERSION",
    1003: "ZR_E_BAD_CODEC", 1004: "ZR_E_CORRUPT", 1005: "ZR_E_DECODE",
    1006: "ZR_E_NO_DICT", 1007: "ZR_E_RANGE", 1008: "ZR_E_TOO_BIG",
    1009: "ZR_E_LOCKED", 1010: "ZR_E_READONLY", 1011: "ZR_E_SCHEMA",
    1012: "ZR_E_MISALIGNED", 1013: "ZR_E_EXISTS", 1014: "ZR_E_HAS_DICT",
    1015: "ZR_E_SAMPLER", 1016: "ZR_E_BUFFER",
    1100: "ZR_E_PROTO", 1101: "ZR_E_VERSION", 1102: "ZR_E_NO_HELLO",
    1103: "ZR_E_UNKNOWN", 1104: "ZR_E_LIMIT", 1105: "ZR_E_BAD_FD",
    1106: "ZR_E_NO_HANDLE", 1107: "ZR_E_STALE", 1108: "ZR_E_SHUTDOWN",
}
NAMES = {v: k for k, v in CODES.items()}

#: loaderx 1.5.7's codes (its ``src/zrecord.zig``) and their fixed messages.
LX157_MESSAGES = {
    -1: "out of memory",
    -2: "file I/O failed",
    -3: "index out of range",
    -4: "record exceeds the 2147483648 byte limit",
    -5: "store is full",
    -6: "buffer too small",
    -7: "stored record failed to decode",
    -8: "not a zrecord store, or written by a newer version",
    -9: "zstd dictionary training failed (too few or too small samples)",
}
#: zrecord's error names that are one of loaderx 1.5.7's codes.
LX157_CODES = {
    "ENOMEM": -1, "EIO": -2, "ENOSPC": -2, "EDQUOT": -2, "EBADF": -2,
    "ZR_E_RANGE": -3, "ZR_E_TOO_BIG": -4, "ZR_E_BUFFER": -6,
    "ZR_E_DECODE": -7, "ZR_E_CORRUPT": -7,
    "ZR_E_BAD_MAGIC": -8, "ZR_E_BAD_VERSION": -8, "ZR_E_BAD_CODEC": -8,
    "ZR_E_NO_DICT": -9,
}


class ZrecordError(RuntimeError):
    """An error reported by zrecordd or detected by the client.

    ``zr_code`` is the daemon's error code (``None`` for errors found by the client
    before anything was sent, unless they name one of zrecord's codes: then the
    code is the name's, from :data:`NAMES`), ``name`` its symbolic name
    (``"ZR_E_RANGE"``, ``"EIO"``), ``message`` the one-line explanation. ``code``
    is loaderx 1.5.7's code where the error is one of its (:data:`LX157_CODES`),
    else ``zr_code``. ``ZrecordError(-3)``, loaderx 1.5.7's form, makes its error.
    """

    message: str
    zr_code: Optional[int]
    name: Optional[str]
    code: Optional[int]
    # set on the OSError subclasses (OSError's own attributes), declared here so
    # that the classes deriving from ZrecordError and an OSError agree on them
    errno: Any
    strerror: Any

    def __init__(self, message, code=None, name=None, **extra):
        if isinstance(message, int) and code is None and name is None:
            lx = message            # loaderx 1.5.7: ZrecordError(code)
            message = LX157_MESSAGES.get(lx, f"unknown zrecord error {lx}")
            name = next((n for n, c in LX157_CODES.items() if c == lx and n.startswith("ZR_")),
                        None)
        super().__init__(message)
        if code is None:
            code = NAMES.get(name)
        if code is None and isinstance(name, str) and name.startswith("E") and \
                isinstance(getattr(_errno, name, None), int):
            code = getattr(_errno, name)
        self.message = message
        self.zr_code = code
        self.name = name or (CODES.get(code) if code is not None else None) or (
            _errno.errorcode.get(code) if code is not None else None)
        self.code = LX157_CODES.get(self.name, code)
        self.extra = extra
        # OSError subclasses want errno/strerror; keep them meaningful.
        if isinstance(self, OSError):
            self.errno = code if code is not None and code < 1000 else None
            self.strerror = message

    def __str__(self):
        if self.name:
            return f"{self.message} [{self.name}]"
        return self.message

    def __reduce__(self):
        return (_rebuild, (type(self).__name__, self.message, self.zr_code, self.name))


class ZrecordValueError(ZrecordError, ValueError):
    """Bad content: a schema mismatch, an unknown codec, misaligned streams, ..."""


class ZrecordTypeError(ZrecordError, TypeError):
    """A value of the wrong type or kind (a dense store opened as ragged, a float index)."""


class ZrecordKeyError(ZrecordValueError, KeyError):
    """A name that is not there (a stream of a multi-stream set): loaderx 1.5.7 raises
    KeyError, zrecord raised ValueError; both catch it."""


class ZrecordIndexError(ZrecordError, IndexError):
    """An index out of range, or a mask of the wrong length."""


class ZrecordFileNotFoundError(ZrecordError, FileNotFoundError):
    """No store where one was expected."""


class ZrecordFileExistsError(ZrecordError, FileExistsError):
    """A store already exists where a new one was to be created."""


class ZrecordPermissionError(ZrecordError, PermissionError):
    """The caller lacks the rights (or the handle is read-only)."""


class ZrecordConnectionError(ZrecordError, ConnectionError):
    """No daemon answers, or the connection broke."""


class ZrecordRuntimeError(ZrecordError, RuntimeError):
    """A failure that is not the caller's input: I/O errors, limits, corruption."""


class ZrecordOSError(ZrecordRuntimeError, OSError):
    """An operating-system failure the daemon met on the caller's behalf (a full
    disk ``ENOSPC``, a quota ``EDQUOT``, ``EIO``): an ``OSError`` with its
    ``errno``, and still a ``RuntimeError`` as every ZrecordError."""


class StaleError(ZrecordValueError):
    """A store changed under a loader, or a resume against a store of another length."""


_BY_NAME = {c.__name__: c for c in (
    ZrecordError, ZrecordValueError, ZrecordTypeError, ZrecordIndexError, ZrecordKeyError,
    ZrecordFileNotFoundError, ZrecordFileExistsError, ZrecordPermissionError,
    ZrecordConnectionError, ZrecordRuntimeError, ZrecordOSError, StaleError)}


def _rebuild(cls_name, message, code, name):
    return _BY_NAME.get(cls_name, ZrecordError)(message, code=code, name=name)


_CLASS_OF = {
    "ZR_E_NOT_STORE": ZrecordFileNotFoundError,
    "ZR_E_BAD_MAGIC": ZrecordValueError,
    "ZR_E_BAD_VERSION": ZrecordValueError,
    "ZR_E_BAD_CODEC": ZrecordValueError,
    "ZR_E_CORRUPT": ZrecordRuntimeError,
    "ZR_E_DECODE": ZrecordRuntimeError,
    "ZR_E_NO_DICT": ZrecordValueError,
    "ZR_E_RANGE": ZrecordIndexError,
    "ZR_E_TOO_BIG": ZrecordValueError,
    "ZR_E_LOCKED": ZrecordRuntimeError,
    "ZR_E_READONLY": ZrecordPermissionError,
    "ZR_E_SCHEMA": ZrecordValueError,
    "ZR_E_MISALIGNED": ZrecordValueError,
    "ZR_E_EXISTS": ZrecordFileExistsError,
    "ZR_E_HAS_DICT": ZrecordValueError,
    "ZR_E_SAMPLER": ZrecordValueError,
    "ZR_E_BUFFER": ZrecordValueError,
    "ZR_E_STALE": StaleError,
    "ZR_E_SHUTDOWN": ZrecordConnectionError,
    "ENOENT": ZrecordFileNotFoundError,
    "ENOTDIR": ZrecordFileNotFoundError,
    "EEXIST": ZrecordFileExistsError,
    "ENOTEMPTY": ZrecordFileExistsError,
    "EACCES": ZrecordPermissionError,
    "EPERM": ZrecordPermissionError,
    "EROFS": ZrecordPermissionError,
    "EINVAL": ZrecordValueError,
    "ENOSPC": ZrecordOSError,
    "EDQUOT": ZrecordOSError,
    "EIO": ZrecordOSError,
    "EFBIG": ZrecordOSError,
}


def is_code(msg, name):
    """True if an error reply or event (LOADER_END, FAULT) carries the code ``name``
    (``"ZR_E_STALE"``), by its name or its number."""
    return msg.get("name") == name or msg.get("code") == NAMES[name]


def from_reply(msg, context=None):
    """The exception for an ``"error"`` reply or a FAULT event."""
    code = msg.get("code")
    name = msg.get("name") or CODES.get(code) or _errno.errorcode.get(code)
    text = msg.get("message") or "error"
    if context:
        text = f"{context}: {text}"
    cls = _CLASS_OF.get(name, ZrecordRuntimeError)
    extra = {k: msg[k] for k in ("index", "needed") if k in msg}
    return cls(text, code=code, name=name, **extra)
