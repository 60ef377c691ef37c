/* msset.c: multi-stream sets (msset.h).
 *
 * It opens the child datasets of a directory in name order, checks they are
 * aligned, and applies appends and deletes to all of them. It assumes it is the
 * only writer of its streams (the store's flock makes that so across processes).
 * It adds no on-disk state: a set is exactly its child directories.
 */
#include "dataset/msset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/resolve.h"

typedef struct stream {
        char *name;
        zr_dataset *ds;
} stream;

struct zr_msset {
        stream *streams;
        size_t n;
        int broken; /* a failed cut-back left the streams misaligned */
};

static int name_cmp(const void *a, const void *b) {
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static int stream_cmp(const void *a, const void *b) {
        return strcmp(((const stream *)a)->name, ((const stream *)b)->name);
}

/* Appends "name=len, " for every stream to buf. */
static void describe_lengths(const zr_msset *ms, const uint64_t *lens, char *buf, size_t size) {
        size_t at = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < ms->n && at < size; i++) {
                int w = snprintf(buf + at, size - at, "%s%s=%llu", i ? ", " : "",
                                 ms->streams[i].name, (unsigned long long)lens[i]);
                if (w < 0)
                        break;
                at += (size_t)w;
        }
}

static int check_aligned(const zr_msset *ms, zr_error *err) {
        uint64_t lens[ZR_MSSET_STREAMS_MAX];
        char buf[ZR_ERROR_MESSAGE_MAX];
        int aligned = 1;

        for (size_t i = 0; i < ms->n; i++) {
                lens[i] = zr_dataset_length(ms->streams[i].ds);
                if (lens[i] != lens[0])
                        aligned = 0;
        }
        if (aligned)
                return 0;
        describe_lengths(ms, lens, buf, sizeof(buf));
        return zr_error_set(err, ZR_E_MISALIGNED, "streams differ in length: %s", buf);
}

int zr_msset_close(zr_msset *ms, zr_error *err) {
        int r = 0;

        if (!ms)
                return 0;
        for (size_t i = 0; i < ms->n; i++) {
                int q = zr_dataset_close(ms->streams[i].ds, err);
                if (q < 0 && r == 0)
                        r = q;
                free(ms->streams[i].name);
        }
        free(ms->streams);
        free(ms);
        return r;
}

int zr_msset_new(zr_dataset **datasets, const char *const *names, size_t n,
                 zr_msset **ret, zr_error *err) {
        zr_msset *ms = NULL;
        size_t taken = 0;
        int r;

        if (n == 0) {
                r = zr_error_set(err, ZR_E_NOT_STORE, "a multi-stream set needs at least one "
                                 "stream");
                goto fail;
        }
        if (n > ZR_MSSET_STREAMS_MAX) {
                r = zr_error_set(err, ZR_E_LIMIT, "%zu streams, at most %d are allowed", n,
                                 ZR_MSSET_STREAMS_MAX);
                goto fail;
        }
        ms = calloc(1, sizeof(*ms));
        if (ms)
                ms->streams = calloc(n, sizeof(stream));
        if (!ms || !ms->streams) {
                r = zr_error_errno(err, ENOMEM, "opening a multi-stream set");
                goto fail;
        }
        for (; taken < n; taken++) {
                ms->streams[taken].ds = datasets[taken];
                ms->streams[taken].name = strdup(names[taken]);
                ms->n = taken + 1;
                if (!ms->streams[taken].name) {
                        taken++;
                        r = zr_error_errno(err, ENOMEM, "opening a multi-stream set");
                        goto fail;
                }
        }
        qsort(ms->streams, n, sizeof(stream), stream_cmp);
        for (size_t i = 0; i < n; i++) {
                if (ms->streams[i].name[0] == '\0' ||
                    (i > 0 && strcmp(ms->streams[i].name, ms->streams[i - 1].name) == 0)) {
                        r = zr_error_set(err, EINVAL, "stream name \"%s\" is empty or appears "
                                         "twice", ms->streams[i].name);
                        goto fail;
                }
        }
        r = check_aligned(ms, err);
        if (r < 0)
                goto fail;
        *ret = ms;
        return 0;
fail:
        /* Close what the set did not take yet, then the set with what it took. */
        for (size_t i = taken; i < n; i++)
                zr_dataset_close(datasets[i], NULL);
        if (ms && ms->streams)
                zr_msset_close(ms, NULL);
        else {
                for (size_t i = 0; i < taken; i++)
                        zr_dataset_close(datasets[i], NULL);
                free(ms);
        }
        return r;
}

int zr_msset_open(int dirfd, const zr_store_options *opts, zr_msset **ret, zr_error *err) {
        zr_dataset *datasets[ZR_MSSET_STREAMS_MAX];
        char *names[ZR_MSSET_STREAMS_MAX];
        size_t n = 0;
        struct dirent *de;
        DIR *dir = NULL;
        int fd, r = 0;

        fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return zr_error_errno(err, errno, "opening the multi-stream directory");
        dir = fdopendir(fd); /* takes fd */
        if (!dir) {
                r = zr_error_errno(err, errno, "reading the multi-stream directory");
                close(fd);
                return r;
        }
        /* Names first: the streams are opened in name order below. */
        while ((errno = 0, de = readdir(dir))) {
                if (de->d_name[0] == '.')
                        continue;
                if (de->d_type != DT_DIR) {
                        struct stat st;
                        if (de->d_type != DT_UNKNOWN ||
                            fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                            !S_ISDIR(st.st_mode))
                                continue;
                }
                if (n == ZR_MSSET_STREAMS_MAX) {
                        r = zr_error_set(err, ZR_E_LIMIT, "more than %d streams",
                                         ZR_MSSET_STREAMS_MAX);
                        goto out;
                }
                names[n] = strdup(de->d_name);
                if (!names[n]) {
                        r = zr_error_errno(err, ENOMEM, "reading the multi-stream directory");
                        goto out;
                }
                n++;
        }
        if (errno != 0) {
                r = zr_error_errno(err, errno, "reading the multi-stream directory");
                goto out;
        }
        if (n == 0) {
                r = zr_error_set(err, ZR_E_NOT_STORE, "no streams: the directory has no child "
                                 "datasets");
                goto out;
        }
        qsort(names, n, sizeof(char *), name_cmp);
        for (size_t i = 0; i < n; i++) {
                zr_error serr = {0};
                int cfd = zr_resolve_open(dirfd, names[i], O_RDONLY | O_DIRECTORY, 0, &serr);
                if (cfd < 0) {
                        r = zr_error_set(err, -cfd, "stream %s: %s", names[i], serr.message);
                } else {
                        r = zr_dataset_open(cfd, opts, &datasets[i], &serr);
                        close(cfd);
                        if (r < 0)
                                zr_error_set(err, -r, "stream %s: %s", names[i], serr.message);
                }
                if (r < 0) {
                        for (size_t k = 0; k < i; k++)
                                zr_dataset_close(datasets[k], NULL);
                        goto out;
                }
        }
        r = zr_msset_new(datasets, (const char *const *)names, n, ret, err);
out:
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        closedir(dir);
        return r;
}

size_t zr_msset_count(const zr_msset *ms) {
        return ms->n;
}

const char *zr_msset_name(const zr_msset *ms, size_t i) {
        return ms->streams[i].name;
}

zr_dataset *zr_msset_stream(zr_msset *ms, size_t i) {
        return ms->streams[i].ds;
}

int zr_msset_find(const zr_msset *ms, const char *name) {
        for (size_t i = 0; i < ms->n; i++)
                if (strcmp(ms->streams[i].name, name) == 0)
                        return (int)i;
        return -ENOENT;
}

uint64_t zr_msset_length(const zr_msset *ms) {
        return zr_dataset_length(ms->streams[0].ds);
}

static int usable(const zr_msset *ms, zr_error *err) {
        if (ms->broken)
                return zr_error_set(err, ZR_E_MISALIGNED, "an earlier failure left the streams "
                                    "misaligned; reopen the set to see their lengths");
        return 0;
}

/* Deletes the records [first, first + count) of stream i, the tail it just got. */
static int cut_back(zr_msset *ms, size_t i, uint64_t first, uint64_t count) {
        uint64_t *idx = malloc((count ? count : 1) * sizeof(uint64_t));
        int r;

        if (!idx)
                return -ENOMEM;
        for (uint64_t k = 0; k < count; k++)
                idx[k] = first + k;
        r = zr_dataset_delete(ms->streams[i].ds, idx, count, NULL);
        free(idx);
        return r;
}

int zr_msset_append(zr_msset *ms, const char *const *names, const zr_batch *batches,
                    size_t n, uint64_t *ret_first, zr_error *err) {
        const zr_batch *order[ZR_MSSET_STREAMS_MAX] = {0};
        uint64_t counts[ZR_MSSET_STREAMS_MAX], first = zr_msset_length(ms);
        int r, aligned = 1;

        r = usable(ms, err);
        if (r < 0)
                return r;
        for (size_t k = 0; k < n; k++) {
                int i = zr_msset_find(ms, names[k]);
                if (i < 0)
                        return zr_error_set(err, ZR_E_SCHEMA, "the set has no stream \"%s\"",
                                            names[k]);
                if (order[i])
                        return zr_error_set(err, ZR_E_SCHEMA, "stream \"%s\" appears twice in "
                                            "the batch", names[k]);
                order[i] = &batches[k];
        }
        for (size_t i = 0; i < ms->n; i++)
                if (!order[i])
                        return zr_error_set(err, ZR_E_SCHEMA, "the batch has nothing for stream "
                                            "\"%s\": every stream must be appended at once",
                                            ms->streams[i].name);
        for (size_t i = 0; i < ms->n; i++) {
                zr_error serr = {0};
                r = zr_dataset_check(ms->streams[i].ds, order[i], &counts[i], &serr);
                if (r < 0)
                        return zr_error_set(err, -r, "stream %s: %s", ms->streams[i].name,
                                            serr.message);
                if (counts[i] != counts[0])
                        aligned = 0;
        }
        if (!aligned) {
                char buf[ZR_ERROR_MESSAGE_MAX];
                describe_lengths(ms, counts, buf, sizeof(buf));
                return zr_error_set(err, ZR_E_MISALIGNED, "the streams' batches hold different "
                                    "record counts: %s", buf);
        }
        for (size_t i = 0; i < ms->n; i++) {
                zr_error serr = {0};
                r = zr_dataset_append(ms->streams[i].ds, order[i], NULL, &serr);
                if (r >= 0)
                        continue;
                zr_error_set(err, -r, "stream %s: %s", ms->streams[i].name, serr.message);
                for (size_t k = 0; k < i; k++)
                        if (cut_back(ms, k, first, counts[0]) < 0)
                                ms->broken = 1;
                return r;
        }
        if (ret_first)
                *ret_first = first;
        return 0;
}

int zr_msset_delete(zr_msset *ms, const uint64_t *idx, size_t n, zr_error *err) {
        uint64_t len = zr_msset_length(ms);
        int r;

        r = usable(ms, err);
        if (r < 0)
                return r;
        for (size_t k = 0; k < n; k++)
                if (idx[k] >= len)
                        return zr_error_set(err, ZR_E_RANGE, "index %llu is out of range (the "
                                            "set has %llu records)", (unsigned long long)idx[k],
                                            (unsigned long long)len);
        for (size_t i = 0; i < ms->n; i++) {
                zr_error serr = {0};
                r = zr_dataset_delete(ms->streams[i].ds, idx, n, &serr);
                if (r >= 0)
                        continue;
                /* The first stream refuses what every stream would (duplicates):
                 * nothing changed. Past it, the streams already differ. */
                if (i > 0)
                        ms->broken = 1;
                return zr_error_set(err, -r, "stream %s: %s%s", ms->streams[i].name,
                                    serr.message, i > 0 ? " (the set is now misaligned)" : "");
        }
        return 0;
}
