/* suite.h: the main() of a libcheck suite, written once: the given tests as
 * one test case, run in check's fork mode, and the exit status meson reads.
 * Header-only; a suite includes it as "../suite.h" and ends with
 *
 *     ZR_SUITE_MAIN("pool", test_parallel_each_shard_once, test_shards)
 *
 * Timeouts are check's default (CK_DEFAULT_TIMEOUT, from meson's test
 * environment) unless a suite calls zr_run_suite() with its own.
 */
#ifndef ZR_TESTS_SUITE_H
#define ZR_TESTS_SUITE_H

#include <check.h>
#include <stddef.h>
#include <stdlib.h>

/* Runs tests[0..n) as the suite `name`, each within `timeout` seconds (0:
 * check's default), and returns the process's exit status. */
static inline int zr_run_suite(const char *name, const TTest *const *tests, size_t n,
                               double timeout) {
        Suite *s = suite_create(name);
        TCase *tc = tcase_create(name);
        SRunner *sr;
        int failed;

        if (timeout > 0)
                tcase_set_timeout(tc, timeout);
        for (size_t i = 0; i < n; i++)
                tcase_add_test(tc, tests[i]);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* Defines main() running the tests named after the suite's name. */
#define ZR_SUITE_MAIN(name, ...)                                                            \
        int main(void) {                                                                    \
                const TTest *const tests[] = { __VA_ARGS__ };                               \
                return zr_run_suite(name, tests, sizeof(tests) / sizeof(tests[0]), 0);     \
        }

#endif
