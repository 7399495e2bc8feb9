/*
 * backend.h - the one interface between the host engine and a compute
 * backend (CPU now, CUDA later).
 *
 * One call per step, at the model level: forward(plan) runs every layer for
 * a flat varlen batch, writes the new K/V into their pages and samples one
 * token for each sequence that asks for one. Sampling lives in the backend
 * because copying 151936 logits per row back to the host would dominate a
 * GPU step. The backend never makes a scheduling decision; the scheduler
 * never touches a tensor.
 *
 * The backend owns the KV pool memory: num_blocks blocks of block_size
 * tokens per layer, for K and V, laid out [block][slot][kv_head][head_dim].
 */
#ifndef QWI_BACKEND_H
#define QWI_BACKEND_H

#include "common.h"
#include "model.h"
#include "sample.h"

/* Pairs a logprobs row is reduced to (qwi_plan's logprobs fields): [0] the
 * row's target token, [1..k] the top k, k <= QW_MAX_LOGPROBS. */
#define QWI_LP_STRIDE (QW_MAX_LOGPROBS + 1)

/* One step's batch, built by the engine (lib/plan.c) from the scheduler's
 * decisions. All arrays are owned by the engine and valid for the call. */
typedef struct qwi_plan {
    int32_t num_tokens;            /* rows of the batch                         */
    const int32_t *token_ids;      /* [num_tokens]                              */
    const int32_t *positions;      /* [num_tokens] absolute position in its seq */
    const int32_t *slot_mapping;   /* [num_tokens] block*block_size + offset    */

    int32_t num_seqs;
    const int32_t *query_start;    /* [num_seqs+1] row offsets; seq i owns rows
                                      query_start[i] .. query_start[i+1]-1       */
    const int32_t *context_lens;   /* [num_seqs] tokens in KV after this step,
                                      including the rows of this step            */
    const int32_t *block_tables;   /* [num_seqs][max_blocks_per_seq]            */
    int32_t max_blocks_per_seq;

    /* [num_seqs] 1: seq i's one row is a generated token (a decode row); 0:
     * its rows are prompt tokens - a prefill chunk, a 1-row one too - or a
     * recomputation after preemption. A backend with separate prefill and
     * decode attention routes by this, not by the row count, so a prompt
     * token takes the same arithmetic in a chunk of one row as in a chunk
     * of many (chunked == unchunked, cached == cold). NULL: every one-row
     * sequence counts as a decode row. */
    const uint8_t *is_decode;
    const uint8_t *do_sample;      /* [num_seqs] 1: sample after the last row   */
    const qwi_sampling *sampling;  /* [num_seqs] (read where do_sample)         */
    /* Optional logits copy-out: where want_logits[i], the pre-sampling logits
     * of seq i's last row go to logits_out + i*vocab. Both may be NULL. */
    const uint8_t *want_logits;
    float *logits_out;

    int32_t *sampled;              /* [num_seqs] out: token, or -1 if no sample  */

    /* Logprobs (lib/logprobs.h; NULL when no seq of the step wants any).
     * logprobs_n[i] >= 0: seq i's sampled row is reduced by the rule of
     * qwi_logprobs_row (target = the sampled token, top logprobs_n[i]) to
     * logprobs_out + i*QWI_LP_STRIDE. prompt_logprobs_n[i] >= 0: so is each
     * row r of seq i with prompt_target[r] >= 0 (target = that token, top
     * prompt_logprobs_n[i]) to prompt_logprobs_out + r*QWI_LP_STRIDE; these
     * rows need the lm_head too, not only each seq's last row. */
    const int8_t *logprobs_n;      /* [num_seqs]                                */
    qw_logprob *logprobs_out;      /* [num_seqs][QWI_LP_STRIDE] out             */
    const int8_t *prompt_logprobs_n;   /* [num_seqs]                            */
    const int32_t *prompt_target;  /* [num_tokens]: -1 = no prompt logprob      */
    qw_logprob *prompt_logprobs_out;   /* [num_tokens][QWI_LP_STRIDE] out       */
} qwi_plan;

typedef struct qwi_backend qwi_backend;

typedef struct qwi_backend_ops {
    const char *name;
    /* Run the plan. On failure returns a status with a message; the KV
     * contents of the step's slots are then unspecified, nothing else is. */
    qw_status (*forward)(qwi_backend *b, const qwi_plan *plan);
    /* Copy the KV contents (every layer, K and V) of block src[i] to block
     * dst[i] for i in [0, n): a forked session's partial last block. */
    qw_status (*copy_blocks)(qwi_backend *b, const int32_t *src, const int32_t *dst, int32_t n);
    /* Free everything the backend owns. */
    void (*destroy)(qwi_backend *b);
} qwi_backend_ops;

struct qwi_backend {
    const qwi_backend_ops *ops;
    int32_t num_blocks;            /* KV pool size the backend allocated       */
};

typedef struct qwi_backend_config {
    int32_t num_threads;           /* 0 = cores available to the process        */
    int32_t num_blocks;            /* KV pool size; 0 = the backend sizes it
                                      from kv_cache_bytes / memory_fraction    */
    int64_t kv_cache_bytes;        /* 0 = backend default                       */
    double memory_fraction;        /* GPU: fraction of device memory to use     */
    int32_t device_index;          /* GPU ordinal for "cuda:N"                  */
    int32_t max_model_len;
    int32_t block_size;            /* tokens per block                          */
    int32_t max_num_batched_tokens;/* most rows a plan can have                 */
    int32_t max_num_seqs;          /* most sequences a plan can have            */
    struct qwi_progress *progress; /* qw_engine_create's, or NULL: add the bytes
                                      of weights processed (creating thread)  */
    int32_t numerics;              /* qw_numerics: CPU linear-layer rounding
                                      (QW_NUMERICS_FAST = 0 is the default)     */
    int32_t kv_cache_dtype;        /* qw_kv_cache_dtype, resolved by the engine;
                                      the CPU backend takes AUTO (0, a config
                                      built by hand) as its numerics default  */
} qwi_backend_config;

/* Bytes the CPU backend needs for one KV block of this model (all layers,
 * K and V) with elements of kv_cache_dtype (a resolved qw_kv_cache_dtype:
 * f32 4 bytes, bf16 2, fp8 1). 0 on overflow, a bad shape or a dtype
 * other than F32/BF16/FP8_E4M3. */
size_t qwi_cpu_kv_bytes_per_block(const qwi_config *cfg, int32_t block_size,
                                  int32_t kv_cache_dtype);

/* Whether the CPU backend copies matmul weights of weight_bytes into
 * huge-page memory at create, packing f32/bf16 ones into panels (see
 * pack_weights in cpu/cpu_backend.c): QWINFER_CPU_WEIGHTS=copy yes, =mmap
 * no, otherwise when they take at most half of MemAvailable. The one place
 * that rule lives; qw-bench asks it to measure the kernels the engine uses. */
bool qwi_cpu_weights_copied(size_t weight_bytes);

/* Create the CPU backend over a loaded model (borrowed: must outlive the
 * backend). Allocates the KV pool and all scratch up front, so forward()
 * does no allocation. On failure *out is NULL and nothing leaks. */
qw_status qwi_cpu_backend_create(const qwi_model *model, const qwi_backend_config *cfg,
                                 qwi_backend **out);

/* Create the CUDA backend on device bc->device_index: weights uploaded as
 * BF16 (quantized linears in cuda/quant.h's code layout), a bf16 or fp8
 * e4m3 KV cache (bc->kv_cache_dtype F32 -> QW_ERR_UNSUPPORTED; fp8 reads
 * the model's k_scale/v_scale, a bad one -> QW_ERR_FORMAT before any device
 * is looked for), KV pool sized from bc (num_blocks, else kv_cache_bytes, else
 * memory_fraction of device memory after weights and workspace) and
 * reported in (*out)->num_blocks. Without a usable device returns
 * QW_ERR_NO_DEVICE with a message and leaks nothing. Only built when the
 * library is compiled with CUDA (QW_HAVE_CUDA). */
qw_status qwi_cuda_backend_create(const qwi_model *model, const qwi_backend_config *bc,
                                  qwi_backend **out);

#endif
