/* req-loader.c: the loader wiring: LOADER_OPEN, RELEASE, LOADER_CLOSE, and the
 * RING, BATCH, RING_CLOSE and LOADER_END events, on top of the loader engine
 * (loader/loader.h).
 *
 * Rings across users: identical loaders share their rings (a group, loader.h),
 * and each member maps the others' rings. Where the kernel lacks
 * F_SEAL_FUTURE_WRITE (before 5.1) a client can map a ring it was passed
 * writable, and would write into the batches of another member; so there a
 * loader that would join a group holding another uid's loader is refused
 * (EPERM), before its ring or any other is passed.
 *
 * A loader handle owns its zr_loader and one registry reference per stream, so
 * the datasets it borrows outlive it, and the working memory its loader was
 * charged (users.h, ZR_USER_WORK), with a reference on its uid's account.
 * Closing one never waits for a worker: a loader whose gather still runs is
 * left to the engine (zr_loader_close()), and the handle keeps its datasets
 * and its charge until the engine says it is gone (zr_server_loader_events()).
 * Opening one never waits on the loop either: LOADER_OPEN opens the loader on
 * a worker (zr_loader_new() takes its streams' locks, blocking, and reads a
 * ragged stream's sample and the fingerprint), paused, and the loop starts it
 * once the reply that names it is sent. The engine's workers wake the loop
 * through an eventfd (server.c); the loop then collects every loader's events
 * and sends them on its session. Everything else here runs on the loop
 * thread; it knows nothing of how rings are filled.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset/fingerprint.h"
#include "loader/ctlring.h"
#include "loader/loader.h"
#include "server/log.h"
#include "server/lview.h"
#include "server/request.h"
#include "server/session.h"

/* Slots when LOADER_OPEN gives no prefetch (PROTOCOL.md section 10). */
#define PREFETCH_DEFAULT 4

struct zr_lhandle {
        zr_loader *loader;
        zr_session *session;
        uint32_t id;
        uint32_t nstreams;                 /* streams of a batch (of each source) */
        uint32_t nentries;
        zr_entry **entries;                /* every source's streams, one reference each */
        uint64_t ring_bytes;
        uint64_t batch_size, seed;
        uint32_t rank, world_size;
        enum zr_sampler_mode mode;
        bool indices;                      /* BATCH carries the indices */
        bool provenance;                   /* BATCH carries a mixture's sources */
        bool ctl_wanted;                   /* LOADER_OPEN asked for control memory */
        bool ended;
        zr_ltrack *track;                  /* what telemetry shows of it (lview.h) */
        zr_user *user;                     /* charged its working memory; a reference */
        uint64_t work_bytes;
};

/* What the handle holds once its loader is gone. */
static void lhandle_gone(zr_lhandle *lh) {
        for (uint32_t i = 0; i < lh->nentries; i++)
                zr_entry_unref(lh->entries[i]);
        if (lh->user) {
                zr_user_release(lh->user, ZR_USER_WORK, lh->work_bytes);
                zr_user_unref(lh->user);
        }
        free(lh->entries);
        free(lh);
}

void zr_lhandle_free(zr_lhandle *lh) {
        if (!lh)
                return;
        zr_ltrack_free(lh->track);
        lh->track = NULL;
        lh->session = NULL; /* it may go first: nothing of the loader is sent now */
        lh->ended = true;
        /* never waits for a worker: a gather of it still running ends first */
        if (zr_loader_close(lh->loader))
                lhandle_gone(lh);
}

zr_loader *zr_lhandle_loader(const zr_lhandle *lh) {
        return lh->loader;
}

uint32_t zr_lhandle_id(const zr_lhandle *lh) {
        return lh->id;
}

zr_session *zr_lhandle_session(const zr_lhandle *lh) {
        return lh->session;
}

uint32_t zr_lhandle_nentries(const zr_lhandle *lh) {
        return lh->nentries;
}

zr_entry *zr_lhandle_entry(const zr_lhandle *lh, uint32_t i) {
        return i < lh->nentries ? lh->entries[i] : NULL;
}

zr_ltrack **zr_lhandle_track(zr_lhandle *lh) {
        return &lh->track;
}

uint64_t zr_lhandle_ring_bytes(const zr_lhandle *lh) {
        return lh->ring_bytes;
}

void zr_lhandle_put_status(zr_lhandle *lh, zr_wire_writer *w, pid_t pid) {
        zr_loader_counters k;
        zr_loader_counters_get(lh->loader, &k);
        zr_wire_begin_map(w, NULL);
        zr_wire_put_u64(w, "pid", pid > 0 ? (uint64_t)pid : 0);
        zr_wire_put_u64(w, "loader", lh->id);
        zr_wire_put_str(w, "sampler", zr_sampler_mode_name(lh->mode));
        zr_wire_put_u64(w, "batch_size", lh->batch_size);
        zr_wire_put_u64(w, "streams", lh->nstreams);
        zr_wire_put_u64(w, "step", k.step);
        zr_wire_put_u64(w, "batches", k.batches);
        zr_wire_put_u64(w, "gathers", k.gathers);
        zr_wire_put_u64(w, "hits", k.hits);
        zr_wire_put_u64(w, "misses", k.misses);
        zr_wire_put_u64(w, "bytes", k.bytes);
        zr_wire_put_u64(w, "evictions", k.evictions);
        zr_wire_put_u64(w, "shared", k.shared);
        zr_wire_put_u64(w, "io_waits", k.io_waits);
        zr_wire_put_u64(w, "depth", k.depth);
        zr_wire_put_u64(w, "depth_raises", k.depth_raises);
        zr_lview_put_status(lh, w);
        zr_wire_end(w);
}

/* ---- events -------------------------------------------------------------- */

static void send_event(zr_lhandle *lh, const zr_loader_event *ev) {
        zr_wire_writer w;
        int fd = -1;
        zr_wire_writer_init(&w);
        if (ev->kind == ZR_LOADER_EVENT_RING) {
                /* the client maps it; a descriptor we cannot duplicate would
                 * leave it unable to read the batches that name the ring */
                fd = fcntl(ev->fd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0) {
                        /* end the loader here, as a shutdown does: nothing of
                         * it is sent after this END */
                        int code = errno;
                        zr_loader_counters k;
                        zr_wire_writer_destroy(&w);
                        zr_log(LOG_ERR, "loader %u: passing ring %u: %s", lh->id, ev->ring,
                               strerror(code));
                        zr_loader_stop(lh->loader, code, "the daemon could not pass a ring");
                        zr_loader_counters_get(lh->loader, &k);
                        zr_loader_event end = {.kind = ZR_LOADER_EVENT_END, .step = k.step,
                                               .code = code,
                                               .message = "the daemon could not pass a ring"};
                        send_event(lh, &end);
                        return;
                }
                zr_wire_writer_begin_message(&w, "ring", false, 0);
                zr_wire_put_u64(&w, "loader", lh->id);
                zr_wire_put_u64(&w, "ring", ev->ring);
                zr_wire_put_u64(&w, "slots", ev->slots);
                zr_wire_put_u64(&w, "slot_bytes", ev->slot_bytes);
                zr_wire_put_u64(&w, "ring_bytes", ev->ring_bytes);
        } else if (ev->kind == ZR_LOADER_EVENT_RING_CLOSE) {
                zr_wire_writer_begin_message(&w, "ring_close", false, 0);
                zr_wire_put_u64(&w, "loader", lh->id);
                zr_wire_put_u64(&w, "ring", ev->ring);
        } else if (ev->kind == ZR_LOADER_EVENT_WAKE) {
                zr_wire_writer_begin_message(&w, "wake", false, 0);
                zr_wire_put_u64(&w, "loader", lh->id);
        } else if (ev->kind == ZR_LOADER_EVENT_BATCH) {
                zr_wire_writer_begin_message(&w, "batch", false, 0);
                zr_wire_put_u64(&w, "loader", lh->id);
                zr_wire_put_u64(&w, "ring", ev->ring);
                zr_wire_put_u64(&w, "slot", ev->slot);
                zr_wire_put_u64(&w, "step", ev->step);
                zr_wire_begin_array(&w, "streams");
                for (size_t i = 0; i < ev->nstreams; i++) {
                        const zr_loader_stream_batch *sb = &ev->streams[i];
                        zr_wire_begin_map(&w, NULL);
                        zr_wire_put_u64(&w, "offset", sb->offset);
                        zr_wire_put_u64(&w, "bytes", sb->bytes);
                        if (sb->skipped)
                                zr_wire_put_u64(&w, "skipped", sb->skipped);
                        if (sb->offsets) {
                                zr_wire_put_u64s(&w, "offsets", sb->offsets, ev->batch_size);
                                zr_wire_put_u64s(&w, "lengths", sb->lengths, ev->batch_size);
                                zr_wire_put_u64s(&w, "shapes", sb->shapes, sb->shape_words);
                        }
                        zr_wire_end(&w);
                }
                zr_wire_end(&w);
                if (lh->indices && ev->indices)
                        zr_wire_put_u64s(&w, "indices", ev->indices, ev->batch_size);
                if (lh->provenance && ev->sources)
                        zr_wire_put_bin(&w, "source", ev->sources, ev->batch_size);
        } else {
                const char *name = zr_error_code_name(ev->code);
                lh->ended = true;
                zr_wire_writer_begin_message(&w, "loader_end", false, 0);
                zr_wire_put_u64(&w, "loader", lh->id);
                zr_wire_put_u64(&w, "step", ev->step);
                zr_wire_put_u64(&w, "code", (uint64_t)ev->code);
                if (name)
                        zr_wire_put_str(&w, "name", name);
                zr_wire_put_str(&w, "message", ev->message ? ev->message : "");
                if (ev->code == ZR_E_BUFFER)
                        zr_wire_put_u64(&w, "needed", ev->needed);
                zr_log(LOG_INFO, "loader %u ends at step %llu: %s: %s", lh->id,
                       (unsigned long long)ev->step, name ? name : "?",
                       ev->message ? ev->message : "");
        }
        zr_session_send_event(lh->session, &w, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
        zr_wire_writer_destroy(&w);
}

void zr_lhandle_shutdown(zr_lhandle *lh) {
        if (lh->ended)
                return;
        zr_loader_counters k;
        zr_loader_stop(lh->loader, ZR_E_SHUTDOWN, "the daemon is shutting down");
        zr_loader_counters_get(lh->loader, &k);
        /* The session closes after this: nothing of this loader is sent after the
         * END, so its step is the first that will not be announced. */
        zr_loader_event ev = {.kind = ZR_LOADER_EVENT_END, .step = k.step,
                              .code = ZR_E_SHUTDOWN, .message = "the daemon is shutting down"};
        send_event(lh, &ev);
}

void zr_server_loader_events(zr_server *s) {
        zr_loader *l;
        zr_loader_event ev;
        void *gone;
        while (zr_loader_engine_next(s->loaders, &l) > 0) {
                zr_lhandle *lh = zr_loader_userdata(l);
                while (zr_loader_poll(l, &ev) > 0)
                        if (!lh->ended && !zr_session_gone(lh->session))
                                send_event(lh, &ev);
        }
        while (zr_loader_engine_gone(s->loaders, &gone) > 0)
                lhandle_gone(gone);
}

void zr_server_loaders_wait_gone(zr_server *s) {
        while (zr_loader_engine_wait_gone(s->loaders) > 0)
                zr_server_loader_events(s);
}

void zr_server_dataset_mutated(zr_server *s, zr_entry *e) {
        if (s->loaders)
                zr_loader_engine_drop_dataset(s->loaders, zr_entry_id(e));
}

/* ---- LOADER_OPEN, LOADER_CLOSE ------------------------------------------ */

/* Whether the engine groups a and b: its key (loader.h, "Shared work"). The
 * streams' generations are not compared: a loader of an older generation ends
 * at its next gather, and counting it as a member only refuses more. */
static bool same_group(const zr_lhandle *a, const zr_lhandle *b) {
        return zr_loader_same_key(a->loader, b->loader, 0);
}

/* The uid of another user whose loader shares a group with lh, or -1. */
static long long other_uid_in_group(zr_server *srv, const zr_lhandle *lh, uid_t uid) {
        for (zr_session *c = srv->sessions; c; c = zr_session_next(c)) {
                if (zr_session_uid(c) == uid || zr_session_gone(c))
                        continue;
                const zr_handles *t = zr_session_handles(c);
                for (uint32_t i = 0; i < t->n; i++)
                        if (t->v[i].type == ZR_HANDLE_LOADER && same_group(lh, t->v[i].loader))
                                return (long long)zr_session_uid(c);
        }
        return -1;
}

/* An optional uint field that must lie in min..max (`code` otherwise); *ret
 * is left as it is when the field is missing. */
static int get_opt_u32(zr_request *rq, const char *field, uint32_t min, uint32_t max, int code,
                       uint32_t *ret) {
        zr_wire_error werr = {0};
        uint64_t v;

        if (!zr_wire_find(rq->root, field))
                return 0;
        if (zr_wire_get_u64(rq->root, field, &v, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (v < min || v > max)
                return zr_request_fail(rq, code, "%s %llu is out of range: %u..%u", field,
                                       (unsigned long long)v, min, max);
        *ret = (uint32_t)v;
        return 0;
}

int zr_request_take_pack(zr_request *rq, const msgpack_object *item, const char *what,
                         zr_pack_params *ret) {
        zr_wire_error werr = {0};
        const msgpack_object *m;
        char mode[16] = "concat";
        uint64_t v;

        if (!zr_request_has_feature(rq, ZR_FEATURE_PACK))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "%s: field 'pack': the \"pack\" "
                                       "feature is not in force on this connection", what);
        if (zr_wire_get_map(item, "pack", &m, &werr) < 0 ||
            zr_wire_get_u64(m, "seq_len", &ret->seq_len, &werr) < 0 ||
            (zr_wire_find(m, "mode") && zr_wire_get_str_copy(m, "mode", mode, sizeof(mode),
                                                             &werr) < 0) ||
            (zr_wire_find(m, "window") && zr_wire_get_u64(m, "window", &ret->window, &werr) < 0))
                return zr_request_fail(rq, ZR_E_PROTO, "%s.pack: %s", what, werr.message);
        if (strcmp(mode, "concat") == 0)
                ret->mode = ZR_PACK_CONCAT;
        else if (strcmp(mode, "best_fit") == 0)
                ret->mode = ZR_PACK_BEST_FIT;
        else
                return zr_request_fail(rq, ZR_E_PROTO, "%s.pack: mode '%s' is unknown "
                                       "(concat, best_fit)", what, mode);
        if (ret->mode == ZR_PACK_BEST_FIT && zr_wire_find(m, "window") && ret->window == 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s.pack: window 0: a window holds at "
                                       "least one document", what);
        if (zr_wire_find(m, "eos_id")) {
                if (zr_wire_get_u64(m, "eos_id", &v, &werr) < 0 || v > INT64_MAX)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.pack: eos_id: %s", what,
                                               werr.message[0] ? werr.message : "out of range");
                ret->has_eos = 1;
                ret->eos_id = (int64_t)v;
        }
        if (zr_wire_find(m, "pad_id")) {
                if (zr_wire_get_u64(m, "pad_id", &v, &werr) < 0 || v > INT64_MAX)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.pack: pad_id: %s", what,
                                               werr.message[0] ? werr.message : "out of range");
                ret->pad_id = (int64_t)v;
        }
        return 0;
}

/* Two numbers lo <= hi of an image map's array field `key` into v. */
static int image_pair(zr_request *rq, const msgpack_object *m, const char *what, const char *key,
                      double v[2]) {
        const msgpack_object *a;
        uint32_t n;
        zr_wire_error werr = {0};

        if (!zr_wire_find(m, key))
                return 0;
        if (zr_wire_get_array(m, key, &a, &n, &werr) < 0 || n != 2)
                return zr_request_fail(rq, ZR_E_PROTO, "%s.image: field '%s': %s", what, key,
                                       werr.message[0] ? werr.message : "expected two numbers");
        if (zr_wire_number(&a[0], key, &v[0], &werr) < 0 ||
            zr_wire_number(&a[1], key, &v[1], &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s.image: %s", what, werr.message);
        return 0;
}

/* A stream map's `image` (feature "image", PROTOCOL.md section 10, "Image
 * streams") into *img and *skip: the engine checks the values against the
 * stream's store at open (imgstream.c). */
static int take_image(zr_request *rq, const msgpack_object *item, const char *what,
                      zr_image_params *img, int *skip) {
        const msgpack_object *m, *sz;
        zr_wire_error werr = {0};
        uint32_t n;
        bool flip = false;
        char word[24];
        int r;

        if (!zr_request_has_feature(rq, ZR_FEATURE_IMAGE))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "%s: field 'image': the \"image\" "
                                       "feature is not in force on this connection", what);
        if (zr_wire_get_map(item, "image", &m, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s: %s", what, werr.message);
        *img = (zr_image_params){ .aug = { .crop = ZR_CROP_NONE, .scale = { 0.08, 1.0 },
                                           .ratio = { 3.0 / 4.0, 4.0 / 3.0 }, .fraction = 0.875 },
                                  .native = true, .channels = 3 };
        *skip = 0;
        if (zr_wire_find(m, "size")) {
                if (zr_wire_get_array(m, "size", &sz, &n, &werr) < 0 || n != 2 ||
                    sz[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
                    sz[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
                    sz[0].via.u64 > ZR_IMAGE_OUT_SIDE_MAX || sz[1].via.u64 > ZR_IMAGE_OUT_SIDE_MAX)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.image: field 'size': expected "
                                               "[height, width], each 1..%u", what,
                                               ZR_IMAGE_OUT_SIDE_MAX);
                img->aug.out_h = (uint32_t)sz[0].via.u64;
                img->aug.out_w = (uint32_t)sz[1].via.u64;
                img->native = false;
        }
        if (zr_wire_find(m, "crop")) {
                if (zr_wire_get_str_copy(m, "crop", word, sizeof(word), &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.image: %s", what, werr.message);
                if (strcmp(word, "random_resized") == 0)
                        img->aug.crop = ZR_CROP_RANDOM_RESIZED;
                else if (strcmp(word, "center") == 0)
                        img->aug.crop = ZR_CROP_CENTER;
                else if (strcmp(word, "none") != 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.image: crop '%s' (random_resized, "
                                               "center, none)", what, word);
        }
        if (zr_wire_find(m, "on_error")) {
                if (zr_wire_get_str_copy(m, "on_error", word, sizeof(word), &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.image: %s", what, werr.message);
                if (strcmp(word, "skip") == 0)
                        *skip = 1;
                else if (strcmp(word, "raise") != 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s.image: on_error '%s' (raise, "
                                               "skip)", what, word);
        }
        if ((zr_wire_find(m, "flip") && zr_wire_get_bool(m, "flip", &flip, &werr) < 0) ||
            (zr_wire_find(m, "channels") && zr_wire_get_u32(m, "channels", &img->channels, &werr) < 0) ||
            (zr_wire_find(m, "max_pixels") &&
             zr_wire_get_uint(m, "max_pixels", ZR_IMAGE_PIXELS_MAX, &img->max_pixels, &werr) < 0) ||
            (zr_wire_find(m, "fraction") && zr_wire_get_f64(m, "fraction", &img->aug.fraction, &werr) < 0))
                return zr_request_fail(rq, ZR_E_PROTO, "%s.image: %s", what, werr.message);
        img->aug.flip = flip;
        if ((r = image_pair(rq, m, what, "scale", img->aug.scale)) < 0 ||
            (r = image_pair(rq, m, what, "ratio", img->aug.ratio)) < 0)
                return r;
        return 0;
}

/* The streams of one source (or of a plain loader), items[0..n), into
 * streams[0..n) and lh's references; `what` names them in messages
 * ("streams", "sources[2].streams"). Stream names are copied into names. */
static int take_streams(zr_request *rq, zr_lhandle *lh, const msgpack_object *items, uint32_t n,
                        const char *what, zr_loader_stream *streams, char (*names)[48],
                        zr_image_params *imgs) {
        zr_wire_error werr = {0};

        if (n < 1 || n > ZR_STREAMS_MAX)
                return zr_request_fail(rq, ZR_E_PROTO, "field '%s': %u streams, 1..%d", what, n,
                                       ZR_STREAMS_MAX);
        for (uint32_t i = 0; i < n; i++) {
                uint32_t hid;
                uint64_t cap = 0;
                if (zr_wire_get_u32(&items[i], "handle", &hid, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s[%u]: %s", what, i, werr.message);
                for (uint32_t j = 0; j < i; j++) {
                        uint32_t other;
                        zr_wire_get_u32(&items[j], "handle", &other, NULL);
                        if (other == hid)
                                return zr_request_fail(rq, ZR_E_PROTO, "%s: handle %u appears "
                                                       "twice", what, hid);
                }
                zr_handle *h = zr_request_handle(rq, "streams", hid,
                                                 ZR_HANDLE_BIT(ZR_HANDLE_DATASET));
                if (!h)
                        return -ZR_E_NO_HANDLE;
                if (zr_wire_find(&items[i], "capacity") &&
                    zr_wire_get_u64(&items[i], "capacity", &cap, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s[%u]: %s", what, i, werr.message);
                names[i][0] = 0;
                if (zr_wire_find(&items[i], "name")) {
                        /* for messages only: its first 47 bytes */
                        const char *nm;
                        size_t len;
                        if (zr_wire_get_str(&items[i], "name", &nm, &len, &werr) < 0)
                                return zr_request_fail(rq, ZR_E_PROTO, "%s[%u]: %s", what, i,
                                                       werr.message);
                        if (memchr(nm, 0, len))
                                return zr_request_fail(rq, ZR_E_PROTO, "%s[%u]: field 'name' "
                                                       "holds a NUL byte", what, i);
                        len = len < sizeof(names[i]) - 1 ? len : sizeof(names[i]) - 1;
                        memcpy(names[i], nm, len);
                        names[i][len] = 0;
                }
                int skip = 0;
                if (zr_wire_find(&items[i], "image")) {
                        char at[56];
                        snprintf(at, sizeof(at), "%s[%u]", what, i);
                        int r = take_image(rq, &items[i], at, &imgs[i], &skip);
                        if (r < 0)
                                return r;
                }
                lh->entries[lh->nentries++] = zr_entry_ref(h->entry);
                streams[i] = (zr_loader_stream){ .ds = h->entry->ds, .capacity = cap,
                                                 .name = names[i][0] ? names[i] : NULL,
                                                 .image = zr_wire_find(&items[i], "image") ?
                                                          &imgs[i] : NULL,
                                                 .image_skip = skip };
                if (zr_wire_find(&items[i], "pack")) {
                        char at[48];
                        snprintf(at, sizeof(at), "%s[%u]", what, i);
                        int r = zr_request_take_pack(rq, &items[i], at, &streams[i].pack);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* A mixture's sources (`sources`, feature "mixture") into p->sources and the
 * streams, source-major. Returns the streams per source, or a negative code. */
static int take_sources(zr_request *rq, zr_lhandle *lh, const msgpack_object *items, uint32_t n,
                        zr_loader_params *p, zr_loader_source *src, zr_loader_stream *streams,
                        char (*names)[48], zr_image_params *imgs) {
        zr_wire_error werr = {0};
        uint32_t per = 0;

        if (!zr_request_has_feature(rq, ZR_FEATURE_MIXTURE))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "field 'sources': the \"mixture\" feature "
                                       "is not in force on this connection");
        if (n < 1 || n > ZR_SOURCES_MAX)
                return zr_request_fail(rq, ZR_E_PROTO, "field 'sources': %u sources, 1..%d", n,
                                       ZR_SOURCES_MAX);
        for (uint32_t k = 0; k < n; k++) {
                const msgpack_object *st;
                uint32_t ns;
                char what[40], sampler[32];
                int r;

                src[k] = (zr_loader_source){ .mode = p->mode };
                snprintf(what, sizeof(what), "sources[%u].streams", k);
                if (zr_wire_get_array(&items[k], "streams", &st, &ns, &werr) < 0 ||
                    zr_wire_get_u32(&items[k], "weight", &src[k].weight, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "sources[%u]: %s", k, werr.message);
                if (k > 0 && ns != per)
                        return zr_request_fail(rq, ZR_E_MISALIGNED, "source %u has %u streams, "
                                               "source 0 %u: every source holds the same streams",
                                               k, ns, per);
                per = ns;
                r = take_streams(rq, lh, st, ns, what, streams + (size_t)k * ns,
                                 names + (size_t)k * ns, imgs + (size_t)k * ns);
                if (r < 0)
                        return r;
                if (zr_wire_find(&items[k], "sampler")) {
                        if (zr_wire_get_str_copy(&items[k], "sampler", sampler, sizeof(sampler),
                                                 &werr) < 0)
                                return zr_request_fail(rq, ZR_E_PROTO, "sources[%u]: %s", k,
                                                       werr.message);
                        if (zr_sampler_mode_from_name(sampler, &src[k].mode) < 0)
                                return zr_request_fail(rq, ZR_E_SAMPLER, "source %u: unknown sampler "
                                                       "'%s' (sequential, iid, cyclic, cyclic-lx157)",
                                                       k, sampler);
                }
                if (zr_wire_find(&items[k], "length")) {
                        if (zr_wire_get_u64(&items[k], "length", &src[k].length, &werr) < 0)
                                return zr_request_fail(rq, ZR_E_PROTO, "sources[%u]: %s", k,
                                                       werr.message);
                        src[k].has_length = 1;
                }
        }
        p->nsources = n;
        p->sources = src;
        return (int)per;
}

/* LOADER_OPEN's state: what the loop parsed, for the job that opens the
 * loader (its streams' locks are taken blocking, a ragged stream's records
 * sampled, the fingerprint read: never on the loop, which a mutation holding a
 * stream's lock would stall), and what the job found. */
typedef struct open_state {
        zr_lhandle *lh;                    /* until the handle takes it */
        zr_loader_params p;
        zr_loader_source src[ZR_SOURCES_MAX];
        zr_loader_stream *streams;
        char (*names)[48];
        zr_image_params *imgs;             /* image streams' decodes (streams[i].image) */
        uint32_t n, nsrc;
        char sampler[32];
        bool has_fingerprint;
        uint64_t expected, fingerprint;
} open_state;

static void open_state_free(void *p) {
        open_state *st = p;
        zr_lhandle_free(st->lh);
        free(st->streams);
        free(st->names);
        free(st->imgs);
        free(st);
}

/* On a worker: the loader, paused until the loop has its handle (its events
 * name it), and the streams' fingerprint. */
static void open_run(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        open_state *st = rq->state;
        zr_server *srv = zr_request_server(rq);
        int r;

        st->p.paused = 1;
        st->p.cancel = &rq->cancelled;
        r = zr_loader_new(srv->loaders, st->streams, st->n, &st->p, st->lh, &st->lh->loader,
                          &rq->err);
        /* the streams' fingerprint (dataset/fingerprint.h), once the length was
         * checked: a daemon that serves other records than the one the client's
         * fingerprint came from refuses */
        st->fingerprint = zr_fingerprint_streams_begin(st->n);
        for (uint32_t i = 0; r == 0 && i < st->n; i++) {
                uint64_t fp;
                zr_dataset_lock(st->streams[i].ds, false);
                r = zr_dataset_fingerprint(st->streams[i].ds, &fp, &rq->err);
                zr_dataset_unlock(st->streams[i].ds);
                if (r == 0)
                        st->fingerprint = zr_fingerprint_streams_add(st->fingerprint, fp);
        }
        rq->result = r;
}

/* On the loop: the checks that need the sessions and the accounts, the
 * handle, the reply; then the loader starts. */
static int open_finish(zr_request *rq) {
        zr_server *srv = zr_request_server(rq);
        open_state *st = rq->state;
        zr_lhandle *lh = st->lh;
        int r;

        if (!srv->rings_sealed) {
                long long other = other_uid_in_group(srv, lh, zr_request_uid(rq));
                if (other >= 0)
                        return zr_request_fail(rq, EPERM, "an identical loader of uid %lld is "
                                               "open, and this kernel cannot seal shared rings "
                                               "against writes (no F_SEAL_FUTURE_WRITE): loaders "
                                               "of different users never share rings here; use "
                                               "another seed, or a daemon of your own", other);
        }
        if (st->has_fingerprint && st->expected != st->fingerprint)
                return zr_request_fail(rq, ZR_E_STALE, "the streams' fingerprint is %016llx here, "
                                       "the client expects %016llx: this daemon serves other "
                                       "records than the one that fingerprint came from (a store "
                                       "copied at another time, changed since, or written apart)",
                                       (unsigned long long)st->fingerprint,
                                       (unsigned long long)st->expected);
        r = zr_user_charge(lh->user, ZR_USER_WORK, zr_loader_work_bytes(lh->loader), &rq->err);
        if (r < 0)
                return r;
        lh->work_bytes = zr_loader_work_bytes(lh->loader);
        /* control memory for a loader whose BATCH carries nothing but where
         * the batch lies (PROTOCOL.md, "Control memory"); counted with the ring */
        int ctl_fd = -1, fds[2] = {-1, -1};
        if (lh->ctl_wanted && !lh->indices && !lh->provenance) {
                r = zr_loader_ctl_open(lh->loader, &ctl_fd, &rq->err);
                if (r < 0)
                        return zr_request_fail(rq, -r, "%s", rq->err.message);
                if (r == 0)
                        ctl_fd = -1;
        }
        lh->ring_bytes = zr_loader_ring_bytes(lh->loader) +
                         (ctl_fd >= 0 ? zr_loader_ctl_bytes(lh->loader) : 0);
        r = zr_request_shm_reserve(rq, lh->ring_bytes);
        if (r < 0)
                return r;
        fds[0] = fcntl(zr_loader_ring_fd(lh->loader), F_DUPFD_CLOEXEC, 3);
        if (fds[0] >= 0 && ctl_fd >= 0) {
                fds[1] = fcntl(ctl_fd, F_DUPFD_CLOEXEC, 3);
                if (fds[1] < 0) {
                        int code = errno;
                        close(fds[0]);
                        fds[0] = -1;
                        errno = code;
                }
        }
        if (fds[0] < 0) {
                zr_request_shm_release(rq, lh->ring_bytes);
                return zr_request_fail(rq, errno, "passing the ring: %s", strerror(errno));
        }
        size_t nfds = ctl_fd >= 0 ? 2 : 1;
        zr_handle h = {.type = ZR_HANDLE_LOADER, .loader = lh};
        int id = zr_request_add_handle(rq, &h);
        if (id < 0) {
                close(fds[0]);
                if (fds[1] >= 0)
                        close(fds[1]);
                zr_request_shm_release(rq, lh->ring_bytes);
                return id;
        }
        st->lh = NULL; /* the handle's now */
        lh->id = (uint32_t)id;
        zr_loader *l = lh->loader;
        zr_wire_writer w;
        zr_reply_begin(rq, &w);
        zr_wire_put_u64(&w, "loader", (uint64_t)id);
        zr_wire_put_u64(&w, "ring", zr_loader_ring_id(l));
        zr_wire_put_u64(&w, "slots", zr_loader_slots(l));
        zr_wire_put_u64(&w, "slot_bytes", zr_loader_slot_bytes(l));
        zr_wire_put_u64(&w, "ring_bytes", zr_loader_ring_bytes(l));
        zr_wire_put_u64(&w, "length", zr_loader_length(l));
        zr_wire_begin_array(&w, "streams");
        for (size_t i = 0; i < zr_loader_nstreams(l); i++) {
                zr_wire_begin_map(&w, NULL);
                uint64_t segs, pos;
                zr_wire_put_u64(&w, "offset", zr_loader_stream_offset(l, i));
                zr_wire_put_u64(&w, "capacity", zr_loader_stream_capacity(l, i));
                if (st->streams[i].pack.mode != ZR_PACK_NONE) {
                        zr_pack_region_bytes(st->p.batch_size, st->streams[i].pack.seq_len,
                                             zr_dataset_schema(st->streams[i].ds)->dtype.itemsize,
                                             &segs, &pos);
                        zr_wire_put_u64(&w, "segments", segs);
                        zr_wire_put_u64(&w, "positions", pos);
                }
                const zr_image_params *img = zr_loader_stream_image(l, i);
                if (img) { /* an image stream: its batch is (B, H, W, C) uint8 */
                        uint64_t shape[3] = { img->aug.out_h, img->aug.out_w, img->channels };
                        zr_wire_put_uint_array(&w, "shape", shape, 3);
                }
                zr_wire_end(&w);
        }
        zr_wire_end(&w);
        if (zr_loader_nsources(l) > 0) {
                zr_wire_begin_array(&w, "sources");
                for (uint32_t k = 0; k < zr_loader_nsources(l); k++) {
                        zr_wire_begin_map(&w, NULL);
                        zr_wire_put_u64(&w, "length", zr_loader_source_length(l, k));
                        zr_wire_end(&w);
                }
                zr_wire_end(&w);
        }
        zr_wire_put_u64(&w, "fingerprint", st->fingerprint);
        if (nfds == 2) {
                zr_wire_begin_map(&w, "ctlring");
                zr_wire_put_u64(&w, "bytes", zr_loader_ctl_bytes(l));
                zr_wire_put_u64(&w, "entries", ZR_CTL_ENTRIES);
                zr_wire_end(&w);
        }
        zr_log(LOG_DEBUG, "pid %d opened loader %d: %s, batch %llu, %u streams, %u sources, step "
               "%llu", (int)zr_request_pid(rq), id, st->sampler,
               (unsigned long long)st->p.batch_size, lh->nstreams, st->nsrc,
               (unsigned long long)st->p.start_step);
        r = zr_reply_send(rq, &w, fds, nfds);
        /* its RING and BATCH events follow the reply, which names it */
        zr_loader_start(l);
        return r;
}

static void open_done(zr_job *job) {
        zr_request *rq = (zr_request *)job;
        int r = rq->result;

        if (zr_request_orphaned(rq)) {
                zr_request_complete(rq, 0); /* the state frees the loader */
                return;
        }
        if (r == 0)
                r = open_finish(rq);
        zr_request_complete(rq, r);
}

int zr_handle_loader_open(zr_request *rq) {
        zr_server *srv = zr_request_server(rq);
        zr_wire_error werr = {0};
        const msgpack_object *items = NULL, *srcs = NULL;
        uint32_t n = 0, nsrc = 0, total;
        zr_lhandle *lh;
        bool indices = false, provenance = false, ctl_wanted = false;
        uint32_t stride = 1;
        int r;

        open_state *st = zr_request_state(rq, sizeof(*st), open_state_free);
        if (!st)
                return -ENOMEM;
        zr_loader_params *p = &st->p;
        p->world_size = 1;
        p->prefetch = PREFETCH_DEFAULT;
        if (zr_wire_get_str_copy(rq->root, "sampler", st->sampler, sizeof(st->sampler), &werr) < 0 ||
            zr_wire_get_u64(rq->root, "batch_size", &p->batch_size, &werr) < 0 ||
            zr_wire_get_u64(rq->root, "seed", &p->seed, &werr) < 0 ||
            zr_wire_get_u64(rq->root, "start_step", &p->start_step, &werr) < 0)
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        /* one source of streams, or a mixture of sources */
        if (!zr_wire_find(rq->root, "streams") == !zr_wire_find(rq->root, "sources"))
                return zr_request_fail(rq, ZR_E_PROTO, "give either 'streams' or 'sources' (a "
                                       "mixture), not %s", zr_wire_find(rq->root, "streams") ?
                                       "both" : "neither");
        if ((zr_wire_find(rq->root, "streams") &&
             zr_wire_get_array(rq->root, "streams", &items, &n, &werr) < 0) ||
            (zr_wire_find(rq->root, "sources") &&
             zr_wire_get_array(rq->root, "sources", &srcs, &nsrc, &werr) < 0))
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (zr_sampler_mode_from_name(st->sampler, &p->mode) < 0)
                return zr_request_fail(rq, ZR_E_SAMPLER, "unknown sampler '%s' (sequential, iid, "
                                       "cyclic)", st->sampler);
        if ((r = get_opt_u32(rq, "rank", 0, UINT32_MAX, ZR_E_SAMPLER, &p->rank)) < 0 ||
            (r = get_opt_u32(rq, "world_size", 0, UINT32_MAX, ZR_E_SAMPLER, &p->world_size)) < 0 ||
            (r = get_opt_u32(rq, "prefetch", 1, ZR_PREFETCH_MAX, ZR_E_LIMIT, &p->prefetch)) < 0 ||
            (r = get_opt_u32(rq, "step_stride", 1, UINT32_MAX, ZR_E_SAMPLER, &stride)) < 0)
                return r;
        if (zr_wire_find(rq->root, "step_stride") && !zr_request_has_feature(rq, ZR_FEATURE_STRIDE))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "field 'step_stride': the \"stride\" "
                                       "feature is not in force on this connection");
        p->step_stride = stride;
        if (zr_wire_find(rq->root, "length")) {
                if (zr_wire_get_u64(rq->root, "length", &p->length, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                p->has_length = 1;
        }
        if (zr_wire_find(rq->root, "fingerprint")) {
                if (zr_wire_get_u64(rq->root, "fingerprint", &st->expected, &werr) < 0)
                        return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
                st->has_fingerprint = true;
        }
        if ((zr_wire_find(rq->root, "indices") &&
             zr_wire_get_bool(rq->root, "indices", &indices, &werr) < 0) ||
            (zr_wire_find(rq->root, "provenance") &&
             zr_wire_get_bool(rq->root, "provenance", &provenance, &werr) < 0) ||
            (zr_wire_find(rq->root, "ctlring") &&
             zr_wire_get_bool(rq->root, "ctlring", &ctl_wanted, &werr) < 0))
                return zr_request_fail(rq, ZR_E_PROTO, "%s", werr.message);
        if (ctl_wanted && !zr_request_has_feature(rq, ZR_FEATURE_CTLRING))
                return zr_request_fail(rq, ZR_E_UNKNOWN, "field 'ctlring': the \"ctlring\" "
                                       "feature is not in force on this connection");
        if (items && (n < 1 || n > ZR_STREAMS_MAX))
                return zr_request_fail(rq, ZR_E_PROTO, "field 'streams': %u streams, 1..%d",
                                       n, ZR_STREAMS_MAX);
        if (srcs && nsrc > ZR_SOURCES_MAX)
                return zr_request_fail(rq, ZR_E_PROTO, "field 'sources': %u sources, 1..%d", nsrc,
                                       ZR_SOURCES_MAX);
        if ((r = zr_request_loader_room(rq)) < 0)
                return r;
        /* room for every source's streams (each source holds at most streams_max) */
        total = srcs ? nsrc * ZR_STREAMS_MAX : n;
        st->lh = lh = calloc(1, sizeof(*lh));
        st->streams = calloc(total ? total : 1, sizeof(*st->streams));
        st->names = calloc(total ? total : 1, sizeof(*st->names));
        st->imgs = calloc(total ? total : 1, sizeof(*st->imgs));
        if (lh)
                lh->entries = calloc(total ? total : 1, sizeof(*lh->entries));
        if (!lh || !st->streams || !st->names || !st->imgs || !lh->entries)
                return zr_request_fail(rq, ENOMEM, "no memory for a loader");
        if (srcs) {
                r = take_sources(rq, lh, srcs, nsrc, p, st->src, st->streams, st->names, st->imgs);
                if (r < 0)
                        return r;
                n = (uint32_t)r * nsrc;
        } else {
                r = take_streams(rq, lh, items, n, "streams", st->streams, st->names, st->imgs);
                if (r < 0)
                        return r;
        }
        st->n = n;
        st->nsrc = nsrc;
        /* a store another program changed on disk since the daemon opened it
         * read-only is never served (store.h, zr_store_check_unchanged()) */
        for (uint32_t i = 0; i < n; i++) {
                zr_error err = {0};
                r = zr_store_check_unchanged(zr_dataset_store(st->streams[i].ds), &err);
                if (r < 0)
                        return zr_request_fail(rq, -r, "stream %u%s%s%s: %s", i,
                                               st->names[i][0] ? " '" : "", st->names[i],
                                               st->names[i][0] ? "'" : "", err.message);
        }
        p->ring_bytes_max = zr_request_shm_left(rq);
        if (p->ring_bytes_max == 0)
                return zr_request_fail(rq, ZR_E_LIMIT, "no shared memory budget left for a ring");
        if (zr_users_get(srv->users, zr_request_uid(rq), &lh->user) < 0)
                return zr_request_fail(rq, ENOMEM, "no memory for a loader");
        p->work_bytes_max = zr_user_room(lh->user, ZR_USER_WORK);
        if (p->work_bytes_max == 0)
                return zr_request_fail(rq, ZR_E_LIMIT, "no working memory left for a loader "
                                       "(max-work-mem-per-uid, max-work-mem-total)");
        lh->session = zr_request_session(rq);
        lh->nstreams = srcs ? n / nsrc : n;
        lh->batch_size = p->batch_size;
        lh->seed = p->seed;
        lh->rank = p->rank;
        lh->world_size = p->world_size;
        lh->mode = p->mode;
        lh->indices = indices;
        lh->provenance = provenance;
        lh->ctl_wanted = ctl_wanted;
        return zr_request_submit(rq, open_run, open_done);
}

int zr_handle_loader_close(zr_request *rq) {
        zr_request_close_handle(rq, rq->handle->id);
        return zr_reply_empty(rq);
}

void zr_handle_release(zr_request *rq, const char *bad) {
        zr_wire_error werr = {0};
        uint32_t id, ring, slot;
        zr_error err = {0};
        zr_handle *h;

        if (bad) {
                zr_request_fault(rq, ZR_E_PROTO, "%s", bad);
                return;
        }
        if (rq->nfds > 0) {
                zr_request_fault(rq, ZR_E_BAD_FD, "release takes no descriptors, %u came",
                                 rq->nfds);
                return;
        }
        if (zr_wire_get_u32(rq->root, "loader", &id, &werr) < 0 ||
            zr_wire_get_u32(rq->root, "ring", &ring, &werr) < 0 ||
            zr_wire_get_u32(rq->root, "slot", &slot, &werr) < 0) {
                zr_request_fault(rq, ZR_E_PROTO, "release: %s", werr.message);
                return;
        }
        h = zr_request_handle(rq, "loader", id, ZR_HANDLE_BIT(ZR_HANDLE_LOADER));
        if (!h) {
                zr_request_fault(rq, ZR_E_NO_HANDLE, "release: %s", rq->err.message);
                return;
        }
        /* what the client says of the batch (PROTOCOL.md, RELEASE): telemetry */
        zr_loader_take take = {0};
        take.has_wait = zr_wire_find(rq->root, "wait_ns") &&
                        zr_wire_get_u64(rq->root, "wait_ns", &take.wait_ns, NULL) == 0;
        take.has_taken = zr_wire_find(rq->root, "taken_ns") &&
                         zr_wire_get_u64(rq->root, "taken_ns", &take.taken_ns, NULL) == 0;
        if (zr_loader_release_report(h->loader->loader, ring, slot, &take, &err) < 0)
                zr_request_fault(rq, err.code ? err.code : ZR_E_PROTO, "release: %s",
                                 err.message);
}

void zr_handle_doorbell(zr_request *rq, const char *bad) {
        zr_wire_error werr = {0};
        uint32_t id;
        zr_handle *h;

        if (bad) {
                zr_request_fault(rq, ZR_E_PROTO, "%s", bad);
                return;
        }
        if (rq->nfds > 0) {
                zr_request_fault(rq, ZR_E_BAD_FD, "doorbell takes no descriptors, %u came",
                                 rq->nfds);
                return;
        }
        if (zr_wire_get_u32(rq->root, "loader", &id, &werr) < 0) {
                zr_request_fault(rq, ZR_E_PROTO, "doorbell: %s", werr.message);
                return;
        }
        h = zr_request_handle(rq, "loader", id, ZR_HANDLE_BIT(ZR_HANDLE_LOADER));
        if (!h) {
                zr_request_fault(rq, ZR_E_NO_HANDLE, "doorbell: %s", rq->err.message);
                return;
        }
        /* a loader without control memory has nothing to ring: ignored */
        zr_loader_ctl_doorbell(h->loader->loader);
}
