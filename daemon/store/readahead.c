/* readahead.c: merging a walk's records into ranges and hinting them (see
 * readahead.h). */
#include "store/readahead.h"

#include "io/hint.h"

void zr_readahead_init(zr_readahead *ra, zr_store *s) {
        ra->s = s;
        ra->cur = (zr_io_range){ .fd = -1 };
}

void zr_readahead_flush(zr_readahead *ra) {
        if (ra->cur.length == 0)
                return;
        (void)zr_io_willneed(&ra->cur, 1); /* a hint: only speed depends on it */
        ra->cur.length = 0;
}

void zr_readahead_add(zr_readahead *ra, const zr_loc *l) {
        zr_io_range r;
        size_t n = 0;

        if (zr_store_io_ranges(ra->s, l, 1, &r, &n, NULL) < 0 || n == 0)
                return;
        zr_io_range *c = &ra->cur;
        if (c->length > 0 && c->fd == r.fd && r.offset >= c->offset &&
            r.offset <= c->offset + c->length) {
                if (r.offset + r.length > c->offset + c->length)
                        c->length = r.offset + r.length - c->offset;
                return;
        }
        zr_readahead_flush(ra);
        *c = r;
}
