/* mapguard.c: a SIGBUS in a guarded call becomes -EFAULT (mapguard.h).
 *
 * The handler is installed once, without SA_RESETHAND and with SA_NODEFER so
 * that a jump out of it leaves SIGBUS unblocked (sigsetjmp need not save the
 * mask: a jump then costs no system call, and the guard one sigsetjmp). The
 * guard is a thread-local pointer set before the call and restored after;
 * initial-exec TLS, so the handler reads it without any allocation.
 */
#include "util/mapguard.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

static __thread sigjmp_buf *guard __attribute__((tls_model("initial-exec")));
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *info, void *uctx) {
        sigjmp_buf *env = guard;
        if (env)
                siglongjmp(*env, 1);
        /* Not ours: the action of before, as if we had never been here. A fault
         * repeats when this returns and meets it; a sent signal is sent again. */
        (void)uctx;
        sigaction(sig, &previous, NULL);
        if (info->si_code <= 0)
                raise(sig);
}

static void install(void) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &previous);
}

int zr_mapguard_run(int (*fn)(void *arg), void *arg) {
        sigjmp_buf env;
        sigjmp_buf *volatile outer = guard;
        volatile int r = -EFAULT;

        pthread_once(&installed, install);
        if (sigsetjmp(env, 0) == 0) {
                guard = &env;
                r = fn(arg);
        }
        guard = outer;
        return r;
}
