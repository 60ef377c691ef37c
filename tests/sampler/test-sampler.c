/* test-sampler.c: parameter checks, sequential windows, sharding, huge steps, and
 * the vectorized fills against the one-index references, for every mode; the
 * permutations' inverses, the gathers over positions in any order and the iid
 * scan against their references. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check-run.h"
#include "sampler/feistel.h"
#include "sampler/lxperm.h"
#include "sampler/rng.h"
#include "sampler/sampler.h"

#define TEST_MAX_BATCH 4096

/* ck_assert records a mark on every pass; in hot loops check first, assert on a miss */
#define TEST_EQ(a, b) do { if ((a) != (b)) ck_assert_uint_eq((a), (b)); } while (0)
#define TEST_NE(a, b) do { if ((a) == (b)) ck_assert_uint_ne((a), (b)); } while (0)
#define TEST_LT(a, b) do { if (!((a) < (b))) ck_assert_uint_lt((a), (b)); } while (0)

static uint64_t test_idx[TEST_MAX_BATCH], test_ref[TEST_MAX_BATCH];

static zr_sampler_params test_params(enum zr_sampler_mode mode, uint64_t n, uint64_t b) {
        return (zr_sampler_params){ .mode = mode, .n = n, .batch_size = b, .seed = 1,
                                    .step = 0, .rank = 0, .world_size = 1 };
}

START_TEST(test_mode_names) {
        /* in turn: a refused name leaves the mode of the name before it */
        static const struct {
                const char *name;
                int result;
                enum zr_sampler_mode mode;
        } names[] = {
                { "cyclic", 0, ZR_SAMPLER_CYCLIC },
                { "sequential", 0, ZR_SAMPLER_SEQUENTIAL },
                { "iid", 0, ZR_SAMPLER_IID },
                { "IID", -ZR_E_SAMPLER, ZR_SAMPLER_IID },
                { "random", -ZR_E_SAMPLER, ZR_SAMPLER_IID },
                { NULL, -ZR_E_SAMPLER, ZR_SAMPLER_IID },
                { "cyclic-lx157", 0, ZR_SAMPLER_CYCLIC_LX157 },
                { "cyclic-lx", -ZR_E_SAMPLER, ZR_SAMPLER_CYCLIC_LX157 },
        };
        enum zr_sampler_mode m = ZR_SAMPLER_IID;

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                ck_assert_int_eq(zr_sampler_mode_from_name(names[i].name, &m), names[i].result);
                ck_assert_int_eq(m, names[i].mode);
        }
        ck_assert_str_eq(zr_sampler_mode_name(ZR_SAMPLER_CYCLIC), "cyclic");
        ck_assert_str_eq(zr_sampler_mode_name(ZR_SAMPLER_CYCLIC_LX157), "cyclic-lx157");
        ck_assert_ptr_null(zr_sampler_mode_name(_ZR_SAMPLER_MODE_MAX));
}
END_TEST

static void test_refused(zr_sampler_params p, const char *needle) {
        zr_error err = {0};

        test_idx[0] = 12345;
        ck_assert_int_eq(zr_sampler_indices(&p, test_idx, &err), -ZR_E_SAMPLER);
        ck_assert_int_eq(err.code, ZR_E_SAMPLER);
        ck_assert_msg(strstr(err.message, needle), "'%s' lacks '%s'", err.message, needle);
        ck_assert_uint_eq(test_idx[0], 12345);
}

START_TEST(test_errors) {
        /* one field of good parameters (n 100, batch 10) made bad, in turn */
        static const struct {
                uint64_t n, batch_size;
                uint32_t rank, world_size;
                const char *needle;
        } bad[] = {
                { 0, 10, 0, 1, "n = 0" },
                { 100, 0, 0, 1, "batch_size = 0" },
                { 100, 10, 0, 0, "world_size = 0" },
                { 100, 10, 4, 4, "rank 4 >= world_size 4" },
                { 100, UINT64_MAX / 2, 0, 4, "overflows" },
        };

        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++) {
                zr_sampler_params p = test_params((enum zr_sampler_mode)m, 100, 10);

                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                        p.n = bad[i].n;
                        p.batch_size = bad[i].batch_size;
                        p.rank = bad[i].rank;
                        p.world_size = bad[i].world_size;
                        test_refused(p, bad[i].needle);
                }
                p = test_params((enum zr_sampler_mode)m, 100, 10);
                p.world_size = 4;
                ck_assert_int_eq(zr_sampler_check(&p, NULL), 0);
        }
        /* cyclic needs a whole global batch inside the index space; the others do not */
        zr_sampler_params p = test_params(ZR_SAMPLER_CYCLIC, 30, 8);
        p.world_size = 4;
        test_refused(p, "cyclic: global batch 32");
        p.mode = ZR_SAMPLER_CYCLIC_LX157;
        test_refused(p, "cyclic-lx157: global batch 32");
        p.mode = ZR_SAMPLER_IID;
        ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
        p.mode = (enum zr_sampler_mode)7;
        test_refused(p, "mode 7");
}
END_TEST

START_TEST(test_sequential_window) {
        zr_sampler_params p = test_params(ZR_SAMPLER_SEQUENTIAL, 10, 4);
        static const uint64_t want[][4] = { { 0, 1, 2, 3 }, { 4, 5, 6, 7 }, { 8, 9, 0, 1 }, { 2, 3, 4, 5 } };

        for (unsigned s = 0; s < 4; s++) {
                p.step = s;
                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                for (unsigned j = 0; j < 4; j++)
                        ck_assert_uint_eq(test_idx[j], want[s][j]);
        }
        /* n < B: the window wraps inside a batch */
        p = test_params(ZR_SAMPLER_SEQUENTIAL, 3, 7);
        p.step = 1;
        ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
        for (unsigned j = 0; j < 7; j++)
                ck_assert_uint_eq(test_idx[j], (7 + j) % 3);
}
END_TEST

/* Huge steps give exactly (s*B*W + r*B + j) mod n, computed here in 128 bits. */
START_TEST(test_sequential_huge_steps) {
        static const uint64_t steps[] = { UINT64_C(1000000000000), UINT64_C(1) << 62, UINT64_MAX };
        static const uint64_t ns[] = { 1, 7, 1000003, UINT64_C(1) << 40, UINT64_MAX };

        for (size_t a = 0; a < sizeof(steps) / sizeof(*steps); a++)
                for (size_t b = 0; b < sizeof(ns) / sizeof(*ns); b++) {
                        zr_sampler_params p = test_params(ZR_SAMPLER_SEQUENTIAL, ns[b], 100);

                        p.step = steps[a];
                        p.world_size = 3;
                        p.rank = 2;
                        ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                        for (unsigned j = 0; j < 100; j++) {
                                unsigned __int128 pos = (unsigned __int128)p.step * 300 + 200 + j;
                                TEST_EQ(test_idx[j], (uint64_t)(pos % p.n));
                        }
                }
}
END_TEST

/* The vectorized iid fill equals the one-index reference, across the 32-bit fast
 * path, its boundary, the 128-bit path and heavily rejecting n, with tails. */
START_TEST(test_iid_fill_matches_reference) {
        static const uint64_t ns[] = {
                1, 2, 3, 1000, 1000000, (UINT64_C(1) << 32) - 1, UINT64_C(1) << 32,
                (UINT64_C(1) << 32) + 1, (UINT64_C(1) << 63) + 1, UINT64_MAX,
                (UINT64_C(3) << 62) + 12345,
        };
        static const uint64_t counts[] = { 1, 63, 64, 65, 1000 };

        for (size_t a = 0; a < sizeof(ns) / sizeof(*ns); a++)
                for (size_t c = 0; c < sizeof(counts) / sizeof(*counts); c++) {
                        uint64_t key = zr_rng_key(a + 100 * c, ZR_RNG_DOMAIN_IID, c);

                        zr_rng_iid_fill(key, ns[a], 17 * c, test_idx, counts[c]);
                        for (size_t j = 0; j < counts[c]; j++) {
                                TEST_EQ(test_idx[j], zr_rng_iid_one(key, ns[a], 17 * c + j));
                                TEST_LT(test_idx[j], ns[a]);
                        }
                }
}
END_TEST

/* A rejected draw moves to the next retry value: with n = 2^63 + 1 about half of
 * the first draws are rejected, and the reference must then differ from the
 * unrejected product (else the retry path would be dead code). */
START_TEST(test_iid_rejection_retries) {
        uint64_t n = (UINT64_C(1) << 63) + 1, key = zr_rng_key(5, ZR_RNG_DOMAIN_IID, 9);
        uint64_t t = zr_rng_threshold(n);
        unsigned rejected = 0;

        ck_assert_uint_eq(t, (UINT64_C(1) << 63) - 1);
        for (uint64_t g = 0; g < 1000; g++) {
                uint64_t x = zr_rng_mix64(key + g * ZR_RNG_GAMMA);
                unsigned __int128 m = (unsigned __int128)x * n;

                if ((uint64_t)m < t) {
                        uint64_t x1 = zr_rng_mix64(key + g * ZR_RNG_GAMMA + ZR_RNG_DELTA);
                        unsigned __int128 m1 = (unsigned __int128)x1 * n;

                        rejected++;
                        if ((uint64_t)m1 >= t)
                                ck_assert_uint_eq(zr_rng_iid_one(key, n, g), (uint64_t)(m1 >> 64));
                } else {
                        ck_assert_uint_eq(zr_rng_iid_one(key, n, g), (uint64_t)(m >> 64));
                }
        }
        ck_assert_uint_gt(rejected, 400);
        ck_assert_uint_lt(rejected, 600);
}
END_TEST

/* The domains of the fill tests: tiny, even and odd bit widths, 2^32 and n
 * near 2^64. */
static const uint64_t fill_ns[] = {
        1, 2, 3, 5, 64, 65, 1000, 1000000, (UINT64_C(1) << 19) + 1, UINT64_C(1) << 32,
        (UINT64_C(1) << 32) + 3, (UINT64_C(1) << 63) + 7, UINT64_MAX,
};

/* Several chunks and a partial one where n allows: the fill of the last
 * fill_count(n) positions of [0, n). */
static uint64_t fill_count(uint64_t n) {
        return n < 2500 ? n : 2500;
}

/* test_idx[0..count) holds a permutation of [0, n) filled from position q0:
 * each value equals the one-index reference permute(perm, q0 + j), is < n,
 * and none repeats within 64 places. */
static void check_fill(uint64_t n, uint64_t q0, uint64_t count,
                       uint64_t (*permute)(const void *perm, uint64_t q), const void *perm) {
        for (uint64_t j = 0; j < count; j++) {
                TEST_EQ(test_idx[j], permute(perm, q0 + j));
                TEST_LT(test_idx[j], n);
                for (uint64_t i = j < 64 ? 0 : j - 64; i < j; i++)
                        TEST_NE(test_idx[i], test_idx[j]);
        }
}

static uint64_t feistel_at(const void *perm, uint64_t q) {
        return zr_feistel_permute(perm, q);
}

static uint64_t lxperm_at(const void *perm, uint64_t q) {
        return zr_lxperm_permute(perm, q);
}

START_TEST(test_cyclic_fill_matches_reference) {
        for (size_t a = 0; a < sizeof(fill_ns) / sizeof(*fill_ns); a++) {
                uint64_t n = fill_ns[a], count = fill_count(n), q0 = n - count;
                zr_feistel f;

                zr_feistel_init(&f, n, zr_rng_key(a, ZR_RNG_DOMAIN_CYCLIC, 3));
                zr_feistel_fill(&f, q0, test_idx, count);
                check_fill(n, q0, count, feistel_at, &f);
        }
}
END_TEST

/* loaderx 1.5.7's permutation: the fill equals the one-index reference, every
 * value is in range and none repeats nearby, across even and odd bit widths (n =
 * 2^19 + 1 walks a domain four times n), 2^32 and n near 2^64. Check values from
 * proto/SAMPLERS.md: n = 10, seed 42, cycle 0. */
START_TEST(test_lx157_fill_matches_reference) {
        static const uint64_t encrypt10[16] = { 14, 9, 10, 3, 0, 7, 12, 5, 6, 1, 2, 11, 8, 15, 4, 13 };
        zr_lxperm x;

        zr_lxperm_init(&x, 10, 42, 0);
        ck_assert_uint_eq(x.key, UINT64_C(0xa759ea27d4727622));
        ck_assert_uint_eq(x.half, 2);
        for (uint64_t v = 0; v < 16; v++)
                ck_assert_uint_eq(zr_lxperm_encrypt(&x, v), encrypt10[v]);
        ck_assert_uint_eq(zr_lxperm_permute(&x, 0), 4); /* 0 -> 14 -> 4 */
        ck_assert_uint_eq(zr_lxperm_permute(&x, 2), 2); /* 2 -> 10 -> 2 */

        for (size_t a = 0; a < sizeof(fill_ns) / sizeof(*fill_ns); a++) {
                uint64_t n = fill_ns[a], count = fill_count(n), q0 = n - count;

                zr_lxperm_init(&x, n, a * 1000003, 3);
                zr_lxperm_fill(&x, q0, test_idx, count);
                check_fill(n, q0, count, lxperm_at, &x);
        }
}
END_TEST

/* A fixed sequence of test values (SplitMix64 over a counter). */
static uint64_t test_state = 0x1a7e;
static uint64_t test_rand_u64(uint64_t below) {
        test_state += ZR_RNG_GAMMA;
        return zr_rng_mix64(test_state) % below;
}

/* Both permutations undo themselves exactly: every q < n for small n, a sample for
 * n up to 2^64 - 1 (odd widths, the 32-bit lanes' limit, walks of half the domain). */
START_TEST(test_permutations_invert) {
        static const uint64_t ns[] = { 1, 2, 3, 5, 10, 64, 65, 1000, (UINT64_C(1) << 19) + 1,
                                       UINT64_C(1) << 32, (UINT64_C(1) << 32) + 3, (UINT64_C(1) << 63) + 7,
                                       UINT64_MAX };

        for (size_t a = 0; a < sizeof(ns) / sizeof(*ns); a++) {
                uint64_t n = ns[a], count = n < 3000 ? n : 3000;
                zr_feistel f;
                zr_lxperm x;

                zr_feistel_init(&f, n, zr_rng_key(a, ZR_RNG_DOMAIN_CYCLIC, 9));
                zr_lxperm_init(&x, n, a * 77, 9);
                for (uint64_t i = 0; i < count; i++) {
                        uint64_t q = n <= 3000 ? i : test_rand_u64(n);

                        TEST_EQ(zr_feistel_unpermute(&f, zr_feistel_permute(&f, q)), q);
                        TEST_EQ(zr_feistel_permute(&f, zr_feistel_unpermute(&f, q)), q);
                        TEST_EQ(zr_lxperm_unpermute(&x, zr_lxperm_permute(&x, q)), q);
                        TEST_EQ(zr_lxperm_permute(&x, zr_lxperm_unpermute(&x, q)), q);
                }
        }
}
END_TEST

/* The gathers equal the one-position references, positions in any order. */
START_TEST(test_maps) {
        static const uint64_t ns[] = { 1, 3, 1000, UINT64_C(1) << 32, (UINT64_C(1) << 32) + 3, UINT64_MAX };
        static uint64_t q[2500], out[2500];

        for (size_t a = 0; a < sizeof(ns) / sizeof(*ns); a++) {
                uint64_t n = ns[a], key = zr_rng_key(a, ZR_RNG_DOMAIN_IID, 1);
                zr_feistel f;
                zr_lxperm x;

                for (size_t i = 0; i < 2500; i++)
                        q[i] = test_rand_u64(n);
                zr_feistel_init(&f, n, key);
                zr_feistel_map(&f, q, out, 2500);
                for (size_t i = 0; i < 2500; i++)
                        TEST_EQ(out[i], zr_feistel_permute(&f, q[i]));
                zr_lxperm_init(&x, n, key, 4);
                zr_lxperm_map(&x, q, out, 2500);
                for (size_t i = 0; i < 2500; i++)
                        TEST_EQ(out[i], zr_lxperm_permute(&x, q[i]));
                zr_rng_iid_map(key, n, q, out, 2500);
                for (size_t i = 0; i < 2500; i++)
                        TEST_EQ(out[i], zr_rng_iid_one(key, n, q[i]));
        }
}
END_TEST

/* The iid scan finds what drawing every position finds, including where about
 * half the first draws are rejected (n = 2^63 + 1, records near both ends). */
START_TEST(test_iid_find) {
        static const uint64_t ns[] = { 1, 2, 3, 7, 1000, UINT64_C(1) << 20, (UINT64_C(1) << 63) + 1, UINT64_MAX };
        static uint64_t found[5000], idx[5000];

        for (size_t a = 0; a < sizeof(ns) / sizeof(*ns); a++) {
                uint64_t n = ns[a], key = zr_rng_key(a, ZR_RNG_DOMAIN_IID, 3), g0 = test_rand_u64(UINT64_C(1) << 60);
                size_t len = 5000 - a;

                zr_rng_iid_fill(key, n, g0, idx, len);
                for (int pick = 0; pick < 4; pick++) {
                        /* a record the block holds (so found is not empty), or the edges */
                        uint64_t record = pick == 0 ? idx[test_rand_u64(len)] : pick == 1 ? 0 : pick == 2 ? n - 1
                                                                                                   : n / 2;
                        size_t want = 0, got = zr_rng_iid_find(key, n, g0, len, record, found);

                        for (size_t i = 0; i < len; i++)
                                if (idx[i] == record) {
                                        ck_assert_uint_lt(want, got);
                                        TEST_EQ(found[want], g0 + i);
                                        want++;
                                }
                        ck_assert_uint_eq(got, want);
                        if (pick == 0)
                                ck_assert_uint_gt(got, 0);
                }
        }
}
END_TEST

/* For each mode: ranks 0..W-1 with batch B are the slices of world_size 1 with
 * batch B*W at the same step; for cyclic the ranks are also pairwise disjoint. */
START_TEST(test_sharding) {
        static const uint32_t worlds[] = { 2, 3, 8 };

        for (int m = 0; m < _ZR_SAMPLER_MODE_MAX; m++)
                for (size_t w = 0; w < sizeof(worlds) / sizeof(*worlds); w++) {
                        uint32_t W = worlds[w];
                        uint64_t B = 37;
                        zr_sampler_params g = test_params((enum zr_sampler_mode)m, 1009, B * W);

                        g.seed = UINT64_C(1) << 40;
                        g.step = 123;
                        ck_assert_int_eq(zr_sampler_indices(&g, test_ref, NULL), 0);
                        for (uint32_t r = 0; r < W; r++) {
                                zr_sampler_params p = g;

                                p.batch_size = B;
                                p.world_size = W;
                                p.rank = r;
                                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                                ck_assert_mem_eq(test_idx, test_ref + r * B, B * sizeof(uint64_t));
                        }
                        if (m == ZR_SAMPLER_CYCLIC || m == ZR_SAMPLER_CYCLIC_LX157)
                                for (uint64_t i = 0; i < B * W; i++)
                                        for (uint64_t j = 0; j < i; j++)
                                                TEST_NE(test_ref[i], test_ref[j]);
                }
}
END_TEST

/* Step 10^12 and 2^62 cost nothing special and equal the definitions evaluated
 * directly: iid from the step key, cyclic from the cycle's permutation. */
START_TEST(test_huge_steps_direct) {
        static const uint64_t steps[] = { UINT64_C(1000000000000), UINT64_C(1) << 62, UINT64_MAX };

        for (size_t s = 0; s < sizeof(steps) / sizeof(*steps); s++) {
                zr_sampler_params p = test_params(ZR_SAMPLER_IID, 1000003, 100);
                zr_feistel f;
                zr_lxperm x;

                p.seed = UINT64_C(0xfeedface12345678);
                p.step = steps[s];
                p.world_size = 2;
                p.rank = 1;
                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                for (uint64_t j = 0; j < 100; j++)
                        ck_assert_uint_eq(test_idx[j],
                                          zr_rng_iid_one(zr_rng_key(p.seed, ZR_RNG_DOMAIN_IID, p.step),
                                                         p.n, 100 + j));

                p.mode = ZR_SAMPLER_CYCLIC;
                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                /* m = floor(1000003 / 200) = 5000 steps per cycle */
                zr_feistel_init(&f, p.n, zr_rng_key(p.seed, ZR_RNG_DOMAIN_CYCLIC, p.step / 5000));
                for (uint64_t j = 0; j < 100; j++)
                        ck_assert_uint_eq(test_idx[j], zr_feistel_permute(&f, (p.step % 5000) * 200 + 100 + j));

                p.mode = ZR_SAMPLER_CYCLIC_LX157;
                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                zr_lxperm_init(&x, p.n, p.seed, p.step / 5000);
                for (uint64_t j = 0; j < 100; j++)
                        ck_assert_uint_eq(test_idx[j], zr_lxperm_permute(&x, (p.step % 5000) * 200 + 100 + j));
        }
}
END_TEST

START_TEST(test_deterministic_and_keyed) {
        for (int m = ZR_SAMPLER_IID; m < _ZR_SAMPLER_MODE_MAX; m++) {
                zr_sampler_params p = test_params((enum zr_sampler_mode)m, 100000, 256);
                unsigned same = 0;

                p.seed = 99;
                ck_assert_int_eq(zr_sampler_indices(&p, test_ref, NULL), 0);
                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                ck_assert_mem_eq(test_idx, test_ref, 256 * sizeof(uint64_t));
                p.seed = 99 + (UINT64_C(1) << 32);
                ck_assert_int_eq(zr_sampler_indices(&p, test_idx, NULL), 0);
                for (unsigned j = 0; j < 256; j++)
                        same += test_idx[j] == test_ref[j];
                ck_assert_uint_lt(same, 4);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("sampler");
        TL_TCASE(s, "core", 0, test_mode_names, test_errors, test_sequential_window,
                 test_sequential_huge_steps, test_iid_fill_matches_reference,
                 test_iid_rejection_retries, test_cyclic_fill_matches_reference,
                 test_lx157_fill_matches_reference, test_sharding,
                 test_huge_steps_direct, test_deterministic_and_keyed, test_permutations_invert, test_maps,
                 test_iid_find);
        return tl_run_suite(s);
}
