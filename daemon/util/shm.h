/* shm.h: shared memory as memfds: the daemon's own (read buffers, loader rings)
 * and the ones clients pass in (append data, dictionaries).
 *
 * A daemon-made region is a memfd sized to a multiple of the page size, mapped
 * read-write by the daemon, pre-faulted (so a batch written later costs no page
 * faults; a loader ring instead has its slots faulted in on the workers, one by
 * one, ZR_SHM_LAZY), and sealed against shrink and grow (and against new writable mappings
 * where the kernel has F_SEAL_FUTURE_WRITE), then F_SEAL_SEAL. Its descriptor is
 * what the daemon passes to the client, which maps it read-only.
 *
 * A client-made region must be a memfd sealed F_SEAL_WRITE | F_SEAL_SHRINK |
 * F_SEAL_GROW, so its bytes cannot change between validation and use.
 */
#ifndef ZR_UTIL_SHM_H
#define ZR_UTIL_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define ZR_SHM_PAGE 4096 /* the granule of every size (mappings are page granular) */

typedef struct zr_shm {
        int fd;        /* the memfd, CLOEXEC; -1 when empty */
        void *data;    /* the mapping */
        size_t size;   /* bytes mapped (a multiple of ZR_SHM_PAGE for daemon-made ones) */
        int writable;  /* 1 if data is mapped PROT_WRITE */
} zr_shm;

/* Rounds up to a multiple of ZR_SHM_PAGE; 0 on overflow. */
size_t zr_shm_round(size_t bytes);

/* Creates a daemon-made region of at least `bytes` bytes (rounded up) named
 * `name` (for /proc/PID/fd), mapped read-write, pre-faulted and sealed. Returns 0
 * and fills *ret, or -errno (ENOMEM, EMFILE, ...) with *err set. */
int zr_shm_create(const char *name, size_t bytes, zr_shm *ret, zr_error *err);

enum zr_shm_flags {
        /* Not pre-faulted: its pages cost nothing until the caller touches them
         * (or faults them in where it chooses, e.g. on other threads). */
        ZR_SHM_LAZY = 1u << 0,
        /* Not sealed against writes: the client maps it writable (a loader's
         * control memory, loader/ctlring.h). Still sealed against shrink and
         * grow, so the daemon's mapping never faults; the daemon reads it as
         * any memory a client can write. */
        ZR_SHM_CLIENT_WRITES = 1u << 1,
};

/* As zr_shm_create(), with `flags` (enum zr_shm_flags; 0 is zr_shm_create()). */
int zr_shm_create_flags(const char *name, size_t bytes, unsigned flags, zr_shm *ret,
                        zr_error *err);

/* Faults in the first `bytes` (at most its size) of a daemon-made region made
 * ZR_SHM_LAZY, as zr_shm_create() does for the whole. */
void zr_shm_prefault(zr_shm *shm, size_t bytes);

/* Maps a client-passed memfd read-only after checking that it is a memfd with
 * F_SEAL_WRITE, F_SEAL_SHRINK and F_SEAL_GROW (ZR_E_BAD_FD otherwise) and holds at
 * least `min_bytes` (ZR_E_BUFFER otherwise). Takes ownership of fd on success
 * and on failure (closed). A 0-byte memfd maps nothing (data NULL, size 0). */
int zr_shm_map_sealed(int fd, size_t min_bytes, zr_shm *ret, zr_error *err);

/* Unmaps and closes; leaves *shm empty. NULL or an empty region allowed. */
void zr_shm_release(zr_shm *shm);

/* 1 if this kernel seals daemon-made regions against new writable mappings
 * (F_SEAL_FUTURE_WRITE, Linux 5.1), 0 if not: then a client that holds a
 * region's descriptor can map it writable and change what others read in it.
 * Probed with a one-page memfd; -errno if the probe could not run. */
int zr_shm_seals_future_write(void);

#endif
