/* handles.c: a session's handle table and shared-memory budget (handles.h).
 *
 * An array sorted by number (numbers only grow, so an append keeps it
 * sorted): a lookup is a binary search, a close a memmove. A session holds
 * tens of handles, bounded by its limit.
 */
#include "server/handles.h"

#include "dataset/rdataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"

static const char *const type_names[] = {
        [ZR_HANDLE_DATASET] = "dataset", [ZR_HANDLE_SET] = "set",
        [ZR_HANDLE_BUFFER] = "buffer", [ZR_HANDLE_LOADER] = "loader",
};

/* "a dataset", "a dataset or set", "a dataset, set or buffer" */
static void types_text(unsigned types, char *buf, size_t size) {
        size_t at = 0, n = 0, k = 0;

        for (unsigned t = ZR_HANDLE_DATASET; t <= ZR_HANDLE_LOADER; t++)
                n += (types & ZR_HANDLE_BIT(t)) != 0;
        for (unsigned t = ZR_HANDLE_DATASET; t <= ZR_HANDLE_LOADER && at < size; t++) {
                if (!(types & ZR_HANDLE_BIT(t)))
                        continue;
                k++;
                at += (size_t)snprintf(buf + at, size - at, "%s%s",
                                       k == 1 ? "a " : k == n ? " or " : ", ", type_names[t]);
        }
}

void zr_handles_init(zr_handles *t, zr_server_counters *totals, zr_user *user) {
        *t = (zr_handles){ .next_id = 1, .totals = totals, .user = user };
}

static void shm_give_back(zr_handles *t, uint64_t bytes) {
        t->shm_bytes -= bytes;
        t->totals->shm_bytes -= bytes;
        zr_user_release(t->user, ZR_USER_SHM, bytes);
}

/* Drops what h holds. */
static void release(zr_handles *t, zr_handle *h) {
        switch (h->type) {
        case ZR_HANDLE_DATASET:
                if (h->remote_creds)
                        zr_rdataset_detach(h->entry->ds, h->remote_creds);
                zr_entry_unref(h->entry);
                break;
        case ZR_HANDLE_SET:
                zr_set_free(h->set);
                break;
        case ZR_HANDLE_BUFFER:
                shm_give_back(t, h->buffer->shm.size);
                zr_buffer_unref(h->buffer);
                break;
        case ZR_HANDLE_LOADER:
                shm_give_back(t, zr_lhandle_ring_bytes(h->loader));
                t->totals->loaders--;
                t->nloaders--;
                zr_lhandle_free(h->loader);
                break;
        }
        t->totals->handles--;
}

void zr_handles_fini(zr_handles *t) {
        for (uint32_t i = 0; i < t->n; i++)
                release(t, &t->v[i]);
        free(t->v);
        t->v = NULL;
        t->n = t->cap = 0;
}

zr_handle *zr_handles_find(zr_handles *t, uint32_t id) {
        uint32_t lo = 0, hi = t->n;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (t->v[mid].id == id)
                        return &t->v[mid];
                if (t->v[mid].id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return NULL;
}

zr_handle *zr_handles_get(zr_handles *t, const char *field, uint32_t id, unsigned types,
                          zr_error *err) {
        zr_handle *h = zr_handles_find(t, id);
        char want[64];

        if (!h) {
                zr_error_set(err, ZR_E_NO_HANDLE, "field '%s': handle %u names nothing", field, id);
                return NULL;
        }
        if (!(types & ZR_HANDLE_BIT(h->type))) {
                types_text(types, want, sizeof(want));
                zr_error_set(err, ZR_E_NO_HANDLE, "field '%s': handle %u is a %s, not %s", field,
                             id, type_names[h->type], want);
                return NULL;
        }
        return h;
}

int zr_handles_add(zr_handles *t, const zr_handle *h, uint32_t max, zr_error *err) {
        zr_handle *slot;

        if (t->n >= max)
                return zr_error_set(err, ZR_E_LIMIT, "%u handles open: the limit is %u", t->n,
                                    max);
        if (t->next_id == UINT32_MAX)
                return zr_error_set(err, ZR_E_LIMIT, "handle numbers exhausted");
        if (t->n == t->cap) {
                uint32_t cap = t->cap ? t->cap * 2 : 16;
                zr_handle *v = realloc(t->v, cap * sizeof(*v));
                if (!v)
                        return zr_error_set(err, ENOMEM, "no memory for a handle");
                t->v = v;
                t->cap = cap;
        }
        slot = &t->v[t->n++];
        *slot = *h;
        slot->id = t->next_id++;
        t->totals->handles++;
        if (slot->type == ZR_HANDLE_LOADER) {
                t->nloaders++;
                t->totals->loaders++;
        }
        return (int)slot->id;
}

void zr_handles_close(zr_handles *t, uint32_t id) {
        zr_handle *h = zr_handles_find(t, id);
        size_t i;

        if (!h)
                return;
        release(t, h);
        i = (size_t)(h - t->v);
        memmove(h, h + 1, (t->n - i - 1) * sizeof(*h));
        t->n--;
}

int zr_handles_shm_reserve(zr_handles *t, uint64_t bytes, uint64_t max, zr_error *err) {
        if (bytes > max || t->shm_bytes > max - bytes)
                return zr_error_set(err, ZR_E_LIMIT, "%llu bytes of shared memory would pass the "
                                    "limit of %llu (%llu in use)", (unsigned long long)bytes,
                                    (unsigned long long)max,
                                    (unsigned long long)t->shm_bytes);
        int r = zr_user_charge(t->user, ZR_USER_SHM, bytes, err);
        if (r < 0)
                return r;
        t->shm_bytes += bytes;
        t->totals->shm_bytes += bytes;
        return 0;
}

void zr_handles_shm_release(zr_handles *t, uint64_t bytes) {
        shm_give_back(t, bytes);
}

uint64_t zr_handles_shm_left(const zr_handles *t, uint64_t max) {
        uint64_t left = t->shm_bytes >= max ? 0 : max - t->shm_bytes;
        uint64_t room = zr_user_room(t->user, ZR_USER_SHM);
        return room < left ? room : left;
}

zr_buffer *zr_buffer_ref(zr_buffer *b) {
        if (b)
                b->refs++;
        return b;
}

zr_buffer *zr_buffer_unref(zr_buffer *b) {
        if (!b || --b->refs > 0)
                return NULL;
        zr_shm_release(&b->shm);
        free(b);
        return NULL;
}

zr_set *zr_set_free(zr_set *set) {
        if (!set)
                return NULL;
        for (uint32_t i = 0; i < set->n; i++) {
                if (set->entries)
                        zr_entry_unref(set->entries[i]);
                if (set->names)
                        free(set->names[i]);
        }
        free(set->entries);
        free(set->names);
        free(set->handles);
        free(set);
        return NULL;
}
