/* crash.h: what the crash tests share (test-crash kills the writer of a store,
 * test-lxcrash the writer of a loaderx 1.5.7 ragged dataset): the program of
 * appends, deletes and compactions their writer runs, the model of the
 * index -> id table it builds, the writer's acknowledgements, and one trial:
 * the writer forked on a new directory, SIGKILLed after some acknowledged
 * operations, and the tables before and after the operation it was in.
 * Nothing here asserts: failures are returned.
 */
#ifndef ZR_TESTS_LIB_CRASH_H
#define ZR_TESTS_LIB_CRASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tl_op_kind { TL_OP_APPEND, TL_OP_DELETE, TL_OP_COMPACT, TL_OP_KINDS };
extern const char *const tl_op_names[TL_OP_KINDS];

#define TL_OP_DELETE_MAX 8

/* One operation of a program. */
typedef struct tl_op {
        enum tl_op_kind kind;
        size_t n;                       /* records appended or deleted */
        uint64_t first_id;              /* append: ids first_id .. first_id + n - 1 */
        uint64_t idx[TL_OP_DELETE_MAX]; /* delete: distinct indices */
        uint64_t max_moves;             /* compact: 0 = to the end */
} tl_op;

/* The table a program builds: index -> id, and the next id an append takes. */
typedef struct tl_model {
        uint64_t *ids;
        size_t len, cap;
        uint64_t next_id;
} tl_model;

/* A program: operation number i of program `seed` over the table m so far,
 * into *ret. *rng is the program's generator, seeded with `seed` when the
 * program starts, for a program that draws from it. */
typedef void (*tl_program)(uint64_t seed, size_t i, uint64_t *rng, const tl_model *m,
                           tl_op *ret);

/* An empty table whose first append takes id 1; and its memory freed. */
void tl_model_init(tl_model *m);
void tl_model_done(tl_model *m);
/* Applies o as the stores' contract says: appends go to the end, a delete is
 * tl_swap_last(), a compaction changes nothing. Exits 2 (tl_die) when memory
 * runs out. */
void tl_model_apply(tl_model *m, const tl_op *o);
/* True if ids[0..n) is m's table, index for index. */
bool tl_model_is(const tl_model *m, const uint64_t *ids, size_t n);
/* The table after the first `ops` operations of program(seed); the operation
 * that comes next in *ret_next (may be NULL). */
void tl_model_replay(tl_program program, uint64_t seed, size_t ops, tl_model *m,
                     tl_op *ret_next);

/* The writer's acknowledgement of one completed operation: a byte on fd (it
 * exits 3 if it cannot write it). */
void tl_ack(int fd);
/* The writer's step after operation o succeeded: o applied to its table m (from
 * which the program draws the next), then acknowledged on fd. */
void tl_ack_op(int fd, tl_model *m, const tl_op *o);

/* One trial. */
typedef struct tl_crash {
        char dir[512];          /* the trial's new directory */
        int dfd;                /* and its descriptor */
        bool killed;            /* false: the writer finished its program first */
        size_t acked;           /* operations acknowledged after the creation */
        tl_model before, after; /* the table without and with the operation in flight */
        tl_op inflight;         /* the operation it was in (or would have begun) */
} tl_crash;

/* Runs a trial in a new directory "TAG-XXXXXX" under tl_tmpdir(true): a child
 * runs writer(ackfd, dfd, arg), which must _exit() (0: the whole program done)
 * and acknowledge the store's creation, then each operation of program(seed);
 * it is SIGKILLed at a random moment after 1 + target acknowledgements
 * (tl_kill_after_acks(), *rng). Then the tables before and after the
 * operation in flight are replayed. 0; -1 with the reason in why[0..size)
 * when the writer failed or never made its store; -errno when the
 * directory, pipe or child could not be made. Release with tl_crash_done(). */
int tl_crash_run(tl_crash *t, const char *tag, size_t target, uint64_t *rng,
                 void (*writer)(int ackfd, int dfd, void *arg), void *arg, tl_program program,
                 uint64_t seed, char *why, size_t size);
/* Frees the tables, closes the directory and removes it. */
void tl_crash_done(tl_crash *t);

/* What a test's trials found, for its summary line. */
typedef struct tl_crash_counts {
        size_t trials;
        size_t kills[TL_OP_KINDS]; /* by the operation in flight */
        size_t finished;           /* the writer finished before the kill */
        size_t in_flight_applied;  /* the store held the table after the operation */
        size_t records;            /* records checked */
} tl_crash_counts;

/* Counts trial t's kill (or finish) in c. */
void tl_crash_count(const tl_crash *t, tl_crash_counts *c);

#endif
