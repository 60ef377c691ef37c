/* storefiles.c: a store's own files read for a copy, and a set's stores
 * (storefiles.h).
 *
 * push holds a shared lock on meta.zr meanwhile (no writer may change them), so
 * the files are mapped read-only: the header, the table, and each chunk up to
 * its used bytes (the end of its last live record: a chunk's tail past them is
 * not data). Every record's checksum is computed from the mapped bytes into a
 * {seg}.sum object beside its table segment, and every object's own checksum
 * for the manifest.
 */
#include "storefiles.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "tool.h"

int tool_header_parse(const uint8_t *b, size_t n, tool_header *h, const char *where) {
        if (n != TOOL_HEADER_BYTES || memcmp(b, "ZREC", 4) != 0)
                return tool_fail_msg("%s: meta.zr is not a zrecord header", where);
        *h = (tool_header){ .version = b[4], .codec = b[5], .tail_chunk = tool_le32(b + 6),
                            .tail_offset = tool_le32(b + 10), .length = tool_le64(b + 14),
                            .chunk_log2 = b[22] ? b[22] : 32, .flags = b[23] };
        if ((h->version != 1 && h->version != 3) || h->codec > 2 || h->chunk_log2 < 12 ||
            h->chunk_log2 > 32)
                return tool_fail_msg("%s: meta.zr: version %u, codec %u, chunk_log2 %u: not a "
                                     "store this zrecord reads", where, h->version, h->codec,
                                     h->chunk_log2);
        return 0;
}

void tool_store_files_free(tool_store_files *f) {
        for (size_t i = 0; i < f->n; i++) {
                if (f->o[i].map)
                        munmap(f->o[i].map, f->o[i].map_len);
                free(f->o[i].own);
        }
        free(f->o);
        memset(f, 0, sizeof(*f));
}

static tool_sfile *files_add(tool_store_files *f, const char *name) {
        if (f->n == f->cap) {
                size_t cap = f->cap ? 2 * f->cap : 16;
                tool_sfile *o = realloc(f->o, cap * sizeof(*o));
                if (!o)
                        return NULL;
                f->o = o;
                f->cap = cap;
        }
        tool_sfile *o = &f->o[f->n++];
        memset(o, 0, sizeof(*o));
        snprintf(o->name, sizeof(o->name), "%s", name);
        return o;
}

/* Maps `len` bytes of file `name` of dirfd (0 bytes: no mapping). */
static int map_file(int dirfd, const char *name, uint64_t len, tool_sfile *o, const char *where) {
        struct stat st;
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return tool_fail_msg("%s/%s: %s", where, name, strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < len) {
                close(fd);
                return tool_fail_msg("%s/%s: not a file of at least %" PRIu64 " bytes", where,
                                     name, len);
        }
        o->size = len;
        if (len) {
                void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
                if (m == MAP_FAILED) {
                        close(fd);
                        return tool_fail_msg("%s/%s: mmap: %s", where, name, strerror(errno));
                }
                madvise(m, len, MADV_SEQUENTIAL);
                o->map = m;
                o->map_len = len;
                o->data = m;
        }
        close(fd);
        return 0;
}

/* Reads a whole small file of dirfd into o (a missing one: -ENOENT, quiet). */
static int read_small(int dirfd, const char *name, tool_sfile *o, const char *where) {
        struct stat st;
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return errno == ENOENT ? -ENOENT : tool_fail_msg("%s/%s: %s", where, name,
                                                                 strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
                close(fd);
                return tool_fail_msg("%s/%s: not a regular file of at most 64 MiB", where, name);
        }
        o->own = malloc((size_t)st.st_size + 1);
        ssize_t k = o->own ? pread(fd, o->own, (size_t)st.st_size, 0) : -1;
        close(fd);
        if (k != st.st_size)
                return tool_fail_msg("%s/%s: short read", where, name);
        o->data = o->own;
        o->size = (uint64_t)st.st_size;
        return 0;
}

/* The objects of the store in dirfd: metadata, table, checksums, chunks. */
int tool_store_read(int dirfd, const char *where, tool_store_files *f) {
        tool_sfile *meta = files_add(f, TOOL_META_NAME), *o;
        uint64_t cap, nseg;
        uint64_t *used = NULL;
        int r;

        if (!meta)
                return tool_fail_msg("out of memory");
        r = read_small(dirfd, TOOL_META_NAME, meta, where);
        if (r < 0)
                return r == -ENOENT ? tool_fail_msg("%s: no meta.zr: not a store", where) : r;
        meta->in_manifest_xxh3 = 1;
        if (tool_header_parse(meta->data, meta->size, &f->h, where) != 0)
                return 1;
        cap = (uint64_t)1 << f->h.chunk_log2;
        if (f->h.tail_offset > cap)
                return tool_fail_msg("%s: meta.zr: tail_offset past the chunk", where);
        for (const char *opt_name = "schema.msgpack"; opt_name;
             opt_name = strcmp(opt_name, "schema.msgpack") == 0 ? "dict.zr" : NULL) {
                o = files_add(f, opt_name);
                if (!o)
                        return tool_fail_msg("out of memory");
                r = read_small(dirfd, opt_name, o, where);
                if (r == -ENOENT) {
                        f->n--;
                        continue;
                }
                if (r)
                        return r;
                o->in_manifest_xxh3 = 1;
        }
        used = calloc((size_t)f->h.tail_chunk + 1, sizeof(*used));
        if (!used)
                return tool_fail_msg("out of memory");
        used[f->h.tail_chunk] = f->h.tail_offset;
        nseg = (f->h.length + ((uint64_t)1 << TOOL_SEG_LOG2) - 1) >> TOOL_SEG_LOG2;
        size_t loc0 = f->n;
        for (uint64_t s = 0; s < nseg; s++) {
                char name[32];
                uint64_t first = s << TOOL_SEG_LOG2, n = f->h.length - first;
                if (n > ((uint64_t)1 << TOOL_SEG_LOG2))
                        n = (uint64_t)1 << TOOL_SEG_LOG2;
                snprintf(name, sizeof(name), "%" PRIu64 ".loc", s);
                if (!(o = files_add(f, name))) {
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                if ((r = map_file(dirfd, name, n * TOOL_LOC_BYTES, o, where)) != 0)
                        goto out;
                o->in_manifest_xxh3 = 1;
                /* each chunk's used bytes: to the end of its last live record */
                for (uint64_t i = 0; i < n; i++) {
                        const uint8_t *e = o->data + i * TOOL_LOC_BYTES;
                        uint64_t end = (uint64_t)tool_le32(e) + tool_le32(e + 4);
                        uint32_t c = tool_le32(e + 12);
                        if (c > f->h.tail_chunk || end > cap ||
                            (c == f->h.tail_chunk && end > f->h.tail_offset)) {
                                r = tool_fail_msg("%s: record %" PRIu64 " points past the "
                                                  "store's data (chunk %u, end %" PRIu64 ")",
                                                  where, first + i, c, end);
                                goto out;
                        }
                        if (c < f->h.tail_chunk && end > used[c])
                                used[c] = end;
                }
        }
        size_t loc_end = f->n;
        for (uint32_t c = 0; c <= f->h.tail_chunk; c++) {
                char name[32];
                snprintf(name, sizeof(name), "%u.chunk", c);
                if (!(o = files_add(f, name))) {
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                if ((r = map_file(dirfd, name, used[c], o, where)) != 0)
                        goto out;
        }
        /* the checksums, one per record, beside the table */
        for (size_t k = loc0; k < loc_end; k++) {
                char name[32];
                uint64_t n = f->o[k].size / TOOL_LOC_BYTES;
                uint8_t *sums = malloc(n * 8 + 1);
                const uint8_t *locs = f->o[k].data;
                snprintf(name, sizeof(name), "%" PRIu64 ".sum", (uint64_t)(k - loc0));
                if (!sums || !(o = files_add(f, name))) {
                        free(sums);
                        r = tool_fail_msg("out of memory");
                        goto out;
                }
                o->own = sums;
                o->data = sums;
                o->size = n * 8;
                o->in_manifest_xxh3 = 1;
                for (uint64_t i = 0; i < n; i++) {
                        const uint8_t *e = locs + i * TOOL_LOC_BYTES;
                        const tool_sfile *ch = &f->o[loc_end + tool_le32(e + 12)];
                        uint64_t v = s3_checksum(ch->data ? ch->data + tool_le32(e) : (const uint8_t *)"",
                                                 tool_le32(e + 4));
                        for (int b = 0; b < 8; b++)
                                sums[i * 8 + (size_t)b] = (uint8_t)(v >> (8 * b));
                }
        }
        for (size_t k = 0; k < f->n; k++)
                f->o[k].xxh3 = s3_checksum(f->o[k].data ? f->o[k].data : (const uint8_t *)"",
                                           f->o[k].size);
        r = 0;
out:
        free(used);
        return r;
}


/* The children of dirfd that hold a meta.zr, sorted (a set), into *ret. */
int tool_list_streams(int dirfd, char ***ret, size_t *ret_n) {
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;

        *ret = NULL;
        *ret_n = 0;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        while ((de = readdir(d))) {
                char path[600];
                struct stat st;
                if (de->d_name[0] == '.' || strlen(de->d_name) > S3_STREAM_NAME_MAX)
                        continue;
                snprintf(path, sizeof(path), "%s/" TOOL_META_NAME, de->d_name);
                if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                char **nn = realloc(names, (n + 1) * sizeof(*nn));
                if (!nn || !(nn[n] = strdup(de->d_name))) {
                        free(nn ? nn : names);
                        closedir(d);
                        return -ENOMEM;
                }
                names = nn;
                n++;
        }
        closedir(d);
        for (size_t i = 1; i < n; i++) /* insertion sort: at most a few dozen */
                for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
                        char *x = names[j];
                        names[j] = names[j - 1];
                        names[j - 1] = x;
                }
        *ret = names;
        *ret_n = n;
        return 0;
}

void tool_names_free(char **names, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
}
