/* lxwrite.c: loaderx 1.5.7's fixture stores, written from the layout (lxwrite.h). */
#include "lxwrite.h"
#include "records.h"

#include <check.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define ZDICT_STATIC_LINKING_ONLY
#include <zdict.h>
#include <zstd.h>

#include "lxdata.h"

#define LXW_CHUNK ((off_t)1 << 32)

enum lxw_kind { LXW_DENSE, LXW_RAGGED, LXW_BYTES };

/* One record of `kind` and id, into a new buffer. */
static uint8_t *lxw_record(enum lxw_kind kind, uint64_t id, size_t *len) {
        uint8_t *b;

        if (kind == LXW_DENSE) {
                *len = LX_DENSE_ITEMS * 4;
                b = malloc(*len);
                lx_dense_record(id, (int32_t *)(void *)b);
        } else if (kind == LXW_RAGGED) {
                *len = lx_ragged_items(id) * 4;
                b = malloc(*len);
                lx_ragged_record(id, (int32_t *)(void *)b);
        } else {
                *len = lx_bytes_len(id);
                b = malloc(*len);
                memset(b, (int)(id % 251), *len);
        }
        if (!b) /* per record: assert only on failure */
                ck_abort_msg("out of memory");
        return b;
}

static void lxw_le32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static void lxw_pwrite(int fd, const void *p, size_t n, off_t at) {
        if (pwrite(fd, p, n, at) != (ssize_t)n)
                ck_abort_msg("pwrite of %zu bytes failed", n);
}

/* A dictionary trained on every record, as train_dict does (tier "fast": 32 KiB). */
static void *lxw_dict(enum lxw_kind kind, uint64_t n, size_t *len) {
        size_t *sizes = malloc(n * sizeof(size_t)), total = 0, got;
        uint8_t *samples = malloc(n * 256), *dict = malloc(32 << 10);

        ck_assert(sizes && samples && dict);
        for (uint64_t i = 0; i < n; i++) {
                uint8_t *r = lxw_record(kind, i, &sizes[i]);
                memcpy(samples + total, r, sizes[i]);
                total += sizes[i];
                free(r);
        }
        got = ZDICT_trainFromBuffer(dict, 32 << 10, samples, sizes, (unsigned)n);
        if (ZDICT_isError(got)) { /* too little to train on: raw content is a dictionary too */
                got = total < 4096 ? total : 4096;
                memcpy(dict, samples, got);
        }
        free(sizes);
        free(samples);
        *len = got;
        return dict;
}

static void pack_str(msgpack_packer *pk, const char *s) {
        msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void lxw_schema(int fd, enum lxw_kind kind, const char *codec, const uint64_t *ids,
                       uint64_t count, int extra) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int sfd;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map(&pk, 6 + (extra != 0));
        pack_str(&pk, "format");
        pack_str(&pk, "loaderx-zrecord");
        pack_str(&pk, "version");
        msgpack_pack_uint32(&pk, 1);
        pack_str(&pk, "kind");
        pack_str(&pk, kind == LXW_DENSE ? "dense" : "ragged");
        pack_str(&pk, "dtype");
        pack_str(&pk, "<i4");
        pack_str(&pk, "codec");
        pack_str(&pk, codec);
        if (kind == LXW_DENSE) {
                pack_str(&pk, "item_shape");
                msgpack_pack_array(&pk, 2);
                msgpack_pack_uint32(&pk, 4);
                msgpack_pack_uint32(&pk, 4);
        } else {
                pack_str(&pk, "shapes");
                msgpack_pack_array(&pk, count);
                for (uint64_t i = 0; i < count; i++) {
                        msgpack_pack_array(&pk, lx_shapes[ids[i] % 5].ndim);
                        for (uint32_t k = 0; k < lx_shapes[ids[i] % 5].ndim; k++)
                                msgpack_pack_uint64(&pk, lx_shapes[ids[i] % 5].dims[k]);
                }
        }
        if (extra) {
                pack_str(&pk, "source");
                pack_str(&pk, "make_loaderx_stores");
        }
        sfd = openat(fd, "schema.msgpack", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(sfd, 0);
        lxw_pwrite(sfd, sb.data, sb.size, 0);
        close(sfd);
        msgpack_sbuffer_destroy(&sb);
}

/* One store: n records of `kind` (ids 0..n-1), then the swap-last delete of
 * del[0..ndel) in the table only; `schema` 0 for a raw Zrecord store. */
static void lxw_store(int dirfd, const char *name, enum lxw_kind kind, unsigned codec,
                      uint64_t n, const uint64_t *del, size_t ndel, int schema, int extra) {
        static const char *const names[3] = { "raw", "zstd", "zstd_dict" };
        uint8_t hdr[32] = { 'Z', 'R', 'E', 'C', 3, (uint8_t)codec }, (*loc)[16];
        uint64_t *ids = malloc(n * sizeof(uint64_t)), count = n, off = 0;
        ZSTD_CCtx *cc = ZSTD_createCCtx();
        ZSTD_CDict *cd = NULL;
        int fd, lf, cf;

        ck_assert_int_eq(mkdirat(dirfd, name, 0755), 0);
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        loc = calloc(n, 16);
        ck_assert(ids && loc && cc);
        if (codec == 2) {
                size_t dlen;
                void *dict = lxw_dict(kind, n, &dlen);
                int df = openat(fd, "dict.zr", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

                ck_assert_int_ge(df, 0);
                lxw_pwrite(df, dict, dlen, 0);
                close(df);
                cd = ZSTD_createCDict(dict, dlen, 19);
                ck_assert_ptr_nonnull(cd);
                free(dict);
        }
        cf = openat(fd, "0.chunk", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        lf = openat(fd, "0.loc", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        ck_assert(cf >= 0 && lf >= 0);
        ck_assert_int_eq(ftruncate(cf, LXW_CHUNK), 0);
        ck_assert_int_eq(ftruncate(lf, LXW_CHUNK), 0);
        for (uint64_t i = 0; i < n; i++) {
                size_t len, phys;
                uint8_t *r = lxw_record(kind, i, &len), *z = malloc(ZSTD_compressBound(len));

                if (!z)
                        ck_abort_msg("out of memory");
                if (codec == 0) {
                        memcpy(z, r, len);
                        phys = len;
                } else if (codec == 1) {
                        phys = ZSTD_compressCCtx(cc, z, ZSTD_compressBound(len), r, len, 3);
                } else {
                        phys = ZSTD_compress_usingCDict(cc, z, ZSTD_compressBound(len), r, len, cd);
                }
                if (ZSTD_isError(phys))
                        ck_abort_msg("zstd: %s", ZSTD_getErrorName(phys));
                lxw_pwrite(cf, z, phys, (off_t)off);
                lxw_le32(loc[i], (uint32_t)off);
                lxw_le32(loc[i] + 4, (uint32_t)phys);
                lxw_le32(loc[i] + 8, (uint32_t)len);
                lxw_le32(loc[i] + 12, 0);
                off += phys;
                ids[i] = i;
                free(r);
                free(z);
        }
        /* delete: the table only, as loaderx's swap-last does it */
        if (ndel) {
                uint64_t pos[LX_DENSE_N];
                for (uint64_t i = 0; i < n; i++)
                        pos[i] = i;
                count = tl_swap_last(pos, n, del, ndel);
                tl_swap_last(ids, n, del, ndel);
                for (uint64_t i = 0; i < count; i++)
                        if (pos[i] != i)
                                memcpy(loc[i], loc[pos[i]], 16);
        }
        lxw_pwrite(lf, loc, count * 16, 0);
        lxw_le32(hdr + 6, 0);                       /* tail_chunk */
        lxw_le32(hdr + 10, (uint32_t)off);          /* tail_offset */
        lxw_le32(hdr + 14, (uint32_t)count);        /* length, low and high halves */
        lxw_le32(hdr + 18, 0);
        {
                int mf = openat(fd, "meta.zr", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                ck_assert_int_ge(mf, 0);
                lxw_pwrite(mf, hdr, 32, 0);
                close(mf);
        }
        if (schema)
                lxw_schema(fd, kind, names[codec], ids, count, extra);
        ZSTD_freeCDict(cd);
        ZSTD_freeCCtx(cc);
        free(loc);
        free(ids);
        close(cf);
        close(lf);
        close(fd);
}

void lxw_all(int dirfd) {
        static const char *const dense[3] = { "dense-raw", "dense-zstd", "dense-zstd_dict" };
        static const char *const ragged[3] = { "ragged-raw", "ragged-zstd", "ragged-zstd_dict" };

        for (unsigned c = 0; c < 3; c++) {
                lxw_store(dirfd, dense[c], LXW_DENSE, c, LX_DENSE_N, NULL, 0, 1, c == 1);
                lxw_store(dirfd, ragged[c], LXW_RAGGED, c, LX_RAGGED_N, NULL, 0, 1, 0);
        }
        lxw_store(dirfd, "bytes-zstd", LXW_BYTES, 1, LX_BYTES_N, NULL, 0, 0, 0);
        lxw_store(dirfd, "dense-deleted", LXW_DENSE, 1, LX_DENSE_N, lx_lx_delete, LX_NLX_DELETE, 1, 0);
        /* loaderx compacted this one; the records' bytes in place are equally valid */
        lxw_store(dirfd, "ragged-compacted", LXW_RAGGED, 1, LX_RAGGED_N, lx_lx_delete, LX_NLX_DELETE,
                  1, 0);
}
