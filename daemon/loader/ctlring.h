/* ctlring.h: a loader's control memory, the completion queues a client and the
 * daemon share (PROTOCOL.md section 10, "Control memory").
 *
 * One page, a memfd the daemon makes and the client maps read-write (sealed
 * against shrink and grow, never against writes). The daemon writes the
 * announcement queue (what BATCH would say: step, ring, slot), its `published`
 * count, its `consumed` count of releases and its `wants` flag; the client
 * writes the release queue, its `released` count and its `waiting` flag.
 *
 * The daemon never trusts the page: it reads each word the client may write
 * once (the client may change it at any moment), judges the count against its
 * own (at most ZR_CTL_ENTRIES ahead of what it consumed, never behind), and
 * leaves every (ring, slot) to its caller to check against what the loader
 * holds. Its own counts live in this struct, never read back from the page.
 * Callers serialize the calls on one ctlring (the engine mutex).
 */
#ifndef ZR_LOADER_CTLRING_H
#define ZR_LOADER_CTLRING_H

#include <stdint.h>

#include "util/error.h"
#include "util/shm.h"

#define ZR_CTL_MAGIC 0x5143525au /* "ZRCQ", little-endian */
#define ZR_CTL_VERSION 1u
#define ZR_CTL_BYTES 4096u
#define ZR_CTL_ENTRIES 64u /* per queue: at least ZR_PREFETCH_MAX */

/* Byte offsets in the page (PROTOCOL.md); each word on its own 64 bytes */
#define ZR_CTL_OFF_MAGIC 0u      /* u32 magic, u32 version, u32 entries */
#define ZR_CTL_OFF_PUBLISHED 64u /* u64, daemon: announcements written */
#define ZR_CTL_OFF_CONSUMED 128u /* u64, daemon: releases taken */
#define ZR_CTL_OFF_RELEASED 192u /* u64, client: releases written */
#define ZR_CTL_OFF_WAITING 256u  /* u32, client: 1 while it may block on its socket */
#define ZR_CTL_OFF_WANTS 320u    /* u32, daemon: 1 while it stopped for lack of a slot */
#define ZR_CTL_OFF_ANN 512u      /* ZR_CTL_ENTRIES x 16: u64 step, u32 ring, u32 slot */
#define ZR_CTL_ANN_BYTES 16u
#define ZR_CTL_OFF_REL 1536u     /* ZR_CTL_ENTRIES x 32: u32 ring, u32 slot, u64
                                  * taken_ns, u64 wait_ns, u64 unused */
#define ZR_CTL_REL_BYTES 32u

typedef struct zr_ctlring {
        zr_shm shm;
        uint64_t published; /* announcements written (the daemon's own count) */
        uint64_t consumed;  /* releases taken */
} zr_ctlring;

/* One release entry, as read (once) from the page. */
typedef struct zr_ctl_release {
        uint32_t ring, slot;
        uint64_t taken_ns, wait_ns;
} zr_ctl_release;

/* Makes the page (a memfd the client may map writable). Returns 0 or -errno
 * with *err set. */
int zr_ctlring_create(zr_ctlring *c, zr_error *err);

/* Unmaps and closes; an empty or zeroed one is fine. */
void zr_ctlring_destroy(zr_ctlring *c);

/* Writes an announcement and then its count (release order). */
void zr_ctlring_publish(zr_ctlring *c, uint64_t step, uint32_t ring, uint32_t slot);

/* After a publish: 1 if the client said it may block on its socket (a full
 * fence first, so that either it sees the announcement or this sees its flag). */
int zr_ctlring_client_waiting(zr_ctlring *c);

/* Releases written and not yet taken: 0..ZR_CTL_ENTRIES, or -1 if the
 * client's count is a lie (behind what was taken, or too far ahead). Reads the
 * count once; *tail gets it. */
int zr_ctlring_pending(zr_ctlring *c, uint64_t *tail);

/* The client's count of releases written, read once (for a look without
 * the caller's lock: judged only by zr_ctlring_pending() later). */
uint64_t zr_ctlring_released(const zr_ctlring *c);

/* Reads the release entry of index `index` (consumed <= index < tail) once. */
void zr_ctlring_entry(const zr_ctlring *c, uint64_t index, zr_ctl_release *ret);

/* Takes releases up to `tail` (stores the count for the client). */
void zr_ctlring_consume(zr_ctlring *c, uint64_t tail);

/* Sets or clears the daemon's `wants` flag; setting it is followed by a full
 * fence, so that the caller's next zr_ctlring_pending() sees a release the
 * client wrote before it read the flag as 0. */
void zr_ctlring_set_wants(zr_ctlring *c, int on);

#endif
