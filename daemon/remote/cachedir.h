/* cachedir.h: the disk cache's directories of remote stores (docs/REMOTE.md,
 * "The disk cache").
 *
 * Under the cache's root (its remote/ directory), one directory per store
 * (named by a hash of endpoint, bucket and prefix), and in it one per manifest
 * id: a mirror (mirror.h). A mirror's directory is locked (flock on its file
 * `lock`) while a daemon has it open; these functions never touch a locked
 * one. Best effort where said: the cache is a cache.
 *
 * Threads: any (the caller serializes what it makes and removes).
 */
#ifndef ZR_REMOTE_CACHEDIR_H
#define ZR_REMOTE_CACHEDIR_H

#include <stdint.h>

#include "remote/source.h"
#include "util/error.h"

/* Makes (if needed) and opens the directory of src's mirror of manifest id
 * under rootfd: a descriptor of the caller's, or a negative code. Its
 * identity is the store's (the daemon's registry shares an open store by it). */
int zr_cachedir_mkdir(int rootfd, const zr_rsrc *src, const char *id, zr_error *err);

/* Removes every mirror directory of src's store under rootfd but the one of
 * manifest id `keep` that is not locked by a daemon (older pushes). Best effort. */
void zr_cachedir_sweep(int rootfd, const zr_rsrc *src, const char *keep);

/* Removes mirrors no daemon has open (their lock is free) under rootfd, least
 * recently closed first, until what they hold on disk is at most `limit`
 * bytes (the disk cache's budget less what the open mirrors hold). Returns
 * the bytes removed. Best effort: a mirror that cannot be removed is left. */
uint64_t zr_cachedir_trim(int rootfd, uint64_t limit);

#endif
