/* fuzz-store.c: libFuzzer target for opening and reading a damaged store.
 *
 * Once per process it builds three small valid stores (raw, zstd, zstd_dict;
 * 24 records, 4 KiB chunks) and keeps their files' bytes. Each input rewrites
 * one store's files into a work directory and damages them as the input says,
 * then opens the store and reads it every way: locate and gather each record
 * (into exact-size buffers, so ASan sees any overrun), gather a table entry
 * taken from the input (store.h: "locs from anywhere are safe"), stats, verify
 * and, for a writable open, append, delete and compact. Properties:
 *   - every call returns 0 or a negative code with that code and a message in
 *     its zr_error; nothing crashes, reads outside a mapping or leaks;
 *   - an undamaged store opens, verifies and reads back every record exactly;
 *   - a record of a compressed store that gathers without an error is one of
 *     the records written, bit for bit (its frame's checksum makes a damaged
 *     frame an error, never other bytes).
 *
 * Input: byte 0 picks the codec (% 3) and the mode ((/ 3) % 4: bit 0 no_mmap,
 * bit 1 a writable open); then edits, each [op][off lo][off hi][len][len bytes]:
 *   op % 8 = 0 write into meta.zr, 1 into 0.loc (the live entries), 2 into
 *   dict.zr, 3 into chunk (op / 8) % chunks, 4 write delete.zr raw, 5 write a
 *   well-formed delete.zr (checksum computed) built from the bytes, 6 truncate
 *   file (op / 8) % files to off, 7 remove it.
 * The last 16 bytes, if the input has them, are the entry for the loc gather.
 * Built as a libFuzzer binary with -Dfuzz=enabled, and as a corpus replay test
 * (replay.c) in every build.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zdict.h>

#include "fuzz.h"
#include "store/format.h"
#include "store/journal.h"
#include "store/store.h"

#define FS_RECORDS 24
#define FS_CHUNK_LOG2 12
#define FS_RECORD_MAX 1500
#define FS_FILES_MAX 32
#define FS_PREFIX (64u << 10) /* bytes kept of a file: the rest is sparse */
#define FS_GATHER_MAX (1u << 20) /* gather only records claiming up to this */
#define FS_WALK_MAX 256 /* stats, verify, compact only stores claiming this few */

/* A property failed: name the line, then abort (the fuzzer keeps the input). */
static void must_at(int cond, int line) {
        if (!cond) {
                fprintf(stderr, "fuzz-store: property at fuzz-store.c:%d failed\n", line);
                abort();
        }
}
#define must(cond) must_at(!!(cond), __LINE__)

/* Setting up the templates must not fail; if it does, say why. */
static void setup_must(int cond, const char *what, const zr_error *err) {
        if (!cond) {
                fprintf(stderr, "fuzz-store: setup: %s: %s\n", what,
                        err && err->message[0] ? err->message : strerror(errno));
                abort();
        }
}

static uint64_t mix64(uint64_t x) {
        x += UINT64_C(0x9e3779b97f4a7c15);
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

static size_t record_len(uint64_t id) {
        return 9 + (size_t)(mix64(id) % (FS_RECORD_MAX - 9));
}

static const char TEMPLATE[] = "zrecord store fuzz: a template for the codecs to find. ";

/* The record of id: a marker byte, its id, then template and noise. */
static void record_fill(uint8_t *dst, uint64_t id, size_t len) {
        dst[0] = 0xa5;
        for (size_t i = 0; i < 8; i++)
                dst[1 + i] = (uint8_t)(id >> (8 * i));
        uint64_t h = 0;
        for (size_t j = 9; j < len; j++) {
                if (j % 32 == 9)
                        h = mix64(id * 7 + j);
                dst[j] = (uint8_t)(TEMPLATE[(j + id) % (sizeof(TEMPLATE) - 1)] + (h & 3));
                h >>= 2;
        }
}

/* 1 if buf[0..len) is exactly a record this target writes (any id). */
static int is_record(const uint8_t *buf, uint64_t len) {
        static uint8_t want[FS_RECORD_MAX];
        uint64_t id = 0;
        if (len < 9 || len >= FS_RECORD_MAX || buf[0] != 0xa5)
                return 0;
        for (size_t i = 0; i < 8; i++)
                id |= (uint64_t)buf[1 + i] << (8 * i);
        if (id >= FS_RECORDS + 8 || record_len(id) != len)
                return 0;
        record_fill(want, id, len);
        return memcmp(want, buf, len) == 0;
}

typedef struct tfile {
        char name[32];
        uint8_t *data; /* the first len bytes */
        size_t len;
        off_t size;
} tfile;

static tfile files[3][FS_FILES_MAX];
static size_t nfiles[3];
static char work[3][512];
static int work_fd[3] = { -1, -1, -1 };

static const char *tmp_base(void) {
        const char *t = getenv("TMPDIR");
        if (t && *t)
                return t;
        return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void clear_dir(int dfd) {
        int fd = dup(dfd);
        must(fd >= 0);
        DIR *d = fdopendir(fd);
        struct dirent *e;
        must(d != NULL);
        rewinddir(d); /* the duplicate shares dfd's position: start from the top */
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        unlinkat(dfd, e->d_name, 0);
        closedir(d);
}

static void remove_work(void) {
        for (int c = 0; c < 3; c++) {
                if (work_fd[c] < 0)
                        continue;
                clear_dir(work_fd[c]);
                close(work_fd[c]);
                rmdir(work[c]);
        }
}

/* Builds the valid store of codec c and keeps its files. */
static void template_build(enum zr_codec c) {
        char dir[512];
        zr_store_options opts = { .chunk_log2 = FS_CHUNK_LOG2 };
        zr_store *s = NULL;
        uint8_t dict[4096];
        size_t dict_len = 0;

        snprintf(dir, sizeof(dir), "%s/zr-fuzz-store-XXXXXX", tmp_base());
        setup_must(mkdtemp(dir) != NULL, dir, NULL);
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        setup_must(dfd >= 0, dir, NULL);

        uint64_t lens[FS_RECORDS];
        size_t total = 0;
        for (size_t i = 0; i < FS_RECORDS; i++)
                total += lens[i] = record_len(i);
        uint8_t *buf = malloc(total);
        must(buf != NULL);
        for (size_t i = 0, off = 0; i < FS_RECORDS; off += lens[i], i++)
                record_fill(buf + off, i, lens[i]);
        if (c == ZR_CODEC_ZSTD_DICT) {
                size_t sl[FS_RECORDS];
                for (size_t i = 0; i < FS_RECORDS; i++)
                        sl[i] = lens[i];
                dict_len = ZDICT_trainFromBuffer(dict, sizeof(dict), buf, sl, FS_RECORDS);
                if (ZDICT_isError(dict_len)) {
                        /* too few samples to train on: a raw-content dictionary */
                        dict_len = sizeof(dict) < total ? sizeof(dict) : total;
                        memcpy(dict, buf, dict_len);
                }
        }
        zr_error err = {0};
        setup_must(zr_store_create(dfd, c, dict, dict_len, &opts, &s, &err) == 0, "create", &err);
        setup_must(zr_store_append(s, buf, lens, FS_RECORDS, NULL, &err) == 0, "append", &err);
        setup_must(zr_store_close(s, &err) == 0, "close", &err);
        free(buf);

        int fd = dup(dfd);
        DIR *d = fdopendir(fd);
        struct dirent *e;
        must(d != NULL);
        while ((e = readdir(d))) {
                struct stat st;
                if (fstatat(dfd, e->d_name, &st, 0) < 0 || !S_ISREG(st.st_mode))
                        continue;
                must(nfiles[c] < FS_FILES_MAX && strlen(e->d_name) < sizeof(files[c][0].name));
                tfile *f = &files[c][nfiles[c]++];
                strcpy(f->name, e->d_name);
                f->size = st.st_size;
                f->len = (size_t)st.st_size < FS_PREFIX ? (size_t)st.st_size : FS_PREFIX;
                f->data = malloc(f->len ? f->len : 1);
                must(f->data != NULL);
                int in = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC);
                must(in >= 0 && pread(in, f->data, f->len, 0) == (ssize_t)f->len);
                close(in);
        }
        closedir(d);
        clear_dir(dfd);
        close(dfd);
        rmdir(dir);

        snprintf(work[c], sizeof(work[c]), "%s/zr-fuzz-work-XXXXXX", tmp_base());
        must(mkdtemp(work[c]) != NULL);
        work_fd[c] = open(work[c], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        must(work_fd[c] >= 0);
}

static void restore(enum zr_codec c) {
        int dfd = work_fd[c];
        clear_dir(dfd);
        for (size_t i = 0; i < nfiles[c]; i++) {
                const tfile *f = &files[c][i];
                int fd = openat(dfd, f->name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                must(fd >= 0);
                must(pwrite(fd, f->data, f->len, 0) == (ssize_t)f->len);
                must(ftruncate(fd, f->size) == 0);
                close(fd);
        }
}

static void file_write(int dfd, const char *name, const uint8_t *p, size_t n, off_t off) {
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
                return;
        if (n > 0 && pwrite(fd, p, n, off) < 0) {
                /* nothing: a write that cannot happen is no edit */
        }
        close(fd);
}

/* A delete.zr that passes its checks: lengths and entries from the bytes. */
static void journal_craft(int dfd, const uint8_t *p, size_t n) {
        uint8_t buf[40 + 8 * 24];
        size_t count = n >= 2 ? (n - 2) / 24 : 0;
        if (count > 8)
                count = 8;
        memset(buf, 0, sizeof(buf));
        memcpy(buf, "ZRDJ", 4);
        zr_le32_put(buf + 4, 1);
        zr_le64_put(buf + 8, n > 0 ? p[0] : FS_RECORDS);           /* old_len */
        zr_le64_put(buf + 16, n > 1 ? p[1] : FS_RECORDS - 1);      /* new_len */
        zr_le64_put(buf + 24, count);
        for (size_t i = 0; i < count; i++) {
                const uint8_t *e = p + 2 + i * 24;
                uint8_t *o = buf + 32 + i * 24;
                zr_le64_put(o, e[0]); /* a small index: the redo is reached */
                memcpy(o + 8, e + 8, 16);
        }
        size_t size = 32 + count * 24 + 8;
        zr_le64_put(buf + size - 8, zr_journal_checksum(buf, size - 8));
        unlinkat(dfd, ZR_JOURNAL_NAME, 0);
        file_write(dfd, ZR_JOURNAL_NAME, buf, size, 0);
}

/* Applies the edits; returns how many. */
static size_t apply_edits(enum zr_codec c, const uint8_t *p, size_t n) {
        int dfd = work_fd[c];
        size_t edits = 0;
        size_t nchunks = 0;
        for (size_t i = 0; i < nfiles[c]; i++)
                nchunks += strstr(files[c][i].name, ".chunk") != NULL;

        while (n >= 4) {
                uint8_t op = p[0];
                size_t off = (size_t)p[1] | (size_t)p[2] << 8;
                size_t len = p[3] < n - 4 ? p[3] : n - 4;
                const uint8_t *b = p + 4;
                char name[32];
                const tfile *f = &files[c][(op / 8) % nfiles[c]];

                switch (op % 8) {
                case 0:
                        file_write(dfd, ZR_META_NAME, b, len, (off_t)(off % 40));
                        break;
                case 1:
                        file_write(dfd, "0.loc", b, len, (off_t)(off % (FS_RECORDS * 16 + 32)));
                        break;
                case 2:
                        file_write(dfd, ZR_DICT_NAME, b, len, (off_t)(off % 4200));
                        break;
                case 3:
                        snprintf(name, sizeof(name), "%zu.chunk", nchunks ? (op / 8) % nchunks : 0);
                        file_write(dfd, name, b, len, (off_t)(off % (1u << FS_CHUNK_LOG2)));
                        break;
                case 4:
                        file_write(dfd, ZR_JOURNAL_NAME, b, len, (off_t)(off % 512));
                        break;
                case 5:
                        journal_craft(dfd, b, len);
                        break;
                case 6: {
                        int fd = openat(dfd, f->name, O_WRONLY | O_CLOEXEC);
                        if (fd >= 0) {
                                /* a .loc segment is cut in units of entries */
                                off_t to = strstr(f->name, ".loc") ? (off_t)(off % 64) * 16
                                                                     : (off_t)off;
                                if (ftruncate(fd, to) < 0) {
                                        /* no edit */
                                }
                                close(fd);
                        }
                        len = 0;
                        break;
                }
                default:
                        unlinkat(dfd, f->name, 0);
                        len = 0;
                        break;
                }
                edits++;
                p += 4 + len;
                n -= 4 + len;
        }
        return edits;
}

static void check_err(int r, const zr_error *err) {
        if (r < 0)
                must(err->code == -r && err->message[0] != 0);
}

/* Gathers record locs (one) into an exact-size buffer; 0 or the code. */
static int gather_loc(zr_store *s, const zr_loc *l, int must_be_record) {
        zr_error err = {0};
        uint8_t *buf = malloc(l->logic_length ? l->logic_length : 1);
        must(buf != NULL);
        void *dst = buf;
        int r = zr_store_gather_locs(s, l, 1, &dst, &err);
        check_err(r, &err);
        if (r == 0 && must_be_record)
                must(is_record(buf, l->logic_length));
        free(buf);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int ready;
        if (!ready) {
                for (int c = 0; c < 3; c++)
                        template_build((enum zr_codec)c);
                atexit(remove_work);
                ready = 1;
        }
        if (size < 1)
                return 0;
        enum zr_codec c = (enum zr_codec)(data[0] % 3);
        unsigned mode = (data[0] / 3) % 4;
        zr_store_options opts = { .no_mmap = mode & 1, .read_only = !(mode & 2) };
        zr_store *s = NULL;
        zr_error err = {0};

        restore(c);
        size_t edits = apply_edits(c, data + 1, size - 1);
        int r = zr_store_open(work_fd[c], &opts, &s, &err);
        check_err(r, &err);
        if (edits == 0)
                must(r == 0 && zr_store_length(s) == FS_RECORDS);
        if (r < 0)
                return 0;

        int compressed = zr_store_codec(s) != ZR_CODEC_RAW; /* as the header says */
        uint64_t n = zr_store_length(s);
        /* stats, verify and compact walk every entry: only for a short table
         * whose records all claim little (verify allocates what they claim) */
        int walk = n <= FS_WALK_MAX;
        for (uint64_t i = 0; i < n && i < FS_WALK_MAX; i++) {
                zr_loc l;
                zr_error_clear(&err);
                r = zr_store_locate(s, &i, 1, &l, &err);
                check_err(r, &err);
                if (r < 0)
                        continue;
                if (l.logic_length > FS_GATHER_MAX) {
                        walk = 0;
                        continue;
                }
                r = gather_loc(s, &l, compressed);
                if (edits == 0) {
                        must(r == 0);
                        /* and the packed gather returns the same bytes */
                        uint8_t *buf = malloc(l.logic_length);
                        uint64_t got = 0;
                        must(buf && zr_store_gather(s, &i, 1, buf, l.logic_length, &got, NULL) == 0);
                        must(got == record_len(i) && is_record(buf, got));
                        free(buf);
                }
        }
        if (size >= 17) {
                zr_loc l;
                zr_loc_decode(data + size - 16, &l);
                if (l.logic_length <= FS_GATHER_MAX)
                        gather_loc(s, &l, compressed);
        }
        if (walk) {
                zr_stats st;
                zr_verify_report rep;
                zr_error_clear(&err);
                r = zr_store_stats(s, &st, &err);
                check_err(r, &err);
                zr_error_clear(&err);
                r = zr_store_verify(s, &rep, &err);
                check_err(r, &err);
                if (edits == 0)
                        must(r == 0 && rep.bad == 0 && rep.records == FS_RECORDS);
        }
        if (!opts.read_only) {
                uint8_t rec[FS_RECORD_MAX];
                uint64_t len = record_len(FS_RECORDS);
                record_fill(rec, FS_RECORDS, len);
                zr_error_clear(&err);
                r = zr_store_append(s, rec, &len, 1, NULL, &err);
                check_err(r, &err);
                if (zr_store_length(s) > 0) {
                        uint64_t idx = 0;
                        zr_error_clear(&err);
                        r = zr_store_delete(s, &idx, 1, &err);
                        check_err(r, &err);
                }
                if (walk && zr_store_length(s) <= FS_WALK_MAX) {
                        zr_compact_result cr;
                        zr_error_clear(&err);
                        r = zr_store_compact(s, 0, &cr, &err);
                        check_err(r, &err);
                        if (edits == 0)
                                must(r == 0 && cr.finished);
                }
        }
        zr_error_clear(&err);
        r = zr_store_close(s, &err);
        check_err(r, &err);
        return 0;
}
