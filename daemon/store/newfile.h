/* newfile.h: the files a store creates, and whose they are.
 *
 * Every file a store creates (meta.zr, N.chunk, N.loc, dict.zr, delete.zr,
 * schema.msgpack and their temporary names) is new: whatever entry has its
 * name is removed first (a file left by an interrupted operation, or one that
 * a user who may write the directory planted there), and the file is created
 * with O_CREAT | O_EXCL through zr_resolve_open(). A planted file is never
 * opened as the store's own: the daemon never writes into a file somebody
 * else made, and never maps one (chunks.h).
 *
 * Whose files are they? The process that creates a file owns it: the daemon's
 * user (the service user `zrecord` for the system daemon, the user for a
 * per-user daemon). The store's owner is the owner of its directory (the client
 * that created the store: DATASET_CREATE needs a directory of its own). A new
 * file gets:
 *
 *   - owner: the daemon's user, read and write;
 *   - group: the directory's (a set-group-ID directory gives it; otherwise the
 *     daemon changes it, which works when it is a member of that group; when it
 *     is not, the group gets no rights rather than the daemon's own group's);
 *   - the group's and others' rights: read and write as the directory gives
 *     them to its group and to others (for a directory with an ACL, its
 *     owning-group entry), never execute, and no write in a sticky directory;
 *     where the directory has a default ACL, the entries it gives new files
 *     instead (execute dropped);
 *   - the store's owner, when that is not the daemon's user: read and write,
 *     through an ACL entry (user:<owner>:rw-), so that the creator can open
 *     its store for writing again (a meta.zr it can open O_RDWR is the proof
 *     of write access, PROTOCOL.md section 6). On a file system without ACLs
 *     the owner has only the group's or others' rights.
 *
 * So a group member has through the daemon what the directory gives the group,
 * and the creator what an owner has. The files count against the daemon's
 * user's disk quota, not the creator's (the daemon cannot give files away
 * without CAP_CHOWN): docs/SECURITY.md, "Store files".
 */
#ifndef ZR_STORE_NEWFILE_H
#define ZR_STORE_NEWFILE_H

#include "util/error.h"

/* Creates `name` anew in dirfd: removes an entry of that name (ENOENT is
 * fine; a directory, or an entry the daemon may not remove, is an error),
 * then opens it O_CREAT | O_EXCL with `flags` (O_RDWR or O_WRONLY, ...)
 * through zr_resolve_open() and gives it the ownership above
 * (zr_newfile_own()). Returns the descriptor (the caller's; O_CLOEXEC) or a
 * negative code with *err (may be NULL) naming `name` (-EEXIST if another
 * process made one in between); nothing is left behind on failure. */
int zr_newfile_create(int dirfd, const char *name, int flags, zr_error *err);

/* The mode to create a file in dirfd with before zr_newfile_own(): 0600, or
 * 0666 where dirfd has a default ACL (which then decides, not the umask). */
unsigned zr_newfile_mode(int dirfd);

/* Gives fd, a file just created in dirfd (also an unnamed O_TMPFILE one before
 * it is linked), the group, rights and ACL entry above. Returns 0 or a
 * negative code with *err: -errno of fstat, fchmod or fsetxattr (EOPNOTSUPP,
 * no ACLs, is not an error: the owner then has no entry). */
int zr_newfile_own(int fd, int dirfd, zr_error *err);

#endif
