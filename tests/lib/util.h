/* util.h: small things the tests share: a seeded generator, the environment,
 * a clock, temporary directories, running a program with its output captured,
 * and failures counted by plain test programs (those that are not libcheck
 * suites: they report every failed check and exit non-zero at the end).
 */
#ifndef ZR_TESTS_LIB_UTIL_H
#define ZR_TESTS_LIB_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* splitmix64: a well-mixed value of x, and the next value of the sequence
 * whose state is *state (the tests' only randomness, always seeded). */
uint64_t tl_mix64(uint64_t x);
uint64_t tl_rand(uint64_t *state);

/* An unsigned from the environment (any base strtoull takes), or `def` if
 * unset or empty. */
uint64_t tl_env_u64(const char *name, uint64_t def);

/* Monotonic nanoseconds, and seconds. */
uint64_t tl_now_ns(void);
double tl_seconds(void);

/* Appends x to the growing array *v of *n values (room for *cap), doubling
 * it (from 1024) when full; exits 2 (tl_die) when memory runs out. */
void tl_push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x);

/* qsort()'s comparison of doubles, ascending. */
int tl_cmp_double(const void *a, const void *b);

/* Where tests put their stores: $TMPDIR if set; else, if `memory`, /dev/shm
 * when it is writable (tests that fsync a lot and need no real disk: a
 * killed process or an injected fault keeps the page cache), else /tmp. */
const char *tl_tmpdir(bool memory);

/* Removes a directory tree (best effort; symbolic links are not followed). */
void tl_rmtree(const char *dir);

/* Copies the regular files of directory `from` into the directory to_dfd. Only
 * the first `prefix` bytes of a file are copied, the rest is extended sparse
 * (a store's .loc segments are 4 GiB and sparse; its other files are small).
 * Writes with raw system calls, so that a test that interposes write() and
 * friends does not count them. 0, or -errno with the path that failed in
 * *ret_name (may be NULL). */
int tl_copy_files(const char *from, int to_dfd, size_t prefix, const char **ret_name);

/* The crash tests' kill of a writer child `pid` that sends one byte on `fd` per
 * operation it completed (the first: its store is created): waits for
 * 1 + `target` bytes, spins a random fraction (0..2, from *rng) of the mean time
 * between the later ones, SIGKILLs the child, reaps it (its wait status in
 * *ret_status, -1 if waitpid failed) and reads the bytes it sent meanwhile.
 * Closes fd. Returns the bytes read in all (the creation included). */
size_t tl_kill_after_acks(pid_t pid, int fd, size_t target, uint64_t *rng, int *ret_status);

/* Runs argv (argv[0] a path) with stdout and stderr captured into malloc()ed,
 * NUL-terminated strings (either may be NULL to discard) and returns its exit
 * status (-1 if it was killed by a signal or could not run). */
int tl_exec_capture(char *const *argv, char **ret_out, char **ret_err);

/* Whether text s is JSON, as python3's json module reads it: 1 it is, 0 it
 * is not, -1 no python3 here to say (a test skips the check then). */
int tl_is_json(const char *s);

/* Makes this process (and the children it starts, the daemon among them) see
 * a kernel older than 5.1 where sealing is concerned: a seccomp filter fails
 * fcntl(F_ADD_SEALS) with EINVAL whenever the seals include
 * F_SEAL_FUTURE_WRITE. For ever: call it in a process of its own (a forked
 * test). 0, or -errno when seccomp is not available (skip then). */
int tl_deny_future_write_seal(void);

/* Makes this process see system call `nr` fail with `err` (ENOSYS: a kernel
 * without it; EPERM: a seccomp filter such as systemd's refusing it). For
 * ever: call it in a process of its own. 0, or -errno without seccomp. */
int tl_deny_syscall(long nr, int err);

/* Moves this process into a mount namespace of its own whose mounts propagate
 * nowhere (and, when not root, into a user namespace mapping only its own uid
 * and gid, as `unshare -Urm` does), so that it may bind-mount at will. For
 * ever: call it in a process of its own. 0, or -errno when namespaces are not
 * available (skip then). */
int tl_private_mounts(void);

/* Failures of a plain test program: tl_fail() prints "FAIL: " and the message
 * to stderr and counts it in tl_failures; tl_die() prints "FATAL: what:
 * strerror(errno)" and exits 2 (the test could not go on). */
extern unsigned tl_failures;
void tl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tl_die(const char *what) __attribute__((noreturn));

#endif
