/* users.c: per-uid accounting and the fair share of the budgets (users.h).
 *
 * A daemon has a few uids at a time (the users of one machine): the entries
 * are a list, walked. Every amount is a uint64_t and every check is done in
 * 128 bits, so no limit or charge can overflow it.
 */
#include "server/users.h"

#include <errno.h>
#include <stdlib.h>

#include "util/fifo.h"

struct zr_users {
        zr_user *head, *tail;
        uid_t self;
        zr_user_limits lim;
        uint64_t total[ZR_USER_NSLOTS];
        unsigned holders[ZR_USER_NSLOTS]; /* entries holding some of the slot */
        void (*wake)(void *arg);
        void *wake_arg;
        bool want_wake;
};

static const char *const slot_names[ZR_USER_NSLOTS] = {
        [ZR_USER_CONNS] = "connections",
        [ZR_USER_BYTES] = "bytes of requests in flight",
        [ZR_USER_FDS] = "descriptors in flight",
        [ZR_USER_SHM] = "bytes of shared memory",
        [ZR_USER_WORK] = "bytes of working memory",
};

const char *zr_user_slot_name(zr_user_slot slot) {
        return slot < ZR_USER_NSLOTS ? slot_names[slot] : "?";
}

int zr_users_new(uid_t self, const zr_user_limits *lim, zr_users **ret) {
        zr_users *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->self = self;
        r->lim = *lim;
        *ret = r;
        return 0;
}

zr_users *zr_users_free(zr_users *r) {
        free(r);
        return NULL;
}

static unsigned jobs_max(const zr_users *r, const zr_user *u) {
        return u->trusted ? 0 : r->lim.jobs_uid_max;
}

void zr_users_set_limits(zr_users *r, const zr_user_limits *lim) {
        r->lim = *lim;
        for (zr_user *u = r->head; u; u = u->next)
                u->jobs.max_running = jobs_max(r, u);
}

const zr_user_limits *zr_users_limits(const zr_users *r) {
        return &r->lim;
}

bool zr_users_trusted(const zr_users *r, uid_t uid) {
        return uid == 0 || uid == r->self;
}

int zr_users_get(zr_users *r, uid_t uid, zr_user **ret) {
        for (zr_user *u = r->head; u; u = u->next)
                if (u->uid == uid) {
                        u->refs++;
                        *ret = u;
                        return 0;
                }
        zr_user *u = calloc(1, sizeof(*u));
        if (!u)
                return -ENOMEM;
        u->users = r;
        u->uid = uid;
        u->trusted = zr_users_trusted(r, uid);
        u->refs = 1;
        zr_work_queue_init(&u->jobs, jobs_max(r, u));
        ZR_FIFO_PUSH(r->head, r->tail, u, next);
        *ret = u;
        return 0;
}

zr_user *zr_user_unref(zr_user *u) {
        if (!u || --u->refs > 0)
                return NULL;
        zr_users *r = u->users;
        for (zr_user_slot s = 0; s < ZR_USER_NSLOTS; s++)
                zr_user_release(u, s, u->used[s]); /* nothing, if the books are right */
        zr_user *prev = NULL;
        for (zr_user *p = r->head; p && p != u; p = p->next)
                prev = p;
        ZR_FIFO_REMOVE(r->head, r->tail, prev, u, next);
        free(u);
        return NULL;
}

zr_user *zr_users_first(const zr_users *r) {
        return r->head;
}

uint64_t zr_users_total(const zr_users *r, zr_user_slot slot) {
        return r->total[slot];
}

uint64_t zr_user_room(const zr_user *u, zr_user_slot slot) {
        const zr_users *r = u->users;
        uint64_t room = UINT64_MAX, held = u->used[slot];
        uint64_t umax = r->lim.uid_max[slot], tmax = r->lim.total_max[slot];

        if (!u->trusted && umax)
                room = held >= umax ? 0 : umax - held;
        if (tmax) {
                uint64_t left = r->total[slot] >= tmax ? 0 : tmax - r->total[slot];
                if (u->trusted) {
                        if (left < room)
                                room = left;
                } else {
                        /* (held + a) * (n + 1) - held <= left, for the largest a */
                        unsigned __int128 n = r->holders[slot] + (held == 0);
                        unsigned __int128 cap = ((unsigned __int128)left + held) / (n + 1);
                        uint64_t a = cap > held ? (uint64_t)(cap - held) : 0;
                        if (a < room)
                                room = a;
                }
        }
        return room;
}

int zr_user_charge(zr_user *u, zr_user_slot slot, uint64_t amount, zr_error *err) {
        const zr_users *r = u->users;
        uint64_t held = u->used[slot];
        if (amount <= zr_user_room(u, slot)) {
                zr_user_add(u, slot, amount);
                return 0;
        }
        uint64_t umax = r->lim.uid_max[slot], tmax = r->lim.total_max[slot];
        if (!u->trusted && umax && (held >= umax || amount > umax - held))
                return zr_error_set(err, ZR_E_LIMIT, "uid %u holds %llu %s: %llu more would pass "
                                    "the limit of %llu per uid", (unsigned)u->uid,
                                    (unsigned long long)held, slot_names[slot],
                                    (unsigned long long)amount, (unsigned long long)umax);
        if (u->trusted)
                return zr_error_set(err, ZR_E_LIMIT, "%llu %s in use by all users: %llu more "
                                    "would pass the limit of %llu", (unsigned long long)r->total[slot],
                                    slot_names[slot], (unsigned long long)amount,
                                    (unsigned long long)tmax);
        return zr_error_set(err, ZR_E_LIMIT, "uid %u holds %llu %s, all users %llu of %llu: %llu "
                            "more would pass its share of what is left (%u users hold some)",
                            (unsigned)u->uid, (unsigned long long)held, slot_names[slot],
                            (unsigned long long)r->total[slot], (unsigned long long)tmax,
                            (unsigned long long)amount, r->holders[slot] + (held == 0));
}

void zr_user_add(zr_user *u, zr_user_slot slot, uint64_t amount) {
        zr_users *r = u->users;
        if (!amount)
                return;
        if (u->used[slot] == 0)
                r->holders[slot]++;
        u->used[slot] += amount;
        r->total[slot] += amount;
}

void zr_user_release(zr_user *u, zr_user_slot slot, uint64_t amount) {
        zr_users *r = u->users;
        if (amount > u->used[slot])
                amount = u->used[slot];
        if (!amount)
                return;
        u->used[slot] -= amount;
        r->total[slot] -= amount;
        if (u->used[slot] == 0)
                r->holders[slot]--;
        if (r->want_wake && r->wake) {
                r->want_wake = false;
                r->wake(r->wake_arg);
        }
}

void zr_users_set_wake(zr_users *r, void (*fn)(void *arg), void *arg) {
        r->wake = fn;
        r->wake_arg = arg;
}

void zr_users_want_wake(zr_users *r) {
        r->want_wake = true;
}
