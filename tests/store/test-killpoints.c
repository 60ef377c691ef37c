/* test-killpoints.c: a store recovers from a kill at every numbered point of its
 * write protocols.
 *
 * Built only with -Dkillpoints=true (daemon/store/killpoint.h). For each
 * scenario (an operation on a prepared store, per codec) and each kill point,
 * the test copies the prepared store, runs the operation in a child process
 * (this binary re-executed with ZR_KILLPOINT=<n>:<hit>) and, when the child died
 * at that point, reopens the store and checks recovery:
 *   - it opens, and every record is bit-exact for the id written into its
 *     first 8 bytes (a raw record has no checksum: the id and the fill prove it);
 *   - the index -> id table is exactly the state before the operation or after
 *     it, as the protocol promises for that point: an append is there only once
 *     its header was written (a prefix with no holes), a delete only once its
 *     journal was written (then always: all or nothing), a compaction never
 *     changes the table, an interrupted recovery is finished by the next open,
 *     a killed create leaves no store (and a new create works) or an empty one;
 *   - zr_store_verify() passes, a compaction re-run finishes without changing
 *     the table and leaves nothing to move, and the store takes a new append.
 * Hits 1..ZR_KILLPOINT_HITS (default 3) of each point are tried; a child that
 * finishes its operation means the point is not reached that often (its result
 * is checked as the "after" state). Every defined point must be killed at in at
 * least one scenario. Prints the points exercised and the recoveries checked.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "recovery.h"
#include "store/killpoint.h"
#include "util.h"

#define KP_HITS_DEFAULT 3 /* hits tried per point in CI; ZR_KILLPOINT_HITS for more */

/* --- scenarios ------------------------------------------------------------------- */

enum scenario {
        SC_APPEND_FIRST, /* the first append into an empty store: creates 0.chunk, 0.loc */
        SC_APPEND,       /* an append that rolls over into new chunks */
        SC_DELETE,       /* a delete batch with swaps below the new length */
        SC_COMPACT,      /* a compaction with moves, a scratch move, freed chunks */
        SC_COMPACT_PART, /* a compaction stopped by max_moves after its scratch move */
        SC_RECOVER,      /* an open that redoes an interrupted delete's journal */
        SC_DICT,         /* installing the dictionary of a zstd_dict store */
        SC_CREATE,       /* creating a store (with its dictionary for zstd_dict) */
        SC_COUNT,
};

static const char *const sc_names[SC_COUNT] = {
        "append-first", "append", "delete", "compact", "compact-partial", "recover", "dict",
        "create",
};

/* --- the dictionary -------------------------------------------------------------- */

/* The children read the parent's dictionary from the file named by
 * ZR_KP_DICT_FILE instead of training their own (slow under ASan). */
static void load_dict(void) {
        const char *path = getenv("ZR_KP_DICT_FILE");
        FILE *f = path ? fopen(path, "rbe") : NULL;
        if (!f) {
                rc_make_dict();
                return;
        }
        rc_dict = malloc(RC_DICT_CAPACITY);
        if (!rc_dict)
                tl_die("malloc");
        rc_dict_len = fread(rc_dict, 1, RC_DICT_CAPACITY, f);
        fclose(f);
        if (rc_dict_len == 0)
                tl_die("ZR_KP_DICT_FILE");
}

static char dict_file[512];

static void save_dict(void) {
        snprintf(dict_file, sizeof(dict_file), "%s/zr-kp-dict-XXXXXX", tl_tmpdir(true));
        int fd = mkstemp(dict_file);
        if (fd < 0 || write(fd, rc_dict, rc_dict_len) != (ssize_t)rc_dict_len)
                tl_die("dictionary file");
        close(fd);
        setenv("ZR_KP_DICT_FILE", dict_file, 1);
}

/* --- the prepared stores ------------------------------------------------------------- */

typedef struct prepared {
        char *dir;      /* the store before the operation */
        rc_ids before;  /* its table */
        rc_ids after;   /* the table once the operation completed */
} prepared;

static prepared prep[SC_COUNT][3];

static zr_pool *pool;

/* Builds the store of scenario sc, codec c; 0 or -1 (with a message). */
static int prepare(enum scenario sc, enum zr_codec c, prepared *p) {
        zr_store *s = NULL;
        zr_error err = {0};

        p->dir = rc_new_dir("zr-kp-pre");
        p->before.n = 0;
        p->after.n = 0;
        if (sc == SC_CREATE)
                return 0; /* an empty directory */
        int dfd = rc_open_dir(p->dir);
        int r = rc_prepare(dfd, c, pool, c == ZR_CODEC_ZSTD_DICT && sc != SC_DICT,
                           sc != SC_APPEND_FIRST && sc != SC_DICT,
                           sc == SC_COMPACT || sc == SC_COMPACT_PART, &s, &p->before, &err);
        if (r < 0) {
                tl_fail("prepare %s codec %d: %s", sc_names[sc], (int)c, err.message);
                zr_store_close(s, NULL);
                close(dfd);
                return -1;
        }
        if (zr_store_close(s, &err) < 0) {
                tl_fail("prepare %s codec %d: close: %s", sc_names[sc], (int)c, err.message);
                close(dfd);
                return -1;
        }
        close(dfd);
        rc_ids_after(&p->before, sc == SC_APPEND_FIRST || sc == SC_APPEND ? RC_APPENDS
                                 : sc == SC_DELETE || sc == SC_RECOVER    ? RC_DELETES
                                                                          : RC_UNCHANGED,
                     &p->after);
        return 0;
}

/* --- the child: one operation, maybe killed on the way ----------------------------- */

static int child_main(enum scenario sc, enum zr_codec c, const char *dir) {
        zr_pool *cpool = NULL;
        zr_store *s = NULL;
        zr_error err = {0};
        int dfd = rc_open_dir(dir);
        int r;

        if (zr_pool_new(2, &cpool) < 0)
                return 3;
        zr_store_options opts = { .pool = cpool, .chunk_log2 = RC_CHUNK_LOG2 };
        if (sc == SC_CREATE) {
                int d = c == ZR_CODEC_ZSTD_DICT;
                r = zr_store_create(dfd, c, d ? rc_dict : NULL, d ? rc_dict_len : 0, &opts, &s, &err);
        } else {
                r = zr_store_open(dfd, &opts, &s, &err);
        }
        if (r >= 0) {
                switch (sc) {
                case SC_APPEND_FIRST:
                case SC_APPEND:
                        r = rc_append(s, 1000, RC_APPEND_N, &err);
                        break;
                case SC_DELETE:
                        r = zr_store_delete(s, rc_delete_idx, RC_DELETE_N, &err);
                        break;
                case SC_COMPACT:
                        r = zr_store_compact(s, 0, NULL, &err);
                        break;
                case SC_COMPACT_PART:
                        r = zr_store_compact(s, 2, NULL, &err);
                        break;
                case SC_RECOVER:
                case SC_CREATE:
                        break; /* the open or create was the operation */
                case SC_DICT:
                        r = zr_store_install_dict(s, rc_dict, rc_dict_len, &err);
                        break;
                default:
                        r = -EINVAL;
                }
                if (r >= 0)
                        r = zr_store_close(s, &err);
                else
                        zr_store_close(s, NULL);
        }
        zr_pool_free(cpool);
        close(dfd);
        if (r < 0) {
                fprintf(stderr, "child %s: %s\n", sc_names[sc], err.message);
                return 4;
        }
        return 0;
}

/* --- the parent: kill, reopen, check --------------------------------------------------- */

/* What a kill at the hit-th reach of point p during scenario sc must leave. The
 * child closes the store after its operation, so a sync point reached after the
 * operation's own syncs is past its end. */
static enum rc_expect expected(enum scenario sc, unsigned p, unsigned hit) {
        int sync = p == ZR_KP_SYNC_CHUNKS || p == ZR_KP_SYNC_LOCS || p == ZR_KP_SYNC_META;

        switch (sc) {
        case SC_APPEND_FIRST:
        case SC_APPEND:
                /* committed once meta.zr holds the new length; an append does not
                 * sync, only the close after it does */
                return p == ZR_KP_HEADER_AFTER || p == ZR_KP_APPEND_COMMITTED || sync ||
                                       p == ZR_KP_FILE_TRIMMED
                               ? RC_AFTER
                               : RC_BEFORE;
        case SC_DELETE:
                /* the files extended by the open, the sync before the batch, then
                 * a complete journal (in the page cache: the kernel survives) is
                 * redone */
                return p == ZR_KP_FILE_EXTENDED || p == ZR_KP_DELETE_SYNCED ||
                                       p == ZR_KP_JOURNAL_CREATED || (sync && hit == 1)
                               ? RC_BEFORE
                               : RC_AFTER;
        case SC_RECOVER:
                return RC_AFTER;
        default:
                return RC_BEFORE; /* compaction and the dictionary change no record */
        }
}

typedef struct counts {
        unsigned trials, kills, completed, points, recoveries;
        unsigned killed_at[ZR_KP_MAX];
} counts;

static char self_exe[4096];

/* Runs the child on dir with ZR_KILLPOINT=p:hit; 1 if killed, 0 if it finished. */
static int run_child(enum scenario sc, enum zr_codec c, const char *dir, unsigned p,
                     unsigned hit) {
        char sel[32], scs[32];
        snprintf(sel, sizeof(sel), "%u:%u", p, hit);
        snprintf(scs, sizeof(scs), "%d:%d", (int)sc, (int)c);
        pid_t pid = fork();
        if (pid < 0)
                tl_die("fork");
        if (pid == 0) {
                setenv("ZR_KILLPOINT", sel, 1);
                execl(self_exe, self_exe, "--child", scs, dir, (char *)NULL);
                _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid)
                tl_die("waitpid");
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                return 1;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        tl_fail("%s, point %u (%s) hit %u: child ended with status %#x", sc_names[sc], p,
                zr_killpoint_name(p), hit, status);
        return -1;
}

/* Reopens dir and checks it against what the scenario allows. */
static unsigned creates_absent; /* killed creates that left no store */

static void check_recovery(enum scenario sc, enum zr_codec c, const prepared *pp, const char *dir,
                           enum rc_expect ex, const char *when) {
        zr_store_options opts = { .pool = pool, .chunk_log2 = RC_CHUNK_LOG2 };
        zr_store *s = NULL;
        zr_error err = {0};
        int dfd = rc_open_dir(dir);

        int r = zr_store_open(dfd, &opts, &s, &err);
        if (r == -ZR_E_NOT_STORE && sc == SC_CREATE) {
                /* a create killed before meta.zr was named: no store, and a
                 * new create succeeds */
                creates_absent++;
                int d = c == ZR_CODEC_ZSTD_DICT;
                zr_error_clear(&err);
                r = zr_store_create(dfd, c, d ? rc_dict : NULL, d ? rc_dict_len : 0, &opts, &s, &err);
                if (r < 0) {
                        tl_fail("%s: create again: %s (%s)", when, err.message, zr_error_code_name(r));
                        close(dfd);
                        return;
                }
        }
        if (r < 0) {
                tl_fail("%s: reopen: %s (%s)", when, err.message, zr_error_code_name(r));
                close(dfd);
                return;
        }
        rc_check_recovered(s, &pp->before, &pp->after, ex, when);
        close(dfd);
}

static void run_scenario(enum scenario sc, enum zr_codec c, unsigned max_hits, counts *k) {
        const prepared *pp = &prep[sc][c];
        unsigned points = 0, kills = 0;
        char reached[512] = "";

        for (unsigned p = 1; p < ZR_KP_MAX; p++) {
                if (!zr_killpoint_name(p))
                        continue;
                unsigned killed = 0;
                for (unsigned hit = 1; hit <= max_hits; hit++) {
                        char *dir = rc_new_dir("zr-kp-run");
                        rc_copy_store(pp->dir, dir);
                        int rk = run_child(sc, c, dir, p, hit);
                        k->trials++;
                        char when[160];
                        snprintf(when, sizeof(when), "%s (codec %d), killed at %u %s, hit %u",
                                 sc_names[sc], (int)c, p, zr_killpoint_name(p), hit);
                        if (rk == 1) {
                                check_recovery(sc, c, pp, dir, expected(sc, p, hit), when);
                                k->kills++;
                                k->recoveries++;
                                k->killed_at[p]++;
                                killed++;
                        } else if (rk == 0 && hit == 1 && p == 1) {
                                /* once per scenario: the operation run to its end */
                                snprintf(when, sizeof(when), "%s (codec %d), not killed",
                                         sc_names[sc], (int)c);
                                check_recovery(sc, c, pp, dir, RC_AFTER, when);
                                k->completed++;
                        }
                        tl_rmtree(dir);
                        free(dir);
                        if (rk != 1)
                                break;
                }
                if (killed) {
                        points++;
                        kills += killed;
                        size_t at = strlen(reached);
                        snprintf(reached + at, sizeof(reached) - at, "%s%u", at ? "," : "", p);
                }
        }
        k->points += points;
        printf("  %-16s codec %d: %2u points, %3u kills (points %s)\n", sc_names[sc], (int)c,
               points, kills, reached);
        fflush(stdout);
}

/* The recover scenario starts from a delete killed once its journal is durable. */
static int prepare_recover(enum zr_codec c, prepared *p) {
        if (prepare(SC_DELETE, c, p) < 0)
                return -1;
        if (run_child(SC_DELETE, c, p->dir, ZR_KP_JOURNAL_DURABLE, 1) != 1) {
                tl_fail("recover codec %d: the delete was not killed with its journal durable", (int)c);
                return -1;
        }
        int dfd = rc_open_dir(p->dir);
        int there = faccessat(dfd, "delete.zr", F_OK, 0) == 0;
        close(dfd);
        if (!there) {
                tl_fail("recover codec %d: no delete.zr after the kill", (int)c);
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        if (argc == 4 && strcmp(argv[1], "--child") == 0) {
                char *colon;
                enum scenario sc = (enum scenario)strtol(argv[2], &colon, 10);
                enum zr_codec c = (enum zr_codec)(*colon == ':' ? atoi(colon + 1) : 0);
                if (sc == SC_DICT || (sc == SC_CREATE && c == ZR_CODEC_ZSTD_DICT))
                        load_dict();
                return child_main(sc, c, argv[3]);
        }
        unsetenv("ZR_KILLPOINT"); /* the parent never stops */
        if (!ZR_KILLPOINTS) {
                printf("killpoints: built without -Dkillpoints=true, nothing to do\n");
                return 77;
        }
        ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
        if (n <= 0)
                tl_die("readlink /proc/self/exe");
        self_exe[n] = 0;
        unsigned max_hits = (unsigned)tl_env_u64("ZR_KILLPOINT_HITS", KP_HITS_DEFAULT);
        if (zr_pool_new(2, &pool) < 0)
                tl_die("pool");
        rc_make_dict();
        save_dict();

        counts k = {0};
        unsigned defined = 0;
        for (unsigned p = 1; p < ZR_KP_MAX; p++)
                defined += zr_killpoint_name(p) != NULL;
        printf("killpoints: %u points defined, up to %u hits each\n", defined, max_hits);
        for (int sc = 0; sc < SC_COUNT; sc++)
                for (int c = 0; c <= 2; c++) {
                        if (sc == SC_DICT && c != ZR_CODEC_ZSTD_DICT)
                                continue;
                        int r = sc == SC_RECOVER ? prepare_recover((enum zr_codec)c, &prep[sc][c])
                                                 : prepare((enum scenario)sc, (enum zr_codec)c,
                                                           &prep[sc][c]);
                        if (r < 0)
                                continue;
                        run_scenario((enum scenario)sc, (enum zr_codec)c, max_hits, &k);
                        tl_rmtree(prep[sc][c].dir);
                        free(prep[sc][c].dir);
                }

        unsigned covered = 0;
        for (unsigned p = 1; p < ZR_KP_MAX; p++) {
                if (!zr_killpoint_name(p))
                        continue;
                if (k.killed_at[p])
                        covered++;
                else
                        tl_fail("point %u (%s) was never reached by any scenario", p,
                                zr_killpoint_name(p));
        }
        printf("killpoints: %u of %u points killed at; %u (scenario, codec, point) points "
               "exercised; %u children run, %u killed, %u recoveries checked (%u killed creates "
               "left no store), %u ran to the end; %u failures\n",
               covered, defined, k.points, k.trials, k.kills, k.recoveries, creates_absent,
               k.completed, tl_failures);
        zr_pool_free(pool);
        free(rc_dict);
        unlink(dict_file);
        return tl_failures ? 1 : 0;
}
