/* harden.c: helpers of the hardening tests (harden.h). */
#include "harden.h"

#include "sampler/sampler.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

unsigned hd_failures;
unsigned hd_checks;

uint64_t hd_now_usec(void) {
        return tl_now_ns() / 1000u;
}

uint64_t hd_hash(uint64_t h, const void *p, size_t n) {
        const uint8_t *b = p;
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                uint64_t v;
                memcpy(&v, b + i, 8);
                h = (h ^ v) * UINT64_C(0x100000001b3);
                h ^= h >> 29;
        }
        for (; i < n; i++)
                h = (h ^ b[i]) * UINT64_C(0x100000001b3);
        return h ^ (h >> 32) ^ n;
}

uint64_t hd_record_size(uint64_t id, uint64_t min, uint64_t max) {
        if (max <= min)
                return min;
        return min + tl_mix64(id ^ UINT64_C(0x51ce)) % (max - min + 1);
}

/* Byte k of record id past its 8-byte id: a few words of a small alphabet, so
 * the zstd codecs (and a dictionary) have something to compress. */
static inline uint8_t record_byte(uint64_t id, uint64_t k, uint64_t word) {
        return (uint8_t)('a' + ((word >> ((k & 7) * 5)) & 15) + (id & 3));
}

void hd_record_fill(uint64_t id, void *dst, uint64_t size) {
        uint8_t *p = dst;
        uint8_t idb[8];
        for (int i = 0; i < 8; i++)
                idb[i] = (uint8_t)(id >> (8 * i));
        for (uint64_t k = 0; k < size && k < 8; k++)
                p[k] = idb[k];
        uint64_t word = 0;
        for (uint64_t k = 8; k < size; k++) {
                if ((k & 7) == 0)
                        word = tl_mix64(id * 31 + (k >> 6));
                p[k] = record_byte(id, k, word);
        }
}

bool hd_record_check(uint64_t id, const void *p, uint64_t size) {
        uint8_t buf[4096];
        const uint8_t *q = p;
        if (size <= sizeof(buf)) {
                hd_record_fill(id, buf, size);
                return memcmp(buf, q, size) == 0;
        }
        uint8_t *big = malloc(size);
        if (!big)
                return false;
        hd_record_fill(id, big, size);
        bool ok = memcmp(big, q, size) == 0;
        free(big);
        return ok;
}

uint64_t hd_expected_hash(const hd_streams *st, int sampler, uint64_t batch, uint64_t seed,
                          uint64_t step) {
        zr_sampler_params p = {.mode = (enum zr_sampler_mode)sampler, .n = st->n,
                               .batch_size = batch, .seed = seed, .step = step, .rank = 0,
                               .world_size = 1};
        uint64_t *idx = malloc(batch * sizeof(*idx)), h = 0;
        uint8_t *dense = malloc(batch * st->dense_bytes), *rec = malloc(st->ragged_max);
        if (idx && dense && rec && zr_sampler_indices(&p, idx, NULL) == 0) {
                for (uint64_t j = 0; j < batch; j++)
                        hd_record_fill(idx[j], dense + j * st->dense_bytes, st->dense_bytes);
                h = hd_hash(HD_HASH_INIT, dense, batch * st->dense_bytes);
                for (uint64_t j = 0; j < batch; j++) {
                        uint64_t size = hd_record_size(idx[j], st->ragged_min, st->ragged_max);
                        hd_record_fill(idx[j], rec, size);
                        h = hd_hash(h, rec, size);
                }
        }
        free(idx);
        free(dense);
        free(rec);
        return h;
}

uint64_t hd_batch_hash(const hd_streams *st, const zrc_loader_batch *b) {
        uint64_t h = hd_hash(HD_HASH_INIT, b->streams[0].data, b->count * st->dense_bytes);
        for (uint64_t j = 0; j < b->count; j++)
                h = hd_hash(h, b->streams[1].payloads[j], b->streams[1].lengths[j]);
        return h;
}

int hd_append_ragged(zrc_dataset *d, uint64_t n, uint64_t min, uint64_t max) {
        uint64_t *shapes = malloc(n * sizeof(*shapes));
        const void **payloads = malloc(n * sizeof(*payloads));
        uint8_t *data = malloc(n * max), *p = data;
        int r = -ENOMEM;
        if (shapes && payloads && data) {
                for (uint64_t i = 0; i < n; i++) {
                        shapes[i] = hd_record_size(i, min, max);
                        hd_record_fill(i, p, shapes[i]);
                        payloads[i] = p;
                        p += shapes[i];
                }
                r = zrc_dataset_append_ragged(d, n, shapes, payloads, NULL);
        }
        free(shapes);
        free(payloads);
        free(data);
        return r;
}

int hd_proc_read(pid_t pid, hd_proc *ret) {
        char path[64], line[512];
        memset(ret, 0, sizeof(*ret));
        snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
        DIR *dir = opendir(path);
        if (!dir)
                return -errno;
        struct dirent *de;
        while ((de = readdir(dir)))
                if (de->d_name[0] != '.')
                        ret->fds++;
        closedir(dir);
        snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        int c, prev = '\n';
        while ((c = fgetc(f)) != EOF) {
                if (c == '\n')
                        ret->maps++;
                prev = c;
        }
        if (prev != '\n')
                ret->maps++;
        fclose(f);
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "VmRSS:", 6) == 0)
                        ret->rss_kib = strtoull(line + 6, NULL, 10);
                else if (strncmp(line, "RssAnon:", 8) == 0)
                        ret->anon_kib = strtoull(line + 8, NULL, 10);
                else if (strncmp(line, "RssFile:", 8) == 0)
                        ret->file_kib = strtoull(line + 8, NULL, 10);
                else if (strncmp(line, "RssShmem:", 9) == 0)
                        ret->shmem_kib = strtoull(line + 9, NULL, 10);
        fclose(f);
        return 0;
}

void hd_daemon_start(tl_daemon *d, const char *const *extra) {
        tl_daemon_options o = { .args = extra };
        int r;

        if (!tl_daemon_binary()) {
                printf("no zrecordd in this build: skipped\n");
                exit(TL_SKIP);
        }
        r = tl_daemon_start(d, &o);
        if (r < 0) {
                fprintf(stderr, "zrecordd did not start: %s (log: %s)\n", strerror(-r), d->log);
                exit(1);
        }
}

bool hd_daemon_kill(tl_daemon *d) {
        int status;

        if (d->pid <= 0)
                return false;
        status = tl_daemon_stop(d, SIGKILL);
        tl_daemon_remove(d);
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

bool hd_daemon_stop(tl_daemon *d) {
        int status = tl_daemon_stop(d, SIGTERM);

        tl_daemon_remove(d);
        return status == 0;
}

int hd_daemon_wait_status;

bool hd_daemon_alive(tl_daemon *d) {
        return tl_daemon_alive(d, &hd_daemon_wait_status);
}

void hd_tempdir(char *buf, size_t size, const char *tag) {
        snprintf(buf, size, "/tmp/zr-%s-XXXXXX", tag);
        if (!mkdtemp(buf)) {
                perror("mkdtemp");
                exit(1);
        }
}

int64_t hd_raw_open(int fd, const char *path, bool writable, uint64_t id) {
        char meta[512];
        snprintf(meta, sizeof(meta), "%s/meta.zr", path);
        int fds[2] = {open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC),
                      open(meta, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC)};
        if (fds[0] < 0 || fds[1] < 0) {
                if (fds[0] >= 0)
                        close(fds[0]);
                if (fds[1] >= 0)
                        close(fds[1]);
                return -ENOENT;
        }
        zr_wire_writer w;
        tl_msg m;
        tl_begin(&w, "dataset_open", id);
        zr_wire_put_bool(&w, "writable", writable);
        int r = tl_call(fd, &w, fds, 2, &m);
        close(fds[0]);
        close(fds[1]);
        int64_t h = r == 0 ? (int64_t)tl_u64(&m, "handle") : (r < 0 ? r : -r);
        tl_msg_free(&m);
        return h;
}
