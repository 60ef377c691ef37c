/* holder.h: who holds a store, for the message of a refused open or write.
 *
 * A store's lock is a flock() on its meta.zr (store.h, "Ownership"): shared by
 * readers, exclusive for the one writer. flock() says that a lock is held, not
 * by whom, so a refusal (ZR_E_LOCKED) names the holders from two sources:
 *
 *   - the kernel's lock table, /proc/locks: every process of this machine that
 *     holds a flock on that very file (its device and inode), with the lock's
 *     kind (READ: a reader, WRITE: the writer), its pid as this process's pid
 *     namespace sees it (0 for one it cannot see) and, from /proc/PID, its
 *     command and uid. On a network file system it lists this machine's holders
 *     only;
 *   - writer.zr, a line a writer leaves in the store's directory while it
 *     holds the exclusive lock (pid, host, uid, since when), so that a reader
 *     on another machine learns which host writes. It is written when the
 *     exclusive lock is taken and removed before it is let go; a writer killed
 *     leaves it behind, so it is shown as a record, never as proof. Readers
 *     leave no record (they may not write the directory).
 *
 * Both are read only to describe a refusal: nothing decides anything by them.
 * Their contents are hostile input (anybody who may write the directory can
 * plant a writer.zr): bounded, and reduced to printable ASCII in a message.
 * It does not take or test locks; store.c does.
 */
#ifndef ZR_STORE_HOLDER_H
#define ZR_STORE_HOLDER_H

#include <stdbool.h>
#include <stddef.h>

#define ZR_HOLDER_NAME "writer.zr"

/* Writes writer.zr in dirfd anew (newfile.h): one line, "pid=P host=H uid=U
 * since=YYYY-MM-DDTHH:MM:SSZ". Best effort, never synced: a failure leaves no
 * record and changes nothing else. Called with the exclusive lock held. */
void zr_holder_record(int dirfd);

/* Removes writer.zr, best effort, before the exclusive lock is let go. */
void zr_holder_forget(int dirfd);

/* Writes into buf (len bytes, always terminated) who holds the lock on
 * meta_fd that an attempt to take it (`exclusive`: the writer's) just met:
 * "read by pid 812 (zrecordd, uid 1000) on this machine" or "written by ...",
 * several holders separated by "; ", or, when no process of this machine
 * holds it, that a process of another machine (or one this machine does not
 * show) does, followed by writer.zr's record if there is one. With
 * `others_only` one lock of the calling process (the caller's own) is left
 * out. */
void zr_holder_describe(int dirfd, int meta_fd, bool exclusive, bool others_only, char *buf,
                        size_t len);

/* The flocks /proc/locks shows on meta_fd's file but the caller's own (one of
 * this process's): those of other processes (of another pid namespace too)
 * and of other descriptions in this process. 0 if none, or if the table
 * cannot be read. Only this machine's holders: a count of 0 proves nothing
 * about other machines. */
unsigned zr_holder_others(int meta_fd);

#endif
