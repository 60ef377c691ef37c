/* npy.h: the header of numpy's .npy files, parsed without numpy.
 *
 * A .npy file is a magic string "\x93NUMPY", a major and minor version byte,
 * the header's length (u16 LE for version 1.0, u32 LE for 2.0 and 3.0), then
 * the header: a Python dict literal such as
 *
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
 *
 * padded with spaces and a newline, and then the array's bytes. This parser
 * accepts exactly what zrecord can store: a plain number dtype (kinds b, i, u,
 * f, c), C order (fortran_order False), and any shape; structured dtypes,
 * object arrays and Fortran order are refused with a message saying so.
 * Nothing here reads a file: the caller passes bytes.
 */
#ifndef ZRECORD_NPY_H
#define ZRECORD_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zrc.h"

/* The preamble: magic (6), version (2), header length (2 or 4). */
#define NPY_PREAMBLE_MAX 12
/* Largest header accepted. numpy writes a few hundred bytes; version 2.0 allows
 * 4 GiB, which only a hostile file would use. */
#define NPY_HEADER_MAX (UINT32_C(1) << 20)

typedef struct npy_header {
        unsigned major, minor;
        char descr[ZRC_DTYPE_MAX];  /* numpy's dtype string, e.g. "<f4" */
        bool fortran_order;
        uint32_t ndim;
        uint64_t shape[ZRC_NDIM_MAX];
        uint64_t data_offset;       /* where the array's bytes start */
        uint32_t itemsize;
        uint64_t records;           /* shape[0] */
        uint64_t record_bytes;      /* itemsize × prod(shape[1:]) */
        uint64_t data_bytes;        /* records × record_bytes */
} npy_header;

/* From the first `len` bytes of a file, the size of its whole header (the
 * preamble and the dict): sets *ret_size. Returns 0, -EAGAIN if fewer than
 * NPY_PREAMBLE_MAX bytes (10 for version 1.0) were given, or -EINVAL (not a
 * .npy file, an unknown version, a header over NPY_HEADER_MAX) with a message
 * in err[0..errsize). */
int npy_header_size(const void *buf, size_t len, uint64_t *ret_size, char *err, size_t errsize);

/* Parses a whole header (buf[0..len), len >= npy_header_size()). Returns 0 and
 * fills *ret, or -EINVAL with a message: a malformed dict, a missing key, an
 * unsupported dtype, fortran_order True, a 0-d array (no record axis), sizes
 * that overflow. */
int npy_header_parse(const void *buf, size_t len, npy_header *ret, char *err, size_t errsize);

#endif
