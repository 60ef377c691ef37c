/* dtype.h: numpy dtype strings ("<f4", "|u1", "|b1", ">i8"), parsed and checked.
 *
 * A dtype string is a byte-order character, a kind letter and an item size in
 * bytes, as numpy's `dtype.str` prints it. zrecord stores plain numbers only:
 *
 *     kind  meaning            item sizes
 *     b     bool               1
 *     i     signed integer     1, 2, 4, 8
 *     u     unsigned integer   1, 2, 4, 8
 *     f     float              2 (float16), 4, 8
 *     c     complex            8, 16
 *
 * Byte order: '<' little, '>' big, '|' not applicable (only for 1-byte types),
 * '=' native (this host, so '<' on every supported platform); a missing order
 * character means native too. The canonical form that zrecord writes and compares
 * is numpy's own: '|' for 1-byte types, '<' or '>' otherwise. Everything else
 * (objects 'O', strings 'S'/'U', void 'V', datetimes 'M'/'m', long double f12/f16,
 * '|' on a multi-byte type) is refused: it either has no fixed meaning on disk or
 * no use in a training set. The daemon never byte-swaps: "<f4" and ">f4" are
 * different dtypes and a batch must match the schema's exactly.
 */
#ifndef ZR_DATASET_DTYPE_H
#define ZR_DATASET_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

/* Longest dtype string accepted (canonical ones are 3 or 4 characters). */
#define ZR_DTYPE_STR_MAX 8

typedef struct zr_dtype {
        char order;        /* '<', '>' or '|' */
        char kind;         /* 'b', 'i', 'u', 'f' or 'c' */
        uint32_t itemsize; /* bytes per element */
        char str[ZR_DTYPE_STR_MAX]; /* canonical form, NUL-terminated */
} zr_dtype;

/* Parses `s` (NUL-terminated, not NULL) into *ret. Returns 0, or -ZR_E_SCHEMA with
 * a message naming the string and what is wrong with it. */
int zr_dtype_parse(const char *s, zr_dtype *ret, zr_error *err);

/* As zr_dtype_parse() for `len` bytes that need not be NUL-terminated (a msgpack
 * string). */
int zr_dtype_parse_n(const char *s, size_t len, zr_dtype *ret, zr_error *err);

/* 1 if a and b are the same dtype (canonical forms equal), else 0. */
int zr_dtype_equal(const zr_dtype *a, const zr_dtype *b);

#endif
