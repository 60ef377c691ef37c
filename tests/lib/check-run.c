/* check-run.c: the main() of a libcheck suite (check-run.h). */
#include "check-run.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TCase *tl_tcase_add(Suite *s, const char *name, double timeout, ...) {
        TCase *tc = tcase_create(name);
        va_list ap;

        if (timeout > 0)
                tcase_set_timeout(tc, timeout);
        va_start(ap, timeout);
        for (const TTest *t = va_arg(ap, const TTest *); t; t = va_arg(ap, const TTest *))
                tcase_add_test(tc, t);
        va_end(ap);
        suite_add_tcase(s, tc);
        return tc;
}

void tl_tcase_add_loops(TCase *tc, int start, int end, ...) {
        va_list ap;

        va_start(ap, end);
        for (const TTest *t = va_arg(ap, const TTest *); t; t = va_arg(ap, const TTest *))
                tcase_add_loop_test(tc, t, start, end);
        va_end(ap);
}

int tl_run_suite(Suite *s) {
        SRunner *sr = srunner_create(s);
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

int tl_run_unforked(Suite *s, enum print_output mode) {
        SRunner *sr = srunner_create(s);
        int failed;

        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, mode);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

/* Frees a suite that will not run (a runner owns and frees its suites). */
static void discard(Suite *s) {
        srunner_free(srunner_create(s));
}

int tl_run_suite_with_daemon(Suite *s, tl_daemon *d, const tl_daemon_options *o) {
        int r, failed, status;

        if (!tl_daemon_binary()) {
                printf("SKIP: no zrecordd in this build ($ZRECORDD unset or not executable)\n");
                discard(s);
                return TL_SKIP;
        }
        r = tl_daemon_start(d, o);
        if (r < 0) {
                fprintf(stderr, "zrecordd did not start: %s (log: %s)\n", strerror(-r), d->log);
                discard(s);
                return EXIT_FAILURE;
        }
        failed = tl_run_suite(s) != EXIT_SUCCESS;
        status = tl_daemon_stop(d, SIGTERM);
        if (status != 0) {
                fprintf(stderr, "zrecordd exited with wait status %#x after SIGTERM (log: %s)\n",
                        status, d->log);
                failed = 1;
        }
        tl_daemon_remove(d);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
