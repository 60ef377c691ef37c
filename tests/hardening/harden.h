/* harden.h: what the hardening tests share: the real zrecordd started on a
 * socket in a temp directory (tests/client/zrd-test.h) and watched through
 * /proc (descriptors, mappings, RSS); records whose bytes are a pure function
 * of an id, so any record read back can be checked bit for bit; a 64-bit hash
 * of batches; raw frames with descriptors for the clients that misbehave on
 * purpose; a counted check that never aborts the run.
 *
 * These tests are plain programs: each prints its figures and exits 0, or 1
 * when a check failed (77 when the build has no daemon).
 */
#ifndef ZR_TESTS_HARDEN_H
#define ZR_TESTS_HARDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"
#include "zrd-test.h"

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

/* An unsigned from the environment, or `def` if unset or empty. */
uint64_t hd_env_u64(const char *name, uint64_t def);

/* Monotonic microseconds. */
uint64_t hd_now_usec(void);

/* splitmix64: a step of the generator (the tests' only randomness, seeded). */
uint64_t hd_mix(uint64_t x);
uint64_t hd_rand(uint64_t *state);

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
void hd_daemon_start(test_daemon *d, const char *const *extra);
/* SIGKILLs the daemon and reaps it; returns true if it died of SIGKILL (and not
 * of something else before). Removes its temp directory. */
bool hd_daemon_kill(test_daemon *d);
/* SIGTERM; true if it drained and exited 0 (under the sanitizers: no error, no
 * leak). Removes its temp directory. */
bool hd_daemon_stop(test_daemon *d);
/* True while the daemon process is alive. Once it is found dead it is reaped
 * (d->pid becomes 0) and its wait status kept in hd_daemon_wait_status. */
extern int hd_daemon_wait_status;
bool hd_daemon_alive(test_daemon *d);

/* A temp directory for stores (removed by test_rmtree()). */
void hd_tempdir(char *buf, size_t size, const char *tag);

/* ---- raw frames --------------------------------------------------------- */

/* A connected, blocking socket to d (CLOEXEC), or -errno. */
int hd_connect(const test_daemon *d);

/* Sends raw bytes, fds attached to the first sendmsg(). 0 or -errno. */
int hd_send_raw(int fd, const void *p, size_t len, const int *fds, unsigned nfds);
/* Finishes w and sends it. */
int hd_send(int fd, zr_wire_writer *w, const int *fds, unsigned nfds);

typedef struct hd_msg {
        uint8_t *bytes;
        size_t len;
        zr_wire_body *body;
        const msgpack_object *root;
        char kind[32];
        int fds[8];
        unsigned nfds;
} hd_msg;

/* Reads one frame within timeout_ms. 0, -EPIPE at EOF (or reset), -ETIMEDOUT,
 * -EPROTO for a frame that does not decode, or -errno. */
int hd_recv(int fd, hd_msg *m, int timeout_ms);
void hd_msg_free(hd_msg *m);
/* Field access; 0 / false when absent. */
uint64_t hd_u64(const hd_msg *m, const char *key);
/* "ok": 0, "error"/"fault": its code, anything else: -1. */
int hd_code(const hd_msg *m);
/* Starts a request body. */
void hd_begin(zr_wire_writer *w, const char *kind, uint64_t id);
/* Sends and reads the reply (skipping events); returns hd_code() or a -errno. */
int hd_call(int fd, zr_wire_writer *w, const int *fds, unsigned nfds, hd_msg *m);
/* Connects and says HELLO; -errno or the error code on failure. */
int hd_connect_hello(const test_daemon *d, int *ret_fd);
/* DATASET_OPEN of the store in `path` over a raw connection; the handle or a
 * negative value. */
int64_t hd_raw_open(int fd, const char *path, bool writable, uint64_t id);

#endif
