/* access.h: what a request's descriptors prove (PROTOCOL.md section 6).
 *
 * The daemon never resolves a path: a client passes a store's directory and its
 * meta.zr, opened O_RDONLY for read access or O_RDWR for write access, or, to
 * create a store, an empty directory it owns. These check such descriptors on the
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

/* proof is meta.zr of the store in dirfd (same st_dev, st_ino), opened for
 * reading, or read-write when `write`. */
int zr_access_proof(zr_request *rq, int dirfd, int proof, bool write, const char *what);

/* dirfd is empty (ZR_E_EXISTS if it holds meta.zr, ENOTEMPTY if anything else)
 * and owned by the peer (EACCES), unless the peer is root. */
int zr_access_new_dir(zr_request *rq, int dirfd);

#endif
