/* files.h: scratch files and directories of the tests, and what the page
 * cache holds of a file. Nothing here asserts: failures are returned.
 */
#ifndef ZR_TESTS_LIB_FILES_H
#define ZR_TESTS_LIB_FILES_H

#include <stdint.h>

/* A scratch directory, "$TMPDIR/zr-TAG-XXXXXX" (/tmp without $TMPDIR), and a
 * descriptor of it (O_DIRECTORY, CLOEXEC). */
typedef struct tl_scratch {
        char path[256];
        int fd;
} tl_scratch;

/* Makes s. 0, or -errno (s->fd is then -1). */
int tl_scratch_new(tl_scratch *s, const char *tag);

/* Closes s and removes its tree (best effort). */
void tl_scratch_free(tl_scratch *s);

/* Writes `text` to the file `rel` below the directory dfd (a scratch
 * directory laid out as a fake root, say), making the directories on the way
 * and replacing the file. 0, or -errno. */
int tl_put_file(int dfd, const char *rel, const char *text);

/* An unlinked temporary file in $TMPDIR (/tmp without it) holding `size`
 * bytes of a pattern (byte j of every MiB is j x 31 + 7): its descriptor
 * (CLOEXEC), or -errno. The data is written, not synced. */
int tl_temp_file(uint64_t size);

/* Pages of [off, off + len) of fd in the page cache (read or being read), from
 * cachestat() (Linux 6.5); -1 on a kernel without it. */
int64_t tl_cached_pages(int fd, uint64_t off, uint64_t len);

#endif
