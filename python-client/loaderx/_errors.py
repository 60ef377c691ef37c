"""Errors of the loaderx package.

Every error the daemon reports becomes a :class:`ZrecordError` carrying the
daemon's code and symbolic name. Where a Python exception type fits (an index out
of range is an ``IndexError``, a missing store a ``FileNotFoundError``, a schema
mismatch a ``ValueError``), the raised class subclasses that type too, so callers
can catch either.
"""

import errno as _errno

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


class ZrecordError(Exception):
    """An error reported by zrecordd or detected by the client.

    ``code`` is the daemon's error code (``None`` for errors found by the client
    before anything was sent, unless they name one of zrecord's codes: then the
    code is the name's, from :data:`NAMES`), ``name`` its symbolic name
    (``"ZR_E_RANGE"``, ``"EIO"``), ``message`` the one-line explanation.
    """

    def __init__(self, message, code=None, name=None, **extra):
        super().__init__(message)
        if code is None:
            code = NAMES.get(name)
        self.message = message
        self.code = code
        self.name = name or (CODES.get(code) if code is not None else None) or (
            _errno.errorcode.get(code) if code is not None else None)
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
        return (_rebuild, (type(self).__name__, self.message, self.code, self.name))


class ZrecordValueError(ZrecordError, ValueError):
    """Bad content: a schema mismatch, an unknown codec, misaligned streams, ..."""


class ZrecordTypeError(ZrecordError, TypeError):
    """A value of the wrong type or kind (a dense store opened as ragged, a float index)."""


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


class StaleError(ZrecordValueError):
    """A store changed under a loader, or a resume against a store of another length."""


_BY_NAME = {c.__name__: c for c in (
    ZrecordError, ZrecordValueError, ZrecordTypeError, ZrecordIndexError,
    ZrecordFileNotFoundError, ZrecordFileExistsError, ZrecordPermissionError,
    ZrecordConnectionError, ZrecordRuntimeError, StaleError)}


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
