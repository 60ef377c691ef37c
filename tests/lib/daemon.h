/* daemon.h: the real zrecordd of the build, started for a test.
 *
 * The binary comes from $ZRECORDD (the test suites' meson.build sets it). A
 * test daemon gets a fresh temporary directory holding its socket
 * (run/zrecordd.sock), the notify socket the test binds, its log (stdout and
 * stderr) and whatever stores the test makes there. Start waits on events,
 * never a sleep: the daemon's READY=1 datagram on NOTIFY_SOCKET or its exit (a
 * pidfd), within a bound, so a broken daemon fails the test instead of hanging
 * it. The notify socket is closed once READY=1 came, unless the test asks to
 * keep it for later datagrams (RELOADING=1, WATCHDOG=1, STOPPING=1): then the
 * test should read it, since the daemon drops what does not fit its queue (it
 * sends STATUS= every few seconds, and never blocks on a full queue).
 *
 * Nothing here asserts: calls return 0 or -errno, and each kind of test wraps
 * them in its own way of failing (libcheck, counted checks).
 */
#ifndef ZR_TESTS_LIB_DAEMON_H
#define ZR_TESTS_LIB_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

/* How long the daemon may take to say READY=1, and the bound on any one wait of
 * a test for it (a slow sanitizer build on a busy 2-core machine). */
#define TL_TIMEOUT_MS 30000

/* The exit code meson counts as "skipped". */
#define TL_SKIP 77

typedef struct tl_daemon {
        pid_t pid;         /* 0 once it exited and was reaped */
        int notify_fd;     /* the bound notify socket, -1 when closed (keep_notify) */
        char dir[128];     /* the temporary directory */
        char socket[160];  /* dir/run/zrecordd.sock */
        char log[160];     /* dir/daemon.log */
} tl_daemon;

typedef struct tl_daemon_options {
        /* More arguments (NULL-terminated, may be NULL), after the launcher's own
         * --socket, --threads=2, --idle-exit=86400 and --log-level: a later
         * flag wins. */
        const char *const *args;
        const char *log_level;   /* NULL: "notice" */
        /* "KEY=value" strings added to the daemon's environment (NULL-terminated,
         * may be NULL); WATCHDOG_PID is set to the daemon when WATCHDOG_USEC is. */
        const char *const *env;
        /* Socket activation: the test binds the socket and passes it as
         * descriptor 3 with LISTEN_FDS/LISTEN_PID; no --socket is given. */
        bool activate;
        /* Keep the notify socket open after READY=1 (tl_daemon_wait_notify()). */
        bool keep_notify;
} tl_daemon_options;

/* The daemon binary, or NULL if this build has none (skip the suite). */
const char *tl_daemon_binary(void);

/* Starts zrecordd in a new temporary directory (o may be NULL); returns once
 * READY=1 came. 0, -ENOENT (no binary), -ETIMEDOUT, -ECHILD (it exited first)
 * or -errno; on failure nothing is left running, and tl_daemon_remove()
 * removes the rest. */
int tl_daemon_start(tl_daemon *d, const tl_daemon_options *o);

/* Waits up to timeout_ms for the next notify datagrams until one contains
 * `what`; true if it came. */
bool tl_daemon_wait_notify(tl_daemon *d, const char *what, int timeout_ms);

/* Sends sig (0: none, wait for the daemon to exit by itself) and reaps it;
 * returns the wait status (0: it exited with status 0), or -1 if it was not
 * running. */
int tl_daemon_stop(tl_daemon *d, int sig);

/* True while the daemon runs; once it is found dead it is reaped (pid 0) and
 * its wait status kept in *ret_status (may be NULL). */
bool tl_daemon_alive(tl_daemon *d, int *ret_status);

/* Closes the notify socket and removes the temporary directory (kept when
 * $ZR_TEST_KEEP is set, to read the log). The daemon must be stopped. */
void tl_daemon_remove(tl_daemon *d);

/* dir/name into buf (PATH_MAX bytes); returns buf. */
char *tl_daemon_path(const tl_daemon *d, const char *name, char *buf);

/* Entries of /proc/PID/fd of the daemon, or -errno. */
int tl_daemon_fd_count(const tl_daemon *d);

/* True if a line of the daemon's log holds `needle`. */
bool tl_daemon_log_contains(const tl_daemon *d, const char *needle);

#endif
