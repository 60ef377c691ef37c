/* interrupt.c: catching Ctrl-C while the tool writes (interrupt.h).
 *
 * The handler does two async-signal-safe things: it records the signal in a
 * sig_atomic_t and calls zrc_interrupt() on the registered connection. No
 * SA_RESTART: a blocking read of the .npy file returns EINTR, and the command
 * looks at interrupt_caught() after each step.
 */
#include "interrupt.h"

#include <signal.h>
#include <stddef.h>

static const int caught_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define N_SIGNALS (sizeof(caught_signals) / sizeof(caught_signals[0]))

static volatile sig_atomic_t caught;
static zrc_conn *volatile target;
static struct sigaction saved[N_SIGNALS];
static int armed;

static void on_signal(int sig) {
        if (!caught)
                caught = sig;
        zrc_interrupt(target);
}

void interrupt_arm(zrc_conn *c) {
        struct sigaction sa = { .sa_handler = on_signal };

        target = c;
        if (armed)
                return;
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < N_SIGNALS; i++)
                sigaddset(&sa.sa_mask, caught_signals[i]);
        for (size_t i = 0; i < N_SIGNALS; i++) {
                sigaction(caught_signals[i], NULL, &saved[i]);
                /* one ignored when the tool started (nohup, a background job of a
                 * shell without job control) stays ignored */
                if (saved[i].sa_handler != SIG_IGN)
                        sigaction(caught_signals[i], &sa, NULL);
        }
        armed = 1;
}

void interrupt_connection(zrc_conn *c) {
        target = c;
        if (c && caught)
                zrc_interrupt(c); /* caught before the connection was there */
}

int interrupt_caught(void) {
        return caught;
}

void interrupt_exit(void) {
        int sig = caught;

        target = NULL;
        if (armed) {
                for (size_t i = 0; i < N_SIGNALS; i++)
                        sigaction(caught_signals[i], &saved[i], NULL);
                armed = 0;
        }
        if (sig)
                raise(sig);
}
