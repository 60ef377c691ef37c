/* newfile.c: new store files, created fresh, with the group and rights their
 * directory gives and an ACL entry for the store's owner (newfile.h).
 *
 * ACLs are read and written as the kernel's xattr blobs
 * (system.posix_acl_access / _default: a version word, then {tag, perm, id}
 * entries sorted by tag and id), so no libacl is needed. Only the file's owner
 * sets them, which the daemon is for the files it creates.
 */
#include "store/newfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "store/resolve.h"

#define ACL_ACCESS "system.posix_acl_access"
#define ACL_DEFAULT "system.posix_acl_default"
#define ACL_VERSION 2
#define ACL_USER_OBJ 0x01
#define ACL_USER 0x02
#define ACL_GROUP_OBJ 0x04
#define ACL_GROUP 0x08
#define ACL_MASK 0x10
#define ACL_OTHER 0x20
#define ACL_NO_ID 0xffffffffu
/* Entries read or written at most: an ACL longer than this is not one a
 * directory of stores needs, and is treated as unreadable. */
#define ACL_ENTRIES_MAX 64

#define PERM_R 4
#define PERM_W 2

typedef struct acl_entry {
        uint16_t tag;
        uint16_t perm;
        uint32_t id;
} acl_entry;

typedef struct acl {
        size_t n;
        acl_entry e[ACL_ENTRIES_MAX + 1];
} acl;

static uint16_t le16(const uint8_t *p) {
        return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
               (uint32_t)p[3] << 24;
}

static void put16(uint8_t *p, uint16_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
        put16(p, (uint16_t)v);
        put16(p + 2, (uint16_t)(v >> 16));
}

/* Reads the ACL `name` of fd: 1 and *ret if it has one, 0 if not (or none
 * this code can use), -errno on another failure. */
static int acl_read(int fd, const char *name, acl *ret) {
        uint8_t buf[4 + 8 * ACL_ENTRIES_MAX];
        ssize_t n = fgetxattr(fd, name, buf, sizeof(buf));
        if (n < 0) /* none, no ACLs here, too long for us, or a filter refusing xattrs */
                return errno == ENODATA || errno == EOPNOTSUPP || errno == ERANGE ||
                       errno == EPERM ? 0 : -errno;
        if (n < 4 || (n - 4) % 8 != 0 || le32(buf) != ACL_VERSION)
                return 0;
        ret->n = (size_t)(n - 4) / 8;
        for (size_t i = 0; i < ret->n; i++) {
                const uint8_t *p = buf + 4 + 8 * i;
                ret->e[i] = (acl_entry){ le16(p), le16(p + 2), le32(p + 4) };
        }
        return 1;
}

static acl_entry *acl_find(acl *a, uint16_t tag, uint32_t id) {
        for (size_t i = 0; i < a->n; i++)
                if (a->e[i].tag == tag && (id == ACL_NO_ID || a->e[i].id == id))
                        return &a->e[i];
        return NULL;
}

/* Sets (adds or replaces) an entry; 0, or -E2BIG if full. */
static int acl_set(acl *a, uint16_t tag, uint32_t id, uint16_t perm) {
        acl_entry *e = acl_find(a, tag, id);
        if (!e) {
                if (a->n >= ACL_ENTRIES_MAX)
                        return -E2BIG;
                e = &a->e[a->n++];
                e->tag = tag;
                e->id = id;
        }
        e->perm = perm;
        return 0;
}

static int entry_cmp(const void *x, const void *y) {
        const acl_entry *a = x, *b = y;
        if (a->tag != b->tag)
                return a->tag < b->tag ? -1 : 1;
        return a->id < b->id ? -1 : a->id > b->id;
}

static int acl_write(int fd, acl *a) {
        uint8_t buf[4 + 8 * ACL_ENTRIES_MAX];
        qsort(a->e, a->n, sizeof(a->e[0]), entry_cmp);
        put32(buf, ACL_VERSION);
        for (size_t i = 0; i < a->n; i++) {
                uint8_t *p = buf + 4 + 8 * i;
                put16(p, a->e[i].tag);
                put16(p + 2, a->e[i].perm);
                put32(p + 4, a->e[i].id);
        }
        return fsetxattr(fd, ACL_ACCESS, buf, 4 + 8 * a->n, 0) < 0 ? -errno : 0;
}

unsigned zr_newfile_mode(int dirfd) {
        return fgetxattr(dirfd, ACL_DEFAULT, NULL, 0) > 0 ? 0666 : 0600;
}

int zr_newfile_own(int fd, int dirfd, zr_error *err) {
        struct stat ds, fs;
        acl a = {0}, dacl = {0};
        int r;

        if (fstat(dirfd, &ds) < 0 || fstat(fd, &fs) < 0)
                return zr_error_errno(err, errno, "new store file: stat");
        int group_ok = fs.st_gid == ds.st_gid;
        if (!group_ok && fchown(fd, (uid_t)-1, ds.st_gid) == 0)
                group_ok = 1;
        int sticky = (ds.st_mode & S_ISVTX) != 0;
        uint16_t wmask = sticky ? PERM_R : PERM_R | PERM_W;

        r = acl_read(fd, ACL_ACCESS, &a); /* inherited from a default ACL */
        if (r < 0)
                return zr_error_errno(err, -r, "new store file: reading its ACL");
        if (r > 0) {
                /* what the directory's default ACL gives new files, without execute */
                for (size_t i = 0; i < a.n; i++)
                        a.e[i].perm &= PERM_R | PERM_W;
                if (!group_ok && acl_find(&a, ACL_GROUP_OBJ, ACL_NO_ID))
                        acl_find(&a, ACL_GROUP_OBJ, ACL_NO_ID)->perm = 0;
        } else {
                /* what the directory gives its group (its owning-group entry when it
                 * has an ACL, whose mode bits then show the mask) and others */
                unsigned dgroup = (ds.st_mode >> 3) & 7;
                r = acl_read(dirfd, ACL_ACCESS, &dacl);
                if (r > 0 && acl_find(&dacl, ACL_GROUP_OBJ, ACL_NO_ID))
                        dgroup = acl_find(&dacl, ACL_GROUP_OBJ, ACL_NO_ID)->perm;
                a.n = 0;
                acl_set(&a, ACL_GROUP_OBJ, ACL_NO_ID, group_ok ? (uint16_t)(dgroup & wmask) : 0);
                acl_set(&a, ACL_OTHER, ACL_NO_ID, (uint16_t)(ds.st_mode & wmask));
        }
        acl_set(&a, ACL_USER_OBJ, ACL_NO_ID, PERM_R | PERM_W);
        acl_entry *m = acl_find(&a, ACL_MASK, ACL_NO_ID);
        if (m) /* recomputed below */
                *m = a.e[--a.n];
        if (ds.st_uid != geteuid() && acl_set(&a, ACL_USER, (uint32_t)ds.st_uid,
                                              PERM_R | PERM_W) < 0)
                return zr_error_set(err, E2BIG, "new store file: the directory's ACL has "
                                    "too many entries");

        uint16_t mask = 0;
        int named = 0;
        for (size_t i = 0; i < a.n; i++)
                if (a.e[i].tag == ACL_USER || a.e[i].tag == ACL_GROUP) {
                        named = 1;
                        mask |= a.e[i].perm;
                } else if (a.e[i].tag == ACL_GROUP_OBJ) {
                        mask |= a.e[i].perm;
                }
        mode_t mode = 0600 | (mode_t)(acl_find(&a, ACL_GROUP_OBJ, ACL_NO_ID)->perm << 3) |
                      acl_find(&a, ACL_OTHER, ACL_NO_ID)->perm;
        if (fchmod(fd, mode) < 0)
                return zr_error_errno(err, errno, "new store file: chmod");
        if (!named)
                return 0;
        acl_set(&a, ACL_MASK, ACL_NO_ID, mask);
        r = acl_write(fd, &a);
        if (r < 0 && r != -EOPNOTSUPP && r != -EPERM) /* no ACLs: the owner has no entry */
                return zr_error_errno(err, -r, "new store file: setting its ACL");
        return 0;
}

int zr_newfile_create(int dirfd, const char *name, int flags, zr_error *err) {
        if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
                return zr_error_errno(err, errno, "%s: removing the entry in the way", name);
        int fd = zr_resolve_open(dirfd, name, flags | O_CREAT | O_EXCL,
                                 (mode_t)zr_newfile_mode(dirfd), err);
        if (fd < 0)
                return fd;
        int r = zr_newfile_own(fd, dirfd, err);
        if (r < 0) {
                close(fd);
                unlinkat(dirfd, name, 0);
                return r;
        }
        return fd;
}
