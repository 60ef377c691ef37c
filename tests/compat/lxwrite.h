/* lxwrite.h: the stores of make_loaderx_stores.py, written byte by byte from the
 * format's documentation (docs/FORMAT.md, "Compatibility with loaderx 1.5.7"), for
 * when no venv with loaderx 1.5.7 is at hand: a test must not need the network.
 *
 * As loaderx 1.5.7 lays them out: meta.zr version 3; 0.loc and 0.chunk created
 * sparse at 4 GiB; records back to back from offset 0; zstd frames of level 3
 * (zstd_dict: level 19 through a CDict) with the content size and no checksum;
 * dict.zr the bare dictionary; schema.msgpack as msgpack-python packs loaderx's
 * dict. Deleted stores hold the swap-last table with the deleted bytes left in
 * the chunk. */
#ifndef ZR_TESTS_COMPAT_LXWRITE_H
#define ZR_TESTS_COMPAT_LXWRITE_H

/* Writes every fixture store as a child directory of dirfd. */
void lxw_all(int dirfd);

#endif
