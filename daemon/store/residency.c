/* residency.c: where records sit in the chunk files, and whether the page
 * cache holds them.
 *
 * The two questions a reader that reads ahead asks (store.h, "Reading ahead
 * of a gather"): which pages does a record occupy, as ranges of the chunk
 * files' descriptors, and are they all resident. Both are lock-free, like a
 * gather, and read nothing. Residency is asked of cachestat(2) (Linux 6.5) on
 * the chunk's descriptor, which needs no mapping and measured 0.54 us a call
 * on this project's 2-core VM against 2.5 to 5.6 us for mincore() of one page
 * of a mapping; where cachestat() is missing (ENOSYS) or filtered (EPERM), it
 * falls back to mincore() for good.
 */
#include "store/store-private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same on every architecture but alpha */
#endif

struct zr_cachestat_range {
        uint64_t off, len;
};

struct zr_cachestat {
        uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* 0 until cachestat() is known to be missing here, then 1. */
static _Atomic bool no_cachestat;

/* Pages asked of mincore() per call: 1 MiB of a record per system call. */
#define RESIDENT_VEC 256

static uint64_t page_size(void) {
        static _Atomic uint64_t cached;
        uint64_t p = atomic_load_explicit(&cached, memory_order_relaxed);
        if (p == 0) {
                long v = sysconf(_SC_PAGESIZE);
                p = v > 0 ? (uint64_t)v : 4096;
                atomic_store_explicit(&cached, p, memory_order_relaxed);
        }
        return p;
}

int zr_store_io_ranges(zr_store *s, const zr_loc *locs, size_t n, zr_io_range *ret,
                       size_t *ret_n, zr_error *err) {
        uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
        uint64_t page = page_size();
        size_t out = 0;
        int r = 0;

        for (size_t i = 0; i < n; i++) {
                const zr_loc *l = &locs[i];
                uint64_t end = (uint64_t)l->offset + l->phys_length;
                uint64_t limit = l->chunk_id < tail_chunk(tail) ? s->chunk_cap
                               : l->chunk_id == tail_chunk(tail) ? tail_offset(tail) : 0;
                if (l->phys_length == 0)
                        continue;
                if (end > limit) {
                        r = zr_error_set(err, ZR_E_CORRUPT,
                                         "table entry {chunk %" PRIu32 ", offset %" PRIu32
                                         ", phys %" PRIu32 "} points past %" PRIu32
                                         ".chunk's end (%" PRIu64 ")",
                                         l->chunk_id, l->offset, l->phys_length, l->chunk_id,
                                         limit);
                        break;
                }
                int fd = zr_files_fd(s->chunks, l->chunk_id);
                if (fd < 0) {
                        r = zr_error_set(err, ZR_E_CORRUPT, "%" PRIu32 ".chunk: not open",
                                         l->chunk_id);
                        break;
                }
                uint64_t lo = (uint64_t)l->offset & ~(page - 1);
                uint64_t hi = (end + page - 1) & ~(page - 1);
                uint64_t size = zr_files_size(s->chunks, l->chunk_id);
                if (hi > size)
                        /* the file ends inside the last page (or grew since open):
                         * never ask for bytes past its end, nor fewer than the record's */
                        hi = size > end ? size : end;
                ret[out++] = (zr_io_range){ .fd = fd, .offset = lo, .length = hi - lo };
        }
        *ret_n = out;
        return r;
}

/* 1 if every page of [addr, addr + len) of a mapping is resident. addr is page
 * aligned. A failing mincore() (a hole in the mapping, EAGAIN) says "unknown". */
static int pages_resident(const uint8_t *addr, uint64_t len, uint64_t page) {
        unsigned char vec[RESIDENT_VEC];
        while (len > 0) {
                uint64_t pages = (len + page - 1) / page;
                if (pages > RESIDENT_VEC)
                        pages = RESIDENT_VEC;
                uint64_t bytes = pages * page < len ? pages * page : len;
                if (mincore((void *)addr, bytes, vec) < 0)
                        return 0;
                for (uint64_t k = 0; k < pages; k++)
                        if (!(vec[k] & 1))
                                return 0;
                addr += bytes;
                len -= bytes;
        }
        return 1;
}

/* 1 if every page of [lo, lo + len) of fd is cached, 0 if not, -1 if
 * cachestat() cannot tell (missing or filtered: then never asked again). */
static int cachestat_resident(int fd, uint64_t lo, uint64_t len, uint64_t page) {
        struct zr_cachestat_range r = { .off = lo, .len = len };
        struct zr_cachestat cs;

        if (atomic_load_explicit(&no_cachestat, memory_order_relaxed))
                return -1;
        if (syscall(__NR_cachestat, fd, &r, &cs, 0) < 0) {
                if (errno == ENOSYS || errno == EPERM)
                        atomic_store_explicit(&no_cachestat, true, memory_order_relaxed);
                return -1;
        }
        return cs.nr_cache >= (len + page - 1) / page;
}

size_t zr_store_resident(zr_store *s, const zr_loc *locs, size_t n, uint8_t *ret) {
        uint64_t page = page_size();
        size_t resident = 0;

        for (size_t i = 0; i < n; i++) {
                const zr_loc *l = &locs[i];
                uint64_t end = (uint64_t)l->offset + l->phys_length;
                uint64_t lo = (uint64_t)l->offset & ~(page - 1);
                int yes = 1;
                if (l->phys_length > 0) {
                        int fd = zr_files_fd(s->chunks, l->chunk_id);
                        yes = fd >= 0 ? cachestat_resident(fd, lo, end - lo, page) : 0;
                }
                if (yes < 0) {
                        uint64_t map_len;
                        const uint8_t *map = zr_files_map(s->chunks, l->chunk_id, &map_len);
                        yes = map && end <= map_len && pages_resident(map + lo, end - lo, page);
                }
                if (ret)
                        ret[i] = (uint8_t)yes;
                resident += (size_t)yes;
        }
        return resident;
}
