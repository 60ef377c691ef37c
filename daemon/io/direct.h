/* direct.h: reads with O_DIRECT straight into their destinations.
 *
 * Beyond memory, a byte read through the page cache costs a page allocated,
 * charged to the memory cgroup, copied out and later reclaimed; a read with
 * O_DIRECT costs none of that: the device writes into the destination
 * itself. It needs offsets, lengths and memory aligned to the file's direct
 * I/O alignment (statx's STATX_DIOALIGN; 512 bytes on most devices), which a
 * store's records need not be. This file turns the exact byte ranges a caller
 * wants into aligned reads:
 *
 *   - wants that follow each other both in the file and in memory form one
 *     run, read together (neighbouring records share a read);
 *   - a run's aligned middle is read straight into its destination when the
 *     destination is aligned like the file offset (the usual case: records of
 *     a multiple of the alignment, laid out at multiples of their size);
 *   - the blocks at a run's two ends that also hold bytes of something else
 *     (or lie past the file's end), and whole runs whose memory is not aligned
 *     like their offsets, are read into a bounce buffer and copied: the only
 *     copies, at most two blocks a run in the usual case;
 *   - bounce reads of one file whose blocks touch or overlap share one read.
 *
 * A plan is made once (zr_direct_plan_make()), read by the I/O queue
 * (zr_direct_read(): zr_ioq_submit_into() at the queue's depth, io_uring or its
 * pread threads) and finished by its copies. Descriptors: zr_direct_open()
 * opens a second descriptor of a file with O_DIRECT (the file's own, through
 * /proc/self/fd, checked to be the same inode) and says whether and how the
 * file system takes direct reads; a file system that refuses them (EINVAL at
 * open, no STATX_DIOALIGN) makes it fail, and the caller reads through the
 * page cache instead.
 *
 * Errors are negative errno values; nothing is printed.
 */
#ifndef ZR_IO_DIRECT_H
#define ZR_IO_DIRECT_H

#include <stddef.h>
#include <stdint.h>

#include "io/ioq.h"
#include "util/error.h"

/* A file's direct I/O alignment: of memory, and of offsets and lengths. Powers
 * of two, at most 4096 each. */
typedef struct zr_direct_align {
        uint32_t mem;
        uint32_t off;
} zr_direct_align;

/* Opens `fd`'s file again, read-only, with O_DIRECT | O_CLOEXEC, into *ret_fd,
 * and its alignment into *ret. -EOPNOTSUPP (or the open's error: EINVAL where
 * the file system refuses O_DIRECT) when direct reads cannot be used: not a
 * regular file, another inode behind the path, no alignment reported, or one
 * over 4096. The new descriptor is the caller's to close. */
int zr_direct_open(int fd, int *ret_fd, zr_direct_align *ret, zr_error *err);

/* One range a caller wants: `length` bytes at `offset` of `fd` (an O_DIRECT
 * descriptor of zr_direct_open()) into dst. */
typedef struct zr_direct_want {
        int fd;
        uint64_t offset;
        uint64_t length;
        uint8_t *dst;
} zr_direct_want;

typedef struct zr_direct_copy {
        const uint8_t *from;
        uint8_t *to;
        uint64_t len;
} zr_direct_copy;

typedef struct zr_direct_plan {
        zr_io_dread *reads;
        size_t nreads;
        zr_direct_copy *copies;
        size_t ncopies;
        uint8_t *bounce;      /* the bounce buffer (an anonymous mapping) */
        uint64_t bounce_len;
        /* what it costs, for telemetry */
        uint64_t want_bytes;  /* the bytes wanted */
        uint64_t read_bytes;  /* the bytes its reads ask for (blocks, rounded) */
        uint64_t copy_bytes;  /* the bytes its copies move */
        uint64_t runs;        /* runs of wants that follow each other */
} zr_direct_plan;

/* The largest bounce buffer a plan may take: beyond it zr_direct_plan_make()
 * says -E2BIG (wants that are nearly all unaligned; read them through the
 * page cache). */
#define ZR_DIRECT_BOUNCE_MAX ((uint64_t)16 << 20)

/* Plans the reads of w[0..n) (sorted in place by file and offset) for files of
 * alignment `a`. Wants may repeat or overlap (each is read on its own), must
 * not overlap in memory, and must lie inside their files but for the end of
 * the last block (the reads may end there). Returns 0, -EINVAL (a bad
 * alignment), -ENOMEM, or -E2BIG (see ZR_DIRECT_BOUNCE_MAX); *p is empty on
 * failure. */
int zr_direct_plan_make(zr_direct_want *w, size_t n, zr_direct_align a, zr_direct_plan *p);

/* Frees what the plan holds; zeroes it. */
void zr_direct_plan_free(zr_direct_plan *p);

/* Reads plan p through queue q and waits for its reads, then does its copies.
 * Returns 0, or the first read's error (-ENODATA: a file ended before a
 * wanted byte), -ECANCELED if the queue stopped; the destinations' bytes are
 * then unspecified. *bytes (may be NULL) receives the bytes read. */
int zr_direct_read(zr_ioq *q, const zr_direct_plan *p, uint64_t *bytes);

#endif
