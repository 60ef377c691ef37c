/* ioq-uring.c: the I/O queue's io_uring backend (liburing).
 *
 * One ring, driven by the dispatcher thread alone (it prepares, submits and
 * reaps), with room for every read the queue lets fly plus one poll on an
 * eventfd: wake() writes the eventfd from any thread, the poll completes and
 * the dispatcher's wait returns. Buffered reads of regular files complete
 * asynchronously on file systems that support it (ext4, xfs, btrfs), else in
 * the kernel's io-wq workers: the dispatcher never blocks on a read. Large
 * reads go to the io-wq workers from the start (URING_ASYNC_MIN). A short
 * read is resubmitted for the rest; a read that returns 0 before its range
 * ends fails with -ENODATA (the file ends there). Latency is measured from
 * submission to the moment the dispatcher reaps the completion.
 *
 * Errors of the ring itself (io_uring_enter: EINTR, EAGAIN, EBUSY) are
 * transient: the dispatcher waits for a completion and submits again.
 *
 * Built without liburing, ioq_uring_new() returns -ENOSYS.
 */
#include "io/ioq-backend.h"
#include "io/io-config.h"

#include <errno.h>

#if ZR_HAVE_LIBURING

#include <liburing.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Reads of at least this many bytes go straight to the kernel's io-wq
 * workers (IOSQE_ASYNC) instead of being tried inline first. A buffered read
 * that misses the page cache does its page-cache work (allocating, charging
 * the memory cgroup, reclaiming to make room) inline, in the dispatcher's
 * io_uring_enter(): one thread for every read of the daemon. For 256 KiB
 * records in a 512 MiB cgroup that one thread was the bound (2.5-2.7 batches
 * of 64 MiB a second; 4.7 with large reads async, 2-core VM at load 25, docs/
 * IO.md); for 4 KiB reads the workers' hand-offs cost more CPU than they save
 * (11 ms of daemon CPU per batch of 1024 inline, 20 async). */
#define URING_ASYNC_MIN (64u << 10)

/* user_data of the eventfd poll; reads carry their (aligned) pointer. */
#define URING_WAKE_TAG ((uint64_t)1)

typedef struct uring_be {
        ioq_env env;
        struct io_uring ring;
        int ring_ready;
        int efd;
        ioq_read *finished; /* reads that ended without a completion (fault hook) */
        int woken;
} uring_be;

static struct io_uring_sqe *uring_sqe(uring_be *be) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&be->ring);
        while (!sqe) {
                /* the ring has room for every read plus the poll; this only
                 * flushes what was prepared */
                int r = io_uring_submit(&be->ring);
                if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
                        sched_yield();
                sqe = io_uring_get_sqe(&be->ring);
        }
        return sqe;
}

static void uring_prep_read(uring_be *be, ioq_read *r) {
        uint64_t want;
        uint8_t *dst = ioq_read_dst(r, be->env.sink, be->env.sink_len, &want);
        struct io_uring_sqe *sqe = uring_sqe(be);
        io_uring_prep_read(sqe, r->range.fd, dst, (unsigned)want, r->range.offset + r->got);
        /* reads into a destination are direct (io/direct.h): no page-cache
         * work inline, the block layer takes them without blocking */
        if (want >= URING_ASYNC_MIN && !r->dst)
                io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
        io_uring_sqe_set_data(sqe, r);
}

static void uring_arm_wake(uring_be *be) {
        struct io_uring_sqe *sqe = uring_sqe(be);
        io_uring_prep_poll_add(sqe, be->efd, POLLIN);
        io_uring_sqe_set_data64(sqe, URING_WAKE_TAG);
}

static void uring_finish(uring_be *be, ioq_read *r, int result) {
        r->result = result;
        r->lat_ns = ioq_now_ns() - r->start_ns;
        r->next = be->finished;
        be->finished = r;
}

/* Submits what is prepared; transient errors are retried by the next wait. */
static void uring_submit(uring_be *be) {
        int r;
        do
                r = io_uring_submit(&be->ring);
        while (r == -EINTR);
}

static void uring_start(void *bev, ioq_read *reads) {
        uring_be *be = bev;
        while (reads) {
                ioq_read *r = reads;
                reads = r->next;
                r->next = NULL;
                r->start_ns = ioq_now_ns();
                int e = be->env.begin(be->env.q, r);
                if (e < 0) {
                        uring_finish(be, r, e);
                        r->lat_ns = 0;
                        continue;
                }
                uring_prep_read(be, r);
        }
        uring_submit(be);
}

static void uring_complete(uring_be *be, struct io_uring_cqe *cqe) {
        uint64_t tag = io_uring_cqe_get_data64(cqe);
        int res = cqe->res;

        if (tag == URING_WAKE_TAG) {
                uint64_t v;
                while (read(be->efd, &v, sizeof(v)) < 0 && errno == EINTR)
                        ;
                be->woken = 1;
                uring_arm_wake(be);
                return;
        }
        ioq_read *r = io_uring_cqe_get_data(cqe);
        if (res == -EINTR || res == -EAGAIN) {
                uring_prep_read(be, r);
                return;
        }
        if (res < 0) {
                uring_finish(be, r, res);
                return;
        }
        if (res == 0) {
                /* the file ends before the range (and before what it needs) */
                uring_finish(be, r, ioq_read_enough(r) ? 0 : -ENODATA);
                return;
        }
        r->got += (uint64_t)res;
        if (!ioq_read_enough(r))
                uring_prep_read(be, r); /* short: read the rest */
        else
                uring_finish(be, r, 0);
}

static ioq_read *uring_reap(void *bev) {
        uring_be *be = bev;
        while (!be->finished && !be->woken) {
                int r = io_uring_submit_and_wait(&be->ring, 1);
                if (r < 0 && r != -EINTR) {
                        /* could not submit (EAGAIN, EBUSY): wait without it */
                        struct io_uring_cqe *c;
                        r = io_uring_wait_cqe(&be->ring, &c);
                        if (r < 0 && r != -EINTR)
                                sched_yield();
                }
                struct io_uring_cqe *cqe;
                unsigned head, seen = 0;
                io_uring_for_each_cqe(&be->ring, head, cqe) {
                        uring_complete(be, cqe);
                        seen++;
                }
                io_uring_cq_advance(&be->ring, seen);
        }
        uring_submit(be); /* resubmissions of short reads, the re-armed poll */
        ioq_read *list = be->finished;
        be->finished = NULL;
        be->woken = 0;
        return list;
}

static void uring_wake(void *bev) {
        uring_be *be = bev;
        uint64_t one = 1;
        /* EAGAIN means the counter is saturated: a wake is pending anyway */
        while (write(be->efd, &one, sizeof(one)) < 0 && errno == EINTR)
                ;
}

static void uring_free(void *bev) {
        uring_be *be = bev;
        if (!be)
                return;
        if (be->ring_ready)
                io_uring_queue_exit(&be->ring); /* cancels the pending poll */
        if (be->efd >= 0)
                close(be->efd);
        free(be);
}

static const ioq_backend_ops uring_ops = {
        .kind = ZR_IOQ_URING,
        .start = uring_start,
        .reap = uring_reap,
        .wake = uring_wake,
        .free = uring_free,
};

int ioq_uring_new(const ioq_env *env, unsigned depth, const ioq_backend_ops **ret_ops,
                  void **ret_be, zr_error *err) {
        uring_be *be = calloc(1, sizeof(*be));
        int r;

        if (!be)
                return zr_error_set(err, ENOMEM, "ioq: out of memory");
        be->env = *env;
        be->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (be->efd < 0) {
                r = zr_error_errno(err, errno, "ioq: eventfd");
                goto fail;
        }
        /* the ring's descriptor is created O_CLOEXEC by the kernel */
        r = io_uring_queue_init(depth + 1, &be->ring, 0);
        if (r < 0) {
                r = zr_error_errno(err, -r, "ioq: io_uring_queue_init(%u)", depth + 1);
                goto fail;
        }
        be->ring_ready = 1;
        uring_arm_wake(be);
        uring_submit(be);
        *ret_ops = &uring_ops;
        *ret_be = be;
        return 0;
fail:
        uring_free(be);
        return r;
}

#else /* !ZR_HAVE_LIBURING */

int ioq_uring_new(const ioq_env *env, unsigned depth, const ioq_backend_ops **ret_ops,
                  void **ret_be, zr_error *err) {
        return zr_error_set(err, ENOSYS, "ioq: built without liburing: no io_uring backend");
}

#endif
