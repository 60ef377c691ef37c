/* fuzz.h: the entry point every fuzz target defines: libFuzzer calls it, and
 * so does replay.c, which runs a target's corpus as an ordinary test. */
#ifndef ZR_FUZZ_FUZZ_H
#define ZR_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs the target on one input; returns 0 (libFuzzer's contract). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
