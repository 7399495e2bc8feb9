/*
 * tokenizer.c - loading a Hugging Face byte-level BPE tokenizer into the
 * immutable tables of tokenizer_impl.h, and the per-id lookups. Encoding is
 * in tokenizer_encode.c, decoding in detok.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "file.h"
#include "tokenizer_impl.h"

/* Qwen2/2.5/3's pre-tokenizer (the Split regex of their tokenizer.json),
 * used when the files name none (vocab.json + merges.txt). */
static const char qwi_qwen_pretok_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* One token as read from the files, before the tables are built. Strings
 * point into the parsed JSON, which outlives the build. */
typedef struct tok_entry {
    const char *s;
    size_t len;
    int32_t id;
    int added, special;
    const char *src;   /* the file it came from, for messages */
} tok_entry;

typedef struct entry_list {
    tok_entry *v;
    size_t n, cap;
} entry_list;

static int entries_push(entry_list *l, const char *s, size_t len, int64_t id, int added,
                        int special, const char *src) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        tok_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (tok_entry){s, len, (int32_t)id, added, special, src};
    return 0;
}

/* ---- GPT-2 byte <-> unicode mapping ---------------------------------------- */

/* GPT-2 maps each byte to a printable code point so BPE tokens are readable
 * strings: printable Latin-1 bytes map to themselves, the other 68 to
 * U+0100.. in byte order. */
static void byte_to_unicode_table(uint32_t cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            cp[b] = (uint32_t)b;
        else
            cp[b] = next++;
    }
}

static size_t utf8_put(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
}

/* Decode one UTF-8 code point of a string already known to be valid (JSON
 * strings from jansson are). Returns its length. */
static size_t utf8_get(const unsigned char *s, size_t n, uint32_t *c) {
    if (s[0] < 0x80 || n < 2) { *c = s[0]; return 1; }
    if (s[0] < 0xE0) { *c = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if (s[0] < 0xF0 || n < 4) {
        if (n < 3) { *c = s[0]; return 1; }
        *c = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *c = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
         ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* The bytes HF's ByteLevel decoder makes of one token string: each char
 * mapped back to its byte, or, if any char is outside the mapping (an added
 * token like "a b"), the string's own UTF-8. Writes at most len bytes. */
static size_t token_raw_bytes(const int16_t *unicode_to_byte, const char *s, size_t len,
                              char *out) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += utf8_get((const unsigned char *)s + i, len - i, &c);
        if (c >= 512 || unicode_to_byte[c] < 0) {
            memcpy(out, s, len);
            return len;
        }
        out[o++] = (char)unicode_to_byte[c];
    }
    return o;
}

/* ---- string map -------------------------------------------------------------- */

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

static const char *tok_str(const qwi_tokenizer *t, int32_t id, size_t *len) {
    *len = t->str_len[id];
    return t->str_arena + t->str_off[id];
}

/* Insert id under its string form; a later id with the same string replaces
 * the earlier one (added tokens are inserted last so they win, as HF's
 * token_to_id looks in the added vocabulary first). */
static void strmap_insert(qwi_tokenizer *t, int32_t id) {
    size_t len;
    const char *s = tok_str(t, id, &len);
    uint64_t i = XXH3_64bits(s, len) & t->str_mask;
    for (;; i = (i + 1) & t->str_mask) {
        int32_t o = t->str_slots[i];
        if (o < 0) { t->str_slots[i] = id; return; }
        size_t ol;
        const char *os = tok_str(t, o, &ol);
        if (ol == len && memcmp(os, s, len) == 0) { t->str_slots[i] = id; return; }
    }
}

static int32_t strmap_find(const qwi_tokenizer *t, const char *s, size_t len) {
    uint64_t i = XXH3_64bits(s, len) & t->str_mask;
    for (;; i = (i + 1) & t->str_mask) {
        int32_t o = t->str_slots[i];
        if (o < 0) return -1;
        size_t ol;
        const char *os = tok_str(t, o, &ol);
        if (ol == len && memcmp(os, s, len) == 0) return o;
    }
}

/* ---- building the tables ----------------------------------------------------- */

static int added_cmp(const void *a, const void *b) {
    const qwi_added_token *x = a, *y = b;
    unsigned char fx = (unsigned char)x->content[0], fy = (unsigned char)y->content[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fill the per-id tables and the string map from the entries. src names the
 * file for messages. */
static qw_status build_vocab(qwi_tokenizer *t, entry_list *el, const char *src) {
    int64_t max_id = -1;
    size_t total = 0, n_added = 0;
    /* The tables are sized by the largest id, so ids are bounded before
     * anything is allocated: by the model's vocabulary when there is one,
     * else by the number of tokens (HF allows holes, not a 3 KB file
     * claiming 2^31 ids). */
    int64_t bound = t->id_limit > 0 ? t->id_limit
                                    : QWI_MIN((int64_t)QWI_TOK_MAX_IDS,
                                              2 * (int64_t)el->n + QWI_TOK_ID_SLACK);
    for (size_t i = 0; i < el->n; i++) {
        tok_entry *e = &el->v[i];
        if (e->id < 0)
            return qwi_fail(QW_ERR_FORMAT, "%s: token \"%.*s\" has a negative id", src,
                            (int)QWI_MIN(e->len, 64), e->s);
        if (e->id >= bound) {
            if (t->id_limit > 0)
                return qwi_fail(QW_ERR_FORMAT, "%s: token \"%.*s\" has id %d, outside the model's "
                                "vocabulary [0, %d) (config.json vocab_size)", e->src,
                                (int)QWI_MIN(e->len, 64), e->s, (int)e->id, (int)t->id_limit);
            return qwi_fail(QW_ERR_FORMAT, "%s: token \"%.*s\" has id %d, but the tokenizer files "
                            "hold %zu tokens: ids must stay below %lld", e->src,
                            (int)QWI_MIN(e->len, 64), e->s, (int)e->id, el->n, (long long)bound);
        }
        if (e->len == 0)
            return qwi_fail(QW_ERR_FORMAT, "%s: token id %d is an empty string", src,
                            (int)e->id);
        if (e->id > max_id) max_id = e->id;
        total += e->len;
        if (e->added) n_added++;
    }
    if (max_id < 0) return qwi_fail(QW_ERR_FORMAT, "%s: empty vocabulary", src);
    if (total >= UINT32_MAX / 2)
        return qwi_fail(QW_ERR_FORMAT, "%s: vocabulary too large", src);
    int32_t nv = (int32_t)(max_id + 1);
    t->vocab_size = nv;
    t->flags = calloc((size_t)nv, 1);
    t->str_off = calloc((size_t)nv, sizeof(uint32_t));
    t->str_len = calloc((size_t)nv, sizeof(uint32_t));
    t->raw_off = calloc((size_t)nv, sizeof(uint32_t));
    t->raw_len = calloc((size_t)nv, sizeof(uint32_t));
    t->str_arena = malloc(total + 1);
    t->raw_arena = malloc(total + 1);
    t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
    uint64_t cap = pow2_at_least((uint64_t)el->n * 2);
    t->str_slots = malloc(cap * sizeof(int32_t));
    if (!t->flags || !t->str_off || !t->str_len || !t->raw_off || !t->raw_len ||
        !t->str_arena || !t->raw_arena || !t->added || !t->str_slots)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory for the vocabulary", src);
    memset(t->str_slots, 0xff, cap * sizeof(int32_t));
    t->str_mask = cap - 1;

    uint32_t b2u[256];
    int16_t u2b[512];
    byte_to_unicode_table(b2u);
    for (int i = 0; i < 512; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) u2b[b2u[b]] = (int16_t)b;

    size_t so = 0, ro = 0;
    for (size_t i = 0; i < el->n; i++) {
        tok_entry *e = &el->v[i];
        uint8_t *f = &t->flags[e->id];
        if (*f & QWI_TOKF_PRESENT) {
            size_t ol;
            const char *os = tok_str(t, e->id, &ol);
            /* HF files often list an added token in the vocab too, with the
             * same id: that is one token. Anything else is a conflict. */
            int same = ol == e->len && memcmp(os, e->s, ol) == 0;
            if (!same || !e->added || (*f & QWI_TOKF_ADDED))
                return qwi_fail(QW_ERR_FORMAT, "%s: duplicate id %d (\"%.*s\" and \"%.*s\")",
                                src, (int)e->id, (int)QWI_MIN(ol, 64), os,
                                (int)QWI_MIN(e->len, 64), e->s);
        }
        *f |= QWI_TOKF_PRESENT;
        if (e->added) *f |= QWI_TOKF_ADDED | (e->special ? QWI_TOKF_SPECIAL : 0);
        memcpy(t->str_arena + so, e->s, e->len);
        t->str_off[e->id] = (uint32_t)so;
        t->str_len[e->id] = (uint32_t)e->len;
        size_t rl = token_raw_bytes(u2b, e->s, e->len, t->raw_arena + ro);
        t->raw_off[e->id] = (uint32_t)ro;
        t->raw_len[e->id] = (uint32_t)rl;
        so += e->len;
        ro += rl;
        if (e->added) {
            /* the same id may be listed twice as added only via the error above */
            t->added[t->n_added++] = (qwi_added_token){
                t->str_arena + t->str_off[e->id], (uint32_t)e->len, e->id, e->special};
        }
    }
    /* Regular tokens first, added ones after, so added strings win. */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t id = 0; id < nv; id++)
            if ((t->flags[id] & QWI_TOKF_PRESENT) &&
                (!!(t->flags[id] & QWI_TOKF_ADDED)) == pass)
                strmap_insert(t, id);

    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t l = utf8_put(b2u[b], s);
        int32_t id = strmap_find(t, s, l);
        if (id < 0 || (t->flags[id] & QWI_TOKF_ADDED))
            return qwi_fail(QW_ERR_FORMAT,
                            "%s: the vocabulary lacks the byte-level token \"%.*s\" of byte "
                            "0x%02x (not a byte-level BPE vocabulary?)",
                            src, (int)l, s, b);
        t->byte_id[b] = id;
    }

    qsort(t->added, t->n_added, sizeof *t->added, added_cmp);
    uint32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_added && (unsigned char)t->added[k].content[0] < b) k++;
        t->added_first[b] = k;
    }
    return QW_OK;
}

static qw_status merges_alloc(qwi_tokenizer *t, size_t n, const char *src) {
    uint64_t cap = pow2_at_least((uint64_t)n * 2 + 16);
    t->merge_keys = malloc(cap * sizeof(uint64_t));
    t->merge_vals = malloc(cap * sizeof(uint64_t));
    if (!t->merge_keys || !t->merge_vals)
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory for merges", src);
    memset(t->merge_keys, 0xff, cap * sizeof(uint64_t));
    t->merge_mask = cap - 1;
    unsigned bits = 0;
    while ((1ull << bits) < cap) bits++;
    t->merge_shift = 64 - bits;
    return QW_OK;
}

/* Add merge number `rank` of tokens a and b (HF string forms). where names
 * the entry for messages ("merges.txt line 7"). */
static qw_status merge_add(qwi_tokenizer *t, const char *a, size_t al, const char *b, size_t bl,
                           const char *where) {
    int32_t ia = strmap_find(t, a, al), ib = strmap_find(t, b, bl);
    if (ia < 0 || ib < 0) {
        const char *u = ia < 0 ? a : b;
        size_t ul = ia < 0 ? al : bl;
        return qwi_fail(QW_ERR_FORMAT, "%s: merge names unknown token \"%.*s\"", where,
                        (int)QWI_MIN(ul, 64), u);
    }
    char stack[256];
    char *ab = al + bl <= sizeof stack ? stack : malloc(al + bl);
    if (!ab) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory", where);
    memcpy(ab, a, al);
    memcpy(ab + al, b, bl);
    int32_t m = strmap_find(t, ab, al + bl);
    if (ab != stack) free(ab);
    if (m < 0)
        return qwi_fail(QW_ERR_FORMAT, "%s: merge result \"%.*s%.*s\" is not in the vocabulary",
                        where, (int)QWI_MIN(al, 32), a, (int)QWI_MIN(bl, 32), b);
    uint64_t key = ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> t->merge_shift;
    for (;; i++) {
        i &= t->merge_mask;
        if (t->merge_keys[i] == UINT64_MAX) { t->merge_keys[i] = key; break; }
        if (t->merge_keys[i] == key) break;   /* HF: a repeated pair's last rank wins */
    }
    t->merge_vals[i] = ((uint64_t)t->n_merges << 32) | (uint32_t)m;
    t->n_merges++;
    return QW_OK;
}

/* ---- files ------------------------------------------------------------------- */

static qw_status load_json(const char *path, json_t **out) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    qw_status st = qwi_file_read(path, false, &text, &len);
    if (st != QW_OK) return st;
    json_error_t err;
    /* Duplicate keys would silently drop tokens: reject them. */
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    free(text);
    if (!*out)
        return qwi_fail(QW_ERR_FORMAT, "%s: bad JSON at line %d column %d: %s", path, err.line,
                        err.column, err.text);
    return QW_OK;
}

static qw_status vocab_from_object(json_t *vocab, entry_list *el, const char *src) {
    if (!json_is_object(vocab))
        return qwi_fail(QW_ERR_FORMAT, "%s: vocab is not a JSON object", src);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v))
            return qwi_fail(QW_ERR_FORMAT, "%s: vocab entry \"%.64s\" is not an integer id", src,
                            key);
        json_int_t id = json_integer_value(v);
        if (id < 0 || id > INT32_MAX - 1)
            return qwi_fail(QW_ERR_FORMAT, "%s: vocab entry \"%.64s\" has id %lld out of range",
                            src, key, (long long)id);
        if (entries_push(el, key, strlen(key), id, 0, 0, src))
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory", src);
    }
    return QW_OK;
}

/* One added token object ({content, special, ...}) with the given id. */
static qw_status added_from_object(json_t *o, int64_t id, entry_list *el, const char *src) {
    json_t *c = json_object_get(o, "content");
    if (!json_is_string(c))
        return qwi_fail(QW_ERR_FORMAT, "%s: added token %lld has no string \"content\"", src,
                        (long long)id);
    if (id < 0 || id > INT32_MAX - 1)
        return qwi_fail(QW_ERR_FORMAT, "%s: added token \"%.64s\" has id %lld out of range", src,
                        json_string_value(c), (long long)id);
    json_t *sp = json_object_get(o, "special");
    if (entries_push(el, json_string_value(c), json_string_length(c), id, 1, json_is_true(sp),
                     src))
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory", src);
    return QW_OK;
}

static qw_status set_regex(qwi_tokenizer *t, const char *pattern, const char *src) {
    int ec;
    PCRE2_SIZE eo;
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                          &eo, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return qwi_fail(QW_ERR_FORMAT, "%s: pre-tokenizer regex at offset %zu: %s", src,
                        (size_t)eo, (const char *)msg);
    }
    /* JIT makes the regex several times faster; it may be unavailable
     * (platform, SELinux execmem); the interpreter then does the same work. */
    t->re_jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return QW_OK;
}

/* Find the Split pre-tokenizer's regex in a tokenizer.json pre_tokenizer
 * (itself, or inside a Sequence). NULL if there is none. */
static const char *find_split_regex(json_t *pt) {
    if (!json_is_object(pt)) return NULL;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "Split") == 0) {
        json_t *re = json_object_get(json_object_get(pt, "pattern"), "Regex");
        return json_string_value(re);
    }
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(pt, "pretokenizers");
        size_t i;
        json_t *p;
        json_array_foreach(arr, i, p) {
            const char *r = find_split_regex(p);
            if (r) return r;
        }
    }
    return NULL;
}

static qw_status load_tokenizer_json(qwi_tokenizer *t, const char *path) {
    json_t *root = NULL;
    entry_list el = {0};
    qw_status st = load_json(path, &root);
    if (st) return st;
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        st = qwi_fail(QW_ERR_FORMAT, "%s: no \"model\" object", path);
        goto done;
    }
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0) {
        st = qwi_fail(QW_ERR_UNSUPPORTED, "%s: model type \"%s\" (only BPE is supported)", path,
                      type);
        goto done;
    }
    if ((st = vocab_from_object(json_object_get(model, "vocab"), &el, path))) goto done;
    json_t *added = json_object_get(root, "added_tokens");
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id)) {
            st = qwi_fail(QW_ERR_FORMAT, "%s: added_tokens[%zu] has no integer \"id\"", path, i);
            goto done;
        }
        if ((st = added_from_object(a, json_integer_value(id), &el, path))) goto done;
    }
    if ((st = build_vocab(t, &el, path))) goto done;

    json_t *merges = json_object_get(model, "merges");
    if (merges && !json_is_array(merges)) {
        st = qwi_fail(QW_ERR_FORMAT, "%s: model.merges is not an array", path);
        goto done;
    }
    if ((st = merges_alloc(t, json_array_size(merges), path))) goto done;
    json_t *m;
    json_array_foreach(merges, i, m) {
        char where[64 + 4096];
        snprintf(where, sizeof where, "%s: model.merges[%zu]", path, i);
        const char *ms = json_string_value(m);
        if (ms) {
            /* "a b": byte-level tokens never hold a real space */
            const char *sp = strchr(ms, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = qwi_fail(QW_ERR_FORMAT, "%s: \"%.64s\" is not \"a b\"", where, ms);
                goto done;
            }
            st = merge_add(t, ms, (size_t)(sp - ms), sp + 1, strlen(sp + 1), where);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
            st = merge_add(t, json_string_value(x), json_string_length(x), json_string_value(y),
                           json_string_length(y), where);
        } else {
            st = qwi_fail(QW_ERR_FORMAT, "%s: neither \"a b\" nor [\"a\", \"b\"]", where);
        }
        if (st) goto done;
    }
    const char *re = find_split_regex(json_object_get(root, "pre_tokenizer"));
    st = set_regex(t, re ? re : qwi_qwen_pretok_regex, path);
done:
    free(el.v);
    json_decref(root);
    return st;
}

static qw_status load_vocab_merges(qwi_tokenizer *t, const char *vocab_path,
                                   const char *merges_path, const char *config_path) {
    json_t *vocab = NULL, *config = NULL;
    entry_list el = {0};
    char *text = NULL;
    qw_status st = load_json(vocab_path, &vocab);
    if (st) goto done;
    if ((st = vocab_from_object(vocab, &el, vocab_path))) goto done;
    if (qwi_file_exists(config_path)) {
        if ((st = load_json(config_path, &config))) goto done;
        json_t *dec = json_object_get(config, "added_tokens_decoder");
        const char *key;
        json_t *a;
        json_object_foreach(dec, key, a) {
            char *end;
            errno = 0;
            long long id = strtoll(key, &end, 10);
            if (*key == '\0' || *end != '\0' || errno) {
                st = qwi_fail(QW_ERR_FORMAT, "%s: added_tokens_decoder key \"%.64s\" is not an id",
                              config_path, key);
                goto done;
            }
            if ((st = added_from_object(a, id, &el, config_path))) goto done;
        }
    }
    if ((st = build_vocab(t, &el, vocab_path))) goto done;

    size_t sz = 0;
    if ((st = qwi_file_read(merges_path, false, &text, &sz))) goto done;
    size_t lines = 0;
    for (size_t i = 0; i < sz; i++) lines += text[i] == '\n';
    if ((st = merges_alloc(t, lines + 1, merges_path))) goto done;
    char *p = text, *end = text + sz;
    for (size_t line = 1; p < end; line++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        size_t ll = (size_t)(le - p);
        if (ll && p[ll - 1] == '\r') ll--;
        if (ll == 0 || (line == 1 && ll >= 8 && memcmp(p, "#version", 8) == 0)) {
            p = le + 1;
            continue;
        }
        char *sp = memchr(p, ' ', ll);
        char where[64 + 4096];
        snprintf(where, sizeof where, "%s line %zu", merges_path, line);
        if (!sp || memchr(sp + 1, ' ', ll - (size_t)(sp - p) - 1) || sp == p ||
            sp + 1 == p + ll) {
            st = qwi_fail(QW_ERR_FORMAT, "%s: \"%.*s\" is not \"a b\"", where,
                          (int)QWI_MIN(ll, 64), p);
            goto done;
        }
        if ((st = merge_add(t, p, (size_t)(sp - p), sp + 1, ll - (size_t)(sp - p) - 1, where)))
            goto done;
        p = le + 1;
    }
    st = set_regex(t, qwi_qwen_pretok_regex, vocab_path);
done:
    free(text);
    free(el.v);
    json_decref(vocab);
    json_decref(config);
    return st;
}

/* Load for qwi_tokenizer_load_dir (model_vocab 0) and
 * qwi_tokenizer_load_dir_for_model (model_vocab > 0). */
static qw_status load_dir(const char *dir, int32_t model_vocab, qwi_tokenizer **out) {
    if (!out) return qwi_fail(QW_ERR_INVALID_ARGUMENT, "tokenizer: NULL out");
    *out = NULL;
    qw_status st = qwi_file_check_dir(dir, "tokenizer: the directory path");
    if (st != QW_OK) return st;
    size_t dl = strlen(dir);
    char *p1 = malloc(dl + 32), *p2 = malloc(dl + 32), *p3 = malloc(dl + 32);
    qwi_tokenizer *t = calloc(1, sizeof *t);
    if (!p1 || !p2 || !p3 || !t) {
        st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto done;
    }
    t->id_limit = model_vocab;   /* the bound build_vocab checks ids against */
    snprintf(p1, dl + 32, "%s/tokenizer.json", dir);
    /* Existence picks the file set; a name that exists but is not a regular
     * file (a FIFO, a directory) is then refused by the open, not skipped. */
    if (qwi_file_exists(p1)) {
        st = load_tokenizer_json(t, p1);
    } else {
        snprintf(p1, dl + 32, "%s/vocab.json", dir);
        snprintf(p2, dl + 32, "%s/merges.txt", dir);
        snprintf(p3, dl + 32, "%s/tokenizer_config.json", dir);
        if (qwi_file_exists(p1) && qwi_file_exists(p2))
            st = load_vocab_merges(t, p1, p2, p3);
        else
            st = qwi_fail(QW_ERR_IO, "%s: no tokenizer.json, nor vocab.json with merges.txt", dir);
    }
    if (st == QW_OK) {
        t->src = strdup(p1);
        if (!t->src) st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    if (st == QW_OK && t->id_limit <= 0) t->id_limit = t->vocab_size;
done:
    free(p1);
    free(p2);
    free(p3);
    if (st) {
        qwi_tokenizer_free(t);
        return st;
    }
    *out = t;
    return QW_OK;
}

/* A standalone tokenizer: ids bounded by the files' own token count. */
qw_status qwi_tokenizer_load_dir(const char *dir, qwi_tokenizer **out) {
    return load_dir(dir, 0, out);
}

/* A model's tokenizer: ids bounded by, and decodable up to, model_vocab. */
qw_status qwi_tokenizer_load_dir_for_model(const char *dir, int32_t model_vocab,
                                           qwi_tokenizer **out) {
    if (model_vocab <= 0) {
        if (out) *out = NULL;
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "tokenizer: model vocabulary %d", (int)model_vocab);
    }
    return load_dir(dir, model_vocab, out);
}

void qwi_tokenizer_free(qwi_tokenizer *t) {
    if (!t) return;
    free(t->src);
    free(t->flags);
    free(t->str_off);
    free(t->str_len);
    free(t->raw_off);
    free(t->raw_len);
    free(t->str_arena);
    free(t->raw_arena);
    free(t->str_slots);
    free(t->merge_keys);
    free(t->merge_vals);
    free(t->added);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

int32_t qwi_tokenizer_vocab_size(const qwi_tokenizer *t) { return t ? t->vocab_size : 0; }

const char *qwi_tokenizer_token_bytes(const qwi_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->vocab_size) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->raw_len[id];
    return t->raw_arena + t->raw_off[id];
}

int32_t qwi_tokenizer_token_id(const qwi_tokenizer *t, const char *str) {
    if (!t || !str || !*str) return -1;
    return strmap_find(t, str, strlen(str));
}

int qwi_tokenizer_is_special(const qwi_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->vocab_size && (t->flags[id] & QWI_TOKF_SPECIAL);
}

int qwi_tokenizer_is_added(const qwi_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->vocab_size && (t->flags[id] & QWI_TOKF_ADDED);
}
