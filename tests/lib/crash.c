/* crash.c: the crash tests' program model and trial (crash.h). */
#include "crash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "records.h"
#include "util.h"

const char *const tl_op_names[TL_OP_KINDS] = { "append", "delete", "compact" };

void tl_model_init(tl_model *m) {
        *m = (tl_model){ .next_id = 1 };
}

void tl_model_done(tl_model *m) {
        free(m->ids);
        tl_model_init(m);
}

void tl_model_apply(tl_model *m, const tl_op *o) {
        if (o->kind == TL_OP_APPEND) {
                for (size_t i = 0; i < o->n; i++)
                        tl_push_u64(&m->ids, &m->len, &m->cap, o->first_id + i);
                m->next_id += o->n;
        } else if (o->kind == TL_OP_DELETE) {
                m->len = tl_swap_last(m->ids, m->len, o->idx, o->n);
        }
}

bool tl_model_is(const tl_model *m, const uint64_t *ids, size_t n) {
        return n == m->len && (n == 0 || memcmp(ids, m->ids, n * sizeof(*ids)) == 0);
}

void tl_model_replay(tl_program program, uint64_t seed, size_t ops, tl_model *m,
                     tl_op *ret_next) {
        uint64_t rng = seed;
        tl_op o;

        tl_model_init(m);
        for (size_t i = 0; i < ops; i++) {
                program(seed, i, &rng, m, &o);
                tl_model_apply(m, &o);
        }
        if (ret_next)
                program(seed, ops, &rng, m, ret_next);
}

void tl_ack(int fd) {
        uint8_t b = 1;

        if (write(fd, &b, 1) != 1)
                _exit(3);
}

void tl_ack_op(int fd, tl_model *m, const tl_op *o) {
        tl_model_apply(m, o);
        tl_ack(fd);
}

void tl_crash_count(const tl_crash *t, tl_crash_counts *c) {
        if (t->killed)
                c->kills[t->inflight.kind]++;
        else
                c->finished++;
}

int tl_crash_run(tl_crash *t, const char *tag, size_t target, uint64_t *rng,
                 void (*writer)(int ackfd, int dfd, void *arg), void *arg, tl_program program,
                 uint64_t seed, char *why, size_t size) {
        int fds[2], status;
        size_t acks;
        pid_t pid;

        *t = (tl_crash){ .dfd = -1 };
        tl_model_init(&t->before);
        tl_model_init(&t->after);
        snprintf(t->dir, sizeof(t->dir), "%s/%s-XXXXXX", tl_tmpdir(true), tag);
        if (!mkdtemp(t->dir))
                return -errno;
        t->dfd = open(t->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (t->dfd < 0 || pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        if (pid == 0) {
                close(fds[0]);
                writer(fds[1], t->dfd, arg);
                _exit(127); /* a writer returns only by mistake */
        }
        close(fds[1]);
        acks = tl_kill_after_acks(pid, fds[0], target, rng, &status);
        if (status == -1) {
                snprintf(why, size, "the writer could not be reaped");
                return -1;
        }
        if (!WIFSIGNALED(status) && WEXITSTATUS(status) != 0) {
                snprintf(why, size, "the writer failed with exit status %d (see its stderr)",
                         WEXITSTATUS(status));
                return -1;
        }
        if (acks < 1) {
                snprintf(why, size, "the writer never created its store");
                return -1;
        }
        t->killed = WIFSIGNALED(status);
        t->acked = acks - 1;
        tl_model_replay(program, seed, t->acked, &t->before, &t->inflight);
        tl_model_replay(program, seed, t->acked + 1, &t->after, NULL);
        return 0;
}

void tl_crash_done(tl_crash *t) {
        tl_model_done(&t->before);
        tl_model_done(&t->after);
        if (t->dfd >= 0)
                close(t->dfd);
        t->dfd = -1;
        if (t->dir[0])
                tl_rmtree(t->dir);
}
