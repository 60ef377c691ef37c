/* memlimit.h: how much memory this process may use, as the box says.
 *
 * The daemon's memory budgets (the decoded-record cache, spare rings, the
 * prefetch window) default to fractions of what the process may really use, so
 * a daemon in a container or a small memory cgroup is never OOM-killed by its
 * own defaults. That is the smallest of:
 *   - the memory limit of the process's cgroup and of every ancestor up to the
 *     root of its hierarchy: cgroup v2 `memory.max` and `memory.high`, or v1
 *     `memory.limit_in_bytes` (each ancestor's counts: a parent's limit covers
 *     its children);
 *   - MemTotal of /proc/meminfo.
 * MemAvailable is read as well: what the kernel thinks could be allocated now
 * without swapping (it includes reclaimable page cache).
 *
 * Every file is read below `root` ("/" in the daemon; a directory laid out
 * like one in tests), so the module is tested without a real cgroup. Nothing
 * here allocates beyond the stack, prints or caches: call it again (SIGHUP) to
 * see a limit that changed.
 */
#ifndef ZR_UTIL_MEMLIMIT_H
#define ZR_UTIL_MEMLIMIT_H

#include <stdint.h>

#include "util/error.h"

#define ZR_MEMLIMIT_SOURCE_MAX 256

typedef struct zr_memlimit {
        uint64_t mem_total;     /* MemTotal, bytes */
        uint64_t mem_available; /* MemAvailable, bytes (MemFree on kernels without it) */
        uint64_t cgroup_limit;  /* smallest cgroup limit found, bytes; 0 = none */
        uint64_t cgroup_usage;  /* the process's own cgroup's usage, bytes; 0 = unknown */
        uint64_t effective;     /* min(mem_total, cgroup_limit if any) */
        int cgroup_version;     /* 1, 2, or 0 when no memory controller was found */
        /* where `effective` came from, for STATUS and the log, e.g.
         * "cgroup v2 memory.max of /system.slice/zrecordd.service" or "MemTotal" */
        char source[ZR_MEMLIMIT_SOURCE_MAX];
} zr_memlimit;

/* Reads the limits as seen by this process, below `root` (NULL means "/").
 * Returns 0 and fills *ret, or a negative code with *err set when /proc/meminfo
 * cannot be read or holds no MemTotal. A missing or unreadable cgroup file is
 * not an error: that cgroup level simply sets no limit. */
int zr_memlimit_read(const char *root, zr_memlimit *ret, zr_error *err);

/* A default budget: `fraction_pct` percent of ml->effective, at most `cap`
 * bytes, rounded down to a MiB (at least 0). */
uint64_t zr_memlimit_budget(const zr_memlimit *ml, unsigned fraction_pct, uint64_t cap);

#endif
