/* memlimit.c: the memory this process may use (see memlimit.h).
 *
 * The cgroup of the process comes from /proc/self/cgroup, the place its
 * hierarchy is mounted from /proc/self/mountinfo (so a cgroup namespace or a
 * container's own mount works as well as the host's /sys/fs/cgroup). A v1
 * memory controller is preferred when both versions are present, as the
 * kernel charges memory there.
 */
#include "util/memlimit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_BYTES 4096
#define DIR_BYTES (2 * PATH_BYTES + 8)
/* v1 reports "no limit" as PAGE_COUNTER_MAX pages (about 2^63); anything this
 * large is no limit at all. */
#define UNLIMITED_FLOOR ((uint64_t)1 << 62)

typedef struct hierarchy {
        int version;             /* 1 or 2 */
        char cgroup[PATH_BYTES]; /* the process's path inside the hierarchy */
        char mount[PATH_BYTES];  /* where (below root) the hierarchy's `mroot` is mounted */
        char mroot[PATH_BYTES];  /* the part of the hierarchy the mount shows */
} hierarchy;

static void join(char *dst, size_t size, const char *root, const char *path) {
        size_t rl = strlen(root);
        while (rl > 0 && root[rl - 1] == '/')
                rl--;
        snprintf(dst, size, "%.*s%s%s", (int)rl, root, path[0] == '/' ? "" : "/", path);
}

/* Reads a file of one number ("max" is no limit: *ret = 0). 0 on success. */
static int read_u64_file(const char *path, uint64_t *ret) {
        char buf[64];
        FILE *f = fopen(path, "re");
        size_t n;

        if (!f)
                return -errno;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        if (strncmp(buf, "max", 3) == 0) {
                *ret = 0;
                return 0;
        }
        char *end;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || end == buf)
                return -EINVAL;
        *ret = v >= UNLIMITED_FLOOR ? 0 : (uint64_t)v;
        return 0;
}

/* mountinfo escapes blanks and backslashes as \ooo. In place. */
static void unescape(char *s) {
        char *o = s;
        for (char *p = s; *p; p++) {
                if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
                    p[3] >= '0' && p[3] <= '7') {
                        *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
                        p += 3;
                } else {
                        *o++ = *p;
                }
        }
        *o = 0;
}

static int has_option(const char *list, const char *opt) {
        size_t n = strlen(opt);
        for (const char *p = list; p && *p;) {
                const char *c = strchr(p, ',');
                size_t len = c ? (size_t)(c - p) : strlen(p);
                if (len == n && strncmp(p, opt, n) == 0)
                        return 1;
                p = c ? c + 1 : NULL;
        }
        return 0;
}

/* Finds the process's memory cgroup path: a v1 line naming "memory" wins over
 * the v2 line "0::". Returns the version found, 0 for none. */
static int find_cgroup(const char *root, hierarchy *h) {
        char path[PATH_BYTES], line[PATH_BYTES + 64];
        int found = 0;
        FILE *f;

        join(path, sizeof(path), root, "/proc/self/cgroup");
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c1 = *c2 = 0;
                char *p = c2 + 1;
                p[strcspn(p, "\n")] = 0;
                if (has_option(c1 + 1, "memory")) {
                        h->version = 1;
                        snprintf(h->cgroup, sizeof(h->cgroup), "%s", p);
                        found = 1;
                        break;
                }
                if (strcmp(line, "0") == 0 && c1[1] == 0 && !found) {
                        h->version = 2;
                        snprintf(h->cgroup, sizeof(h->cgroup), "%s", p);
                        found = 2;
                }
        }
        fclose(f);
        return found ? h->version : 0;
}

/* Finds where the hierarchy of h->version is mounted. 0 on success. */
static int find_mount(const char *root, hierarchy *h) {
        char path[PATH_BYTES], line[3 * PATH_BYTES];
        int r = -ENOENT;
        FILE *f;

        join(path, sizeof(path), root, "/proc/self/mountinfo");
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                /* id parent maj:min root mountpoint options [optional...] - fstype source super */
                char *fld[6] = {0}, *save = NULL, *tok = strtok_r(line, " \n", &save);
                int i = 0;
                for (; tok && i < 6; tok = strtok_r(NULL, " \n", &save))
                        fld[i++] = tok;
                if (i < 6)
                        continue;
                while (tok && strcmp(tok, "-") != 0)
                        tok = strtok_r(NULL, " \n", &save);
                char *fstype = tok ? strtok_r(NULL, " \n", &save) : NULL;
                char *source = fstype ? strtok_r(NULL, " \n", &save) : NULL;
                char *super = source ? strtok_r(NULL, " \n", &save) : NULL;
                if (!fstype)
                        continue;
                if (h->version == 2 ? strcmp(fstype, "cgroup2") != 0
                                    : strcmp(fstype, "cgroup") != 0 || !has_option(super, "memory"))
                        continue;
                unescape(fld[3]);
                unescape(fld[4]);
                snprintf(h->mroot, sizeof(h->mroot), "%s", fld[3]);
                snprintf(h->mount, sizeof(h->mount), "%s", fld[4]);
                r = 0;
                break;
        }
        fclose(f);
        return r;
}

/* Reads the limits of cgroup directory `dir` into *limit (the smallest, 0 for
 * none). */
static void dir_limit(const hierarchy *h, const char *dir, uint64_t *limit, const char **file) {
        static const char *const v1[] = { "memory.limit_in_bytes", NULL };
        static const char *const v2[] = { "memory.max", "memory.high", NULL };
        char path[DIR_BYTES + 32];

        *limit = 0;
        for (const char *const *n = h->version == 1 ? v1 : v2; *n; n++) {
                uint64_t v;
                snprintf(path, sizeof(path), "%s/%s", dir, *n);
                if (read_u64_file(path, &v) == 0 && v > 0 && (*limit == 0 || v < *limit)) {
                        *limit = v;
                        *file = *n;
                }
        }
}

static void read_cgroup(const char *root, zr_memlimit *ml) {
        hierarchy h = {0};
        char base[PATH_BYTES], dir[DIR_BYTES], rel[PATH_BYTES];

        if (!find_cgroup(root, &h) || find_mount(root, &h) < 0)
                return;
        /* the cgroup path as seen below the mount: strip the mount's own root */
        const char *cg = h.cgroup;
        size_t mrl = strlen(h.mroot);
        if (mrl > 1 && strncmp(cg, h.mroot, mrl) == 0 && (cg[mrl] == '/' || cg[mrl] == 0))
                cg += mrl;
        snprintf(rel, sizeof(rel), "%s", cg);
        join(base, sizeof(base), root, h.mount);
        ml->cgroup_version = h.version;

        /* the process's own cgroup, then each ancestor up to the mount */
        for (;;) {
                uint64_t v;
                const char *file = NULL;
                snprintf(dir, sizeof(dir), "%s%s", base, strcmp(rel, "/") == 0 ? "" : rel);
                if (ml->cgroup_usage == 0) {
                        char p[sizeof(dir) + 32];
                        snprintf(p, sizeof(p), "%s/%s", dir,
                                 h.version == 1 ? "memory.usage_in_bytes" : "memory.current");
                        if (read_u64_file(p, &v) < 0)
                                v = 0;
                        ml->cgroup_usage = v;
                }
                dir_limit(&h, dir, &v, &file);
                if (v && (ml->cgroup_limit == 0 || v < ml->cgroup_limit)) {
                        ml->cgroup_limit = v;
                        snprintf(ml->source, sizeof(ml->source), "cgroup v%d %s of %.200s", h.version,
                                 file, strcmp(rel, "") == 0 ? "/" : rel);
                }
                char *slash = strrchr(rel, '/');
                if (!slash || (slash == rel && rel[1] == 0) || rel[0] == 0)
                        break;
                if (slash == rel)
                        rel[1] = 0; /* up to "/" */
                else
                        *slash = 0;
        }
}

static int read_meminfo(const char *root, zr_memlimit *ml, zr_error *err) {
        char path[PATH_BYTES], line[256];
        uint64_t free_kb = 0, avail_kb = 0;
        int have_avail = 0;
        FILE *f;

        join(path, sizeof(path), root, "/proc/meminfo");
        f = fopen(path, "re");
        if (!f)
                return zr_error_errno(err, errno, "%s", path);
        while (fgets(line, sizeof(line), f)) {
                unsigned long long kb;
                if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
                        ml->mem_total = (uint64_t)kb * 1024;
                else if (sscanf(line, "MemFree: %llu kB", &kb) == 1)
                        free_kb = kb;
                else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                        avail_kb = kb;
                        have_avail = 1;
                }
        }
        fclose(f);
        if (ml->mem_total == 0)
                return zr_error_set(err, EINVAL, "%s: no MemTotal line", path);
        ml->mem_available = (have_avail ? avail_kb : free_kb) * 1024;
        return 0;
}

int zr_memlimit_read(const char *root, zr_memlimit *ret, zr_error *err) {
        zr_memlimit ml = {0};
        int r;

        if (!root)
                root = "/";
        r = read_meminfo(root, &ml, err);
        if (r < 0)
                return r;
        read_cgroup(root, &ml);
        if (ml.cgroup_limit && ml.cgroup_limit < ml.mem_total) {
                ml.effective = ml.cgroup_limit;
        } else {
                ml.effective = ml.mem_total;
                snprintf(ml.source, sizeof(ml.source), "MemTotal");
        }
        *ret = ml;
        return 0;
}

uint64_t zr_memlimit_budget(const zr_memlimit *ml, unsigned fraction_pct, uint64_t cap) {
        uint64_t b = ml->effective / 100 * fraction_pct;
        if (b > cap)
                b = cap;
        return b & ~(uint64_t)((1u << 20) - 1);
}
