/* mapguard.h: reads of file mappings that cannot kill the process.
 *
 * A read through a mapping of a file, past the end of the file (truncated by
 * someone after the mapping was made), raises SIGBUS, whose default action
 * kills the daemon and every client with it. The store maps only files that
 * belong to the daemon's user and that nobody else may write (store/chunks.h),
 * but the daemon's own user, or root, may still truncate one (a per-user
 * daemon's client is that user). zr_mapguard_run() runs a function so that a
 * SIGBUS raised in the calling thread while it runs ends the function and
 * makes the call return -EFAULT: the request that met the truncated file
 * fails, and the daemon lives.
 *
 * How: a process-wide SIGBUS handler (installed on first use, SA_NODEFER |
 * SA_ONSTACK) jumps (siglongjmp) back into the guarded call of the thread that
 * faulted. A SIGBUS outside any guarded call goes to the action that was there
 * before (by default: the process dies, as it would have).
 *
 * What the guarded function may do: read mappings, write memory it owns,
 * call code that allocates nothing and takes no lock (memcpy, zstd's one-shot
 * decompression into a context it resets at its next call). A jump out of it
 * abandons whatever it was doing, so it must leave no state that a later call
 * relies on half-changed.
 */
#ifndef ZR_UTIL_MAPGUARD_H
#define ZR_UTIL_MAPGUARD_H

/* Runs fn(arg) and returns its value, or -EFAULT if a SIGBUS interrupted it.
 * Guarded calls nest (each returns to its own caller). Any thread. */
int zr_mapguard_run(int (*fn)(void *arg), void *arg);

#endif
