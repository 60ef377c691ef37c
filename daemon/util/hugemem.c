/* hugemem.c: large zeroed buffers on huge-page boundaries (hugemem.h). */

#include "util/hugemem.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_ALIGN ((size_t)2 << 20)

static size_t page_round(size_t bytes) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        return (bytes + page - 1) & ~(page - 1);
}

void *zr_hugemem_alloc(size_t bytes) {
        size_t len, extra;
        uint8_t *raw, *p, *end;

        if (bytes == 0 || bytes > SIZE_MAX - 2 * HUGE_ALIGN) {
                errno = ENOMEM;
                return NULL;
        }
        len = page_round(bytes);
        extra = bytes >= ZR_HUGEMEM_MIN ? HUGE_ALIGN : 0;
        raw = mmap(NULL, len + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED)
                return NULL;
        if (!extra)
                return raw;
        /* keep the 2 MiB-aligned part, give the rest back */
        p = (uint8_t *)(((uintptr_t)raw + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
        end = raw + len + extra;
        if (p > raw)
                munmap(raw, (size_t)(p - raw));
        if (end > p + len)
                munmap(p + len, (size_t)(end - (p + len)));
        (void)madvise(p, len, MADV_HUGEPAGE); /* advice: without it, plain pages */
        return p;
}

void zr_hugemem_free(void *p, size_t bytes) {
        if (p)
                munmap(p, page_round(bytes));
}
