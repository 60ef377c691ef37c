/* harden.h: what the hardening tests share: the real zrecordd started on a
 * socket in a temp directory (tests/lib/daemon.h) and watched through /proc
 * (descriptors, mappings, RSS); records whose bytes are a pure function of an
 * id, so any record read back can be checked bit for bit; a 64-bit hash of
 * batches; raw frames with descriptors for the clients that misbehave on
 * purpose (tests/lib/frames.h); a counted check that never aborts the run.
 *
 * These tests are plain programs: each prints its figures and exits 0, or 1
 * when a check failed (77 when the build has no daemon).
 */
#ifndef ZR_TESTS_HARDEN_H
#define ZR_TESTS_HARDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "daemon.h"
#include "frames.h"
#include "util.h"
#include "zrc.h"

/* Failed checks so far (every CHECK that fails prints its place and message). */
extern unsigned hd_failures;
extern unsigned hd_checks;

#define CHECK(cond, ...)                                                              \
        do {                                                                          \
                hd_checks++;                                                          \
                if (!(cond)) {                                                        \
                        hd_failures++;                                                \
                        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
                        fprintf(stderr, __VA_ARGS__);                                 \
                        fputc('\n', stderr);                                          \
                }                                                                     \
        } while (0)

/* True in a sanitizer build: RSS and mapping counts of the daemon are then
 * ASan's business (its quarantine holds freed memory), so tests report them
 * and do not compare; LeakSanitizer checks leaks at the daemon's clean exit. */
#ifdef HD_SANITIZED
#define HD_CHECK_MEMORY 0
#else
#define HD_CHECK_MEMORY 1
#endif

/* Monotonic microseconds. */
uint64_t hd_now_usec(void);

/* 64-bit hash of bytes, chainable (h = hd_hash(h, p, n)); start with HD_HASH_INIT. */
#define HD_HASH_INIT UINT64_C(0xcbf29ce484222325)
uint64_t hd_hash(uint64_t h, const void *p, size_t n);

/* Record `id` of a test store: its size in bytes for a store whose records are
 * between min and max bytes (ragged) and its content (the first 8 bytes are the
 * id, little-endian; the rest a compressible pattern keyed by the id). */
uint64_t hd_record_size(uint64_t id, uint64_t min, uint64_t max);
void hd_record_fill(uint64_t id, void *dst, uint64_t size);
/* True if p[0..size) is record id's content. */
bool hd_record_check(uint64_t id, const void *p, uint64_t size);

/* The two streams of the loaders of soak and determinism: n records, a dense
 * stream of dense_bytes per record and a ragged one of ragged_min..ragged_max
 * bytes (hd_record_size()), both holding hd_record_fill()'s records. */
typedef struct hd_streams {
        uint64_t n, dense_bytes, ragged_min, ragged_max;
} hd_streams;
/* The hash of the batch of `step` (batch records, seed, sampler: an enum
 * zr_sampler_mode) as the engine's sampler picks it and the records hold it;
 * 0 if the sampler refuses the parameters. */
uint64_t hd_expected_hash(const hd_streams *st, int sampler, uint64_t batch, uint64_t seed,
                          uint64_t step);
/* The same hash of a batch a loader returned. */
uint64_t hd_batch_hash(const hd_streams *st, const zrc_loader_batch *b);

/* Appends records 0..n-1 of min..max bytes (hd_record_size()) to a ragged
 * "|u1" 1-d dataset; libzrc's return. */
int hd_append_ragged(zrc_dataset *d, uint64_t n, uint64_t min, uint64_t max);

/* What /proc says about a process. */
typedef struct hd_proc {
        int fds;          /* entries of /proc/PID/fd */
        int maps;         /* lines of /proc/PID/maps */
        uint64_t rss_kib; /* VmRSS */
        uint64_t anon_kib, file_kib, shmem_kib; /* its parts: RssAnon, RssFile, RssShmem */
} hd_proc;
int hd_proc_read(pid_t pid, hd_proc *ret);

/* Starts zrecordd with extra arguments; exits the program with 77 when the
 * build has no daemon, with 1 when it does not start. */
void hd_daemon_start(tl_daemon *d, const char *const *extra);
/* SIGKILLs the daemon and reaps it; returns true if it died of SIGKILL (and not
 * of something else before). Removes its temp directory. */
bool hd_daemon_kill(tl_daemon *d);
/* SIGTERM; true if it drained and exited 0 (under the sanitizers: no error, no
 * leak). Removes its temp directory. */
bool hd_daemon_stop(tl_daemon *d);
/* True while the daemon process is alive. Once it is found dead it is reaped
 * (d->pid becomes 0) and its wait status kept in hd_daemon_wait_status. */
extern int hd_daemon_wait_status;
bool hd_daemon_alive(tl_daemon *d);

/* A temp directory for stores (removed by tl_rmtree()). */
void hd_tempdir(char *buf, size_t size, const char *tag);

/* DATASET_OPEN of the store in `path` over a raw connection; the handle or a
 * negative value. */
int64_t hd_raw_open(int fd, const char *path, bool writable, uint64_t id);

#endif
