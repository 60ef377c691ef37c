/* libzrc-kit.h: what the files of the libzrc suite share (test-libzrc.c:
 * connections, datasets, sets, status, many clients, descriptors;
 * libzrc-loaders.c: loaders, resume, staleness and rings shared by a group;
 * libzrc-layouts.c: ragged layouts and CONVERT;
 * libzrc-mixture.c: loaders over mixtures, which steps saw a record).
 * One daemon serves the whole suite; every test makes its own stores under
 * its directory.
 */
#ifndef ZR_TESTS_LIBZRC_KIT_H
#define ZR_TESTS_LIBZRC_KIT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon.h"
#include "zrc.h"

/* The suite's daemon (started by main()). */
extern tl_daemon daemon_;

/* A new connection to it (asserted). */
zrc_conn *conn(void);
/* Its directory's `name` (a static buffer). */
const char *path(const char *name);
/* A dense <f4 (4, 5) record whose values identify it. */
void fill_record(float *rec, uint64_t id);
/* A dense <f4 (4, 5) store `name` of n records 0..n-1, open and writable. */
zrc_dataset *make_dense(zrc_conn *c, const char *name, zrc_codec codec, uint64_t n,
                        const void *dict, size_t dict_size);
/* The same with record i of id first_id + i. */
zrc_dataset *make_dense_ids(zrc_conn *c, const char *name, zrc_codec codec, uint64_t n,
                            uint64_t first_id, const void *dict, size_t dict_size);
/* Reads idx[0..n) and checks the records are ids[0..n) (idx when NULL). */
void check_dense(zrc_dataset *d, const uint64_t *idx, size_t n, const uint64_t *ids);
/* Marks in `set` (4096 entries) the descriptors open now; returns how many. */
int fds_open(bool *set);

/* What a client thread of a test reports to it: how often it failed, and the
 * library's message of the last failure. */
typedef struct kit_failures {
        int count;
        char message[ZRC_ERROR_MESSAGE_MAX];
} kit_failures;

/* Counts a failure of c, keeping its message (c NULL: no connection, no
 * message). */
void kit_fail(kit_failures *f, zrc_conn *c);
/* A thread's connection to the suite's daemon, or NULL (a failure counted). */
zrc_conn *kit_thread_connect(kit_failures *f);
/* The test's check of thread i's failures. */
#define KIT_NO_FAILURES(what, i, f)                                                   \
        ck_assert_msg((f).count == 0, "%s %d: %d failures: %s", (what), (i), (f).count, \
                      (f).message)

/* Skips a loader test (passing) on a daemon without the feature. */
#define NEED_LOADER(c)                                                                  \
        do {                                                                            \
                if (!zrc_has_feature((c), "loader")) {                                  \
                        printf("note: the daemon has no \"loader\" feature: skipped\n"); \
                        zrc_disconnect(c);                                              \
                        return;                                                         \
                }                                                                       \
        } while (0)

/* The suite's loader cases (libzrc-loaders.c), and its mixtures and which
 * steps saw a record (libzrc-mixture.c). */
void libzrc_add_loaders(TCase *tc);
/* Its ragged layouts: any ndim, loaderx 1.5.7's, byte stores, CONVERT
 * (libzrc-layouts.c). */
void libzrc_add_layouts(TCase *tc);
void libzrc_add_mixtures(TCase *tc);

#endif
