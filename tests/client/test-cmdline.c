/* test-cmdline.c: the zrecord tool's command line: commands, global options in
 * any position, per-command options (a mixture's sources too), usage errors
 * and their messages. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "cmdline.h"

#define ARGV(...) ((char *const[]){ "zrecord", __VA_ARGS__, NULL })
#define ARGC(...) ((int)(sizeof((char *const[]){ "zrecord", __VA_ARGS__ }) / sizeof(char *)))
#define PARSE(cl, ...) cmdline_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (cl))

START_TEST(test_commands) {
        cmdline cl;

        ck_assert_int_eq(PARSE(&cl, "status"), 0);
        ck_assert_int_eq(cl.cmd, CMD_STATUS);
        ck_assert(!cl.json);
        ck_assert_ptr_null(cl.socket);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "--json", "info", "/data/x"), 0);
        ck_assert_int_eq(cl.cmd, CMD_INFO);
        ck_assert(cl.json);
        ck_assert_str_eq(cl.path, "/data/x");
        cmdline_done(&cl);

        /* global options after the command, both value forms */
        ck_assert_int_eq(PARSE(&cl, "stats", "/d", "--socket", "/s.sock", "--json"), 0);
        ck_assert_int_eq(cl.cmd, CMD_STATS);
        ck_assert_str_eq(cl.socket, "/s.sock");
        ck_assert(cl.json);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "--socket=/t.sock", "verify", "/d"), 0);
        ck_assert_str_eq(cl.socket, "/t.sock");
        ck_assert_int_eq(cl.cmd, CMD_VERIFY);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "compact", "/d"), 0);
        ck_assert_int_eq(cl.cmd, CMD_COMPACT);
        cmdline_done(&cl);
}
END_TEST

START_TEST(test_import) {
        cmdline cl;

        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d"), 0);
        ck_assert_int_eq(cl.cmd, CMD_IMPORT);
        ck_assert_str_eq(cl.npy, "a.npy");
        ck_assert_str_eq(cl.path, "/d");
        ck_assert_int_eq(cl.codec, ZRC_CODEC_ZSTD); /* as from_numpy's */
        ck_assert_uint_eq(cl.chunk, 0);
        ck_assert_str_eq(cl.dict_tier, "balanced");
        ck_assert_uint_eq(cl.level, 0); /* the codec's default */
        cmdline_done(&cl);

        /* --level: 1..19, for a compressed codec, of import only */
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--level", "19"), 0);
        ck_assert_uint_eq(cl.level, 19);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--codec=zstd_dict", "--level=1"), 0);
        ck_assert_uint_eq(cl.level, 1);
        cmdline_done(&cl);
        static char *bad_levels[] = { "0", "20", "-3", "3x", "" };
        for (size_t i = 0; i < sizeof(bad_levels) / sizeof(bad_levels[0]); i++) {
                ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--level", bad_levels[i]),
                                 -EINVAL);
                ck_assert_msg(strstr(cl.error, "1 to 19"), "%s", cl.error);
                cmdline_done(&cl);
        }
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--codec", "raw", "--level", "3"),
                         -EINVAL);
        ck_assert(strstr(cl.error, "raw is not compressed"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "info", "/d", "--level", "3"), -EINVAL);
        ck_assert(strstr(cl.error, "options of import"));
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "import", "--codec", "zstd_dict", "a.npy", "/d", "--chunk=500",
                               "--dict-tier", "max"),
                         0);
        ck_assert_int_eq(cl.codec, ZRC_CODEC_ZSTD_DICT);
        ck_assert_uint_eq(cl.chunk, 500);
        ck_assert_str_eq(cl.dict_tier, "max");
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--codec=lz4"), -EINVAL);
        ck_assert(strstr(cl.error, "lz4"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--chunk", "0"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--chunk", "12x"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy"), -EINVAL);
        ck_assert(strstr(cl.error, "FILE.npy and PATH"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--dict-tier", "max"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "a.npy", "/d", "--chunk"), -EINVAL);
        ck_assert(strstr(cl.error, "needs a value"));
        cmdline_done(&cl);
}
END_TEST

START_TEST(test_cat) {
        cmdline cl;

        ck_assert_int_eq(PARSE(&cl, "cat", "/d"), 0);
        ck_assert_int_eq(cl.cmd, CMD_CAT);
        ck_assert_uint_eq(cl.n_indices, 0);
        ck_assert(!cl.has_range);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "cat", "/d", "3", "0", "3", "--hex"), 0);
        ck_assert_uint_eq(cl.n_indices, 3);
        ck_assert_uint_eq(cl.indices[0], 3);
        ck_assert_uint_eq(cl.indices[1], 0);
        ck_assert_uint_eq(cl.indices[2], 3);
        ck_assert(cl.hex);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "cat", "--range", "10:20", "/d"), 0);
        ck_assert(cl.has_range);
        ck_assert_uint_eq(cl.range_start, 10);
        ck_assert_uint_eq(cl.range_end, 20);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "cat", "/d", "--range=5:"), 0);
        ck_assert_uint_eq(cl.range_start, 5);
        ck_assert_uint_eq(cl.range_end, UINT64_MAX);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "cat", "/d", "1", "--range", "1:2"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "cat", "/d", "x"), -EINVAL);
        ck_assert(strstr(cl.error, "not an index"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "cat", "/d", "--range", "9:3"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "info", "/d", "--hex"), -EINVAL);
        cmdline_done(&cl);
}
END_TEST

START_TEST(test_ranges) {
        uint64_t a, b;

        ck_assert_int_eq(cmdline_parse_range(":", &a, &b), 0);
        ck_assert_uint_eq(a, 0);
        ck_assert_uint_eq(b, UINT64_MAX);
        ck_assert_int_eq(cmdline_parse_range(":7", &a, &b), 0);
        ck_assert_uint_eq(a, 0);
        ck_assert_uint_eq(b, 7);
        ck_assert_int_eq(cmdline_parse_range("3:3", &a, &b), 0);
        ck_assert_int_eq(cmdline_parse_range("3", &a, &b), -EINVAL);
        ck_assert_int_eq(cmdline_parse_range("1:2:3", &a, &b), -EINVAL);
        ck_assert_int_eq(cmdline_parse_range("-1:2", &a, &b), -EINVAL);
        ck_assert_int_eq(cmdline_parse_range("99999999999999999999:", &a, &b), -EINVAL);
}
END_TEST

START_TEST(test_usage_errors) {
        cmdline cl;

        ck_assert_int_eq(cmdline_parse(1, ARGV("x") + 0, &cl), -EINVAL); /* no command */
        ck_assert(strstr(cl.error, "no command"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "frobnicate"), -EINVAL);
        ck_assert(strstr(cl.error, "unknown command"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "status", "--bogus"), -EINVAL);
        ck_assert(strstr(cl.error, "--bogus"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "status", "extra"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "info"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "info", "/a", "/b"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "status", "--json=yes"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "--socket"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "stats", "/d", "--codec", "zstd"), -EINVAL);
        cmdline_done(&cl);
        /* convert: --to is needed, known, and its own */
        ck_assert_int_eq(PARSE(&cl, "convert", "/a", "/b"), -EINVAL);
        ck_assert(strstr(cl.error, "--to"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "convert", "--to", "parquet", "/a", "/b"), -EINVAL);
        ck_assert(strstr(cl.error, "parquet"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "convert", "--to", "zrecord", "/a"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "info", "/a", "--to", "zrecord"), -EINVAL);
        ck_assert(strstr(cl.error, "--to is an option of convert"));
        cmdline_done(&cl);
}
END_TEST

START_TEST(test_convert) {
        cmdline cl;

        ck_assert_int_eq(PARSE(&cl, "convert", "--to", "loaderx157", "/src", "/dst"), 0);
        ck_assert_int_eq(cl.cmd, CMD_CONVERT);
        ck_assert_int_eq(cl.to, ZRC_LAYOUT_LX157);
        ck_assert_str_eq(cl.path, "/src");
        ck_assert_str_eq(cl.dst, "/dst");
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "--json", "convert", "/src", "/dst", "--to=zrecord"), 0);
        ck_assert_int_eq(cl.to, ZRC_LAYOUT_ZRECORD);
        ck_assert(cl.json);
        cmdline_done(&cl);
}
END_TEST

/* where and batch: the run's options, a mixture's sources, SOURCE:RECORD. */
START_TEST(test_where_batch) {
        struct cmdline_source src;
        cmdline cl;

        ck_assert_int_eq(PARSE(&cl, "where", "/d", "17", "--sampler", "cyclic", "--seed", "7",
                               "--batch=64", "--world-size", "4", "--range", "10:20"), 0);
        ck_assert_int_eq(cl.cmd, CMD_WHERE);
        ck_assert_str_eq(cl.path, "/d");
        ck_assert_uint_eq(cl.record, 17);
        ck_assert_str_eq(cl.sampler, "cyclic");
        ck_assert_uint_eq(cl.seed, 7);
        ck_assert_uint_eq(cl.batch, 64);
        ck_assert_uint_eq(cl.world_size, 4);
        ck_assert(cl.has_range);
        ck_assert_uint_eq(cl.range_start, 10);
        ck_assert_uint_eq(cl.range_end, 20);
        ck_assert_uint_eq(cl.n_sources, 0);
        cmdline_done(&cl);

        /* a mixture: sources in order, the record as SOURCE:INDEX */
        ck_assert_int_eq(PARSE(&cl, "where", "--source", "7=/web", "--source=3,iid=/a=b", "1:5",
                               "--sampler", "iid", "--seed", "1", "--batch", "8"), 0);
        ck_assert_ptr_null(cl.path);
        ck_assert_uint_eq(cl.n_sources, 2);
        ck_assert_uint_eq(cl.sources[0].weight, 7);
        ck_assert_ptr_null(cl.sources[0].sampler);
        ck_assert_str_eq(cl.sources[0].path, "/web");
        ck_assert_uint_eq(cl.sources[1].weight, 3);
        ck_assert_str_eq(cl.sources[1].sampler, "iid");
        ck_assert_str_eq(cl.sources[1].path, "/a=b"); /* everything after the first '=' */
        ck_assert_uint_eq(cl.record_source, 1);
        ck_assert_uint_eq(cl.record, 5);
        ck_assert_uint_eq(cl.world_size, 1);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "batch", "/d", "--step", "1000000", "--sampler", "sequential",
                               "--seed", "0", "--batch", "3", "--world-size", "2", "--rank", "1",
                               "--values", "--json"), 0);
        ck_assert_int_eq(cl.cmd, CMD_BATCH);
        ck_assert_uint_eq(cl.step, 1000000);
        ck_assert_uint_eq(cl.rank, 1);
        ck_assert(cl.values);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "batch", "--source", "1=/a", "--source", "2=/b", "--step", "3",
                               "--sampler", "cyclic", "--seed", "0", "--batch", "3"), 0);
        ck_assert_uint_eq(cl.n_sources, 2);
        cmdline_done(&cl);

        /* refusals */
        const char *const bad[][12] = {
                { "where", "/d", "1", "--seed", "1", "--batch", "2" },         /* no sampler */
                { "where", "/d", "1", "--sampler", "iid", "--seed", "1" },      /* no batch */
                { "where", "/d", "1:2", "--sampler", "iid", "--seed", "1", "--batch", "2" },
                { "where", "--source", "1=/a", "2", "--sampler", "iid", "--seed", "1", "--batch", "2" },
                { "where", "--source", "1=/a", "1:2", "--sampler", "iid", "--seed", "1", "--batch", "2" },
                { "where", "/d", "1", "--sampler", "shuffle", "--seed", "1", "--batch", "2" },
                { "where", "/d", "1", "--sampler", "iid", "--seed", "1", "--batch", "0" },
                { "where", "/d", "1", "--sampler", "iid", "--seed", "1", "--batch", "2", "--step", "3" },
                { "batch", "/d", "--sampler", "iid", "--seed", "1", "--batch", "2" }, /* no step */
                { "batch", "/d", "--step", "1", "--sampler", "iid", "--seed", "1", "--batch", "2",
                  "--rank", "1" },                                              /* rank >= world */
                { "batch", "--source", "0=/a", "--step", "1", "--sampler", "iid", "--seed", "1",
                  "--batch", "2" },                                             /* weight 0 */
                { "cat", "/d", "--sampler", "iid" },
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char *argv[14] = { "zrecord" };
                int argc = 1;
                for (int j = 0; j < 12 && bad[i][j]; j++)
                        argv[argc++] = (char *)bad[i][j];
                ck_assert_msg(cmdline_parse(argc, argv, &cl) == -EINVAL, "case %zu parsed", i);
                ck_assert(cl.error[0]);
                cmdline_done(&cl);
        }
        ck_assert_int_eq(cmdline_parse_source("5=x", &src), 0);
        ck_assert_int_eq(cmdline_parse_source("5,cyclic-lx157=x", &src), 0);
        ck_assert_str_eq(src.sampler, "cyclic-lx157");
        ck_assert_int_eq(cmdline_parse_source("x", &src), -EINVAL);
        ck_assert_int_eq(cmdline_parse_source("5=", &src), -EINVAL);
        ck_assert_int_eq(cmdline_parse_source("=x", &src), -EINVAL);
        ck_assert_int_eq(cmdline_parse_source("4294967296=x", &src), -EINVAL);
        ck_assert_int_eq(cmdline_parse_source("5,bogus=x", &src), -EINVAL);
}
END_TEST

START_TEST(test_help) {
        cmdline cl;

        ck_assert_int_eq(PARSE(&cl, "--help"), 0);
        ck_assert(cl.help);
        ck_assert_int_eq(cl.cmd, CMD_NONE);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "import", "-h"), 0);
        ck_assert(cl.help);
        ck_assert_int_eq(cl.cmd, CMD_IMPORT);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "--version"), 0);
        ck_assert(cl.version);
        cmdline_done(&cl);

        /* every help text states the exit codes */
        for (int k = CMD_NONE; k < _CMD_MAX; k++) {
                const char *h = cmdline_help((cmd_kind)k);

                ck_assert(strstr(h, "Usage: zrecord"));
                ck_assert(strstr(h, "3  cannot connect"));
                ck_assert(strstr(h, "2  usage error"));
                if (k != CMD_NONE)
                        ck_assert(strstr(h, cmdline_cmd_name((cmd_kind)k)));
        }
        /* "--" ends the options: a path that starts with a dash */
        ck_assert_int_eq(PARSE(&cl, "info", "--", "--weird"), 0);
        ck_assert_str_eq(cl.path, "--weird");
        cmdline_done(&cl);
}
END_TEST

/* top and metrics: top's options, top's alone; seconds with up to three decimals. */
START_TEST(test_top) {
        cmdline cl;
        uint64_t ms;

        ck_assert_int_eq(PARSE(&cl, "top"), 0);
        ck_assert_int_eq(cl.cmd, CMD_TOP);
        ck_assert_uint_eq(cl.iterations, 0);
        ck_assert_uint_eq(cl.delay_ms, 0);
        ck_assert_ptr_null(cl.sort);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "top", "-n", "3", "-d", "0.25", "--sort", "rate", "--json"),
                         0);
        ck_assert_uint_eq(cl.iterations, 3);
        ck_assert_uint_eq(cl.delay_ms, 250);
        ck_assert_str_eq(cl.sort, "rate");
        ck_assert(cl.json);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "--iterations=1", "top", "--delay=2", "--sort=mib"), 0);
        ck_assert_uint_eq(cl.delay_ms, 2000);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "metrics"), 0);
        ck_assert_int_eq(cl.cmd, CMD_METRICS);
        cmdline_done(&cl);

        ck_assert_int_eq(PARSE(&cl, "top", "-n", "0"), -EINVAL);
        ck_assert_ptr_nonnull(strstr(cl.error, "-n"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "top", "-n"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "top", "-d", "fast"), -EINVAL);
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "top", "--sort", "speed"), -EINVAL);
        ck_assert_ptr_nonnull(strstr(cl.error, "unknown sort key"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "status", "-n", "1"), -EINVAL);
        ck_assert_ptr_nonnull(strstr(cl.error, "options of top"));
        cmdline_done(&cl);
        ck_assert_int_eq(PARSE(&cl, "metrics", "extra"), -EINVAL);
        cmdline_done(&cl);

        ck_assert_int_eq(cmdline_parse_seconds("1.5", &ms), 0);
        ck_assert_uint_eq(ms, 1500);
        ck_assert_int_eq(cmdline_parse_seconds("0.001", &ms), 0);
        ck_assert_uint_eq(ms, 1);
        ck_assert_int_eq(cmdline_parse_seconds("86400", &ms), 0);
        ck_assert_uint_eq(ms, 86400000);
        const char *bad[] = { "0", "0.0004", "0.0001", "86400.001", "100000", "-1", "1e3", "1.5.",
                              ".5", "" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ck_assert_msg(cmdline_parse_seconds(bad[i], &ms) == -EINVAL, "%s accepted",
                              bad[i]);
}
END_TEST

int main(void) {
        Suite *s = suite_create("cmdline");
        TL_TCASE(s, "parse", 0, test_commands, test_import, test_cat, test_ranges,
                 test_usage_errors, test_where_batch, test_help, test_convert, test_top);
        return tl_run_suite(s);
}
