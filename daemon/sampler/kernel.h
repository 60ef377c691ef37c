/* kernel.h: how the samplers' inner loops are compiled.
 *
 * A kernel is a loop over a block of independent lanes with no branch inside, written in plain C so the compiler vectorizes it. ZR_SAMPLER_KERNEL asks
 * GCC to vectorize it whatever the build's optimization level, and, on x86-64,
 * builds it for AVX-512, AVX2 and the baseline ISA, picked at load time (ifunc).
 * Every clone computes the same bits: the kernels use integer arithmetic only.
 * Other compilers get the plain function. Building with ZR_SAMPLER_GENERIC_ONLY
 * defined gives the baseline-ISA kernels only (and no AVX-512 helpers), so the
 * tests can check that path on a machine that would never pick it.
 */
#ifndef ZR_SAMPLER_KERNEL_H
#define ZR_SAMPLER_KERNEL_H

/* Lanes per iid kernel call: a multiple of every vector width (64 bytes of uint64
 * is 8 lanes) and small enough that a block with a rejected draw, redone lane by
 * lane, costs little. */
#define ZR_SAMPLER_BLOCK 64

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
        !defined(ZR_SAMPLER_GENERIC_ONLY)
#  define ZR_SAMPLER_KERNEL \
        __attribute__((optimize("O3"), \
                       target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__)
#  define ZR_SAMPLER_KERNEL __attribute__((optimize("O3")))
#else
#  define ZR_SAMPLER_KERNEL
#endif

#endif
