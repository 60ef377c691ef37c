/* s3.c: the error value and the wiping of secrets every part of s3/ uses
 * (s3.h). Nothing here needs libcurl: libzrc links this, url.c and creds.c
 * alone to resolve a client's credentials. */
#include "s3.h"

#include <stdio.h>

int s3_error_set(s3_error *err, int code, const char *fmt, ...) {
        if (err && !err->code) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->message, sizeof(err->message), fmt, ap);
                va_end(ap);
                err->code = code;
        }
        return -code;
}

void s3_wipe(void *p, size_t n) {
        volatile unsigned char *v = p;
        while (n--)
                *v++ = 0;
}
