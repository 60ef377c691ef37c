/* journal.h: the delete intent journal (delete.zr).
 *
 * A delete batch is a set of table writes (index <- RecordLoc) plus a new
 * length. Before touching the table the store writes them here, durably; after
 * the table and meta.zr are durable it removes the file. On open a complete
 * journal is redone (the writes are absolute, so redoing twice is harmless) and
 * a torn one (bad size or checksum) is discarded: the table was not touched yet.
 * Layout in docs/FORMAT.md.
 */
#ifndef ZR_STORE_JOURNAL_H
#define ZR_STORE_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/error.h"

typedef struct zr_journal_entry {
        uint64_t index;
        zr_loc loc;
} zr_journal_entry;

typedef struct zr_journal {
        uint64_t old_len; /* length before the batch */
        uint64_t new_len; /* length after it */
        size_t n;
        zr_journal_entry *entries; /* malloc()ed, owned by the journal */
} zr_journal;

/* The checksum that ends a journal, of its n bytes before it (FNV-1a, 64
 * bits; for tools and the fuzzer that craft journals too). */
uint64_t zr_journal_checksum(const uint8_t *p, size_t n);

/* Writes `j` to delete.zr in dirfd, fsyncs it and the directory. 0 or -errno. */
int zr_journal_write(int dirfd, const zr_journal *j, zr_error *err);

/* Reads delete.zr. Returns 1 and fills *ret (free with zr_journal_done()) if a
 * complete journal is there, 0 if there is none or it is torn, -errno on an I/O
 * error. */
int zr_journal_read(int dirfd, zr_journal *ret, zr_error *err);

/* Unlinks delete.zr (absent is fine). 0 or -errno. */
int zr_journal_remove(int dirfd, zr_error *err);

/* Frees the entries of *j (NULL allowed) and zeroes it. */
void zr_journal_done(zr_journal *j);

#endif
