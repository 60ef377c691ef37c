/* hostile.h: what the files of the hostile test share (hostile.c: the
 * daemon, the stores, the well-behaved checker and the baseline every case
 * must come back to, main; hostile-fds.c: memfds written to and descriptors
 * of the wrong kind; hostile-flow.c: pipelining, connections, shared memory,
 * held slots, cut frames; hostile-vanish.c: forks, clients that vanish with a
 * request in flight, files truncated under the daemon).
 */
#ifndef ZR_TESTS_HOSTILE_H
#define ZR_TESTS_HOSTILE_H

#include <stdbool.h>
#include <stdint.h>

#include "harden.h"
#include "zrc.h"

#define N_RECORDS 2048
#define REC_BYTES 256
#define MAX_CLIENTS 48
#define SHM_MAX (96 << 20) /* --max-shm: three rings of 64 x 512 KiB fit, a fourth does not */
/* What RSS may differ from the baseline after a case: allocator retention, not
 * a leak. The largest is the pipelined big-replies case: ~20 MiB of replies
 * queued for a client that does not read are freed in the loop thread's arena,
 * of which 3-10 MiB stay (measured). Rings, buffers and sessions are held to
 * their baseline exactly through the shared-memory total, descriptors and
 * mappings. */
#define RSS_SLACK_KIB (12 * 1024)
#define RAG_RECORDS 40000 /* 8-byte ragged records: a READ of all is a ~960 KB reply */

/* The daemon under test, the stores' paths, the monitor's connection (STATUS)
 * and the daemon's /proc figures before the first case. */
extern tl_daemon D;
extern char hd_path[300], scratch_path[300], victim_path[300], victimz_path[300], rag_path[300];
extern zrc_conn *monitor;
extern hd_proc base;
/* The RSS a case must come back to: the baseline (0), or after the vanish case
 * the level it left (see case_vanish()). */
extern uint64_t rss_ref_kib;

/* True if data holds records idx[0..n) of REC_BYTES. */
bool dense_batch_ok(const void *data, const uint64_t *idx, uint64_t n);
/* The checker: waits until it has verified n more batches (an event, with a
 * bound); the batches it verified so far. */
bool checker_progress(uint64_t n);
uint64_t checker_batches(void);
/* The shared memory the daemon holds (STATUS). */
uint64_t status_shm(void);
/* After a case: waits until the daemon is back at the baseline and checks it
 * (descriptors, mappings, RSS, shared memory, checker progress); prints the
 * case's figures; returns the daemon's RSS. */
uint64_t settle(const char *name, uint64_t shm0, uint64_t batches_before);
/* LOADER_OPEN over a raw connection (sequential, 32 records a batch): the
 * loader number with its ring's memfd and sizes, or a negative value. */
int raw_loader_open(int fd, int64_t h, uint32_t prefetch, uint64_t id, int *ret_ring,
                    uint64_t *ret_ring_bytes, uint64_t *ret_slot_bytes);
/* A libzrc client: connected (a failure described in *err, may be NULL),
 * store `path` opened, and a loader with options o unless o is NULL; the first
 * error, or 0. */
int client_open(const char *path, const zrc_loader_options *o, zrc_conn **c, zrc_dataset **d,
                zrc_loader **l, zrc_error *err);

/* The cases, one file each group. */
void case_ring_write(void);
void case_wrong_fds(void);
void case_pipeline(void);
void case_big_replies(void);
void case_connections(void);
void case_shm_budget(void);
void case_never_release(void);
void case_half_open(void);
void case_fork(void);
void case_vanish(void);
void case_truncate(void);

#endif
