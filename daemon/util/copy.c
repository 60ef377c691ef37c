/* copy.c: streaming copies for large gathers (copy.h). */
#include "util/copy.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#define HAVE_STREAM 1
#else
#define HAVE_STREAM 0
#endif

#define STREAM_MIN_DEFAULT (16ull << 20)

static _Atomic uint64_t stream_min; /* 0: not asked yet */

/* The largest cache cpu0 reports in sysfs, in bytes, or 0. sysconf() is no
 * help in a VM: glibc derives it from CPUID, which can describe the host (it
 * says 256 MiB where sysfs says 32 MiB on the machine of copy.h's figures). */
static uint64_t sysfs_cache_size(void) {
        uint64_t best = 0;

        for (int i = 0; i < 8; i++) {
                char path[96], buf[32], *end;
                snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
                FILE *f = fopen(path, "re");
                if (!f)
                        continue;
                char *line = fgets(buf, sizeof(buf), f);
                fclose(f);
                if (!line)
                        continue;
                errno = 0;
                unsigned long long v = strtoull(buf, &end, 10);
                if (errno || end == buf)
                        continue;
                if (*end == 'K')
                        v <<= 10;
                else if (*end == 'M')
                        v <<= 20;
                if (v > best)
                        best = v;
        }
        return best;
}

uint64_t zr_copy_stream_min(void) {
        uint64_t m = atomic_load_explicit(&stream_min, memory_order_relaxed);
        if (m)
                return m;
        uint64_t llc = sysfs_cache_size();
#ifdef _SC_LEVEL3_CACHE_SIZE
        if (llc == 0) {
                long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
                llc = v > 0 ? (uint64_t)v : 0;
        }
#endif
        m = llc > 0 ? llc / 2 : STREAM_MIN_DEFAULT;
        atomic_store_explicit(&stream_min, m, memory_order_relaxed);
        return m;
}

bool zr_copy_streams(uint64_t total) {
        return HAVE_STREAM && total >= zr_copy_stream_min();
}

void zr_copy_stream(void *dst, const void *src, size_t n) {
#if HAVE_STREAM
        uint8_t *d = dst;
        const uint8_t *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;

        if (n < head + 64) {
                memcpy(d, s, n);
                return;
        }
        memcpy(d, s, head);
        d += head;
        s += head;
        n -= head;
        for (; n >= 64; n -= 64, d += 64, s += 64) {
                __m128i a = _mm_loadu_si128((const __m128i *)s);
                __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
                __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
                __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
                _mm_stream_si128((__m128i *)d, a);
                _mm_stream_si128((__m128i *)(d + 16), b);
                _mm_stream_si128((__m128i *)(d + 32), c);
                _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, n);
#else
        memcpy(dst, src, n);
#endif
}

void zr_copy(void *dst, const void *src, size_t n, bool stream) {
        if (stream)
                zr_copy_stream(dst, src, n);
        else
                memcpy(dst, src, n);
}

void zr_copy_stream_done(void) {
#if HAVE_STREAM
        _mm_sfence();
#endif
}
