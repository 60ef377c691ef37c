/* check-run.h: the main() of a libcheck suite, without its boilerplate.
 *
 *     int main(void) {
 *             Suite *s = suite_create("wire");
 *             TL_TCASE(s, "core", 0, test_header, test_body);
 *             return tl_run_suite(s);
 *     }
 */
#ifndef ZR_TESTS_LIB_CHECK_RUN_H
#define ZR_TESTS_LIB_CHECK_RUN_H

#include <check.h>

#include "daemon.h"

/* Adds a test case `name` to s with the tests named after `timeout` (START_TEST
 * names, then NULL: TL_TCASE adds it). `timeout` in seconds, 0 for libcheck's
 * default ($CK_DEFAULT_TIMEOUT). Returns the case, for fixtures and loop tests. */
TCase *tl_tcase_add(Suite *s, const char *name, double timeout, ...);
#define TL_TCASE(s, name, timeout, ...) \
        tl_tcase_add((s), (name), (timeout), __VA_ARGS__, (const TTest *)NULL)

/* Adds the loop tests named after `end` to an existing case tc, each run for _i in [start, end)
 * (tcase_add_loop_test), then NULL: TL_LOOP_TESTS adds it. */
void tl_tcase_add_loops(TCase *tc, int start, int end, ...);
#define TL_LOOP_TESTS(tc, start, end, ...) \
        tl_tcase_add_loops((tc), (start), (end), __VA_ARGS__, (const TTest *)NULL)

/* Defines main() running the tests named after the suite's name as one case
 * (check's default timeout), the usual shape of a module's suite:
 *
 *     TL_SUITE_MAIN("pool", test_parallel_each_shard_once, test_shards)
 */
#define TL_SUITE_MAIN(name, ...)                                   \
        int main(void) {                                           \
                Suite *s_ = suite_create(name);                    \
                TL_TCASE(s_, name, 0, __VA_ARGS__);                \
                return tl_run_suite(s_);                           \
        }

/* Runs every case of s (CK_NORMAL output) and frees it; EXIT_SUCCESS when no
 * check failed, else EXIT_FAILURE. */
int tl_run_suite(Suite *s);

/* As tl_run_suite(), in this process (no fork per test: a benchmark written
 * with libcheck assertions) with the runner's output `mode`; the value for
 * exit(): 0 when no check failed, else 1. */
int tl_run_unforked(Suite *s, enum print_output mode);

/* tl_run_suite() against one daemon shared by the whole suite: returns TL_SKIP
 * (with a note) when the build has no zrecordd; else starts d (o may be NULL),
 * runs s, and stops d with SIGTERM, which it must answer with a clean drain
 * and exit status 0 (under the sanitizers: no error, no leak). */
int tl_run_suite_with_daemon(Suite *s, tl_daemon *d, const tl_daemon_options *o);

#endif
