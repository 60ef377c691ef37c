/* copy.h: the copy of a large gather, with stores that bypass the cache.
 *
 * A gather writes each record once into memory it does not read back: a read
 * buffer or a ring slot that the client reads later. An ordinary store first
 * reads the destination's cache line in (read for ownership), so a copy moves
 * each byte over the memory bus three times; a streaming (non-temporal) store
 * writes whole lines and moves it twice. Measured on a 2-core EPYC (32 MiB L3),
 * 256 random records of 256 KiB gathered from a mapped file on 2 threads:
 * memcpy 7.9-8.9 GiB/s, streaming stores 10.8-13.1 GiB/s (median of 200).
 * Below about half the last-level cache the trade turns: the destination of an
 * 8 MiB gather stays in the cache between batches, and memcpy is 1.2x faster.
 * So a gather streams only when the memory it writes before any of it is read
 * back is at least zr_copy_stream_min() bytes: a READ's batch, a loader's
 * whole ring (its slots are read a prefetch depth later).
 *
 * Streaming stores are weakly ordered: a thread that used zr_copy_stream()
 * calls zr_copy_stream_done() before it tells anyone that the bytes are there.
 * On a machine without them (not x86-64) both are memcpy() and nothing.
 */
#ifndef ZR_UTIL_COPY_H
#define ZR_UTIL_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Half the last-level cache (sysfs, else sysconf), 16 MiB when neither says. */
uint64_t zr_copy_stream_min(void);

/* Whether a gather of `total` bytes in all should stream its copies. */
bool zr_copy_streams(uint64_t total);

/* memcpy(dst, src, n) through streaming stores where dst is 16-byte aligned
 * (the unaligned head and the tail through memcpy). */
void zr_copy_stream(void *dst, const void *src, size_t n);

/* Orders this thread's streaming stores before its later stores (sfence). */
void zr_copy_stream_done(void);

/* zr_copy_stream() when `stream`, else memcpy(): a gather's one copy call. */
void zr_copy(void *dst, const void *src, size_t n, bool stream);

#endif
