/* journal.c: writing, reading and removing delete.zr.
 *
 * The file is small (40 bytes plus 24 per moved entry) and written whole with
 * one pwrite; its last 8 bytes are an FNV-1a 64 checksum of everything before,
 * so a write torn by a crash is recognised. It does not apply the journal: the
 * store does, since only it knows the table.
 */
#include "store/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/chunks.h"
#include "store/format.h"
#include "store/killpoint.h"
#include "store/newfile.h"
#include "store/resolve.h"

#define JOURNAL_HEAD 32 /* magic, version, old_len, new_len, count */
#define JOURNAL_ENTRY 24 /* index u64 + one RecordLoc */
#define JOURNAL_TAIL 8  /* checksum */
#define JOURNAL_VERSION 1

static const uint8_t journal_magic[4] = { 'Z', 'R', 'D', 'J' };

uint64_t zr_journal_checksum(const uint8_t *p, size_t n) {
        uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a, 64 bits */
        for (size_t i = 0; i < n; i++) {
                h ^= p[i];
                h *= 0x100000001b3ULL;
        }
        return h;
}

int zr_journal_write(int dirfd, const zr_journal *j, zr_error *err) {
        size_t size = JOURNAL_HEAD + j->n * JOURNAL_ENTRY + JOURNAL_TAIL;
        uint8_t *buf = malloc(size);
        int fd = -1, r;

        if (!buf)
                return zr_error_set(err, ENOMEM, ZR_JOURNAL_NAME ": out of memory");
        memcpy(buf, journal_magic, 4);
        zr_le32_put(buf + 4, JOURNAL_VERSION);
        zr_le64_put(buf + 8, j->old_len);
        zr_le64_put(buf + 16, j->new_len);
        zr_le64_put(buf + 24, j->n);
        for (size_t i = 0; i < j->n; i++) {
                uint8_t *e = buf + JOURNAL_HEAD + i * JOURNAL_ENTRY;
                zr_le64_put(e, j->entries[i].index);
                zr_loc_encode(&j->entries[i].loc, e + 8);
        }
        zr_le64_put(buf + size - JOURNAL_TAIL, zr_journal_checksum(buf, size - JOURNAL_TAIL));

        fd = zr_newfile_create(dirfd, ZR_JOURNAL_NAME, O_RDWR, err);
        if (fd < 0) {
                r = fd;
                goto out;
        }
        ZR_KILLPOINT(ZR_KP_JOURNAL_CREATED);
        r = zr_pwrite_all(fd, buf, size, 0);
        if (r < 0) {
                r = zr_error_errno(err, -r, ZR_JOURNAL_NAME ": write");
                goto out;
        }
        ZR_KILLPOINT(ZR_KP_JOURNAL_WRITTEN);
        if (fdatasync(fd) < 0 || fsync(dirfd) < 0) {
                r = zr_error_errno(err, errno, ZR_JOURNAL_NAME ": fsync");
                goto out;
        }
        r = 0;
out:
        if (fd >= 0)
                close(fd);
        free(buf);
        return r;
}

int zr_journal_read(int dirfd, zr_journal *ret, zr_error *err) {
        struct stat st;
        uint8_t *buf = NULL;
        int fd, r = 0;

        zr_error oerr = {0};
        fd = zr_resolve_open(dirfd, ZR_JOURNAL_NAME, O_RDONLY, 0, &oerr);
        if (fd < 0) {
                if (fd == -ENOENT)
                        return 0;
                return zr_error_set(err, -fd, "%s", oerr.message);
        }
        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, ZR_JOURNAL_NAME ": stat");
                goto out;
        }
        size_t size = (size_t)st.st_size;
        if (size < JOURNAL_HEAD + JOURNAL_TAIL ||
            (size - JOURNAL_HEAD - JOURNAL_TAIL) % JOURNAL_ENTRY != 0)
                goto out; /* torn */
        buf = malloc(size);
        if (!buf) {
                r = zr_error_set(err, ENOMEM, ZR_JOURNAL_NAME ": out of memory");
                goto out;
        }
        size_t got = 0;
        while (got < size) {
                ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = zr_error_errno(err, errno, ZR_JOURNAL_NAME ": read");
                        goto out;
                }
                if (n == 0)
                        goto out; /* shrank under us: torn */
                got += (size_t)n;
        }
        size_t count = (size - JOURNAL_HEAD - JOURNAL_TAIL) / JOURNAL_ENTRY;
        if (memcmp(buf, journal_magic, 4) != 0 || zr_le32_get(buf + 4) != JOURNAL_VERSION ||
            zr_le64_get(buf + 24) != count ||
            zr_le64_get(buf + size - JOURNAL_TAIL) != zr_journal_checksum(buf, size - JOURNAL_TAIL))
                goto out; /* torn */

        zr_journal j = { .old_len = zr_le64_get(buf + 8), .new_len = zr_le64_get(buf + 16),
                         .n = count };
        j.entries = calloc(count ? count : 1, sizeof(*j.entries));
        if (!j.entries) {
                r = zr_error_set(err, ENOMEM, ZR_JOURNAL_NAME ": out of memory");
                goto out;
        }
        for (size_t i = 0; i < count; i++) {
                const uint8_t *e = buf + JOURNAL_HEAD + i * JOURNAL_ENTRY;
                j.entries[i].index = zr_le64_get(e);
                zr_loc_decode(e + 8, &j.entries[i].loc);
        }
        *ret = j;
        r = 1;
out:
        free(buf);
        close(fd);
        return r;
}

int zr_journal_remove(int dirfd, zr_error *err) {
        if (unlinkat(dirfd, ZR_JOURNAL_NAME, 0) < 0 && errno != ENOENT)
                return zr_error_errno(err, errno, ZR_JOURNAL_NAME ": unlink");
        return 0;
}

void zr_journal_done(zr_journal *j) {
        if (j) {
                free(j->entries);
                *j = (zr_journal){0};
        }
}
