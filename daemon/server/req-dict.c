/* req-dict.c: dictionaries: TRAIN_DICT (over a store or over records in a
 * sealed memfd; the dictionary goes back in a daemon-made sealed memfd) and
 * INSTALL_DICT (into an empty zstd_dict store, exclusive).
 *
 * Training reads a tier-sized sample and runs zstd's trainer: seconds of CPU,
 * so it runs on the pool. It does not choose tiers (dicttrain.h does).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dicttrain.h"
#include "server/request.h"

typedef struct dict_state {
        zr_entry *entry;
        const zr_dict_tier_spec *spec;
        zr_shm input;          /* client records (memfd source) */
        uint64_t offset;
        uint64_t *sizes;
        size_t n;
        void *dict;
        size_t dict_len;
        zr_shm out;            /* the reply's memfd */
} dict_state;

static void dict_state_free(void *p) {
        dict_state *st = p;
        zr_entry_unref(st->entry);
        zr_shm_release(&st->input);
        zr_shm_release(&st->out);
        free(st->sizes);
        free(st->dict);
        free(st);
}

static void train_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        dict_state *st = rq->state;
        int r;
        if (st->entry) {
                zr_dataset_lock(st->entry->ds, false);
                r = zr_dict_train_dataset(st->entry->ds, st->spec, &st->dict, &st->dict_len,
                                          &rq->err);
                zr_dataset_unlock(st->entry->ds);
        } else {
                r = zr_dict_train((const uint8_t *)st->input.data + st->offset, st->sizes, st->n,
                                  st->spec, &st->dict, &st->dict_len, &rq->err);
        }
        if (r == 0) {
                r = zr_shm_create("zrecord-dict", st->dict_len, &st->out, &rq->err);
                if (r == 0)
                        memcpy(st->out.data, st->dict, st->dict_len);
        }
        rq->result = r;
        zr_server_trim_heap();
}

static void train_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        dict_state *st = rq->state;
        int r = rq->result;
        if (r == 0 && !zr_request_orphaned(rq)) {
                int fd = st->out.fd;
                st->out.fd = -1;
                zr_wire_writer w;
                zr_reply_begin(rq, &w);
                zr_wire_put_u64(&w, "dict_bytes", st->dict_len);
                r = zr_reply_send(rq, &w, &fd, 1);
        }
        zr_request_complete(rq, r);
}

int zr_handle_train_dict(zr_request *rq) {
        zr_wire_error werr = {0};
        char tier[32];
        zr_error err = {0};
        enum zr_dict_tier t;
        bool has_handle = zr_wire_find(rq->root, "handle") != NULL;
        bool has_sizes = zr_wire_find(rq->root, "sizes") != NULL;
        int r;

        if (zr_wire_get_str_copy(rq->root, "tier", tier, sizeof(tier), &werr) < 0)
                return zr_request_fail(rq, EINVAL, "%s", werr.message);
        r = zr_dict_tier_parse(tier, &t, &err);
        if (r < 0)
                return zr_request_fail(rq, -r, "%s", err.message);
        if (has_handle == has_sizes)
                return zr_request_fail(rq, EINVAL, "train_dict needs exactly one source: "
                                       "'handle' or 'sizes' with a memfd");
        dict_state *st = zr_request_state(rq, sizeof(*st), dict_state_free);
        if (!st)
                return -ENOMEM;
        st->input.fd = -1;
        st->out.fd = -1;
        st->spec = zr_dict_tier_get(t);
        if (has_handle) {
                uint32_t hid;
                if (zr_wire_get_u32(rq->root, "handle", &hid, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                zr_handle *h = zr_request_handle(rq, "handle", hid,
                                                 ZR_HANDLE_BIT(ZR_HANDLE_DATASET));
                if (!h)
                        return -ZR_E_NO_HANDLE;
                st->entry = zr_entry_ref(h->entry);
        } else {
                const uint8_t *p;
                uint64_t total = 0;
                if (zr_wire_find(rq->root, "offset") &&
                    zr_wire_get_u64(rq->root, "offset", &st->offset, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                if (zr_wire_get_u64s(rq->root, "sizes", &p, &st->n, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                st->sizes = malloc((st->n ? st->n : 1) * sizeof(uint64_t));
                if (!st->sizes)
                        return zr_request_fail(rq, ENOMEM, "no memory");
                for (size_t i = 0; i < st->n; i++) {
                        st->sizes[i] = zr_wire_u64_at(p, i);
                        if (__builtin_add_overflow(total, st->sizes[i], &total))
                                return zr_request_fail(rq, ZR_E_BUFFER, "sizes overflow");
                }
                if (__builtin_add_overflow(total, st->offset, &total) || total > SIZE_MAX)
                        return zr_request_fail(rq, ZR_E_BUFFER, "offset + sizes overflow");
                r = zr_shm_map_sealed(zr_request_take_fd(rq, 0), (size_t)total, &st->input,
                                      &rq->err);
                if (r < 0)
                        return r;
        }
        return zr_request_submit(rq, train_run, train_done);
}

typedef struct install_state {
        zr_entry *entry;
        zr_shm dict;
        uint64_t dict_bytes;
} install_state;

static void install_state_free(void *p) {
        install_state *st = p;
        zr_entry_unref(st->entry);
        zr_shm_release(&st->dict);
        free(st);
}

static void install_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        install_state *st = rq->state;
        int r = zr_mutation_begin(rq, &st->entry, 1, true);
        if (r == 0)
                r = zr_dataset_install_dict(st->entry->ds, st->dict.data,
                                            (size_t)st->dict_bytes, &rq->err);
        zr_mutation_end(rq, r == 0);
        rq->result = r;
}

int zr_handle_install_dict(zr_request *rq) {
        zr_wire_error werr = {0};
        zr_handle *h = rq->handle;
        uint64_t bytes;
        int r;

        if (zr_wire_get_u64(rq->root, "dict_bytes", &bytes, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (zr_dataset_schema(h->entry->ds)->codec != ZR_CODEC_ZSTD_DICT)
                return zr_request_fail(rq, ZR_E_BAD_CODEC, "not a zstd_dict store");
        if (bytes == 0 || bytes > SIZE_MAX)
                return zr_request_fail(rq, EINVAL, "dict_bytes %llu", (unsigned long long)bytes);
        install_state *st = zr_request_state(rq, sizeof(*st), install_state_free);
        if (!st)
                return -ENOMEM;
        st->dict.fd = -1;
        r = zr_shm_map_sealed(zr_request_take_fd(rq, 0), (size_t)bytes, &st->dict, &rq->err);
        if (r < 0)
                return r;
        st->dict_bytes = bytes;
        st->entry = zr_entry_ref(h->entry);
        return zr_request_submit_reply(rq, install_run, NULL);
}
