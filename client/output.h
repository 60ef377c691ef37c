/* output.h: how the zrecord tool writes values: JSON strings, numbers by dtype,
 * hex bytes. Writes to a FILE the caller gives; never exits.
 */
#ifndef ZRECORD_OUTPUT_H
#define ZRECORD_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A parsed dtype string, for printing elements. */
typedef struct out_dtype {
        char order;        /* '<', '>' or '|' */
        char kind;         /* 'b', 'i', 'u', 'f', 'c' */
        unsigned itemsize;
} out_dtype;

/* Parses "<f4", "|u1", ... Returns 0 or -EINVAL. */
int out_dtype_parse(const char *s, out_dtype *ret);

/* Writes s as a JSON string (quoted and escaped). */
void out_json_string(FILE *f, const char *s);

/* Writes the element at p (itemsize bytes, in the dtype's byte order) as a
 * number: JSON (true/false, numbers, complex as [re, im], non-finite floats as
 * the strings "nan", "inf", "-inf") or text (numpy-like: True/False, 1.5, 1+2j). */
void out_value(FILE *f, const out_dtype *dt, const uint8_t *p, bool json);

/* Writes n bytes as lower-case hex pairs, separated by `sep` (0: none). */
void out_hex(FILE *f, const uint8_t *p, size_t n, char sep);

/* Writes a shape: "(28, 28)" as text, "[28, 28]" as JSON. */
void out_shape(FILE *f, const uint64_t *shape, uint32_t ndim, bool json);

#endif
