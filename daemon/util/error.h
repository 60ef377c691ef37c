/* error.h: an error value with a human message, filled by library code.
 *
 * Library code never prints. A function that can fail in a way a person must
 * understand takes a `zr_error *err` (which may be NULL) and, on failure, fills
 * it and returns the negated code:
 *
 *     if (hdr.magic != ZR_MAGIC)
 *             return zr_error_set(err, ZR_E_BAD_MAGIC,
 *                                 "meta.zr: magic is %08x, not ZREC", hdr.magic);
 *
 * The first error set wins: a cleanup path that fails after the real failure does
 * not overwrite the message that explains it. Codes are the positive values of
 * proto/zr-errors.h or errno values.
 */
#ifndef ZR_UTIL_ERROR_H
#define ZR_UTIL_ERROR_H

#include <stdarg.h>
#include "zr-errors.h"

#define ZR_ERROR_MESSAGE_MAX 256

typedef struct zr_error {
        int code;                           /* 0 while no error is set */
        char message[ZR_ERROR_MESSAGE_MAX]; /* NUL-terminated, one line */
} zr_error;

/* Sets *err (if err is not NULL and holds no error yet) and returns -code.
 * code must be positive. */
int zr_error_set(zr_error *err, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* As zr_error_set(), for an errno value, appending ": <strerror>" to the message. */
int zr_error_errno(zr_error *err, int errnum, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Clears *err (NULL allowed). */
void zr_error_clear(zr_error *err);

/* The name of a code (see zr_error_name()) or of an errno value ("EIO"); never NULL. */
const char *zr_error_code_name(int code);

#endif
