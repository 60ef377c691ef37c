/* limits-kit.h: what the files of the limits suite share: the daemon each test
 * starts with its own flags, connections made as another uid, the daemon's CPU
 * time and the lines of its log.
 *
 * test-limits.c: descriptors (the limit raised at start, no spin at EMFILE,
 * rate-limited lines).
 */
#ifndef ZR_TESTS_LIMITS_KIT_H
#define ZR_TESTS_LIMITS_KIT_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tclient.h"

/* The daemon of the running test (lk_start()); stopped by teardown, which
 * asserts a clean exit. */
extern td_daemon LD;
void lk_start(const char *const *args);
void lk_teardown(void);

/* The next request id. */
uint64_t lk_id(void);

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

#endif
