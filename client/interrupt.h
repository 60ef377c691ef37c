/* interrupt.h: Ctrl-C (and SIGTERM, SIGHUP) for the tool's commands that write.
 *
 * `zrecord import` and `zrecord convert` undo what they staged when they are
 * stopped (staging.h). While armed, those signals are caught: the handler
 * remembers the first and interrupts the connection given (zrc_interrupt(), so
 * the call waiting for the daemon returns at once); the command sees
 * interrupt_caught(), cleans up, and interrupt_exit() then ends the process by
 * that signal, as it would have died of it, so that a shell sees Ctrl-C.
 */
#ifndef ZRECORD_INTERRUPT_H
#define ZRECORD_INTERRUPT_H

#include "zrc.h"

/* Catches SIGINT, SIGTERM and SIGHUP from now on; c (may be NULL) is the
 * connection to interrupt, set later with interrupt_connection(). */
void interrupt_arm(zrc_conn *c);

/* The connection a signal interrupts from now on (NULL: none). */
void interrupt_connection(zrc_conn *c);

/* The signal caught since interrupt_arm(), or 0. */
int interrupt_caught(void);

/* Puts the dispositions back; with a signal caught, raises it (the default
 * action ends the process) and returns only if it did not. */
void interrupt_exit(void);

#endif
