/* limits-kit.h: what the files of the limits suite share: the daemon each test
 * starts with its own flags, connections made as another uid, the daemon's CPU
 * time and the lines of its log.
 *
 * test-limits.c: descriptors (the limit raised at start, no spin at EMFILE,
 * rate-limited lines); limits-users.c: the limits per uid, with clients of
 * other uids; limits-timeouts.c: connections closed for doing nothing;
 * limits-rings.c: rings shared across uids, with and without
 * F_SEAL_FUTURE_WRITE.
 */
#ifndef ZR_TESTS_LIMITS_KIT_H
#define ZR_TESTS_LIMITS_KIT_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "check-run.h"
#include "tclient.h"

/* The daemon of the running test (lk_start()); stopped by teardown, which
 * asserts a clean exit. */
extern td_daemon LD;
void lk_start(const char *const *args);
void lk_teardown(void);

/* Uids of no one (they need not exist) for the clients of other users; a
 * daemon run by root sees them as ordinary users (root and the daemon's own
 * uid are trusted, users.h). */
#define LK_UID_A 3500001u
#define LK_UID_B 3500002u
/* True when this process may act as other uids (root); else prints why the
 * test is skipped. */
bool lk_can_switch_uid(void);
/* lk_start() with a socket (and directory) every uid may reach, for clients
 * of other uids. */
void lk_start_shared(const char *const *args);
/* A connection made as uid (its own gid) to LD (tl_connect_as()). */
int lk_connect_as(uid_t uid);
/* Sends HELLO on fd and reads the answer: 0 if served, else the code of the
 * FAULT or error that came (its message in msg, may be NULL), or -errno
 * (-EPIPE: closed with nothing said). */
int lk_hello(int fd, char *msg, size_t size);

/* The next request id. */
uint64_t lk_id(void);

/* A dense "<u4" (4,) store LD.dir/name of n records (record i holds i*4 ..
 * i*4+3), created on fd (root's); its directory and files readable by all. */
void lk_store(int fd, const char *name, uint64_t n);
/* DATASET_OPEN of LD.dir/name (read) on fd, with descriptors this process
 * opens; the handle. */
uint32_t lk_open_store(int fd, const char *name);
/* LOADER_OPEN of a sequential loader over handle h (batch 4, prefetch 2,
 * `seed`) on fd; its reply in *m (the ring's descriptor with it). Returns the
 * code. */
int lk_open_loader(int fd, uint32_t h, uint64_t seed, td_msg *m);
/* STATUS on fd (past loader events): the reply in *m. */
void lk_status(int fd, td_msg *m);
/* The number of elements of array field `key` of m (asserting it is one). */
uint32_t lk_array_len(const td_msg *m, const char *key);

/* Asks STATUS on fd until the daemon counts n clients (each step a
 * round-trip, with a bound). */
void lk_wait_clients(int fd, uint64_t n);

/* The daemon's CPU time (user + system), in seconds. */
double lk_cpu_seconds(pid_t pid);

/* Lines of the daemon's log holding `needle`. */
unsigned lk_log_count(const char *needle);

/* Raises this process's soft RLIMIT_NOFILE to its hard limit (a test that
 * holds hundreds of sockets). */
void lk_raise_nofile(void);

/* The cases of each file. */
void limits_add_users(Suite *s);
void limits_add_timeouts(Suite *s);
void limits_add_rings(Suite *s);

#endif
