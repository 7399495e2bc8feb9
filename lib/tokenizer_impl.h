/*
 * tokenizer_impl.h - the in-memory layout of a loaded qwi_tokenizer, shared
 * by its loader (tokenizer.c), encoder (tokenizer_encode.c) and decoders
 * (detok.c). Nothing else may include it.
 */
#ifndef QWI_TOKENIZER_IMPL_H
#define QWI_TOKENIZER_IMPL_H

#include <stdint.h>
#include <stddef.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

/* Per-id flags. */
enum {
    QWI_TOKF_PRESENT = 1,  /* the id names a token            */
    QWI_TOKF_ADDED = 2,    /* from added_tokens(_decoder)     */
    QWI_TOKF_SPECIAL = 4   /* added with "special": true      */
};

/* An added token, for matching on raw text. */
typedef struct qwi_added_token {
    const char *content;  /* points into qwi_tokenizer.str_arena */
    uint32_t len;
    int32_t id;
    int special;
} qwi_added_token;

struct qwi_tokenizer {
    int32_t vocab_size;       /* max id + 1                                  */
    /* Ids in [vocab_size, id_limit) decode to nothing: the engine's
     * tokenizer gets the model's vocab_size here, because a model samples
     * its embedding's padding rows (Qwen3: 151669..151935) as Hugging Face
     * does and decodes them to "". A standalone tokenizer has
     * id_limit == vocab_size. */
    int32_t id_limit;
    char *src;                /* the file loaded, for messages (owned)      */
    uint8_t *flags;           /* [vocab_size] QWI_TOKF_*                     */

    /* Per id: the HF string form (byte-level unicode for regular tokens,
     * content for added ones) and the raw bytes decode emits. */
    uint32_t *str_off, *str_len;
    uint32_t *raw_off, *raw_len;
    char *str_arena;
    char *raw_arena;

    /* HF string form -> id: open addressing over ids, keyed by XXH3. */
    int32_t *str_slots;       /* -1 = empty */
    uint64_t str_mask;

    /* BPE merges: key (left id << 32 | right id) -> (rank << 32 | new id). */
    uint64_t *merge_keys;     /* UINT64_MAX = empty */
    uint64_t *merge_vals;
    uint64_t merge_mask;      /* capacity - 1 (a power of two)              */
    unsigned merge_shift;     /* 64 - log2(capacity)                        */
    uint32_t n_merges;

    int32_t byte_id[256];     /* id of the single-byte token of each byte   */

    /* Added tokens sorted by first byte, then length descending, so the
     * first hit in a bucket is the longest. first[b]..first[b+1] is the
     * bucket of lead byte b. */
    qwi_added_token *added;
    uint32_t n_added;
    uint32_t added_first[257];

    pcre2_code *re;           /* the pre-tokenizer regex                    */
    int re_jit;               /* 1 if pcre2_jit_compile succeeded           */
};

/* Look up a merge of (a, b): 1 and *rank, *merged if it exists, else 0. */
static inline int qwi_merge_lookup(const struct qwi_tokenizer *t, int32_t a, int32_t b,
                                   uint32_t *rank, int32_t *merged) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    /* Fibonacci hashing of the packed pair: cheap and spreads both halves. */
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> t->merge_shift;
    for (;;) {
        i &= t->merge_mask;
        uint64_t k = t->merge_keys[i];
        if (k == key) {
            uint64_t v = t->merge_vals[i];
            *rank = (uint32_t)(v >> 32);
            *merged = (int32_t)(uint32_t)v;
            return 1;
        }
        if (k == UINT64_MAX) return 0;
        i++;
    }
}

#endif
