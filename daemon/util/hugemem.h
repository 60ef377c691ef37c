/* hugemem.h: large zeroed buffers the daemon writes once and right away (a
 * packed loader's index, a store's length table), mapped so that filling them
 * costs a few page faults instead of one per 4 KiB page.
 *
 * A fresh anonymous 4 KiB page costs 1.7 to 5 us to fault in on the VMs this
 * daemon is measured on (docs/TOKENS.md, "The index"); a cycle's index of 10^6
 * documents is 2,000 of them, more than the rest of its build. A buffer of
 * ZR_HUGEMEM_MIN bytes or more is mapped at a 2 MiB boundary and advised
 * MADV_HUGEPAGE, so the kernel backs it with transparent huge pages where it
 * has them ("madvise" or "always" in /sys/kernel/mm/transparent_hugepage/
 * enabled): one fault zeroes 2 MiB. Where it has none the buffer is an
 * ordinary mapping; nothing else differs.
 */
#ifndef ZR_UTIL_HUGEMEM_H
#define ZR_UTIL_HUGEMEM_H

#include <stddef.h>

#define ZR_HUGEMEM_MIN ((size_t)2 << 20) /* below it: plain pages, no advice */

/* Maps `bytes` (> 0) zeroed bytes read-write, private. Returns the mapping, or
 * NULL with errno set (ENOMEM). Free it with zr_hugemem_free(p, bytes). */
void *zr_hugemem_alloc(size_t bytes);

/* Unmaps a buffer of zr_hugemem_alloc(bytes); NULL is ignored. */
void zr_hugemem_free(void *p, size_t bytes);

#endif
