/* zr-errors.h: the error codes of zrecord, shared by the engine, the daemon, the
 * wire protocol and every client.
 *
 * A code is a positive integer. Functions of the engine and of libzrc return
 * 0 (or a documented non-negative value) on success and the negated code on
 * failure, as systemd's functions return -errno. Codes below 1000 ARE errno
 * values (EIO, ENOSPC, ENOMEM, EINVAL, ...) and keep their usual meaning; codes
 * from 1000 up are zrecord's own and never change their number once published,
 * because they travel on the wire (proto/PROTOCOL.md, "Errors").
 *
 * This header depends on nothing but the C library.
 */
#ifndef ZR_ERRORS_H
#define ZR_ERRORS_H

enum zr_error_code {
        ZR_E_NOT_STORE     = 1000, /* the directory holds no meta.zr */
        ZR_E_BAD_MAGIC     = 1001, /* meta.zr does not start with "ZREC" */
        ZR_E_BAD_VERSION   = 1002, /* format version this build cannot read */
        ZR_E_BAD_CODEC     = 1003, /* codec tag unknown, or a codec name unknown */
        ZR_E_CORRUPT       = 1004, /* a structure on disk is inconsistent */
        ZR_E_DECODE        = 1005, /* a record's frame does not decode (checksum, size) */
        ZR_E_NO_DICT       = 1006, /* a zstd_dict store has no dictionary */
        ZR_E_RANGE         = 1007, /* an index is out of range */
        ZR_E_TOO_BIG       = 1008, /* a record is larger than 2^31 bytes */
        ZR_E_LOCKED        = 1009, /* another process owns the store */
        ZR_E_READONLY      = 1010, /* the store turned read-only (failed fsync) or was opened so */
        ZR_E_SCHEMA        = 1011, /* a record or request does not match the schema */
        ZR_E_MISALIGNED    = 1012, /* the streams of a multi-stream set differ in length */
        ZR_E_EXISTS        = 1013, /* a store already exists where one was to be created */
        ZR_E_HAS_DICT      = 1014, /* a dictionary is already installed */
        ZR_E_SAMPLER       = 1015, /* sampler parameters are invalid */
        ZR_E_BUFFER        = 1016, /* a destination buffer is too small */
        /* protocol (1100..) */
        ZR_E_PROTO         = 1100, /* a frame or message is malformed */
        ZR_E_VERSION       = 1101, /* protocol version not supported */
        ZR_E_NO_HELLO      = 1102, /* a request arrived before HELLO */
        ZR_E_UNKNOWN       = 1103, /* unknown request kind */
        ZR_E_LIMIT         = 1104, /* a per-client or global limit was hit */
        ZR_E_BAD_FD        = 1105, /* a passed descriptor is missing or of the wrong kind */
        ZR_E_NO_HANDLE     = 1106, /* a handle number names nothing */
        ZR_E_STALE         = 1107, /* the store changed under an open loader */
        ZR_E_SHUTDOWN      = 1108, /* the daemon is shutting down */
};

/* The symbolic name of a code ("ZR_E_RANGE", "EIO"), or NULL if unknown. */
static inline const char *zr_error_name(int code) {
        if (code < 0)
                code = -code;
        switch (code) {
        case ZR_E_NOT_STORE: return "ZR_E_NOT_STORE";
        case ZR_E_BAD_MAGIC: return "ZR_E_BAD_MAGIC";
        case ZR_E_BAD_VERSION: return "ZR_E_BAD_VERSION";
        case ZR_E_BAD_CODEC: return "ZR_E_BAD_CODEC";
        case ZR_E_CORRUPT: return "ZR_E_CORRUPT";
        case ZR_E_DECODE: return "ZR_E_DECODE";
        case ZR_E_NO_DICT: return "ZR_E_NO_DICT";
        case ZR_E_RANGE: return "ZR_E_RANGE";
        case ZR_E_TOO_BIG: return "ZR_E_TOO_BIG";
        case ZR_E_LOCKED: return "ZR_E_LOCKED";
        case ZR_E_READONLY: return "ZR_E_READONLY";
        case ZR_E_SCHEMA: return "ZR_E_SCHEMA";
        case ZR_E_MISALIGNED: return "ZR_E_MISALIGNED";
        case ZR_E_EXISTS: return "ZR_E_EXISTS";
        case ZR_E_HAS_DICT: return "ZR_E_HAS_DICT";
        case ZR_E_SAMPLER: return "ZR_E_SAMPLER";
        case ZR_E_BUFFER: return "ZR_E_BUFFER";
        case ZR_E_PROTO: return "ZR_E_PROTO";
        case ZR_E_VERSION: return "ZR_E_VERSION";
        case ZR_E_NO_HELLO: return "ZR_E_NO_HELLO";
        case ZR_E_UNKNOWN: return "ZR_E_UNKNOWN";
        case ZR_E_LIMIT: return "ZR_E_LIMIT";
        case ZR_E_BAD_FD: return "ZR_E_BAD_FD";
        case ZR_E_NO_HANDLE: return "ZR_E_NO_HANDLE";
        case ZR_E_STALE: return "ZR_E_STALE";
        case ZR_E_SHUTDOWN: return "ZR_E_SHUTDOWN";
        default: return 0;
        }
}

#endif
