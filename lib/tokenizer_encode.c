/*
 * tokenizer_encode.c - text -> token ids: added-token split, NFC, the
 * pre-tokenizer regex and byte-level BPE (see tokenizer.h for the pipeline).
 *
 * BPE runs over a linked list of symbols with a binary min-heap of
 * (rank, position) for adjacent pairs: each merge pushes at most two new
 * pairs and stale heap entries are skipped when popped, so a piece of n bytes
 * costs O(n log n) whatever its length (a 10K-character word included).
 * All scratch state lives in a per-call context: no locks, no shared cache.
 */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>
#include <xxhash.h>

#include "utf8.h"
#include "tokenizer_impl.h"

/* Pieces repeat a lot in real text ("Ġthe", "Ġof", ...). Past this input
 * size a per-call direct-mapped cache of piece -> ids is worth its setup. */
#define PIECE_CACHE_MIN_TEXT 4096
#define PIECE_CACHE_SLOTS 4096          /* power of two */
#define PIECE_CACHE_MAX_LEN 24          /* bytes of a cacheable piece */
#define PIECE_CACHE_MAX_IDS 12

typedef struct piece_slot {
    uint64_t hash;
    uint8_t len, n_ids;
    char bytes[PIECE_CACHE_MAX_LEN];
    int32_t ids[PIECE_CACHE_MAX_IDS];
} piece_slot;

typedef struct enc_ctx {
    const qwi_tokenizer *t;
    /* output */
    int32_t *ids;
    size_t n, cap;
    /* BPE scratch, grown to the longest piece seen */
    int32_t *sym_id, *sym_prev, *sym_next;
    uint64_t *heap;
    size_t sym_cap;
    /* regex */
    pcre2_match_data *md;
    size_t seg_base;        /* offset in the caller's text of the stretch matched */
    int seg_nfc;            /* 1 when that stretch was NFC-normalised (offsets shift) */
    piece_slot *cache;      /* NULL for short inputs */
} enc_ctx;

static int out_push(enc_ctx *c, int32_t id) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        int32_t *v = realloc(c->ids, cap * sizeof *v);
        if (!v) return -1;
        c->ids = v;
        c->cap = cap;
    }
    c->ids[c->n++] = id;
    return 0;
}

static int scratch_reserve(enc_ctx *c, size_t n) {
    if (n <= c->sym_cap) return 0;
    size_t cap = c->sym_cap ? c->sym_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *a = realloc(c->sym_id, cap * sizeof *a);
    if (a) c->sym_id = a;
    int32_t *b = realloc(c->sym_prev, cap * sizeof *b);
    if (b) c->sym_prev = b;
    int32_t *d = realloc(c->sym_next, cap * sizeof *d);
    if (d) c->sym_next = d;
    /* each merge pushes <= 2 pairs on top of the n-1 initial ones */
    uint64_t *h = realloc(c->heap, 3 * cap * sizeof *h);
    if (h) c->heap = h;
    if (!a || !b || !d || !h) return -1;
    c->sym_cap = cap;
    return 0;
}

/* ---- min-heap of (rank << 32 | position) --------------------------------------- */

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t r = l + 1, s = (r < m && h[r] < h[l]) ? r : l;
        if (h[s] >= v) break;
        h[i] = h[s];
        i = s;
    }
    if (m) h[i] = v;
    return top;
}

static void push_pair(enc_ctx *c, size_t *hn, int32_t pos) {
    if (pos < 0) return;
    int32_t nx = c->sym_next[pos];
    if (nx < 0) return;
    uint32_t rank;
    int32_t m;
    if (qwi_merge_lookup(c->t, c->sym_id[pos], c->sym_id[nx], &rank, &m))
        heap_push(c->heap, hn, ((uint64_t)rank << 32) | (uint32_t)pos);
}

/* BPE of one piece's bytes, appending its ids to the output. */
static int bpe_piece(enc_ctx *c, const unsigned char *s, size_t n) {
    const qwi_tokenizer *t = c->t;
    if (n == 1) return out_push(c, t->byte_id[s[0]]);

    piece_slot *slot = NULL;
    uint64_t hash = 0;
    if (c->cache && n <= PIECE_CACHE_MAX_LEN) {
        hash = XXH3_64bits(s, n);
        slot = &c->cache[hash & (PIECE_CACHE_SLOTS - 1)];
        if (slot->hash == hash && slot->len == n && memcmp(slot->bytes, s, n) == 0) {
            for (unsigned i = 0; i < slot->n_ids; i++)
                if (out_push(c, slot->ids[i])) return -1;
            return 0;
        }
    }

    if (scratch_reserve(c, n)) return -1;
    int32_t *id = c->sym_id, *prev = c->sym_prev, *next = c->sym_next;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[s[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(c, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = heap_pop(c->heap, &hn);
        int32_t p = (int32_t)(uint32_t)top;
        uint32_t want = (uint32_t)(top >> 32), rank;
        int32_t q = next[p], m;
        /* stale: p was absorbed (-1), lost its right neighbour, or the pair
         * at p changed since it was pushed (ranks identify pairs) */
        if (id[p] < 0 || q < 0) continue;
        if (!qwi_merge_lookup(t, id[p], id[q], &rank, &m) || rank != want) continue;
        id[p] = m;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        push_pair(c, &hn, prev[p]);
        push_pair(c, &hn, p);
    }
    size_t first = c->n;
    for (int32_t i = 0; i >= 0; i = next[i])
        if (out_push(c, id[i])) return -1;
    if (slot && c->n - first <= PIECE_CACHE_MAX_IDS) {
        slot->hash = hash;
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)(c->n - first);
        memcpy(slot->bytes, s, n);
        memcpy(slot->ids, c->ids + first, (c->n - first) * sizeof(int32_t));
    }
    return 0;
}

/* ---- pre-tokenizer ------------------------------------------------------------ */

/* The status of a failed match. The limits are hit by a pattern that
 * backtracks catastrophically on this text: the regex comes from the
 * tokenizer file, so that is the file's problem, not a qwinfer bug. */
static qw_status regex_failure(const enc_ctx *c, int rc, size_t from) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    size_t at = c->seg_base + (c->seg_nfc ? 0 : from);
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT)
        return qwi_fail(QW_ERR_UNSUPPORTED,
                        "tokenizer: the pre-tokenizer regex of %s gave up on this text near byte "
                        "%zu (%s): the pattern backtracks catastrophically", c->t->src, at,
                        (const char *)msg);
    if (rc == PCRE2_ERROR_NOMEMORY)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: the pre-tokenizer regex ran out of "
                        "memory near byte %zu", at);
    return qwi_fail(QW_ERR_INTERNAL, "tokenizer: pre-tokenizer regex failed near byte %zu: %s",
                    at, (const char *)msg);
}

static qw_status pretok_bpe(enc_ctx *c, const char *s, size_t n) {
    const qwi_tokenizer *t = c->t;
    size_t gap = 0, from = 0;
    while (from < n) {
        int rc;
        if (t->re_jit) {
            rc = pcre2_jit_match(t->re, (PCRE2_SPTR)s, n, from, 0, c->md, NULL);
            /* the JIT's default stack is small; the interpreter uses the heap */
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                                 c->md, NULL);
        } else {
            rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, c->md, NULL);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return regex_failure(c, rc, from);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) {
            /* HF drops empty matches; step over one character and go on */
            from = m0 + 1;
            while (from < n && ((unsigned char)s[from] & 0xC0) == 0x80) from++;
            continue;
        }
        /* Split "Isolated": the text between matches is a piece of its own */
        if (m0 > gap && bpe_piece(c, (const unsigned char *)s + gap, m0 - gap)) goto oom;
        if (bpe_piece(c, (const unsigned char *)s + m0, m1 - m0)) goto oom;
        gap = from = m1;
    }
    if (n > gap && bpe_piece(c, (const unsigned char *)s + gap, n - gap)) goto oom;
    return QW_OK;
oom:
    return qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
}

/* NFC then pre-tokenize one stretch of text between added tokens; base is
 * its offset in the caller's text, for messages. */
static qw_status encode_segment(enc_ctx *c, const char *s, size_t n, size_t base) {
    if (n == 0) return QW_OK;
    c->seg_base = base;
    c->seg_nfc = 0;
    /* Code points below U+0300 (lead bytes < 0xCC) are all NFC-stable and
     * none of them combines with a neighbour, so such text is its own NFC:
     * skip utf8proc's copy for ASCII and most Latin text. */
    int simple = 1;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0xCC) { simple = 0; break; }
    if (simple) return pretok_bpe(c, s, n);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) {
        free(nfc);
        return qwi_fail(r == UTF8PROC_ERROR_NOMEM ? QW_ERR_OUT_OF_MEMORY : QW_ERR_INVALID_ARGUMENT,
                        "tokenizer: NFC normalisation failed: %s", utf8proc_errmsg(r));
    }
    c->seg_nfc = 1;
    qw_status st = pretok_bpe(c, (const char *)nfc, (size_t)r);
    free(nfc);
    return st;
}

/* Offset of the first invalid UTF-8 byte (Unicode Table 3-7), or n; a
 * sequence cut off by the end of the text counts as invalid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0, len;
    while (i < n) {
        if (qwi_utf8_step(s + i, n - i, &len) != U8_VALID) return i;
        i += len;
    }
    return n;
}

qw_status qwi_tokenizer_encode(const qwi_tokenizer *t, const char *text, size_t len,
                               int parse_special, int32_t **ids, size_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "tokenizer_encode: NULL argument");
    if (len == 0) return QW_OK;
    size_t bad = utf8_invalid_at((const unsigned char *)text, len);
    if (bad != len)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT,
                        "tokenizer_encode: text is not valid UTF-8 at byte %zu", bad);

    enc_ctx c = {.t = t};
    qw_status st = QW_OK;
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) { st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory"); goto done; }
    if (len >= PIECE_CACHE_MIN_TEXT) c.cache = calloc(PIECE_CACHE_SLOTS, sizeof *c.cache);
    c.cap = len / 3 + 16;
    c.ids = malloc(c.cap * sizeof *c.ids);
    if (!c.ids) { st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory"); goto done; }

    /* which bytes can start an added token */
    uint8_t can_start[256] = {0};
    for (uint32_t i = 0; i < t->n_added; i++)
        if (parse_special || !t->added[i].special)
            can_start[(unsigned char)t->added[i].content[0]] = 1;

    const unsigned char *s = (const unsigned char *)text;
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        if (!can_start[s[i]]) { i++; continue; }
        /* leftmost-longest: the bucket is sorted longest first */
        const qwi_added_token *hit = NULL;
        for (uint32_t k = t->added_first[s[i]]; k < t->added_first[s[i] + 1]; k++) {
            const qwi_added_token *a = &t->added[k];
            if ((parse_special || !a->special) && a->len <= len - i &&
                memcmp(a->content, s + i, a->len) == 0) {
                hit = a;
                break;
            }
        }
        if (!hit) { i++; continue; }
        if ((st = encode_segment(&c, text + seg, i - seg, seg))) goto done;
        if (out_push(&c, hit->id)) {
            st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
            goto done;
        }
        i += hit->len;
        seg = i;
    }
    st = encode_segment(&c, text + seg, len - seg, seg);
done:
    pcre2_match_data_free(c.md);
    free(c.cache);
    free(c.sym_id);
    free(c.sym_prev);
    free(c.sym_next);
    free(c.heap);
    if (st) {
        free(c.ids);
        return st;
    }
    if (c.n == 0) {
        free(c.ids);
        c.ids = NULL;
    }
    *ids = c.ids;
    *n = c.n;
    return QW_OK;
}
