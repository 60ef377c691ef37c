/* killpoint.h: numbered points where a test build stops the process, so that
 * recovery can be checked after a kill at every step of every write protocol.
 *
 * Built with -Dkillpoints=true (meson), ZR_KILLPOINT(n) calls zr_killpoint_hit(n);
 * otherwise it compiles to nothing and the store carries no trace of it. At run
 * time the environment selects one point:
 *
 *     ZR_KILLPOINT=<n>[:<hit>]   SIGKILL the process the <hit>-th time (default
 *                                1st) it reaches point <n>
 *
 * read once, at the first point the process reaches. The numbers are stable (a
 * test names them); each point sits *after* the step its name gives, before the
 * next one begins. tests/store/test-killpoints.c runs a child per point and
 * checks the store it leaves. It does not print and never fails otherwise.
 */
#ifndef ZR_STORE_KILLPOINT_H
#define ZR_STORE_KILLPOINT_H

#include "store/killpoint-config.h" /* ZR_KILLPOINTS: 1 with -Dkillpoints=true */

enum zr_killpoint {
        /* append */
        ZR_KP_APPEND_COMPRESSED = 1,  /* records compressed (or sized, raw) */
        ZR_KP_APPEND_FILE_CREATED,    /* a new chunk or .loc file made durable (each) */
        ZR_KP_APPEND_FILES_DURABLE,   /* the directory fsynced after new files */
        ZR_KP_APPEND_DATA_WRITTEN,    /* every record's bytes written */
        ZR_KP_APPEND_TABLE_WRITTEN,   /* one .loc segment's run of entries written (each) */
        ZR_KP_APPEND_COMMITTED,       /* meta.zr written: the commit point passed */
        /* header (every write of meta.zr, whatever the operation) */
        ZR_KP_HEADER_BEFORE = 10,     /* about to write meta.zr */
        ZR_KP_HEADER_AFTER,           /* meta.zr written, not synced */
        /* sync */
        ZR_KP_SYNC_CHUNKS = 15,       /* chunk files fdatasynced */
        ZR_KP_SYNC_LOCS,              /* .loc files fdatasynced */
        ZR_KP_SYNC_META,              /* meta.zr fdatasynced */
        /* delete */
        ZR_KP_DELETE_SYNCED = 20,     /* the store synced before the batch */
        ZR_KP_JOURNAL_CREATED,        /* delete.zr created, still empty */
        ZR_KP_JOURNAL_WRITTEN,        /* delete.zr written, not yet fsynced */
        ZR_KP_JOURNAL_DURABLE,        /* delete.zr and the directory fsynced */
        ZR_KP_DELETE_SWAP,            /* one journaled table write applied (each) */
        ZR_KP_DELETE_TABLE_SYNCED,    /* the .loc files fdatasynced */
        ZR_KP_DELETE_HEADER_SYNCED,   /* meta.zr with the new length fdatasynced */
        ZR_KP_JOURNAL_REMOVED,        /* delete.zr unlinked */
        /* compact */
        ZR_KP_COMPACT_SYNCED = 30,    /* the store synced before the pass */
        ZR_KP_COMPACT_SCRATCH_RAISED, /* frontier raised over scratch space (header) */
        ZR_KP_COMPACT_SCRATCH_COPIED, /* a record's bytes copied to scratch */
        ZR_KP_COMPACT_SCRATCH_ENTRY,  /* its entry pointed at scratch */
        ZR_KP_COMPACT_PIECE,          /* one piece of a move copied (each) */
        ZR_KP_COMPACT_MOVED,          /* a record copied to its place, entry not yet updated */
        ZR_KP_COMPACT_ENTRY,          /* its entry pointed at its place */
        ZR_KP_COMPACT_DATA_SYNCED,    /* chunks and .loc fdatasynced at the end of a pass */
        ZR_KP_COMPACT_TAIL,           /* meta.zr with the new frontier fdatasynced */
        ZR_KP_COMPACT_CHUNKS_REMOVED, /* chunk files past the frontier unlinked */
        ZR_KP_COMPACT_HOLE_PUNCHED,   /* the rest of the tail chunk punched */
        ZR_KP_COMPACT_TAIL_RESTORED,  /* a pass stopped by max_moves: frontier put back */
        /* dictionary */
        ZR_KP_DICT_TMP_DURABLE = 45,  /* dict.zr.tmp written and fdatasynced */
        ZR_KP_DICT_RENAMED,           /* renamed to dict.zr, directory fsynced */
        ZR_KP_DICT_FLAGGED,           /* meta.zr with the dictionary flag written */
        /* create */
        ZR_KP_CREATE_META_OPEN = 50,  /* meta.zr's file made (unnamed if it can be) and locked */
        ZR_KP_CREATE_META_NAMED,      /* meta.zr whole and named, the directory not yet synced */
        /* apparent size (docs/FORMAT.md) */
        ZR_KP_FILE_EXTENDED = 55,     /* a file grown to full size for writing, synced (each) */
        ZR_KP_FILE_TRIMMED,           /* a file cut to its data at close (each) */
        ZR_KP_MAX = 64,               /* every number is below this */
};

/* The name of point n ("append-data-written"), or NULL if n is not a point. */
const char *zr_killpoint_name(unsigned n);

#if ZR_KILLPOINTS
/* SIGKILLs the process if ZR_KILLPOINT selects this hit of point n. */
void zr_killpoint_hit(unsigned n);
#define ZR_KILLPOINT(n) zr_killpoint_hit(n)
#else
#define ZR_KILLPOINT(n) do { } while (0)
#endif

#endif
