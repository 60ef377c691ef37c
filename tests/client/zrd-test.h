/* zrd-test.h: running the real zrecordd for integration tests.
 *
 * The daemon binary comes from the build through $ZRECORDD (tests/client's
 * meson.build sets it). A test daemon gets a fresh temporary directory that
 * holds its socket, the notify socket the test binds, its log and the stores
 * the test creates. Start waits on an event, never a sleep: the daemon's
 * READY=1 datagram on NOTIFY_SOCKET, or its exit (a pidfd), within a bound.
 */
#ifndef ZRD_TEST_H
#define ZRD_TEST_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

/* The exit code meson counts as "skipped". */
#define TEST_SKIP 77

typedef struct test_daemon {
        pid_t pid;
        char dir[128];    /* the temporary directory */
        char socket[160]; /* dir/sock */
        char log[160];    /* dir/daemon.log */
} test_daemon;

/* The daemon binary, or NULL if this build has none (skip the suite). */
const char *test_daemon_binary(void);

/* Starts zrecordd on a socket in a new temporary directory, with `extra`
 * arguments (NULL-terminated, may be NULL), and waits until it is ready.
 * Returns 0, or -errno / -ETIMEDOUT / -ECHILD (it exited first). */
int test_daemon_start(test_daemon *d, const char *const *extra);

/* Sends SIGTERM, waits for the daemon and removes its directory. Returns its
 * exit status (0 for a clean drain), or -1 if it died of a signal. */
int test_daemon_stop(test_daemon *d);

/* dir/name into buf (PATH_MAX bytes); returns buf. */
char *test_daemon_path(const test_daemon *d, const char *name, char *buf);

/* Runs argv (argv[0] a path) with stdout and stderr captured into malloc()ed,
 * NUL-terminated strings (either may be NULL to discard) and returns its exit
 * status (-1 if killed by a signal). */
int test_run(char *const *argv, char **ret_out, char **ret_err);

/* Removes a directory tree (best effort). */
void test_rmtree(const char *dir);

#endif
