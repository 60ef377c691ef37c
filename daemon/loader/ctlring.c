/* ctlring.c: a loader's control memory (ctlring.h). */
#include "loader/ctlring.h"

#include <string.h>

static uint64_t *word64(const zr_ctlring *c, uint32_t off) {
        return (uint64_t *)((char *)c->shm.data + off);
}

static uint32_t *word32(const zr_ctlring *c, uint32_t off) {
        return (uint32_t *)((char *)c->shm.data + off);
}

int zr_ctlring_create(zr_ctlring *c, zr_error *err) {
        int r;

        *c = (zr_ctlring){ .shm = { .fd = -1 } };
        r = zr_shm_create_flags("zrecord-ctl", ZR_CTL_BYTES, ZR_SHM_CLIENT_WRITES, &c->shm, err);
        if (r < 0)
                return r;
        uint32_t *head = word32(c, ZR_CTL_OFF_MAGIC);
        head[0] = ZR_CTL_MAGIC;
        head[1] = ZR_CTL_VERSION;
        head[2] = ZR_CTL_ENTRIES;
        return 0;
}

void zr_ctlring_destroy(zr_ctlring *c) {
        if (c->shm.data || c->shm.fd >= 0)
                zr_shm_release(&c->shm);
        *c = (zr_ctlring){ .shm = { .fd = -1 } };
}

void zr_ctlring_publish(zr_ctlring *c, uint64_t step, uint32_t ring, uint32_t slot) {
        char *e = (char *)c->shm.data + ZR_CTL_OFF_ANN +
                  (c->published % ZR_CTL_ENTRIES) * ZR_CTL_ANN_BYTES;

        __atomic_store_n((uint64_t *)e, step, __ATOMIC_RELAXED);
        __atomic_store_n((uint32_t *)(e + 8), ring, __ATOMIC_RELAXED);
        __atomic_store_n((uint32_t *)(e + 12), slot, __ATOMIC_RELAXED);
        c->published++;
        __atomic_store_n(word64(c, ZR_CTL_OFF_PUBLISHED), c->published, __ATOMIC_RELEASE);
}

int zr_ctlring_client_waiting(zr_ctlring *c) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return __atomic_load_n(word32(c, ZR_CTL_OFF_WAITING), __ATOMIC_RELAXED) != 0;
}

int zr_ctlring_pending(zr_ctlring *c, uint64_t *tail) {
        uint64_t t = __atomic_load_n(word64(c, ZR_CTL_OFF_RELEASED), __ATOMIC_ACQUIRE);
        uint64_t n = t - c->consumed; /* a count behind wraps: far too many */

        *tail = t;
        return n <= ZR_CTL_ENTRIES ? (int)n : -1;
}

uint64_t zr_ctlring_released(const zr_ctlring *c) {
        return __atomic_load_n(word64(c, ZR_CTL_OFF_RELEASED), __ATOMIC_ACQUIRE);
}

void zr_ctlring_entry(const zr_ctlring *c, uint64_t index, zr_ctl_release *ret) {
        const char *e = (const char *)c->shm.data + ZR_CTL_OFF_REL +
                        (index % ZR_CTL_ENTRIES) * ZR_CTL_REL_BYTES;

        ret->ring = __atomic_load_n((const uint32_t *)e, __ATOMIC_RELAXED);
        ret->slot = __atomic_load_n((const uint32_t *)(e + 4), __ATOMIC_RELAXED);
        ret->taken_ns = __atomic_load_n((const uint64_t *)(e + 8), __ATOMIC_RELAXED);
        ret->wait_ns = __atomic_load_n((const uint64_t *)(e + 16), __ATOMIC_RELAXED);
}

void zr_ctlring_consume(zr_ctlring *c, uint64_t tail) {
        c->consumed = tail;
        __atomic_store_n(word64(c, ZR_CTL_OFF_CONSUMED), tail, __ATOMIC_RELEASE);
}

void zr_ctlring_set_wants(zr_ctlring *c, int on) {
        __atomic_store_n(word32(c, ZR_CTL_OFF_WANTS), on ? 1u : 0u, __ATOMIC_RELAXED);
        if (on)
                __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
