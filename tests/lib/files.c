/* files.c: scratch files and directories, page cache residency (files.h). */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

#define MiB ((uint64_t)1 << 20)

int tl_scratch_new(tl_scratch *s, const char *tag) {
        snprintf(s->path, sizeof(s->path), "%s/zr-%s-XXXXXX", tl_tmpdir(false), tag);
        s->fd = -1;
        if (!mkdtemp(s->path))
                return -errno;
        s->fd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return s->fd < 0 ? -errno : 0;
}

void tl_scratch_free(tl_scratch *s) {
        if (s->fd >= 0)
                close(s->fd);
        s->fd = -1;
        tl_rmtree(s->path);
}

int tl_put_file(int dfd, const char *rel, const char *text) {
        char path[512];
        size_t len = strlen(text);
        int fd, r = 0;

        if (snprintf(path, sizeof(path), "%s", rel) >= (int)sizeof(path))
                return -ENAMETOOLONG;
        for (char *p = strchr(path, '/'); p; p = strchr(p + 1, '/')) {
                *p = 0;
                if (mkdirat(dfd, path, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        fd = openat(dfd, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (write(fd, text, len) != (ssize_t)len)
                r = errno ? -errno : -EIO;
        close(fd);
        return r;
}

int tl_temp_file(uint64_t size) {
        char path[256];
        uint8_t *buf = malloc(MiB);
        int fd, r = 0;

        snprintf(path, sizeof(path), "%s/zr-test-file-XXXXXX", tl_tmpdir(false));
        fd = buf ? mkostemp(path, O_CLOEXEC) : -1;
        if (fd < 0) {
                r = buf ? -errno : -ENOMEM;
                free(buf);
                return r;
        }
        unlink(path);
        for (uint64_t i = 0; i < MiB; i++)
                buf[i] = (uint8_t)(i * 31 + 7);
        for (uint64_t off = 0; off < size && r == 0; off += MiB) {
                uint64_t n = size - off < MiB ? size - off : MiB;
                if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
                        r = errno ? -errno : -EIO;
        }
        free(buf);
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

/* cachestat()'s arguments (linux/mman.h has them from 6.5 on only). */
struct tl_cachestat_range {
        uint64_t off, len;
};
struct tl_cachestat {
        uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

int64_t tl_cached_pages(int fd, uint64_t off, uint64_t len) {
        struct tl_cachestat_range r = { off, len };
        struct tl_cachestat cs;

        if (syscall(__NR_cachestat, fd, &r, &cs, 0) < 0)
                return -1;
        return (int64_t)cs.nr_cache;
}
