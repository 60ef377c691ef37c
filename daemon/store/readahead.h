/* readahead.h: hints ahead of the store's sequential walks (verify, compact).
 *
 * Chunk files are read at random (no kernel read-around: chunks.h), so a pass
 * that walks records in order hints them first: it feeds the records it is
 * about to read, in walk order; consecutive ones that touch (after rounding to
 * pages) merge into one range, and each range is handed to the kernel
 * (WILLNEED, io/hint.h) when the next record does not extend it or on flush.
 * Best effort: a record that cannot be hinted (a bad loc) is skipped, and the
 * read that follows reports it. Part of the store; not for other layers.
 */
#ifndef ZR_STORE_READAHEAD_H
#define ZR_STORE_READAHEAD_H

#include "io/range.h"
#include "store/store.h"

typedef struct zr_readahead {
        zr_store *s;
        zr_io_range cur; /* pending range, cur.length 0 if none */
} zr_readahead;

/* Starts a walk over s. */
void zr_readahead_init(zr_readahead *ra, zr_store *s);

/* Adds the record at *l to the walk. */
void zr_readahead_add(zr_readahead *ra, const zr_loc *l);

/* Hints what is pending. */
void zr_readahead_flush(zr_readahead *ra);

#endif
