/* error.c: filling zr_error values. See error.h. No allocation, no printing. */
#include "util/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void error_vfill(zr_error *err, int code, const char *fmt, va_list ap) {
        err->code = code;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
}

int zr_error_set(zr_error *err, int code, const char *fmt, ...) {
        if (code < 0)
                code = -code;
        if (err && err->code == 0) {
                va_list ap;
                va_start(ap, fmt);
                error_vfill(err, code, fmt, ap);
                va_end(ap);
        }
        return -code;
}

int zr_error_errno(zr_error *err, int errnum, const char *fmt, ...) {
        if (errnum < 0)
                errnum = -errnum;
        if (errnum == 0)
                errnum = EIO;
        if (err && err->code == 0) {
                va_list ap;
                va_start(ap, fmt);
                error_vfill(err, errnum, fmt, ap);
                va_end(ap);
                size_t len = strlen(err->message);
                char buf[128];
                const char *s = strerror_r(errnum, buf, sizeof(buf));
                snprintf(err->message + len, sizeof(err->message) - len, ": %s", s);
        }
        return -errnum;
}

void zr_error_clear(zr_error *err) {
        if (err) {
                err->code = 0;
                err->message[0] = '\0';
        }
}

const char *zr_error_code_name(int code) {
        if (code < 0)
                code = -code;
        const char *name = zr_error_name(code);
        if (name)
                return name;
        if (code > 0 && code < 1000) {
                const char *e = strerrorname_np(code);
                if (e)
                        return e;
        }
        return "ZR_E_UNKNOWN_CODE";
}
