/* workload.h: deterministic data and index generators shared by the benchmarks.
 *
 * Every benchmark in bench/ feeds the same bytes to every contender, so the data
 * must be a pure function of a seed. An "image" record is a width x height uint8
 * picture: a smooth gradient (random base level and slopes per record) plus a
 * little uniform noise, so it compresses mildly, as a natural image does. The
 * 512 x 512 record (256 KiB) and the 64 x 64 tile (4 KiB) of the two
 * workloads are both made here.
 *
 * Also here: a small counter-based generator (splitmix64), fixed-seed uniform
 * index draws for random batches, and a monotonic clock with a median helper.
 * Nothing here allocates behind the caller's back except workload_images(),
 * which says so.
 */
#ifndef ZR_BENCH_WORKLOAD_H
#define ZR_BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

/* The next value of the splitmix64 sequence whose state is *state. */
uint64_t workload_next(uint64_t *state);

/* A well-mixed 64-bit value of (seed, id): the same inputs give the same value. */
uint64_t workload_mix(uint64_t seed, uint64_t id);

/* Writes the image record `id` of data set `seed` (width * height bytes) to dst.
 * Pure: the same (seed, id, width, height) always gives the same bytes. */
void workload_image(uint8_t *dst, size_t width, size_t height, uint64_t seed, uint64_t id);

/* Allocates n image records of width x height, packed back to back, and fills
 * them with records 0..n-1 of data set `seed`. Returns a malloc()ed buffer of
 * n * width * height bytes owned by the caller (free()), or NULL if out of memory
 * or if the size overflows. */
uint8_t *workload_images(size_t n, size_t width, size_t height, uint64_t seed);

/* Fills idx[0..n) with a uniform draw, with replacement, from [0, range)
 * (Lemire's bounded method with rejection, unbiased), keyed by (seed, batch):
 * batch k of seed s is always the same list. range must be > 0. */
void workload_draw(uint64_t *idx, size_t n, uint64_t range, uint64_t seed, uint64_t batch);

/* Monotonic time in nanoseconds. */
uint64_t workload_now_ns(void);

/* Sorts v[0..n) in place and returns its median (the mean of the two middle
 * values for even n). n must be > 0. */
double workload_median(double *v, size_t n);

/* The smallest of v[0..n). n must be > 0. */
double workload_min(const double *v, size_t n);

/* One timed step: runs batch number `batch`; returns 0 or a negative code. */
typedef int (*workload_step_fn)(void *arg, uint64_t batch);

/* Runs fn for batches 0..warm-1 untimed, then warm..warm+timed-1 each timed on
 * its own; ret_secs[0..timed) receives the seconds of each timed batch. Stops at
 * the first failure and returns its code; 0 otherwise. */
int workload_time(workload_step_fn fn, void *arg, size_t warm, size_t timed, double *ret_secs);

#endif
