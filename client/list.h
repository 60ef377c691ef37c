/* list.h: the connection's lists of what it has open (datasets, sets,
 * loaders): doubly linked through each element's next and prev fields, the
 * head in the connection. Macros, for any element type with those fields; an
 * argument may be evaluated more than once, so pass plain lvalues.
 */
#ifndef ZRC_LIST_H
#define ZRC_LIST_H

#include <stddef.h>

/* Puts elem first. */
#define ZRC_LIST_PUSH(head, elem)                                               \
        do {                                                                    \
                (elem)->prev = NULL;                                            \
                (elem)->next = (head);                                          \
                if (head)                                                       \
                        (head)->prev = (elem);                                  \
                (head) = (elem);                                                \
        } while (0)

/* Takes elem out (nothing changes if it was never put in). */
#define ZRC_LIST_UNLINK(head, elem)                                             \
        do {                                                                    \
                if ((elem)->prev)                                               \
                        (elem)->prev->next = (elem)->next;                      \
                else if ((head) == (elem))                                      \
                        (head) = (elem)->next;                                  \
                if ((elem)->next)                                               \
                        (elem)->next->prev = (elem)->prev;                      \
        } while (0)

#endif
