/*
 * philox.h - the counter-based random numbers of the sampling semantics:
 * Philox-4x32-10 (Salmon et al., SC'11) keyed by the request's seed, with
 * the token's position as the counter. Header-only so the CPU sampler
 * (lib/sample.c) and the CUDA sampler (cuda/sample.cu) compile the very
 * same code: a request samples the same token on either backend.
 */
#ifndef QWI_PHILOX_H
#define QWI_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#  define QWI_HD __host__ __device__ __forceinline__
#else
#  define QWI_HD static inline
#endif

QWI_HD void qwi_philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k[0];
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k[1];
    c[1] = (uint32_t)p1;
    c[3] = (uint32_t)p0;
    c[0] = n0;
    c[2] = n2;
}

/* Philox-4x32-10 block function, in place on ctr. */
QWI_HD void qwi_philox_block(uint32_t ctr[4], const uint32_t key[2]) {
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        qwi_philox_round(ctr, k);
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
    }
}

/* key = seed, counter = (position lo, position hi, 0, 0); the top 53 bits of
 * the first two output words make the double, so every value is k * 2^-53. */
QWI_HD double qwi_philox_uniform(uint64_t seed, int64_t position) {
    uint64_t pos = (uint64_t)position;
    uint32_t ctr[4] = {(uint32_t)pos, (uint32_t)(pos >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    qwi_philox_block(ctr, key);
    uint64_t bits = ((uint64_t)ctr[0] << 21) | (ctr[1] >> 11);
    return (double)bits * 0x1.0p-53;
}

#endif
