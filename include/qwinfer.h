/*
 * qwinfer.h - the public, stable C API of libqwinfer.
 *
 * qwinfer serves Qwen3-family language models from inside the host process.
 * The host owns the loop: it creates an engine, submits requests (from any
 * thread), and calls qw_engine_step() to advance one continuous batch at a
 * time, reading the tokens each step produced from an array of events.
 *
 *   qw_engine_options *o; qw_engine_options_create(&o);
 *   qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, "/models/qwen3-0.6b");
 *   qw_engine *e; qw_engine_create(o, &e); qw_engine_options_destroy(o);
 *
 *   qw_request *r; qw_request_create(&r);
 *   qw_request_set_prompt(r, ids, n_ids);
 *   qw_request_set_int(r, QW_REQ_MAX_TOKENS, 64);
 *   qw_engine_submit(e, r);
 *
 *   qw_event ev[64]; size_t n;
 *   while (qw_engine_has_work(e)) {
 *       qw_engine_step(e, ev, 64, sizeof ev[0], &n);
 *       for (size_t i = 0; i < n; i++) ... ev[i].token ...
 *   }
 *   qw_request_release(r); qw_engine_destroy(e);
 *
 * ABI rules (see docs/api.md):
 *   - Every object is an opaque handle with one create and one destroy/release.
 *   - No struct is passed by value. The only structs are ones the library
 *     writes into caller memory (qw_event); the caller passes their element
 *     size, so fields can be appended in later versions without breaking
 *     old callers.
 *   - Enums have fixed values that never change meaning; new ones are appended.
 *   - Every fallible function returns qw_status; qw_last_error() then holds a
 *     message with the detail, in the calling thread.
 *   - The library never prints, exits or aborts.
 *
 * Threading: qw_engine_submit(), qw_engine_cancel(), qw_request_get_state()
 * and the qw_request_set_* functions of a request that is not yet submitted
 * are safe from any thread at any time. Everything else that takes an engine,
 * and the read functions of a submitted request, must be called from one
 * thread per engine at a time (the "step thread"), typically the thread that
 * calls qw_engine_step(). Options objects are not shared-thread-safe.
 */
#ifndef QWINFER_H
#define QWINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* QW_API marks exported functions. Define it empty (e.g. for cffi's cdef)
 * before including this header if the attribute gets in the way. */
#ifndef QW_API
#  if defined(_WIN32)
#    define QW_API __declspec(dllimport)
#  elif defined(__GNUC__)
#    define QW_API __attribute__((visibility("default")))
#  else
#    define QW_API
#  endif
#endif

/* ---------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------- */
#define QW_VERSION_MAJOR 0
#define QW_VERSION_MINOR 1
#define QW_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, as compiled against. */
#define QW_VERSION_NUMBER 100

/* The version of the library actually loaded, as MAJOR*10000+MINOR*100+PATCH.
 * Thread-safe. Compare with QW_VERSION_NUMBER to detect a mismatch. */
QW_API uint32_t qw_version_number(void);
/* The same as a static string "MAJOR.MINOR.PATCH". Never NULL, never freed. */
QW_API const char *qw_version_string(void);

/* ---------------------------------------------------------------------------
 * Status and errors
 * ------------------------------------------------------------------------- */
typedef enum qw_status {
    QW_OK = 0,
    QW_ERR_INVALID_ARGUMENT = 1,  /* NULL handle, bad option key or value  */
    QW_ERR_OUT_OF_MEMORY = 2,     /* host allocation failed                */
    QW_ERR_IO = 3,                /* file missing, unreadable, mmap failed */
    QW_ERR_FORMAT = 4,            /* malformed model/config/weights file   */
    QW_ERR_UNSUPPORTED = 5,       /* valid but not supported (dtype, arch) */
    QW_ERR_INVALID_STATE = 6,     /* call not allowed in object's state    */
    QW_ERR_NO_DEVICE = 7,         /* requested device not present          */
    QW_ERR_TOKEN_OUT_OF_RANGE = 8,/* token id < 0 or >= vocabulary size    */
    QW_ERR_TOO_LONG = 9,          /* prompt (+max tokens) > max model len  */
    QW_ERR_KV_CAPACITY = 10,      /* request can never fit the KV pool     */
    QW_ERR_BUFFER_TOO_SMALL = 11, /* caller buffer/element size too small  */
    QW_ERR_INTERNAL = 12,         /* a bug in qwinfer; please report       */
    QW_ERR_EMPTY_PROMPT = 13,     /* request has no prompt tokens          */
    QW_ERR_SESSION_BUSY = 14,     /* the session already runs a request    */
    QW_ERR_QUEUE_FULL = 15,       /* QW_OPT_MAX_WAITING_REQUESTS reached   */
    QW_ERR_CANCELLED = 16         /* the caller cancelled it (progress cb) */
} qw_status;

/* A static English name for a status ("QW_ERR_IO: input/output error").
 * Never NULL; unknown values give "unknown status". Thread-safe. */
QW_API const char *qw_status_string(qw_status status);

/* The detail message of the most recent failing call made by this thread
 * (thread-local). "" when none failed yet. The pointer stays valid until the
 * next qwinfer call on this thread; copy it if you need it longer. Successful
 * calls do not clear it. */
QW_API const char *qw_last_error(void);

/* ---------------------------------------------------------------------------
 * Engine options
 * ------------------------------------------------------------------------- */
typedef struct qw_engine_options qw_engine_options;

/* Keys of engine options. Each key has one type: the setter of another type
 * returns QW_ERR_INVALID_ARGUMENT. Values never change meaning. */
typedef enum qw_engine_option {
    QW_OPT_MODEL_PATH = 1,         /* string: Hugging Face model directory (required) */
    QW_OPT_DEVICE = 2,             /* string: "cpu" (default) or "cuda:N"             */
    QW_OPT_NUM_THREADS = 3,        /* int: CPU worker threads; 0 = cores available    */
    QW_OPT_MAX_NUM_SEQS = 4,       /* int: most sequences in one step (default 256)   */
    QW_OPT_MAX_NUM_BATCHED_TOKENS = 5, /* int: token budget of one step (default 2048)*/
    QW_OPT_BLOCK_SIZE = 6,         /* int: tokens per KV block (default 16; 1..1024)  */
    QW_OPT_KV_CACHE_BYTES = 7,     /* int: KV pool size in bytes (0 = default: CPU from
                                        QW_OPT_KV_CACHE_MEMORY_FRACTION, CUDA from
                                        QW_OPT_GPU_MEMORY_UTILIZATION); overrides
                                        the fraction                                  */
    QW_OPT_NUM_KV_BLOCKS = 8,      /* int: KV pool size in blocks; overrides bytes    */
    QW_OPT_MAX_MODEL_LEN = 9,      /* int: max tokens of a sequence (0 = from config,
                                        capped to what the KV pool holds); a value
                                        set here that the pool cannot hold for one
                                        sequence fails qw_engine_create               */
    QW_OPT_SEED = 10,              /* int: engine seed for requests without a seed    */
    QW_OPT_ENABLE_CHUNKED_PREFILL = 11, /* int 0/1 (default 1): if 0, a prompt must fit
                                        the token budget in one step                  */
    QW_OPT_ENABLE_PREFIX_CACHING = 12, /* int 0/1 (default 1): share KV of full blocks
                                        with equal prefixes between requests          */
    QW_OPT_MAX_NUM_PARTIAL_PREFILLS = 13, /* int: most sequences per step whose prefill
                                        chunk leaves it unfinished (default 4)        */
    QW_OPT_LONG_PREFILL_TOKEN_THRESHOLD = 14, /* int: when others wait, a prefill
                                        chunk is capped at this many tokens
                                        (0 = budget / max partial prefills)           */
    QW_OPT_PRIORITY_AGING_STEPS = 15,  /* int: a request's effective priority improves
                                        by 1 every this many steps since it arrived,
                                        so nothing starves (default 256; 0 = off)     */
    QW_OPT_GPU_MEMORY_UTILIZATION = 16, /* double in (0,1]: GPU memory fraction for
                                        weights + KV (default 0.9); cuda only         */
    QW_OPT_KV_CACHE_MEMORY_FRACTION = 17, /* double in (0,1]: CPU KV pool = this
                                        fraction of available RAM (MemAvailable)
                                        after the weights (default 0.5); cpu only     */
    QW_OPT_MAX_WAITING_REQUESTS = 18, /* int: most requests submitted and not yet
                                        admitted to the running batch for the first
                                        time (preempted ones do not count); submit
                                        beyond it gives QW_ERR_QUEUE_FULL
                                        (default 0 = unbounded)                       */
    QW_OPT_CHECK_WEIGHTS = 19,     /* int 0/1 (default 1): at qw_engine_create, scan
                                        every weight for NaN/infinity and fail with
                                        QW_ERR_FORMAT naming the tensor and element;
                                        0 skips the scan (one read of the weights)    */
    QW_OPT_NUMERICS = 20,          /* int, a qw_numerics value (default
                                        QW_NUMERICS_FAST): how the CPU backend's
                                        linear layers round; see qw_numerics          */
    QW_OPT_KV_CACHE_DTYPE = 21     /* int, a qw_kv_cache_dtype value (default
                                        QW_KV_CACHE_AUTO): the element type of the
                                        KV cache; see qw_kv_cache_dtype              */
} qw_engine_option;

/* Values of QW_OPT_NUMERICS (CPU backend; the CUDA backend ignores it: it
 * computes in bf16, and on sm_90 runs FP8 checkpoints in 128 x 128 blocks
 * with e4m3 activations in steps of more than 8 rows - docs/quantization.md,
 * "CUDA").
 * QW_NUMERICS_FAST: the activations entering each linear layer (matmul) are
 *   rounded to bf16 (round to nearest even, subnormals to zero) and the
 *   weights are held as bf16 (f32/f16 checkpoints are rounded to bf16 once,
 *   at load, which also halves their memory); products accumulate in f32
 *   (AVX512_BF16 vdpbf16ps, or an exact emulation of it). Over a bf16 KV
 *   cache on AVX512_BF16 CPUs, attention's q.K and P.V also run on bf16
 *   dot products (q and the softmax weights rounded to bf16, f32 softmax
 *   and accumulation, as flash-attention does). Logits stay within
 *   about 2e-2 relative error of a float64 reference, as on GPUs. Batched ==
 *   alone and chunked == unchunked still hold bit for bit. The weights are
 *   always copied into packed memory in this mode; if that fails,
 *   qw_engine_create returns QW_ERR_OUT_OF_MEMORY. Quantized checkpoints:
 *   fp8 weights multiply the bf16 activations the same way; int4 and int8
 *   (AWQ, GPTQ) linears instead quantize each activation row to int16 per
 *   scale group (step: the group's largest magnitude / 32767 for groups up
 *   to 256 columns) and sum exactly in int32 (docs/quantization.md).
 * QW_NUMERICS_EXACT: f32 activations and f32 accumulation with the
 *   weights' own precision: the numerical reference (1e-4), slower.
 * QW_NUMERICS_FAST_INT8: QW_NUMERICS_FAST, except that int4 (AWQ, GPTQ
 *   4-bit) linears quantize their activations to int8 per scale group
 *   (step: the group's largest magnitude / 127), as llama.cpp's 4-bit
 *   formats do. Codes and activations then meet as bytes (vpmaddubsw
 *   with the avx2 table, vpdpbusd with AVX512_VNNI), which on those
 *   tables makes int4 matmuls faster: batch-1 decode where the multiplies
 *   bound it (an AVX2-only Zen 1), prefill and concurrent decode on
 *   AVX-512 CPUs (docs/benchmarks.md); the generic table, and the avx512
 *   table without AVX512_VNNI, compute the same bits at about
 *   QW_NUMERICS_FAST's speed. The logits move further from the float64
 *   reference (up to about 3e-2 relative on the test models, against
 *   2e-2), while agreement with the unquantized model stays as it was
 *   (docs/quantization.md). Other weight formats compute as in
 *   QW_NUMERICS_FAST.
 * Read once by qw_engine_create and fixed for the engine's life; like every
 * option, set it from one thread before creating the engine. */
typedef enum qw_numerics {
    QW_NUMERICS_FAST = 0,
    QW_NUMERICS_EXACT = 1,
    QW_NUMERICS_FAST_INT8 = 2
} qw_numerics;

/* Values of QW_OPT_KV_CACHE_DTYPE: what the KV cache stores K and V in.
 * A smaller element holds more tokens in the same pool (the pool's block
 * count grows by the ratio) and is read faster by long-context decode.
 * QW_KV_CACHE_AUTO: the backend's default - CPU: bf16 with
 *   QW_NUMERICS_FAST, f32 with QW_NUMERICS_EXACT; CUDA: bf16.
 * QW_KV_CACHE_F32: 4 bytes an element, exact (the CPU backend; CUDA keeps
 *   bf16 or fp8 only).
 * QW_KV_CACHE_BF16: 2 bytes, each element rounded to nearest even when
 *   written (relative error <= 2^-9).
 * QW_KV_CACHE_FP8_E4M3: 1 byte, the OCP e4m3 ("e4m3fn") format: an element
 *   x of layer l is stored as e4m3(x / scale) (round to nearest even,
 *   saturating at +-448) and read as that value times scale, with scale
 *   the checkpoint's "model.layers.{l}.self_attn.k_scale" / "v_scale"
 *   tensor (a positive finite scalar, as vLLM's fp8 checkpoints carry)
 *   when present, else 1.0. Relative error <= 2^-4 within range.
 * The cache dtype is independent of QW_OPT_NUMERICS (either works with
 * either); batched == alone, prefix caching, sessions and preemption hold
 * for every dtype. Read once by qw_engine_create. */
typedef enum qw_kv_cache_dtype {
    QW_KV_CACHE_AUTO = 0,
    QW_KV_CACHE_F32 = 1,
    QW_KV_CACHE_BF16 = 2,
    QW_KV_CACHE_FP8_E4M3 = 3
} qw_kv_cache_dtype;

/* Create an options object with every default. *out owned by the caller, freed
 * with qw_engine_options_destroy(). On failure *out is NULL. */
QW_API qw_status qw_engine_options_create(qw_engine_options **out);
/* Free an options object. NULL is a no-op. */
QW_API void qw_engine_options_destroy(qw_engine_options *opts);
/* Set an integer option. Range is checked here (QW_ERR_INVALID_ARGUMENT);
 * on failure the object is unchanged. */
QW_API qw_status qw_engine_options_set_int(qw_engine_options *opts,
                                           qw_engine_option key, int64_t value);
/* Set a double option (QW_OPT_GPU_MEMORY_UTILIZATION,
 * QW_OPT_KV_CACHE_MEMORY_FRACTION). */
QW_API qw_status qw_engine_options_set_double(qw_engine_options *opts,
                                              qw_engine_option key, double value);
/* Called by qw_engine_create on its own thread while it reads and prepares
 * the weights: done and total are bytes (total = the weights' bytes, twice
 * with QW_OPT_CHECK_WEIGHTS, which reads them once more; done grows to
 * total, and the last call has done == total). Return 0 to go on, nonzero
 * to cancel: qw_engine_create then returns QW_ERR_CANCELLED, having freed
 * everything (the callback is not called again). */
typedef int (*qw_progress_fn)(void *user_data, uint64_t done, uint64_t total);

/* Set (fn NULL: clear) the progress callback of qw_engine_create. */
QW_API qw_status qw_engine_options_set_progress(qw_engine_options *opts, qw_progress_fn fn,
                                                void *user_data);

/* Set a string option; the string is copied. On failure nothing changes. */
QW_API qw_status qw_engine_options_set_string(qw_engine_options *opts,
                                              qw_engine_option key,
                                              const char *value);

/* ---------------------------------------------------------------------------
 * Engine
 * ------------------------------------------------------------------------- */
typedef struct qw_engine qw_engine;

/* Load the model and create an engine. opts is only read (the caller may
 * destroy it right after). On success *out is owned by the caller and freed
 * with qw_engine_destroy(). On failure *out is NULL, nothing is leaked and
 * qw_last_error() names the file/tensor/option at fault. Model files:
 * QW_ERR_INVALID_ARGUMENT for an empty QW_OPT_MODEL_PATH; QW_ERR_IO for a
 * missing or unreadable file, or one that is not a regular file (a FIFO or
 * a directory named config.json is refused at once, never waited on);
 * QW_ERR_FORMAT for malformed JSON, safetensors headers or shapes, and (with
 * QW_OPT_CHECK_WEIGHTS, the default) a NaN or infinite weight, naming the
 * tensor and element; QW_ERR_UNSUPPORTED for an architecture, dtype or
 * config.json size beyond what qwinfer runs (e.g. max_position_embeddings
 * above 16777216 or vocab_size above 1048576: the message names the key and
 * the limit). A tokenizer file in the directory is loaded too (see
 * qw_engine_get_tokenizer). */
QW_API qw_status qw_engine_create(const qw_engine_options *opts, qw_engine **out);

/* Destroy an engine. Requests still in it are finished with
 * QW_FINISH_CANCELLED without events; the caller's own request handles stay
 * valid until released. NULL is a no-op. No other thread may be using the
 * engine (including submit/cancel) during or after this call. */
QW_API void qw_engine_destroy(qw_engine *engine);

/* Model facts, for hosts that build prompts. Return 0 for a NULL engine.
 * The max model length is QW_OPT_MAX_MODEL_LEN when set, else the model's
 * max_position_embeddings capped to what the KV pool holds for one
 * sequence (docs/api.md, "KV cache sizing"). */
QW_API int32_t qw_engine_vocab_size(const qw_engine *engine);
QW_API int32_t qw_engine_max_model_len(const qw_engine *engine);
/* Number of KV blocks in the pool, and how many no request or session holds
 * right now (free, or kept only for the prefix cache). */
QW_API int32_t qw_engine_num_kv_blocks(const qw_engine *engine);
QW_API int32_t qw_engine_num_free_kv_blocks(const qw_engine *engine);

/* ---------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------- */
typedef struct qw_request qw_request;

typedef enum qw_request_option {
    QW_REQ_MAX_TOKENS = 1,     /* int: tokens to generate (default: up to max model len) */
    QW_REQ_TEMPERATURE = 2,    /* double >= 0; 0 = greedy (default 1.0)            */
    QW_REQ_TOP_K = 3,          /* int: 0 or -1 = off (default 0)                   */
    QW_REQ_TOP_P = 4,          /* double in (0,1]; 1 = off (default 1.0)           */
    QW_REQ_MIN_P = 5,          /* double in [0,1]; 0 = off (default 0.0)           */
    QW_REQ_SEED = 6,           /* int: sampling seed (default: from engine seed)   */
    QW_REQ_IGNORE_EOS = 7,     /* int 0/1: keep generating past EOS (default 0)    */
    QW_REQ_MIN_TOKENS = 8,     /* int: suppress EOS/stop tokens before this many   */
    QW_REQ_PRIORITY = 9,       /* int: lower runs first (default 0), FCFS within   */
    QW_REQ_MAX_QUEUE_MS = 10,  /* int: finish with QW_FINISH_TIMEOUT if no token
                                  was produced this long after submit (0 = off)     */
    QW_REQ_DEADLINE_MS = 11,   /* int: finish with QW_FINISH_TIMEOUT this long
                                  after submit, wherever it is (0 = off)            */
    QW_REQ_CACHE_SALT = 12,    /* int: requests with different salts never share
                                  cached KV blocks (default 0)                      */
    QW_REQ_SKIP_SPECIAL_TOKENS = 13, /* int 0/1: leave special tokens (<|im_end|>,
                                  ...) out of the streamed text of
                                  qw_request_get_text_piece (default 1)             */
    QW_REQ_LOGPROBS = 14,      /* int -1..QW_MAX_LOGPROBS: per generated token, its
                                  logprob (0) plus the top-k alternatives (k > 0);
                                  -1 = off (default). See qw_request_get_logprobs */
    QW_REQ_PROMPT_LOGPROBS = 15, /* int -1..QW_MAX_LOGPROBS: the same for every
                                  prompt token after the first; -1 = off
                                  (default). See qw_request_get_prompt_logprobs */
    QW_REQ_REPETITION_PENALTY = 16, /* double in (0, 100]: Hugging Face/vLLM
                                  repetition penalty over prompt and output;
                                  1 = off (default). See "Penalties" below      */
    QW_REQ_PRESENCE_PENALTY = 17, /* double in [-2, 2]: OpenAI presence penalty
                                  over the output; 0 = off (default)            */
    QW_REQ_FREQUENCY_PENALTY = 18, /* double in [-2, 2]: OpenAI frequency penalty
                                  over the output; 0 = off (default)            */
    QW_REQ_N = 19,             /* int 1..QW_MAX_SAMPLES: sequences sampled from
                                  the one prompt (default 1); see "Parallel
                                  samples" below                                  */
    QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT = 20, /* int 0/1: the text of a request
                                  ended by a stop string keeps the stop string
                                  (default 0: it ends where the match starts);
                                  see qw_request_set_stop_strings               */
} qw_request_option;

typedef enum qw_request_state {
    QW_STATE_CREATED = 0,   /* not yet submitted                           */
    QW_STATE_QUEUED = 1,    /* submitted, waiting for KV/budget            */
    QW_STATE_RUNNING = 2,   /* in the running batch (prefill or decode)    */
    QW_STATE_FINISHED = 3   /* done; see qw_request_get_finish_reason()        */
} qw_request_state;

typedef enum qw_finish_reason {
    QW_FINISH_NONE = 0,       /* not finished                                  */
    QW_FINISH_STOP = 1,       /* EOS, a stop token or a stop string was
                                 generated (qw_request_get_stop_match says
                                 which)                                        */
    QW_FINISH_LENGTH = 2,     /* max tokens or max model length reached        */
    QW_FINISH_CANCELLED = 3,  /* qw_engine_cancel() or engine destroyed        */
    QW_FINISH_ERROR = 4,      /* the backend failed or memory ran out; see the
                                 step's status                                 */
    QW_FINISH_TIMEOUT = 5     /* QW_REQ_MAX_QUEUE_MS or QW_REQ_DEADLINE_MS     */
} qw_finish_reason;

/* The message of the most recent failed call on this object, copied into
 * buf (the buffer convention of qw_chat_render: the first min(len, cap - 1)
 * bytes and a NUL when cap > 0, the full length in *len_out; "" when no
 * call on it failed yet). Unlike qw_last_error() it does not depend on the
 * OS thread, so a runtime that moves work between threads (Go, thread
 * pools) reads the right message from any thread. Functions that take a
 * request record into it (qw_request_*, qw_engine_submit, qw_engine_cancel);
 * functions that take an engine into the engine's (qw_engine_step,
 * qw_engine_get_stats, qw_engine_get_model_info, qw_engine_event_fd);
 * option setters and qw_engine_create into the options object's. The
 * thread-local qw_last_error() is set as before. Any thread.
 * QW_ERR_INVALID_ARGUMENT for a NULL object or len_out, or NULL buf with
 * cap > 0. */
QW_API qw_status qw_request_get_error(const qw_request *req, char *buf, size_t cap, size_t *len_out);
QW_API qw_status qw_engine_get_error(const qw_engine *engine, char *buf, size_t cap, size_t *len_out);
QW_API qw_status qw_engine_options_get_error(const qw_engine_options *opts, char *buf, size_t cap,
                                             size_t *len_out);

/* Create a request with default options and no prompt. *out is owned by the
 * caller (one reference) and freed by qw_request_release(). */
QW_API qw_status qw_request_create(qw_request **out);

/* Drop the caller's reference. The request is freed once the engine is done
 * with it too. After this call the caller must not use the handle. Returns
 * QW_ERR_INVALID_STATE if the caller's reference was already released while
 * the engine still holds the request (a detectable double release); releasing
 * again after the object is freed is undefined, as with free(). NULL: no-op. */
QW_API qw_status qw_request_release(qw_request *req);

/* Set the prompt token ids (copied). Only before submission
 * (QW_ERR_INVALID_STATE after). Ids are range-checked at submit, when the
 * vocabulary is known. */
QW_API qw_status qw_request_set_prompt(qw_request *req, const int32_t *ids, size_t n);
/* Set an integer or double option; type and range checked as documented in
 * qw_request_option. Only before submission. On failure nothing changes. */
QW_API qw_status qw_request_set_int(qw_request *req, qw_request_option key, int64_t value);
QW_API qw_status qw_request_set_double(qw_request *req, qw_request_option key, double value);
/* Extra token ids that end generation (copied; replaces an earlier list).
 * The stop token is included in the output. Only before submission. */
QW_API qw_status qw_request_set_stop_tokens(qw_request *req, const int32_t *ids, size_t n);

/* ---- Stop conditions ---------------------------------------------------------
 * After each generated token, in this order (the first that applies wins):
 *  1. EOS (the model's end-of-sequence ids, unless QW_REQ_IGNORE_EOS) or a
 *     stop token id (qw_request_set_stop_tokens): QW_FINISH_STOP. The token
 *     stays the last of the output tokens; its text is in the output only if
 *     it has some (special tokens have none unless QW_REQ_SKIP_SPECIAL_TOKENS
 *     is 0).
 *  2. A stop string that this token's text completed: QW_FINISH_STOP. The
 *     token stays the last of the output tokens (it may carry text past the
 *     match, which is dropped).
 *  3. QW_REQ_MAX_TOKENS generated, or the max model length reached:
 *     QW_FINISH_LENGTH.
 * A token that is both EOS/stop token and completes a stop string reports
 * both in qw_request_get_stop_match, and the text is cut at the stop string.
 * QW_REQ_MIN_TOKENS = m: while fewer than m tokens were generated, EOS and
 * the stop token ids are banned from sampling (the earliest is token m + 1),
 * and a stop string completed by one of the first m - 1 tokens is passed
 * over (and not found later); one completed by token m or later stops (as
 * vLLM). QW_REQ_MAX_TOKENS always applies: with m above it the request just
 * cannot stop early. QW_REQ_IGNORE_EOS: EOS ids are neither banned nor a
 * stop; stop token ids and stop strings still stop the request.
 * ------------------------------------------------------------------------- */
#define QW_MAX_STOP_STRINGS 64
#define QW_MAX_STOP_STRING_BYTES 1024

/* Set the stop strings (copied; replaces an earlier list; n = 0 clears it):
 * strings[i] is lens[i] bytes, or NUL-terminated when lens is NULL. They
 * are matched on the detokenised output text (the text of
 * qw_request_get_text_piece, so QW_REQ_SKIP_SPECIAL_TOKENS applies), across
 * token boundaries and inside characters cut between tokens: a match counts
 * on the token whose text completes it. When several matches complete on
 * one token, the one that ends first wins (on the same end the longer, then
 * the lower index). The request then finishes with QW_FINISH_STOP on that
 * token's event; the text (qw_request_get_text) ends where the match starts,
 * or after it with QW_REQ_INCLUDE_STOP_STR_IN_OUTPUT = 1. While the request
 * runs, each event's text piece holds back only the trailing bytes that
 * could still start a stop string (released by a later event, the last at
 * the latest); no piece holds text past the stop, and the pieces of all
 * events concatenated equal qw_request_get_text at the end. Matching keeps
 * per string only a KMP state: cost O(new bytes x strings) per token.
 * QW_ERR_INVALID_ARGUMENT (naming the index; nothing changes): n above
 * QW_MAX_STOP_STRINGS, strings NULL with n > 0, a NULL or empty string, one
 * over QW_MAX_STOP_STRING_BYTES bytes, or one that is not valid UTF-8 (it
 * could never match whole characters). Only before submission
 * (QW_ERR_INVALID_STATE after). qw_engine_submit refuses a request with stop
 * strings on an engine without a tokenizer (QW_ERR_INVALID_STATE). */
QW_API qw_status qw_request_set_stop_strings(qw_request *req, const char *const *strings,
                                             const size_t *lens, size_t n);

/* Which condition ended a request that finished with QW_FINISH_STOP:
 * *stop_string gets the index of the stop string in the list or -1, and
 * *stop_token the EOS or stop token id or -1 (both are set when one token
 * did both). For a request that has not finished with QW_FINISH_STOP, both
 * are -1 and QW_OK. Either pointer may be NULL. QW_ERR_INVALID_ARGUMENT for
 * a NULL request. Safe from any thread. */
QW_API qw_status qw_request_get_stop_match(const qw_request *req, int32_t *stop_string,
                                           int32_t *stop_token);

/* The request's output text so far: the concatenation of the text pieces
 * of its events so far (so after a stop string's cut; while the
 * request runs, without the bytes held back). Writes the first
 * min(len, cap - 1) bytes and a NUL into buf when cap > 0 and the full
 * length to *len_out; QW_OK even when cut (call again with cap > *len_out);
 * buf may be NULL with cap 0 to ask for the length. QW_ERR_INVALID_ARGUMENT
 * for NULL req or len_out, or buf NULL with cap > 0; QW_ERR_INVALID_STATE
 * when the request was not submitted to an engine with a tokenizer (*len_out
 * is 0 on failure). Step thread only, like qw_request_get_tokens. */
QW_API qw_status qw_request_get_text(const qw_request *req, char *buf, size_t cap,
                                     size_t *len_out);

/* ---- Penalties and logit bias ----------------------------------------------
 * Applied to the model's logits before temperature and the truncations, in
 * this order (vLLM's), each in float32 for every token id i:
 *   1. ids banned before QW_REQ_MIN_TOKENS (EOS, stop tokens) stay excluded
 *      whatever the bias or penalties;
 *   2. logit bias: logit_i += bias_i (qw_request_set_logit_bias);
 *   3. repetition penalty r (QW_REQ_REPETITION_PENALTY, Hugging Face/vLLM):
 *      where i occurs in the prompt or the output,
 *      logit_i = logit_i > 0 ? logit_i / r : logit_i * r;
 *   4. frequency penalty f (OpenAI): logit_i -= f * count_i, and
 *   5. presence penalty p (OpenAI): logit_i -= p where count_i > 0,
 *      count_i being how often i occurs in the output so far.
 * The "prompt" is every token before the first generated one (a session's
 * history included). They apply to greedy decoding (temperature 0) too; the
 * logits callback and logprobs see the raw logits. Neutral values cost
 * nothing; otherwise O(prompt + output + vocabulary) per sampled token.
 * Batching, chunking and preemption do not change the result. */
#define QW_MAX_LOGIT_BIAS 300

/* Set the logit bias map: bias[i] is added to the logit of token ids[i]
 * (copied; replaces an earlier map; n = 0 clears it). Each bias must be
 * finite and within [-100, 100], n at most QW_MAX_LOGIT_BIAS and the ids
 * distinct (QW_ERR_INVALID_ARGUMENT naming the entry otherwise, nothing
 * changed); ids are checked against the vocabulary at submit
 * (QW_ERR_TOKEN_OUT_OF_RANGE). Only before submission (QW_ERR_INVALID_STATE
 * after). Not thread-safe on one request, like every setter. */
QW_API qw_status qw_request_set_logit_bias(qw_request *req, const int32_t *ids, const float *bias, size_t n);
/* Opaque host pointer, returned in every event of this request. Only
 * before submission (QW_ERR_INVALID_STATE after), like every setter. */
QW_API qw_status qw_request_set_user_data(qw_request *req, void *user_data);
QW_API void *qw_request_get_user_data(const qw_request *req);

/* A unique id of the request within the process (assigned at create). */
QW_API uint64_t qw_request_get_id(const qw_request *req);
/* Current state and finish reason. Safe from any thread. */
QW_API qw_request_state qw_request_get_state(const qw_request *req);
QW_API qw_finish_reason qw_request_get_finish_reason(const qw_request *req);

/* Copy the generated tokens (not the prompt) into buf[0..cap). *n_out gets
 * the total number generated so far even if cap is smaller; buf may be NULL
 * with cap 0 to ask for the count. Step thread only. */
QW_API qw_status qw_request_get_tokens(const qw_request *req, int32_t *buf,
                                       size_t cap, size_t *n_out);

/* ---- Parallel samples (QW_REQ_N) ------------------------------------------
 * One submit of a request with QW_REQ_N = n gives n sequences from the one
 * prompt (the OpenAI API's n, vLLM's parallel sampling). Sample 0 is the
 * submitted request itself, so n = 1 is a plain request; samples 1..n-1 are
 * requests the engine creates at submit with every option of the submitted
 * one, owned by it (freed with it: never qw_request_release or submit them).
 * Seeds: sample i samples with seed + i (uint64 arithmetic, wrapping), where
 * seed is QW_REQ_SEED or, without it, the seed the engine derives for the
 * submitted request; so sample i gives exactly the tokens of a separate
 * request with QW_REQ_SEED = seed + i (with QW_REQ_N = 1). The prompt is
 * prefilled once: when sample 0 has computed its prompt, the other samples'
 * first tokens are sampled from the same logits and they share its full KV
 * blocks (each gets a copy of the partial last block; without a free block
 * for it, a sample recomputes those few tokens). Then each sample is an
 * ordinary sequence: batched, preempted (it recomputes, through the prefix
 * cache) and finished on its own, with its own events (sample_index = i,
 * request = its handle, request_id and user_data of the submitted request).
 * Samples that cannot all run at once (QW_OPT_MAX_NUM_SEQS, KV blocks) wait
 * in the queue holding their share of the prompt's KV (released first when
 * running sequences need blocks; they then recompute through the prefix
 * cache). Each sample must fit the KV pool alone (the check of any request);
 * the n samples together need not. A request with n samples counts n
 * against QW_OPT_MAX_WAITING_REQUESTS. qw_engine_cancel on the submitted
 * request cancels every sample; on a sample's handle, that sample only. If
 * the submitted request ends before its prompt is computed (cancel,
 * timeout, error), the other samples end with it, with the same reason.
 * QW_REQ_N > 1 with a session (qw_request_set_session) is refused at submit
 * with QW_ERR_INVALID_ARGUMENT: a session holds one continuation. */
#define QW_MAX_SAMPLES 128

/* The handle of sample `index` (0 = req itself) of a submitted request, in
 * *out (borrowed: valid as long as req is; every getter works on it).
 * QW_ERR_INVALID_ARGUMENT for NULL arguments or index >= QW_REQ_N;
 * QW_ERR_INVALID_STATE for index >= 1 before req was submitted (the samples
 * are made at submit). Any thread, once qw_engine_submit has returned. */
QW_API qw_status qw_request_get_sample(qw_request *req, uint32_t index, qw_request **out);

/* Timing and cache facts of one request, written by qw_request_get_stats.
 * Times are seconds; -1 where the event has not happened yet. Fields are
 * only ever appended; pass sizeof(qw_request_stats). */
typedef struct qw_request_stats {
    uint64_t size;               /* set by the library: bytes it wrote        */
    double arrival_time;         /* submit, on CLOCK_MONOTONIC, seconds       */
    double queue_time;           /* submit -> first scheduled                 */
    double time_to_first_token;  /* submit -> first token                     */
    double decode_time;          /* first token -> finish (or now)            */
    uint64_t prompt_tokens;      /* tokens prefilled for this request (the
                                    session history counts, cached or not)    */
    uint64_t cached_prompt_tokens; /* of those, served from the prefix cache
                                    or the session's kept KV                  */
    uint64_t num_preemptions;
    uint64_t generated_tokens;
    uint64_t computed_tokens;    /* positions (prompt, then generated) whose
                                    K/V the engine holds for the request now,
                                    the cached prefix included: the prefill's
                                    progress. 0 while waiting and after a
                                    preemption (it rises again as the request
                                    is recomputed); at the finish it stays at
                                    its last value. */
} qw_request_stats;

/* Fill *out (of out_size bytes, at least 8) with the request's stats; bytes
 * past what this version knows are zeroed. Step thread. */
QW_API qw_status qw_request_get_stats(const qw_request *req, qw_request_stats *out,
                                      size_t out_size);

/* ---- Log-probabilities (QW_REQ_LOGPROBS, QW_REQ_PROMPT_LOGPROBS) ----------
 * Definition: the log-softmax of the RAW model logits of the row that
 * predicts the token, over the whole vocabulary: before temperature, top-k/
 * top-p/min-p, penalties, logit bias and banned ids (vLLM's default
 * "raw_logprobs"; the OpenAI API's logprobs). logprob(t) = logit[t] - lse,
 * lse = max + log(sum exp(logit - max)) accumulated in double, rounded to
 * float32 at the end: within 1e-4 of a float64 softmax. The top-k list is
 * ordered by descending logprob, lower token id first on ties, and holds
 * min(k, vocabulary size) entries. They are computed in the backend where
 * the logits are (only k + 1 pairs per row leave a GPU) and cost nothing
 * when off.
 * Prompt logprobs: prompt token j (1 <= j < prompt length) gets the logprob
 * of that token given the prompt tokens before it; token 0 has none. A
 * request that asks for them does not look up the prefix cache (every prompt
 * row is computed, as vLLM does), and for a session request (qw_request_
 * set_session) they cover the request's own new prompt tokens only: index j
 * is token j of the prompt set on this request, the history is context.
 * Chunked prefill, batching and preemption (recompute) give the same values
 * as one unchunked run alone. */
#define QW_MAX_LOGPROBS 20

/* One (token, logprob) pair. */
typedef struct qw_logprob {
    int32_t token;
    float logprob;
} qw_logprob;

/* Logprobs of generated token `index` (0 = first generated): *sampled gets
 * the token actually generated and its logprob, top[0..min(cap, k)) the
 * top-k alternatives (k = QW_REQ_LOGPROBS), and *n_top gets k' = min(k,
 * vocabulary size) even when cap is smaller. sampled and n_top may be NULL;
 * top may be NULL with cap 0. Errors (nothing written): QW_ERR_INVALID_STATE
 * when the request was not submitted with QW_REQ_LOGPROBS >= 0;
 * QW_ERR_INVALID_ARGUMENT for a NULL request, top NULL with cap > 0, or an
 * index at or beyond the number of tokens generated so far. Values of a
 * token are final once its event is delivered. Step thread only (like
 * qw_request_get_tokens), or any thread once the request finished. */
QW_API qw_status qw_request_get_logprobs(const qw_request *req, size_t index, qw_logprob *sampled,
                                         qw_logprob *top, size_t cap, size_t *n_top);

/* Prompt logprobs of prompt token `index` (1 <= index < prompt length):
 * *actual gets the prompt token and its logprob, top and *n_top as in
 * qw_request_get_logprobs with k = QW_REQ_PROMPT_LOGPROBS. Available for
 * every index once the request's first token event was delivered.
 * QW_ERR_INVALID_ARGUMENT for index 0 (the first prompt token has no
 * logprob: nothing precedes it), an index beyond the prompt, or one whose
 * row was not computed yet; QW_ERR_INVALID_STATE without
 * QW_REQ_PROMPT_LOGPROBS >= 0 at submit. Threading as
 * qw_request_get_logprobs. */
QW_API qw_status qw_request_get_prompt_logprobs(const qw_request *req, size_t index,
                                                qw_logprob *actual, qw_logprob *top, size_t cap,
                                                size_t *n_top);

/* Submit a request to an engine. Safe from any thread. The engine takes its
 * own reference; the request joins the batch at the next step. Validated here:
 * a prompt (QW_ERR_EMPTY_PROMPT), token ids within the vocabulary
 * (QW_ERR_TOKEN_OUT_OF_RANGE), prompt + max tokens within the max model length
 * (QW_ERR_TOO_LONG), a KV need within the whole pool (QW_ERR_KV_CAPACITY),
 * and room in the queue when QW_OPT_MAX_WAITING_REQUESTS is set
 * (QW_ERR_QUEUE_FULL). Without QW_REQ_MAX_TOKENS a request may generate up
 * to the max model length (which never exceeds what the KV pool holds for
 * one sequence). Memory for the request's tokens and KV blocks grows as
 * tokens arrive, so a queued request costs little more than its prompt.
 * A request can be submitted once (QW_ERR_INVALID_STATE after). On failure
 * the request is untouched and may be fixed and submitted again. */
QW_API qw_status qw_engine_submit(qw_engine *engine, qw_request *req);

/* Ask for a submitted request to stop. Safe from any thread. It finishes with
 * QW_FINISH_CANCELLED at the next step (one event with token -1), unless it
 * finished for another reason first. With QW_REQ_N > 1 every sample still
 * running is cancelled too (each with its own event). A request that is
 * already finished (with all its samples), or was never submitted to this
 * engine, gives QW_ERR_INVALID_STATE. */
QW_API qw_status qw_engine_cancel(qw_engine *engine, qw_request *req);

/* ---------------------------------------------------------------------------
 * Sessions: conversations whose KV survives between requests
 * ------------------------------------------------------------------------- */
typedef struct qw_session qw_session;

/* Create an empty session on an engine. It holds the token history
 * (prompts and generated tokens of its requests, in order) and the KV blocks
 * of that history, so a follow-up request prefills only its new tokens.
 * Under KV pressure an idle session's blocks may go back to the pool (they
 * stay findable in the prefix cache); the next request then recomputes what
 * was lost - slower, never an error. *out is owned by the caller and freed
 * with qw_session_destroy before the engine is destroyed. Step thread. */
QW_API qw_status qw_session_create(qw_engine *engine, qw_session **out);

/* Free a session and its KV blocks. QW_ERR_SESSION_BUSY (nothing freed)
 * while one of its requests is queued or running: cancel it and step until
 * it finished first. NULL is a no-op. Step thread; a qw_engine_submit of a
 * request on this session may race it from any thread: either the submit
 * came first (QW_ERR_SESSION_BUSY here) or it fails with
 * QW_ERR_INVALID_STATE ("session was destroyed"). A request set to the
 * session keeps its memory alive until the request is freed or set to
 * another session, so destroying it again meanwhile is detected
 * (QW_ERR_INVALID_STATE); after that, as with free(), it is undefined. */
QW_API qw_status qw_session_destroy(qw_session *session);

/* A new session with the same history, sharing its full KV blocks (copy on
 * write is never needed: full blocks are immutable) and a copy of the
 * partial last block, for branching and parallel sampling. The source must
 * be idle (QW_ERR_SESSION_BUSY). Step thread; a submit on the source may
 * race it from any thread (the fork then gets the history from before it,
 * or QW_ERR_SESSION_BUSY). A destroyed source: QW_ERR_INVALID_STATE. */
QW_API qw_status qw_session_fork(qw_session *session, qw_session **out);

/* Copy the history into buf[0..cap); *n_out gets its full length. Step
 * thread (where histories change); a submit on the session may race it from
 * any thread. A destroyed session: QW_ERR_INVALID_STATE. */
QW_API qw_status qw_session_get_tokens(const qw_session *session, int32_t *buf,
                                       size_t cap, size_t *n_out);

/* Run the request on a session (before submit): its prompt is the new
 * tokens only, appended to the session's history; what it generates joins
 * the history when it finishes. Max tokens and the max model length count
 * the whole history. One request at a time per session: submitting a second
 * while one is queued or running gives QW_ERR_SESSION_BUSY. The session must
 * belong to the engine the request is submitted to. The request keeps the
 * session's memory alive (not its history or KV) until it is freed or set
 * to another session (NULL: none), so a submit after the session was
 * destroyed fails cleanly with QW_ERR_INVALID_STATE; so does setting a
 * session already destroyed (while another request still keeps it). */
QW_API qw_status qw_request_set_session(qw_request *req, qw_session *session);

/* ---------------------------------------------------------------------------
 * Engine statistics
 * ------------------------------------------------------------------------- */
typedef struct qw_engine_stats {
    uint64_t size;                  /* set by the library: bytes it wrote      */
    uint64_t num_running;
    uint64_t num_waiting;           /* queued, including preempted ones        */
    uint64_t num_preempted_waiting; /* queued after a preemption               */
    uint64_t kv_blocks_total;
    uint64_t kv_blocks_used;        /* referenced by a request or session      */
    uint64_t kv_blocks_cached_free; /* unreferenced, kept for the prefix cache */
    uint64_t prefix_cache_queries;  /* prompt tokens looked up in the cache    */
    uint64_t prefix_cache_hits;     /* of those, found                         */
    uint64_t prompt_tokens;         /* tokens prefilled (computed) so far      */
    uint64_t generation_tokens;     /* tokens sampled so far                   */
    uint64_t num_steps;             /* steps that ran the model                */
    uint64_t last_batch_size;       /* sequences in the last such step         */
    double mean_batch_size;
    uint64_t num_preemptions;       /* total since create                      */
    double forward_seconds;         /* time in the backend's forward pass      */
    double host_seconds;            /* time in qw_engine_step outside it       */
    uint64_t num_finished;          /* requests finished since create          */
} qw_engine_stats;

/* Fill *out (of out_size bytes, at least 8) with the engine's counters;
 * bytes past what this version knows are zeroed. Step thread. */
QW_API qw_status qw_engine_get_stats(const qw_engine *engine, qw_engine_stats *out,
                                     size_t out_size);

/* ---------------------------------------------------------------------------
 * Stepping
 * ------------------------------------------------------------------------- */
typedef enum qw_event_kind {
    QW_EVENT_TOKEN = 1,     /* a token was generated (finish may also be set)   */
    QW_EVENT_FINISHED = 2   /* finished without a new token (cancel, error)    */
} qw_event_kind;

/* One event, written by qw_engine_step(). Fields are only ever appended. */
typedef struct qw_event {
    uint32_t kind;          /* qw_event_kind                                  */
    uint32_t finish_reason; /* qw_finish_reason; NONE while generation goes on */
    int32_t token;          /* the new token id, or -1                        */
    uint32_t index;         /* 0-based index of this token in the output      */
    uint64_t request_id;    /* qw_request_get_id()                            */
    qw_request *request;    /* valid at least until the next qw_engine_step   */
    void *user_data;        /* qw_request_set_user_data()                     */
    uint32_t sample_index;  /* which of the QW_REQ_N samples (0 for n = 1)    */
} qw_event;

/* Run one scheduling step: apply submissions and cancellations, schedule
 * decode tokens then prefill chunks under the token budget, run the model,
 * sample, and write at most cap events of event_size bytes each into events.
 * cap must be at least 1: cap 0 gives QW_ERR_BUFFER_TOO_SMALL and does
 * nothing (such a step could never deliver the events it makes).
 * Pass sizeof(qw_event) as event_size: a larger size (a newer header) is
 * accepted and the extra bytes are zeroed; the size of the first qw_event
 * (up to user_data, before sample_index was appended) is accepted and gets
 * the fields it has; a smaller one gives QW_ERR_BUFFER_TOO_SMALL. *n_out gets the number written.
 * Events that do not fit are kept and delivered first by the next call, which
 * then does no model work; so a loop of steps never loses an event, and
 * every successful call delivers an event or advances the work, so a loop
 * on qw_engine_has_work() ends. Step thread only. On a backend failure the requests of that step finish
 * with QW_FINISH_ERROR, their events are delivered and the engine stays usable;
 * so they do when the backend reports success but an output fails the
 * engine's check (a sampled id outside the vocabulary, a logprobs row it did
 * not compute): QW_ERR_INTERNAL naming the backend and the row, and no such
 * token or logprob reaches a request.
 * When host memory runs out growing one request's token arrays, that request
 * finishes with QW_FINISH_ERROR on its token's event (the token is kept),
 * the step returns QW_ERR_OUT_OF_MEMORY naming it, and the others go on. */
QW_API qw_status qw_engine_step(qw_engine *engine, void *events, size_t cap,
                                size_t event_size, size_t *n_out);

/* 1 if any request is queued, running, or has undelivered events (another
 * qw_engine_step with cap >= 1 would do something); 0 otherwise or for NULL.
 * Any thread: from the step thread the answer is exact; from another it
 * reflects the last step and every submit and cancel made before the call. */
QW_API int qw_engine_has_work(qw_engine *engine);

/* Sleep until qw_engine_has_work() is 1 or timeout_ms milliseconds pass
 * (timeout_ms < 0: no limit; 0: just check). Returns 1 when there is work,
 * 0 on timeout or for NULL. A submit or cancel from any thread, and a step
 * that leaves work, wake every waiter at once; no CPU is spent while it
 * sleeps. Any thread; the usual loop is
 *   for (;;) { qw_engine_wait(e, -1); while (qw_engine_has_work(e)) qw_engine_step(...); }
 * (a host that must also stop the loop submits or cancels something, or
 * waits with a timeout). */
QW_API int qw_engine_wait(qw_engine *engine, int32_t timeout_ms);

/* A file descriptor (a Linux eventfd, non-blocking, close-on-exec) that is
 * readable whenever work may have arrived: it is signalled by every submit
 * and cancel, and by every step that leaves work, so it fits epoll, select,
 * asyncio's add_reader or Go's netpoller. The host reads 8 bytes to clear
 * it, then steps while qw_engine_has_work(). Made by the first call (work
 * already there signals it at once); later calls return the same
 * descriptor. Owned by the engine: closed by qw_engine_destroy, never by
 * the host. -1 on failure (QW_ERR_IO or QW_ERR_INVALID_ARGUMENT in
 * qw_last_error()). Any thread. */
QW_API int qw_engine_event_fd(qw_engine *engine);

/* ---------------------------------------------------------------------------
 * Tokenizer and chat
 *
 * Qwen's byte-level BPE, exactly as Hugging Face `tokenizers` encodes it, and
 * Qwen3's ChatML chat template, in C. A tokenizer is either standalone
 * (qw_tokenizer_create_from_dir: no weights needed) or the engine's
 * (qw_engine_get_tokenizer: found in the model directory at create).
 * Buffers follow the qw_request_get_tokens convention: the caller passes a
 * buffer and its capacity, the library writes what fits and reports the
 * full size, so a second call with a big enough buffer gets everything.
 * ------------------------------------------------------------------------- */
typedef struct qw_tokenizer qw_tokenizer;

/* Load the tokenizer of a Hugging Face model directory: dir/tokenizer.json,
 * else dir/vocab.json + dir/merges.txt (+ dir/tokenizer_config.json's
 * added_tokens_decoder). Needs no weights or config.json. On success *out is
 * owned by the caller and freed with qw_tokenizer_destroy(). On failure *out
 * is NULL, nothing leaks, and qw_last_error() names the file (and entry) at
 * fault: QW_ERR_IO when no tokenizer file is found or one is unreadable or
 * not a regular file (a FIFO or directory is refused at once), QW_ERR_FORMAT
 * for bad JSON, a merge naming an unknown token, duplicate ids, or a token id
 * out of proportion to the files (at or above 2 x their token count + 65536,
 * or 2^24: the message names the token and id), QW_ERR_INVALID_ARGUMENT for
 * NULL arguments or an empty dir. Thread-safe. */
QW_API qw_status qw_tokenizer_create_from_dir(const char *dir, qw_tokenizer **out);

/* Free a tokenizer made by qw_tokenizer_create_from_dir. NULL is a no-op, and
 * so is the engine's tokenizer (it is freed with its engine). No other thread
 * may be using it. */
QW_API void qw_tokenizer_destroy(qw_tokenizer *tok);

/* The number of ids: the largest id of a regular or added token + 1 (Qwen3:
 * 151669, below the model's padded vocab_size of 151936). 0 for NULL.
 * Thread-safe. */
QW_API int32_t qw_tokenizer_vocab_size(const qw_tokenizer *tok);

/* Encode len bytes of UTF-8 text (need not be NUL-terminated; text may be
 * NULL when len is 0). parse_special: 1 = special added tokens written in
 * the text ("<|im_start|>") become their ids, as Hugging Face does by
 * default; 0 = they are encoded as plain text, which is what untrusted user
 * text should get. Non-special added tokens (<think>) are matched either way.
 * Writes the first min(n, cap) ids into ids[0..cap) and the full count n to
 * *n_out, returning QW_OK even when cap < n (call again with cap >= *n_out);
 * ids may be NULL with cap 0 to ask for the count. On failure *n_out is 0 and
 * ids is unspecified: QW_ERR_INVALID_ARGUMENT for NULL arguments or text that
 * is not valid UTF-8 (the message gives the byte offset),
 * QW_ERR_OUT_OF_MEMORY, QW_ERR_UNSUPPORTED when the pre-tokenizer regex of
 * the tokenizer file backtracks past PCRE2's match limit on this text (the
 * message names the file). Thread-safe: any number of threads may encode
 * with one tokenizer at once. */
QW_API qw_status qw_tokenizer_encode(const qw_tokenizer *tok, const char *text, size_t len,
                                     int parse_special, int32_t *ids, size_t cap,
                                     size_t *n_out);

/* Decode n ids to UTF-8 as Hugging Face's decode() does: invalid UTF-8 (a
 * character cut between ids) becomes U+FFFD; skip_special = 1 leaves out
 * special added tokens. *len_out gets the full length in bytes (without a
 * terminator); buf[0..cap) gets the first min(len, cap - 1) bytes and a NUL
 * when cap > 0. QW_OK even when cap <= *len_out: the text was cut (possibly
 * inside a character); call again with cap > *len_out. buf may be NULL with
 * cap 0 to ask for the length. Ids the engine can sample beyond the
 * tokenizer's own (the model's embedding padding: Qwen3's 151669..151935,
 * ids in [qw_tokenizer_vocab_size, qw_engine_vocab_size)) decode to nothing
 * with the engine's tokenizer, as in Hugging Face, so decode of generated ids
 * always equals their streamed pieces. On failure *len_out is 0 and buf is
 * untouched: QW_ERR_TOKEN_OUT_OF_RANGE for an id < 0 or beyond every
 * vocabulary (>= qw_engine_vocab_size for the engine's tokenizer, >=
 * qw_tokenizer_vocab_size for a standalone one; the message gives its index),
 * QW_ERR_INVALID_ARGUMENT, QW_ERR_OUT_OF_MEMORY. Thread-safe. */
QW_API qw_status qw_tokenizer_decode(const qw_tokenizer *tok, const int32_t *ids, size_t n,
                                     int skip_special, char *buf, size_t cap,
                                     size_t *len_out);

/* The id of a token given its Hugging Face string: an added token's content
 * ("<|im_end|>") or a regular token in byte-level form ("Ġthe"). *id_out
 * gets it; QW_ERR_INVALID_ARGUMENT (and *id_out = -1) when the tokenizer has
 * no such token or an argument is NULL. Thread-safe. */
QW_API qw_status qw_tokenizer_token_id(const qw_tokenizer *tok, const char *token,
                                       int32_t *id_out);

/* 1 if id is a special added token (<|im_end|>; left out by skip_special),
 * else 0 (also for NULL or an id out of range). Thread-safe. */
QW_API int qw_tokenizer_is_special(const qw_tokenizer *tok, int32_t id);

/* The engine's tokenizer, loaded from the model directory at
 * qw_engine_create (a malformed tokenizer file there, or one with a token id
 * >= the model's vocab_size, makes the create fail with a message naming the
 * file; a directory without one is fine). Its decode accepts every id the
 * model can sample (see qw_tokenizer_decode). Borrowed:
 * valid until qw_engine_destroy, never destroyed by the caller. NULL when the
 * model has no tokenizer, or for a NULL engine. Thread-safe, like the
 * tokenizer itself. */
QW_API const qw_tokenizer *qw_engine_get_tokenizer(const qw_engine *engine);

/* A conversation to render with Qwen3's chat template (ChatML):
 *   <|im_start|>system\n...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n...
 * Tool messages become <tool_response> blocks of a user turn; assistant turns
 * before the last user query lose their reasoning, as the official template
 * does. A qw_chat is a plain value: one thread at a time, no engine needed. */
typedef struct qw_chat qw_chat;

typedef enum qw_chat_role {
    QW_CHAT_SYSTEM = 0,     /* instructions, usually the first message       */
    QW_CHAT_USER = 1,
    QW_CHAT_ASSISTANT = 2,  /* a model turn (its <think> block, if any, is
                               taken as its reasoning)                       */
    QW_CHAT_TOOL = 3        /* a tool's result                               */
} qw_chat_role;

/* Flags of qw_chat_render and qw_request_set_chat (bitwise or). As in
 * Qwen3's official template, the model thinks unless told not to: with
 * neither thinking flag it thinks first (no think block is appended). */
typedef enum qw_chat_flag {
    QW_CHAT_ADD_GENERATION_PROMPT = 1, /* end with "<|im_start|>assistant\n"
                                          for the model to answer            */
    QW_CHAT_ENABLE_THINKING = 2,       /* let Qwen3 think first (the default;
                                          this flag only says it explicitly) */
    QW_CHAT_DISABLE_THINKING = 4       /* a non-thinking answer: with the
                                          generation prompt, the empty block
                                          "<think>\n\n</think>\n\n" is appended
                                          (the template's enable_thinking=false).
                                          With QW_CHAT_ENABLE_THINKING:
                                          QW_ERR_INVALID_ARGUMENT            */
} qw_chat_flag;

/* Create an empty conversation. *out is owned by the caller and freed with
 * qw_chat_destroy(); NULL on failure (QW_ERR_INVALID_ARGUMENT,
 * QW_ERR_OUT_OF_MEMORY). Thread-safe. */
QW_API qw_status qw_chat_create(qw_chat **out);
/* Free a conversation. NULL is a no-op. */
QW_API void qw_chat_destroy(qw_chat *chat);

/* Append a message of len bytes of UTF-8 (copied; content may be NULL when
 * len is 0). QW_ERR_INVALID_ARGUMENT for a NULL chat, an unknown role, or
 * content holding a NUL byte; QW_ERR_OUT_OF_MEMORY. On failure the chat is
 * unchanged. */
QW_API qw_status qw_chat_add_message(qw_chat *chat, qw_chat_role role, const char *content,
                                     size_t len);
/* Set the reasoning (thinking) of the last message, which must be an
 * assistant one (QW_ERR_INVALID_STATE otherwise); copied, replaces an
 * earlier one, and overrides a <think> block in its content. Rendered only
 * for assistant turns after the last user query. On failure nothing
 * changes. */
QW_API qw_status qw_chat_set_reasoning(qw_chat *chat, const char *reasoning, size_t len);
/* Declare a tool (function) the model may call: json is its definition as
 * one line of JSON, as Python's json.dumps writes it (copied, not parsed).
 * Tools go into the system turn with Qwen3's tool-calling instructions. */
QW_API qw_status qw_chat_add_tool(qw_chat *chat, const char *json, size_t len);
/* Number of messages added so far (0 for NULL). */
QW_API size_t qw_chat_num_messages(const qw_chat *chat);

/* Render the conversation as prompt text. flags: qw_chat_flag bits. Writes
 * the first min(len, cap - 1) bytes and a NUL into buf when cap > 0, and the
 * full length to *len_out; QW_OK even when cut (call again with
 * cap > *len_out); buf may be NULL with cap 0 to ask for the length. On
 * failure *len_out is 0: QW_ERR_INVALID_ARGUMENT (NULL arguments, unknown
 * flag bits, both QW_CHAT_ENABLE_THINKING and QW_CHAT_DISABLE_THINKING),
 * QW_ERR_OUT_OF_MEMORY. The chat is only read. */
QW_API qw_status qw_chat_render(const qw_chat *chat, uint32_t flags, char *buf, size_t cap,
                                size_t *len_out);

/* Set the prompt as len bytes of UTF-8 text (copied), encoded at
 * qw_engine_submit with the engine's tokenizer, special tokens written in the
 * text parsed as Hugging Face does (encode untrusted text yourself with
 * parse_special = 0 and use qw_request_set_prompt to avoid that). Replaces a
 * prompt set by qw_request_set_prompt or qw_request_set_chat, and the other
 * way round. Only before submission (QW_ERR_INVALID_STATE after). Submit
 * then fails with QW_ERR_INVALID_STATE when the engine has no tokenizer, and
 * with QW_ERR_INVALID_ARGUMENT for text that is not UTF-8. */
QW_API qw_status qw_request_set_prompt_text(qw_request *req, const char *text, size_t len);

/* Set the prompt as a conversation: chat is rendered now with flags
 * (qw_chat_flag bits; usually QW_CHAT_ADD_GENERATION_PROMPT), so it may be
 * changed or destroyed right after, and the text is encoded at
 * qw_engine_submit like qw_request_set_prompt_text's. At submit the
 * tokenizer's <|im_end|> (the end of an assistant turn) is added to the
 * request's stop tokens, so generation stops at the end of the answer.
 * Replaces any earlier prompt. Only before submission. On failure nothing
 * changes. */
QW_API qw_status qw_request_set_chat(qw_request *req, const qw_chat *chat, uint32_t flags);

/* The streamed text of the request's latest event (read it while handling
 * the event): the UTF-8 completed by that event's token, possibly empty,
 * since a character cut between tokens comes out whole with the token that
 * completes it; the finishing event also carries whatever was held back
 * (as U+FFFD). Special tokens are left out unless QW_REQ_SKIP_SPECIAL_TOKENS
 * is 0. The pieces of all events concatenated equal qw_request_get_text and,
 * without stop strings, qw_tokenizer_decode of all generated tokens (with
 * stop strings a piece also holds back the bytes that may start one, and the
 * text ends at the stop: see qw_request_set_stop_strings). *piece (never NULL on success, not NUL-terminated)
 * stays valid until the next qw_engine_step call or the request is freed;
 * copy it to keep it. Before the first event: "" and 0. Works for every
 * request submitted to an engine with a tokenizer, whatever its prompt kind;
 * QW_ERR_INVALID_STATE otherwise (not submitted, or no tokenizer), with ""
 * and 0. Step thread only. */
QW_API qw_status qw_request_get_text_piece(const qw_request *req, const char **piece,
                                           size_t *len);

/* ---------------------------------------------------------------------------
 * Names and model information (for logs, bindings and clients)
 * ------------------------------------------------------------------------- */

/* Static, never-NULL names: "stop", "length", "cancelled", "error",
 * "timeout", "none" (the words OpenAI-style APIs use for finish reasons);
 * "token", "finished"; "created", "queued", "running", "finished"; and the
 * constants' own spellings for option keys ("QW_OPT_DEVICE",
 * "QW_REQ_TOP_P"). An unknown value gives "unknown". Any thread. */
QW_API const char *qw_finish_reason_string(qw_finish_reason reason);
QW_API const char *qw_event_kind_string(qw_event_kind kind);
QW_API const char *qw_request_state_string(qw_request_state state);
QW_API const char *qw_engine_option_name(qw_engine_option key);
QW_API const char *qw_request_option_name(qw_request_option key);

/* Most EOS ids qw_model_info reports. */
#define QW_MAX_EOS_IDS 8

/* The loaded model, written by qw_engine_get_model_info. Fields are only
 * ever appended; pass sizeof(qw_model_info). */
typedef struct qw_model_info {
    uint64_t size;                  /* set by the library: bytes it wrote      */
    char architecture[64];          /* "Qwen3ForCausalLM" or "Qwen2ForCausalLM" */
    char dtype[16];                 /* checkpoint dtype: "bfloat16", "float16",
                                       "float32"                               */
    int32_t vocab_size;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_layers;
    int32_t num_heads;              /* query heads                             */
    int32_t num_kv_heads;
    int32_t head_dim;
    int32_t max_position_embeddings; /* from config.json                      */
    int32_t max_model_len;          /* what this engine accepts (capped by
                                       QW_OPT_MAX_MODEL_LEN and the KV pool)   */
    int32_t tie_word_embeddings;    /* 1 if lm_head is the embedding           */
    int32_t has_tokenizer;          /* 1 if the model directory had one        */
    int32_t bos_token_id;           /* -1 when the config has none             */
    int32_t num_eos;                /* entries of eos_token_ids                */
    int32_t eos_token_ids[QW_MAX_EOS_IDS]; /* config.json and
                                       generation_config.json, as generation
                                       stops on them                           */
    double rope_theta;
    double rms_norm_eps;
} qw_model_info;

/* Fill *out (of out_size bytes, at least 8) with the engine's model facts;
 * bytes past what this version knows are zeroed. Any thread (the facts
 * never change after create). NULL arguments: QW_ERR_INVALID_ARGUMENT. */
QW_API qw_status qw_engine_get_model_info(const qw_engine *engine, qw_model_info *out,
                                          size_t out_size);

/* ---------------------------------------------------------------------------
 * Experimental: may change between minor versions.
 * ------------------------------------------------------------------------- */

/* Called with the logits (vocab_size floats, before any sampling transform)
 * each time a token is sampled for the request: position is the index of the
 * token about to be sampled in the full sequence (prompt + output). Runs on
 * the step thread inside qw_engine_step. On GPU backends this costs a copy. */
typedef void (*qw_logits_fn)(void *user_data, qw_request *req, int32_t position,
                             const float *logits, int32_t vocab_size);
QW_API qw_status qw_request_set_logits_callback(qw_request *req, qw_logits_fn fn,
                                                void *user_data);

#ifdef __cplusplus
}
#endif
#endif /* QWINFER_H */
