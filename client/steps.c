/* steps.c: which steps saw a record (zrc.h, zrc_steps_of()): STEPS_OF
 * requests over a range, piece after piece.
 *
 * The daemon answers each request with the hits of steps [start, next) and
 * `next`, having done a bounded amount of work (PROTOCOL.md, STEPS_OF); this
 * walks from q->start to q->stop asking again from each `next`, and hands each
 * piece to the caller, so that a long iid scan shows its progress and can be
 * stopped. The daemon is the one implementation of the samplers: nothing of
 * them is computed here. Each reply is checked: its hits ascend, lie in the
 * piece, and `next` moves forward and never past stop.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "zrc-private.h"

/* Checks a reply's hits and next against the piece asked, into *hits. */
static int piece_take(zrc_conn *c, const conn_reply *reply, const zrc_steps_query *q,
                      uint64_t at, zrc_step_hit **hits, size_t *count, uint64_t *next) {
        const uint8_t *p;
        size_t n = 0;
        zrc_step_hit *h;

        *next = conn_get_u64(reply->root, "next");
        if (zr_wire_get_u64s(reply->root, "hits", &p, &n, NULL) < 0 || n % 3 != 0)
                return conn_fail(c, ZR_E_PROTO, "STEPS_OF reply: hits are not (step, rank, "
                                 "position) triples");
        if (*next <= at || *next > q->stop)
                return conn_fail(c, ZR_E_PROTO, "STEPS_OF reply: next %" PRIu64 " after asking "
                                 "from %" PRIu64 " to %" PRIu64, *next, at, q->stop);
        n /= 3;
        h = realloc(*hits, (n ? n : 1) * sizeof(*h));
        if (!h)
                return conn_fail(c, ENOMEM, "out of memory for %zu hits", n);
        *hits = h;
        for (size_t i = 0; i < n; i++) {
                h[i] = (zrc_step_hit){ .step = zr_wire_u64_at(p, 3 * i),
                                       .rank = zr_wire_u64_at(p, 3 * i + 1),
                                       .position = zr_wire_u64_at(p, 3 * i + 2) };
                if (h[i].step < at || h[i].step >= *next ||
                    (i && (h[i].step < h[i - 1].step ||
                           (h[i].step == h[i - 1].step &&
                            (h[i].rank < h[i - 1].rank ||
                             (h[i].rank == h[i - 1].rank && h[i].position <= h[i - 1].position))))))
                        return conn_fail(c, ZR_E_PROTO, "STEPS_OF reply: hit %zu (step %" PRIu64
                                         ") out of order or outside steps [%" PRIu64 ", %" PRIu64 ")",
                                         i, h[i].step, at, *next);
        }
        *count = n;
        return 0;
}

/* One STEPS_OF request for steps [at, q->stop). */
static void piece_ask(zrc_conn *c, const zrc_steps_query *q, uint64_t at) {
        zr_wire_writer *w = conn_begin(c, ZR_MSG_STEPS_OF);

        zr_wire_put_str(w, "sampler", q->sampler ? q->sampler : "sequential");
        if (q->sources) {
                zr_wire_begin_array(w, "sources");
                for (size_t k = 0; k < q->n_sources; k++) {
                        zr_wire_begin_map(w, NULL);
                        zr_wire_put_u64(w, "n", q->sources[k].n);
                        zr_wire_put_u64(w, "weight", q->sources[k].weight);
                        if (q->sources[k].sampler)
                                zr_wire_put_str(w, "sampler", q->sources[k].sampler);
                        zr_wire_end(w);
                }
                zr_wire_end(w);
                zr_wire_put_u64(w, "source", q->source);
        } else {
                zr_wire_put_u64(w, "n", q->n);
        }
        zr_wire_put_u64(w, "batch_size", q->batch_size);
        zr_wire_put_u64(w, "seed", q->seed);
        zr_wire_put_u64(w, "world_size", q->world_size ? q->world_size : 1);
        zr_wire_put_u64(w, "record", q->record);
        zr_wire_put_u64(w, "start", at);
        zr_wire_put_u64(w, "stop", q->stop);
}

int zrc_steps_of(zrc_conn *c, const zrc_steps_query *q, zrc_steps_fn fn, void *userdata) {
        zrc_step_hit *hits = NULL;
        uint64_t at;
        int r;

        r = conn_check(c, CONN_FEATURE_STEPS_OF, ZR_FEATURE_STEPS_OF);
        if (r < 0)
                return r;
        if (!q || !fn)
                return conn_fail(c, EINVAL, "zrc_steps_of needs a query and a function");
        if (q->sources && (q->n_sources == 0 || q->n_sources > ZR_SOURCES_MAX))
                return conn_fail(c, EINVAL, "a mixture of %zu sources: 1..%d", q->n_sources,
                                 ZR_SOURCES_MAX);
        for (at = q->start; at < q->stop && r == 0;) {
                conn_reply reply = CONN_REPLY_NULL;
                size_t count = 0;
                uint64_t next = 0;

                piece_ask(c, q, at);
                r = conn_call(c, ZR_MSG_STEPS_OF, NULL, 0, &reply);
                if (r < 0)
                        break;
                r = piece_take(c, &reply, q, at, &hits, &count, &next);
                conn_reply_done(&reply);
                if (r < 0)
                        break;
                r = fn(userdata, hits, count, next);
                at = next;
        }
        free(hits);
        return r;
}
