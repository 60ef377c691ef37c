/* daemon-kit.h: what the files of the daemon suite share: the daemon each
 * test starts (setup/teardown), its stores of dense "<u4" (ITEM,) records
 * whose values name them (record i holds i*ITEM .. i*ITEM+ITEM-1), and the
 * requests the tests make again and again, over raw frames (tclient.h).
 *
 * test-daemon.c: HELLO and every request on dense, ragged, multi-stream and
 * dictionary stores; daemon-input.c: malformed frames, strikes, descriptors,
 * protocol vectors, pipelining; daemon-clients.c: many clients, mutations
 * under load, reclamation; daemon-lifecycle.c: signals, reload, limits,
 * activation; daemon-loaders.c: loaders and their groups' shared rings.
 */
#ifndef ZR_TESTS_DAEMON_KIT_H
#define ZR_TESTS_DAEMON_KIT_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tclient.h"

#define ITEM 4 /* u32 values per dense test record: record i holds i*4 .. i*4+3 */

/* The daemon of the running test: started by setup(), stopped (exit status 0
 * asserted) by teardown(). */
extern td_daemon D;
void setup(void);
void teardown(void);

/* The next request id of the tests' own requests. */
extern uint64_t next_id;

/* D.dir/name (one of four rotating buffers of the calling thread). */
char *path_in(const char *name);

/* A dense "<u4" (ITEM,) store in D.dir/name; a ragged "<u2" 2-d zstd store;
 * each returns its handle. */
uint32_t create_dense(int fd, const char *name, const char *codec);
uint32_t create_ragged(int fd, const char *name);
/* create_dense() with records 0..n-1 appended. */
uint32_t dense_store(int fd, const char *name, const char *codec, uint64_t n);
/* Appends records first..first+count-1 (values i*ITEM + j); returns the code
 * (and on success checks first, count and length). */
int append_dense(int fd, uint32_t h, uint64_t first, uint64_t count);
/* BUFFER_OPEN of `bytes`, mapped read-only into *ret_map (its size into
 * *ret_size, may be NULL); returns the buffer's handle. */
uint32_t open_buffer(int fd, uint64_t bytes, const uint8_t **ret_map, uint64_t *ret_size);
/* READ of idx[0..n) into buffer buf at offset; returns the code, reply in *m. */
int read_records(int fd, uint32_t h, uint32_t buf, uint64_t offset, const uint64_t *idx,
                 size_t n, td_msg *m);
/* DELETE of idx[0..n); returns the code, reply in *m. */
int delete_records(int fd, uint32_t h, const uint64_t *idx, size_t n, td_msg *m);
/* p holds the dense records idx[0..n). */
void check_dense_values(const uint8_t *p, const uint64_t *idx, size_t n);
/* A request with at most one unsigned field: its code, reply in *m, or only
 * the code. */
int simple(int fd, const char *kind, const char *key, uint64_t v, td_msg *m);
int simple_code(int fd, const char *kind, const char *key, uint64_t v);
/* INFO of handle h says `length` records. */
void expect_length(int fd, uint32_t h, uint64_t length);
/* DATASET_OPEN of D.dir/name with its directory and a meta.zr proof opened
 * with proof_mode; returns the code, reply in *m. */
int open_dataset(int fd, const char *name, int proof_mode, bool writable, td_msg *m);
/* As open_dataset(), asserting it works; returns the handle. */
uint32_t open_handle(int fd, const char *name, int proof_mode, bool writable);
/* A second client is served normally. */
void second_client_served(void);
/* Expects the daemon to close the connection (after any frames). Returns the
 * code of the last fault seen, or 0. */
int expect_closed(int fd);
/* Waits (each step a round-trip to the daemon) until it counts `n` clients. */
void wait_clients(int fd, uint64_t n);
/* LOADER_OPEN of a sequential loader over handle h (seed 7, indices); returns
 * the code, reply in *m. */
int open_loader(int fd, uint32_t h, uint64_t batch, uint64_t start, uint64_t prefetch,
                td_msg *m);
/* STATUS: no loader and no shared memory left. */
void expect_no_loaders(int fd);

/* The suite's cases, one function a file. */
void daemon_add_input(TCase *tc);
void daemon_add_clients(TCase *tc);
void daemon_add_lifecycle(TCase *tc);
void daemon_add_loaders(TCase *tc);

#endif
