/* access.h: what a request's descriptors prove (PROTOCOL.md section 6).
 *
 * The daemon never resolves a path: a client passes a store's directory and its
 * meta.zr, opened O_RDONLY for read access or O_RDWR for write access (for a
 * set, each stream's directory and meta.zr), or, to create a store, an empty
 * directory it owns. These check such descriptors on the
 * loop thread and fail the request (rq->err) with the protocol's codes:
 * ZR_E_BAD_FD for a descriptor of the wrong kind, ZR_E_NOT_STORE, EACCES,
 * ZR_E_EXISTS, ENOTEMPTY. `what` names the descriptor in messages.
 */
#ifndef ZR_SERVER_ACCESS_H
#define ZR_SERVER_ACCESS_H

#include <stdbool.h>

#include "server/request.h"

/* fd is a usable directory descriptor, not O_PATH. */
int zr_access_dir(zr_request *rq, int fd, const char *what);

/* proof is meta.zr of the store in dirfd (same st_dev, st_ino; dirfd's meta.zr
 * resolved beneath it, on its mount: store/resolve.h), opened for reading, or
 * read-write when `write`. */
int zr_access_proof(zr_request *rq, int dirfd, int proof, bool write, const char *what);

/* dirfd, a set's stream directory as the client passed it, is a directory it
 * opened for reading (zr_access_dir()) and the root's very child `name`
 * (resolved beneath rootfd, on its mount): EACCES if it is another. */
int zr_access_member(zr_request *rq, int rootfd, const char *name, int dirfd,
                     const char *what);

/* dirfd is empty (ZR_E_EXISTS if it holds meta.zr, ENOTEMPTY if anything else)
 * and owned by the peer (EACCES), unless the peer is root. */
int zr_access_new_dir(zr_request *rq, int dirfd);

#endif
