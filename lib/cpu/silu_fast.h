/*
 * silu_fast.h - SiLU(gate) * up for the fast numerics mode, with the
 * bf16-KV table's polynomial exp (cpu/kv_bf16.h) instead of libm's expf,
 * so the activation of an MLP runs at vector speed. Exact mode keeps
 * qwr_silu_mul (libm expf), its f32 reference.
 */
#ifndef QWI_CPU_SILU_FAST_H
#define QWI_CPU_SILU_FAST_H

#include "common.h"
#include "cpu/kv_bf16.h"

/* out[i] = gate[i] / (1 + exp(-gate[i])) * up[i] for i < n, exp by
 * kb->vexp (relative error <= QWI_VEXP_MAX_REL_ERR; for gate < -88 the
 * clamped exp still gives |out| < 1e-36 * |gate * up|). Element-wise, so a
 * row's bits do not depend on the batch. out may alias gate or up. No
 * allocation; cannot fail. Thread-safe on disjoint outputs. */
void qwi_cpu_silu_mul_fast(const qwi_cpu_kv_bf16_kernels *kb, const float *gate, const float *up,
                           int64_t n, float *out);

#endif
