/* group.c: groups of identical loaders (loader-private.h; loader.h, "Shared
 * work"): who is a member, the members' rings as one pool of slots, and which
 * of those rings each member has been told of.
 *
 * Why a member below its claims always finds a free slot: the group's live
 * rings hold the sum of the live members' nslots slots; each claim names one
 * slot, each member has at most nslots claims, so while one member has fewer,
 * the slots named by claims are fewer than the slots (a fill whose claims
 * were dropped, by an end or a close, occupies a slot for the rest of that
 * fill only). So no member waits for another to release anything: a slow
 * member holds its own claims and nothing else.
 *
 * Every function runs with the engine mutex held. A group is a short list of
 * members and rings: it is walked, never indexed.
 */
#include <errno.h>
#include <stdlib.h>

#include "loader/loader-private.h"

/* Same batches for every step, in the same slot layout (a mixture's: the same
 * sources, samplers and weights too), and the same steps for the engine's
 * (stride and phase). */
int zr_loader_same_key(const zr_loader *a, const zr_loader *b, int generations) {
        if (a->nstreams != b->nstreams || a->nsources != b->nsources || a->sp.mode != b->sp.mode ||
            a->sp.seed != b->sp.seed || a->sp.batch_size != b->sp.batch_size ||
            a->sp.rank != b->sp.rank || a->sp.world_size != b->sp.world_size || a->sp.n != b->sp.n ||
            a->slot_bytes != b->slot_bytes || a->stride != b->stride || a->phase != b->phase)
                return 0;
        for (uint32_t k = 0; k < a->nsources; k++)
                if (a->mix->sources[k].mode != b->mix->sources[k].mode ||
                    a->mix->sources[k].n != b->mix->sources[k].n ||
                    a->mix->sources[k].weight != b->mix->sources[k].weight)
                        return 0;
        for (size_t i = 0; i < a->nall; i++)
                if (zr_dataset_id(a->streams[i].s.ds) != zr_dataset_id(b->streams[i].s.ds) ||
                    (generations && a->streams[i].open_gen != b->streams[i].open_gen) ||
                    a->streams[i].offset != b->streams[i].offset ||
                    a->streams[i].capacity != b->streams[i].capacity ||
                    !zr_pack_same(a->streams[i].pack, b->streams[i].pack) ||
                    a->streams[i].image != b->streams[i].image ||
                    (a->streams[i].image &&
                     (!zr_image_params_same(&a->streams[i].img, &b->streams[i].img) ||
                      a->streams[i].s.image_skip != b->streams[i].s.image_skip)))
                        return 0;
        return 1;
}

static int ring_busy(const ring *r) {
        for (uint32_t i = 0; i < r->nslots; i++)
                if (slot_busy(&r->slots[i]))
                        return 1;
        return 0;
}

ring *zr_group_ring(const group *g, uint32_t id) {
        for (ring *r = g->rings; r; r = r->next)
                if (r->id == id)
                        return r;
        return NULL;
}

/* A slot of a live ring that holds `step` or is being filled with it. */
slot *zr_group_find(const group *g, uint64_t step) {
        for (ring *r = g->rings; r; r = r->next) {
                if (!r->owner)
                        continue;
                for (uint32_t i = 0; i < r->nslots; i++) {
                        slot *sl = &r->slots[i];
                        if (sl->step == step && (sl->has_content || sl->filling) &&
                            !atomic_load(&sl->cancel))
                                return sl;
                }
        }
        return NULL;
}

/* 1 if a live member of g has still to take `step` (it has not claimed it,
 * and its end is not before it). */
static int step_needed(const group *g, uint64_t step) {
        for (const zr_loader *m = g->members; m; m = m->g_next) {
                if (m->closing || step < m->start + m->fill_k)
                        continue;
                if (m->end_reachable && step - m->start >= m->end_k)
                        continue;
                return 1;
        }
        return 0;
}

/* Resident slots a group may have to keep batches for members behind: one
 * member's ring, plus a slot for each other member. Members in step use about
 * nslots + 1; each step between the slowest and the fastest costs one more
 * slot, so this keeps a lag of about nmembers - 2 steps past the depth, and a
 * group's memory within about 1.5 rings at 4 members of depth 4. */
static size_t resident_cap(const group *g) {
        uint32_t depth = 0;

        for (const zr_loader *m = g->members; m; m = m->g_next)
                if (m->nslots > depth)
                        depth = m->nslots;
        return depth + (g->nmembers ? g->nmembers - 1 : 0);
}

/* A free slot of a live ring to fill, NULL if none. In order:
 *   - a resident slot with no batch, or with one no member will take again
 *     (the oldest such): members in step then use about one ring's memory,
 *     and no fill pays a first touch it could avoid;
 *   - while the group's resident slots are below resident_cap(), a slot never
 *     filled (its pages are faulted in first), so that a member that fell
 *     behind finds the steps it needs;
 *   - a resident slot whose batch a member behind still needs: the newest
 *     such. The oldest is the very step the slowest member needs next:
 *     taking it made that member gather its next step, fall further behind
 *     and lose the next one the same way (4 processes: 159 gathers for 96
 *     steps). Losing the newest, it first takes the older ones it finds;
 *   - a slot never filled (the invariant above: a member below its claims
 *     finds one). */
slot *zr_group_pick(const group *g) {
        slot *best = NULL;
        int best_rank = 0, grow;
        size_t resident = 0;

        for (ring *r = g->rings; r; r = r->next)
                for (uint32_t i = 0; i < r->nslots; i++)
                        resident += r->slots[i].populated;
        grow = resident < resident_cap(g);
        for (ring *r = g->rings; r; r = r->next) {
                if (!r->owner)
                        continue;
                for (uint32_t i = 0; i < r->nslots; i++) {
                        slot *sl = &r->slots[i];
                        int rank;
                        if (slot_busy(sl))
                                continue;
                        if (!sl->populated)
                                rank = grow ? 3 : 1;
                        else if (!sl->has_content)
                                rank = 5;
                        else
                                rank = step_needed(g, sl->step) ? 2 : 4;
                        if (rank > best_rank ||
                            (rank == best_rank && rank == 4 && sl->step < best->step) ||
                            (rank == best_rank && rank == 2 && sl->step > best->step)) {
                                best = sl;
                                best_rank = rank;
                        }
                }
        }
        return best;
}

int zr_group_knows(const zr_loader *l, uint32_t id) {
        for (size_t i = 0; i < l->nknown; i++)
                if (l->known[i] == id)
                        return 1;
        return 0;
}

int zr_group_know(zr_loader *l, uint32_t id) {
        if (l->nknown == l->known_cap) {
                size_t cap = l->known_cap ? 2 * l->known_cap : 4;
                uint32_t *k = realloc(l->known, cap * sizeof(*k));
                if (!k)
                        return -ENOMEM;
                l->known = k;
                l->known_cap = cap;
        }
        l->known[l->nknown++] = id;
        return 0;
}

/* Something about rings to tell the client: a ring it knows is gone, or a
 * live ring of its group is new to it. */
int zr_group_news(const zr_loader *l) {
        for (size_t i = 0; i < l->nknown; i++)
                if (!zr_group_ring(l->g, l->known[i]))
                        return 1;
        for (ring *r = l->g->rings; r; r = r->next)
                if (r->owner && !zr_group_knows(l, r->id))
                        return 1;
        return 0;
}

/* Engine mutex held: joins the group of l's key (creating it), with its ring.
 * Returns 1 if notify is due (the other members have a RING to collect). */
int zr_group_join(zr_loader_engine *e, zr_loader *l, group *fresh) {
        group *g;
        int notify = 0;

        for (g = e->groups; g; g = g->next)
                if (g->members && zr_loader_same_key(g->members, l, 1))
                        break;
        if (!g) {
                g = fresh;
                g->next = e->groups;
                e->groups = g;
                /* without memory for its window, it just does not read ahead */
                (void)zr_pf_group_init(e, g, l);
        } else {
                free(fresh);
        }
        l->own->next = g->rings;
        g->rings = l->own;
        for (zr_loader *m = g->members; m; m = m->g_next)
                notify |= zr_sched_ready(e, m);
        l->g = g;
        l->g_next = g->members;
        g->members = l;
        g->nmembers++;
        return notify;
}

/* Engine mutex held: leaves l's group; the last member unlinks it from the
 * engine (the caller frees it once its rings are reaped). */
void zr_group_leave(zr_loader_engine *e, zr_loader *l) {
        group *g = l->g;

        for (zr_loader **p = &g->members; *p; p = &(*p)->g_next) {
                if (*p == l) {
                        *p = l->g_next;
                        break;
                }
        }
        l->g = NULL;
        if (--g->nmembers > 0)
                return;
        for (group **p = &e->groups; *p; p = &(*p)->next) {
                if (*p == g) {
                        *p = g->next;
                        break;
                }
        }
}

/* Requeues every member: a slot became free, or a batch some wait for came. */
void zr_group_wake(zr_loader_engine *e, group *g) {
        for (zr_loader *m = g->members; m; m = m->g_next)
                zr_sched_run(e, m);
}

/* Moves g's retiring rings that nothing uses any more to *dead (released by
 * the caller, outside the mutex, with zr_rings_release()). Members that knew one
 * get a RING_CLOSE: returns 1 if notify is due. Loop thread. */
int zr_group_reap(zr_loader_engine *e, group *g, ring **dead) {
        int notify = 0;

        for (ring **pp = &g->rings; *pp;) {
                ring *r = *pp;
                if (r->owner || ring_busy(r)) {
                        pp = &r->next;
                        continue;
                }
                *pp = r->next;
                r->next = *dead;
                *dead = r;
                for (zr_loader *m = g->members; m; m = m->g_next)
                        if (zr_group_knows(m, r->id))
                                notify |= zr_sched_ready(e, m);
                /* a loader of this geometry is likely to be opened again (a
                 * resumed run): have a warm ring ready for it, if the budget
                 * allows */
                zr_spare_make(e, r->shm.size);
        }
        return notify;
}
