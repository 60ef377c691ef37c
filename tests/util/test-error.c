/* test-error.c: zr_error keeps the first error, formats errno text, names codes. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "check-run.h"

START_TEST(test_first_error_wins) {
        zr_error err = {0};
        ck_assert_int_eq(zr_error_set(&err, ZR_E_RANGE, "index %d out of range", 7), -ZR_E_RANGE);
        ck_assert_int_eq(zr_error_set(&err, ZR_E_CORRUPT, "later"), -ZR_E_CORRUPT);
        ck_assert_int_eq(err.code, ZR_E_RANGE);
        ck_assert_str_eq(err.message, "index 7 out of range");
        zr_error_clear(&err);
        ck_assert_int_eq(err.code, 0);
        ck_assert_int_eq(zr_error_set(NULL, ZR_E_LOCKED, "x"), -ZR_E_LOCKED);
}
END_TEST

START_TEST(test_errno_message) {
        zr_error err = {0};
        ck_assert_int_eq(zr_error_errno(&err, EIO, "fsync %s", "0.chunk"), -EIO);
        ck_assert_int_eq(err.code, EIO);
        ck_assert_ptr_nonnull(strstr(err.message, "fsync 0.chunk: "));
        ck_assert_ptr_nonnull(strstr(err.message, "error"));
        ck_assert_str_eq(zr_error_code_name(-EIO), "EIO");
        ck_assert_str_eq(zr_error_code_name(ZR_E_NO_DICT), "ZR_E_NO_DICT");
        ck_assert_str_eq(zr_error_code_name(99999), "ZR_E_UNKNOWN_CODE");
}
END_TEST

START_TEST(test_long_message_truncates) {
        zr_error err = {0};
        char big[1000];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        zr_error_set(&err, ZR_E_PROTO, "%s", big);
        ck_assert_uint_eq(strlen(err.message), ZR_ERROR_MESSAGE_MAX - 1);
}
END_TEST

TL_SUITE_MAIN("error", test_first_error_wins, test_errno_message, test_long_message_truncates)
