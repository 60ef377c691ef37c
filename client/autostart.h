/* autostart.h: the zrecord tool's private daemon, started when none answers
 * (autostart.c). */
#ifndef ZRECORD_AUTOSTART_H
#define ZRECORD_AUTOSTART_H

#include <stddef.h>

/* Starts the user's private zrecordd unless one answers at its path (as the
 * Python client does); returns 0 with that path in sock[sock_size], or -errno
 * with why[size] saying what stopped it (a binary or directory refused, none
 * found, a daemon that did not become ready). */
int autostart_private_daemon(char *sock, size_t sock_size, char *why, size_t size);

#endif
