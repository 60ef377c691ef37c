/* inverse.h: which steps saw a record: every sampler and mixture, run backwards.
 *
 * Samplers are pure functions of (seed, step), so "which steps of [start, stop)
 * hold record r, on which rank, at which position of its batch" has an exact
 * answer, computed without replaying the run:
 *
 *   sequential    arithmetic: the global positions p = r, r + n, r + 2n, ... in
 *                 [start*G, stop*G); O(hits).
 *   cyclic,       the inverse permutation: each cycle holds r once, at position
 *   cyclic-lx157  P_c^-1(r), unless that position is one the cycle drops; O(1)
 *                 per cycle, so O(cycles) for the range.
 *   iid           a scan. Draws are independent, so no arithmetic finds them: every
 *                 position of every step in the range is drawn again, 64 lanes at a
 *                 time (one mix and two compares each). It is bounded (scan_limit
 *                 positions per call, an error above it) and reports progress.
 *   mixtures      through the apportionment: the source's own stream is inverted as
 *                 above (its draws, not the mixture's positions, are scanned for an
 *                 iid source), each draw c found goes to the step s with
 *                 D_k(s) <= c < D_k(s+1), then through the step's layout back to
 *                 its global position.
 *
 * The definition is normative in proto/SAMPLERS.md, "Which steps saw a record";
 * proto/vectors/sampler-inverse.jsonl holds answers every client reproduces.
 *
 * Results go to a callback in batches, in ascending (step, rank, position) order.
 * Functions return 0 once the whole range is covered; the nonzero value a callback
 * returned, which stops the walk (a positive value to stop early, or a negative
 * error); -ZR_E_SAMPLER for parameters the sampler refuses, a record >= n, or an
 * iid scan above its limit; -ENOMEM. Thread-safe; no state.
 */
#ifndef ZR_SAMPLER_INVERSE_H
#define ZR_SAMPLER_INVERSE_H

#include <stddef.h>
#include <stdint.h>

#include "sampler/mixture.h"
#include "sampler/sampler.h"
#include "util/error.h"

/* Positions (or a mixture source's draws) an iid inverse scans in one call unless
 * told otherwise: 2^34, some seconds to a minute on one core. */
#define ZR_STEPS_OF_SCAN_LIMIT (UINT64_C(1) << 34)

/* One place a record was read: step `step`, rank `rank`, index `position` of that
 * rank's batch (its global position is rank * batch_size + position). */
typedef struct zr_sampler_hit {
        uint64_t step;
        uint64_t position;
        uint32_t rank;
} zr_sampler_hit;

typedef struct zr_steps_of_ops {
        /* Receives hits, count >= 1, in ascending order across calls; returns 0 to go
         * on, nonzero to stop. Required. */
        int (*on_hits)(void *userdata, const zr_sampler_hit *hits, size_t count);
        /* Optional: told now and then how far a long walk got, in units of the walk
         * (positions or draws scanned for iid, cycles for the cyclics, hits for
         * sequential), done <= total; returns 0 to go on, nonzero to stop. */
        int (*on_progress)(void *userdata, uint64_t done, uint64_t total);
        void *userdata;
        uint64_t scan_limit; /* iid: most positions scanned; 0 for ZR_STEPS_OF_SCAN_LIMIT */
        /* a mixture: the most hits of one step held to be sorted (0: no bound);
         * a step with more fails the call with -E2BIG, nothing of that step
         * handed to on_hits */
        size_t step_hits_max;
} zr_steps_of_ops;

/* Every hit of `record` in steps [start, stop) of sampler p (p->step and p->rank are
 * ignored: every rank is searched). record < p->n. */
int zr_sampler_steps_of(const zr_sampler_params *p, uint64_t record, uint64_t start, uint64_t stop,
                        const zr_steps_of_ops *ops, zr_error *err);

/* Every hit of record `record` of source `source` in steps [start, stop) of mixture
 * m; stop is cut to m->last_step + 1. source < K, record < n_source. */
int zr_mixture_steps_of(const zr_mixture *m, uint32_t source, uint64_t record, uint64_t start,
                        uint64_t stop, const zr_steps_of_ops *ops, zr_error *err);

/* The places of draws[0..n) of source `source` of mixture m (ascending, each
 * in [D_k(start), D_k(stop))), as zr_mixture_steps_of() reports them: a
 * packed mixture's rows (a source's draw c is row c of its packed stream)
 * found by its own walk. */
int zr_mixture_draws_steps_of(const zr_mixture *m, uint32_t source, const uint64_t *draws,
                              size_t n, uint64_t start, uint64_t stop,
                              const zr_steps_of_ops *ops, zr_error *err);

/* The position of `record` (< n) in cycle `cycle` of the document order of a
 * packed loader, zr_sampler_cycle_fill()'s: its inverse. The mode has cycles
 * (not iid: UINT64_MAX). O(1). */
uint64_t zr_sampler_cycle_position(enum zr_sampler_mode mode, uint64_t n, uint64_t seed,
                                   uint64_t cycle, uint64_t record);

/* Where to cut a walk of steps [start, stop) so that it costs at most
 * `max_scan` positions (iid) or `max_cycles` cycles (the cyclics), to answer a
 * long range in pieces: returns the end of the first piece, in (start, stop]
 * (at least one step, whatever it costs; stop itself when the walk is within
 * the budget, and always for sequential, whose cost is its hits). A caller walks
 * [start, cut), then [cut, ...) until stop. start < stop. */
uint64_t zr_sampler_steps_of_cut(const zr_sampler_params *p, uint64_t start, uint64_t stop,
                                 uint64_t max_scan, uint64_t max_cycles);

/* The same for source `source` of mixture m, in its draws: at most `max_scan`
 * draws of an iid source, `max_cycles` cycles of a cyclic one (stop is first
 * cut to m->last_step + 1). O(log(stop - start) × depth). start < stop. */
uint64_t zr_mixture_steps_of_cut(const zr_mixture *m, uint32_t source, uint64_t start,
                                 uint64_t stop, uint64_t max_scan, uint64_t max_cycles);

#endif
