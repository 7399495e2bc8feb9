/*
 * cuda_host.h - the pure host-side arithmetic of the CUDA backend: graph
 * bucket selection, KV pool sizing, decode split choice, and the packing of
 * one step's plan into the single buffer that is copied to the device.
 *
 * Plain C11 with no CUDA dependency, so it is tested on machines without a
 * GPU (tests/test_cuda_host.c). Compiled into libqwinfer only when the CUDA
 * backend is (see the Makefile's CUDA section).
 */
#ifndef QWI_CUDA_HOST_H
#define QWI_CUDA_HOST_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most distinct graph buckets (1, 2, 4, ..., max). */
#define QWI_CUDA_MAX_BUCKETS 24

/* Fill buckets[] with 1, 2, 4, 8, ... up to (and always ending with)
 * max_seqs; returns how many (0 if max_seqs < 1). */
int qwi_cuda_buckets(int32_t max_seqs, int32_t *buckets);

/* The smallest bucket >= n, or -1 when n < 1 or n > the last bucket. */
int32_t qwi_cuda_bucket_for(const int32_t *buckets, int nbuckets, int32_t n);

/* Bytes of one KV block on the GPU: all layers, K and V, bf16. 0 on overflow. */
size_t qwi_cuda_kv_bytes_per_block(const qwi_config *cfg, int32_t block_size);

/* Bytes of one element of the CUDA KV cache for a QW_OPT_KV_CACHE_DTYPE
 * value: 2 for QW_KV_CACHE_AUTO (a hand-built config: bf16, as the engine
 * resolves it) and QW_KV_CACHE_BF16, 1 for QW_KV_CACHE_FP8_E4M3; 0 for
 * what the backend does not keep (QW_KV_CACHE_F32, unknown values). */
int qwi_cuda_kv_elem_bytes(int32_t kv_cache_dtype);

/* Bytes of one KV block: all layers, K and V, elem_bytes (1 or 2) per
 * element. 0 on overflow or a bad argument. */
size_t qwi_cuda_kv_block_bytes(const qwi_config *cfg, int32_t block_size, int elem_bytes);

/* Inputs of the KV pool size decision, all bytes. */
typedef struct qwi_cuda_mem {
    uint64_t total;            /* device total memory                          */
    uint64_t free_now;         /* free after weights, activations, workspace    */
    uint64_t reserve;          /* kept free for graphs, library scratch         */
    uint64_t per_block;        /* qwi_cuda_kv_block_bytes                       */
    int64_t max_useful_blocks; /* max_num_seqs * blocks of one max-length seq    */
} qwi_cuda_mem;

/* Number of KV blocks, from (in order) an explicit count, a byte budget, or
 * memory_fraction of total memory minus what is already in use, the last
 * capped at free_now - reserve (so a fraction near 1.0 means "all that is
 * free but the reserve", not a failure). An explicit count or byte budget
 * must fit in free_now - reserve. QW_ERR_KV_CAPACITY with a message when
 * nothing fits, QW_ERR_INVALID_ARGUMENT for a bad fraction. */
qw_status qwi_cuda_kv_blocks(const qwi_cuda_mem *m, int32_t num_blocks, int64_t kv_cache_bytes,
                             double memory_fraction, int32_t *out);

/* The cuBLASLt algorithm cache key for a GEMM of m rows: m rounded up to a
 * power of two up to 256, then to a multiple of 256. A server's prefill
 * chunks come in every length; keyed on the exact m, each new length would
 * cost a heuristic query and a cache slot, and the cache would fill. With
 * buckets a (N, K) pair has at most 9 + max_rows / 256 entries. The
 * algorithm is chosen for the bucket's m and run at the real m (gemm.cu
 * falls back to an exact query when cuBLASLt refuses that). m < 1: 0. */
int32_t qwi_cuda_gemm_bucket(int32_t m);

/* CUDA graph use per decode batch bucket. The first step of a bucket runs
 * eagerly (warm-up: cuBLASLt heuristics, lazy module loading and the
 * attention kernels' attributes happen outside any capture), the second is
 * captured and launched, later ones replay. A capture or instantiation that
 * fails marks the bucket EAGER_ONLY: it runs eagerly from then on, so a graph
 * problem costs speed, never a failed step. */
typedef enum qwi_cuda_graph_state {
    QWI_GRAPH_NEW = 0,     /* never ran                                   */
    QWI_GRAPH_WARM = 1,    /* ran eagerly once                            */
    QWI_GRAPH_READY = 2,   /* captured and instantiated                   */
    QWI_GRAPH_EAGER_ONLY = 3 /* capture failed, or QWINFER_CUDA_GRAPHS=0 */
} qwi_cuda_graph_state;

typedef enum qwi_cuda_graph_action {
    QWI_GRAPH_RUN_EAGER = 0,
    QWI_GRAPH_CAPTURE = 1,   /* capture, instantiate, then launch         */
    QWI_GRAPH_REPLAY = 2
} qwi_cuda_graph_action;

/* What a decode step of a bucket in state s does. */
qwi_cuda_graph_action qwi_cuda_graph_next(qwi_cuda_graph_state s);
/* The bucket's state after action a ran; ok says whether it succeeded (a
 * failed eager run changes nothing: the step failed for another reason). */
qwi_cuda_graph_state qwi_cuda_graph_after(qwi_cuda_graph_state s, qwi_cuda_graph_action a, bool ok);


/* Header at the start of the packed plan (read by kernels on the device). */
typedef struct qwi_cuda_step_hdr {
    int32_t num_tokens;        /* real rows                                     */
    int32_t num_seqs;          /* real sequences                                */
    int32_t bt_stride;         /* block-table row length of this step           */
    int32_t num_logit_rows;    /* real rows that need logits                    */
    int32_t num_banned;        /* total banned ids                              */
    int32_t max_query_len;
    int32_t num_prefill_tiles; /* entries of tiles                              */
    int32_t pad_;
} qwi_cuda_step_hdr;

/* Byte offsets of each array in the packed buffer. Arrays are padded to
 * the padded counts (tpad rows, spad seqs, lpad logit rows); every offset
 * is a multiple of 16. */
typedef struct qwi_cuda_plan_layout {
    int32_t tpad, spad, lpad, bt_stride, nbanned_cap, ntiles_cap;
    size_t hdr;                /* qwi_cuda_step_hdr                              */
    size_t token_ids;          /* int32 [tpad]; padded rows: 0                  */
    size_t positions;          /* int32 [tpad]; padded rows: 0                  */
    size_t slot_mapping;       /* int32 [tpad]; padded rows: -1 (no write)      */
    size_t row_seq;            /* int32 [tpad]; padded rows: -1                 */
    size_t query_start;        /* int32 [spad+1]; padded seqs: empty at tokens  */
    size_t context_lens;       /* int32 [spad]; padded: 0                       */
    size_t decode_seq;         /* int32 [spad]: 1 the decode kernel's; padded 0 */
    size_t logit_rows;         /* int32 [lpad]: row of logit row i (pad: 0)     */
    size_t logit_seq;          /* int32 [lpad]: seq of logit row i (pad: -1)    */
    size_t temperature;        /* float [lpad]                                  */
    size_t top_p;              /* float [lpad]                                  */
    size_t min_p;              /* float [lpad]                                  */
    size_t top_k;              /* int32 [lpad]                                  */
    size_t do_sample;          /* int32 [lpad]                                  */
    size_t sample_pos;         /* int64 [lpad]: position of the sampled token   */
    size_t seed;               /* uint64 [lpad]                                 */
    size_t banned_start;       /* int32 [lpad+1]                                */
    size_t tiles;              /* int32 [ntiles_cap][2]: (seq, first row)       */
    size_t banned;             /* int32 [nbanned_cap]                           */
    size_t block_tables;       /* int32 [spad][bt_stride], last: every offset
                                  before it depends only on the padded counts
                                  and nbanned_cap, so one graph serves every
                                  block-table stride                            */
    size_t total;
} qwi_cuda_plan_layout;

/* Query rows per tile of the prefill attention kernel. */
#define QWI_CUDA_PREFILL_TILE 64

/* Counts a plan needs before packing: the block-table stride (largest
 * number of blocks any sequence uses), logit rows, banned ids and prefill
 * tiles of QWI_CUDA_PREFILL_TILE rows. */
typedef struct qwi_cuda_plan_counts {
    int32_t bt_stride, num_logit_rows, num_banned, max_query_len;
    int32_t num_tiles;         /* prefill tiles of the prompt rows              */
    int32_t num_decode_rows;   /* decode rows (the decode kernel's)             */
    int32_t max_decode_ctx;    /* longest context among the decode rows         */
    bool decode_only;          /* every sequence is one decode row              */
} qwi_cuda_plan_counts;

void qwi_cuda_plan_count(const qwi_plan *p, int32_t block_size, qwi_cuda_plan_counts *c);

/* Layout for padded counts. */
void qwi_cuda_plan_layout_make(qwi_cuda_plan_layout *L, int32_t tpad, int32_t spad, int32_t lpad,
                               int32_t bt_stride, int32_t nbanned, int32_t ntiles);

/* Pack p into dst (L->total bytes) under layout L built from counts c.
 * Logit rows are the sequences with do_sample or want_logits, in sequence
 * order; their row is the sequence's last row. */
void qwi_cuda_plan_pack(const qwi_plan *p, const qwi_cuda_plan_counts *c,
                        const qwi_cuda_plan_layout *L, void *dst);

#ifdef __cplusplus
}
#endif
/* QWINFER_CUDA_FP8_GEMM (env: the variable's value or NULL): unset, empty
 * or "auto" -> *block true (FP8 linears in 128 x 128 blocks take the
 * block-scaled FP8 GEMM on sm_90, cuda/fp8_block.h); "dequant" -> false
 * (every quantized linear runs weight-only: bf16 activations times its
 * weights rounded to bf16, in the GEMV, qgemm.h's GEMM or dequantized for
 * cuBLASLt by the step's rows). Anything else: QW_ERR_INVALID_ARGUMENT naming
 * the variable and the values it takes. */
qw_status qwi_cuda_fp8_gemm_mode(const char *env, bool *block);

#endif
