/* fifo.h: a singly linked first-in first-out queue threaded through its
 * elements, as the daemon's work queues, output queues and users are.
 *
 * The queue is a head and a tail pointer, both NULL when it is empty (so a
 * zeroed pair is an empty queue); every element has a next pointer, whose
 * field name the caller passes. Macros, for any element type: an argument may
 * be evaluated more than once, so pass plain lvalues. Not thread-safe: the
 * owner's lock or thread guards the queue.
 */
#ifndef ZR_UTIL_FIFO_H
#define ZR_UTIL_FIFO_H

#include <stddef.h>

/* Appends elem. */
#define ZR_FIFO_PUSH(head, tail, elem, next)                                    \
        do {                                                                    \
                (elem)->next = NULL;                                            \
                if (tail)                                                       \
                        (tail)->next = (elem);                                  \
                else                                                            \
                        (head) = (elem);                                        \
                (tail) = (elem);                                                \
        } while (0)

/* Puts elem first (a job handed back, say). */
#define ZR_FIFO_PUSH_FRONT(head, tail, elem, next)                              \
        do {                                                                    \
                (elem)->next = (head);                                          \
                (head) = (elem);                                                \
                if (!(tail))                                                    \
                        (tail) = (elem);                                        \
        } while (0)

/* Takes elem out from anywhere; prev is the element before it (NULL: elem is
 * the first). */
#define ZR_FIFO_REMOVE(head, tail, prev, elem, next)                            \
        do {                                                                    \
                if (prev)                                                       \
                        (prev)->next = (elem)->next;                            \
                else                                                            \
                        (head) = (elem)->next;                                  \
                if ((tail) == (elem))                                           \
                        (tail) = (prev);                                        \
                (elem)->next = NULL;                                            \
        } while (0)

/* Takes elem, which must be the first element, off the queue. */
#define ZR_FIFO_SHIFT(head, tail, elem, next)                                   \
        do {                                                                    \
                (head) = (elem)->next;                                          \
                if (!(head))                                                    \
                        (tail) = NULL;                                          \
                (elem)->next = NULL;                                            \
        } while (0)

#endif
