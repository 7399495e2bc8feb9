/*
 * safetensors.c - mmap loader for safetensors files and sharded model
 * directories, with strict header validation (see safetensors.h).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON object
 * {name: {dtype, shape, data_offsets:[begin,end]}, "__metadata__": {...}},
 * then the data section; offsets are relative to the data section.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "file.h"
#include "safetensors.h"

/* The reference implementation refuses headers over 100 MB; a larger length
 * is a corrupt file, and refusing it early avoids parsing garbage. */
#define QWI_ST_MAX_HEADER (100u * 1024u * 1024u)

/* No real dimension comes near 2^40 elements; with every dimension below it
 * a shape's element count is only overflow-checked, never trusted. */
#define QWI_ST_MAX_DIM ((uint64_t)1 << 40)

typedef struct qwi_st_file {
    char *path;             /* owned; qwi_tensor.file points here          */
    void *map;              /* whole file, PROT_READ, MAP_PRIVATE          */
    size_t map_len;
} qwi_st_file;

struct qwi_st_set {
    qwi_st_file *files;
    size_t num_files, cap_files;
    qwi_tensor *tensors;    /* sorted by name once loading is complete     */
    size_t num_tensors, cap_tensors;
};

/* One tensor's extent in its file's data section, for the contiguity check. */
typedef struct qwi_st_span {
    uint64_t begin, end;
    const char *name;
} qwi_st_span;

static char *qwi_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static qw_status qwi_st_set_new(qwi_st_set **out) {
    *out = calloc(1, sizeof **out);
    return *out ? QW_OK : qwi_fail(QW_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
}

/* Unmap every file and free names and tables. NULL is a no-op; safe on a
 * half-built set (that is how every failure path cleans up). */
void qwi_st_close(qwi_st_set *set) {
    if (!set) return;
    for (size_t i = 0; i < set->num_tensors; i++) free((char *)set->tensors[i].name);
    for (size_t i = 0; i < set->num_files; i++) {
        if (set->files[i].map) munmap(set->files[i].map, set->files[i].map_len);
        free(set->files[i].path);
    }
    free(set->tensors);
    free(set->files);
    free(set);
}

static qw_status qwi_st_push_tensor(qwi_st_set *set, const qwi_tensor *t) {
    if (set->num_tensors == set->cap_tensors) {
        size_t cap = set->cap_tensors ? set->cap_tensors * 2 : 64;
        qwi_tensor *nt = realloc(set->tensors, cap * sizeof *nt);
        if (!nt) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        set->tensors = nt;
        set->cap_tensors = cap;
    }
    set->tensors[set->num_tensors++] = *t;
    return QW_OK;
}

/* Map a safetensors dtype string. Known-but-unsupported types are a
 * different error from garbage so users learn the file is fine but we
 * cannot run it (e.g. an FP8 checkpoint). */
static qw_status qwi_st_parse_dtype(const char *s, const char *path, const char *name,
                                    qwi_dtype *dt) {
    if (strcmp(s, "F32") == 0) { *dt = QWI_DTYPE_F32; return QW_OK; }
    if (strcmp(s, "BF16") == 0) { *dt = QWI_DTYPE_BF16; return QW_OK; }
    if (strcmp(s, "F16") == 0) { *dt = QWI_DTYPE_F16; return QW_OK; }
    /* Only the quantized-linear loader (quant_load.c) reads these two; every
     * float reader refuses them by name. */
    if (strcmp(s, "F8_E4M3") == 0) { *dt = QWI_DTYPE_F8_E4M3; return QW_OK; }
    if (strcmp(s, "I32") == 0) { *dt = QWI_DTYPE_I32; return QW_OK; }
    static const char *const known[] = {
        "F64", "I64", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL",
        "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64",
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(s, known[i]) == 0)
            return qwi_fail(QW_ERR_UNSUPPORTED,
                            "%s: tensor %s: dtype %s is not supported (F32, BF16, F16, F8_E4M3, I32 are)",
                            path, name, s);
    return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: unknown dtype \"%s\"", path, name, s);
}

/* Parse one header entry into *t (name not yet set) and its span. */
static qw_status qwi_st_parse_entry(const char *path, const char *name, json_t *v,
                                    uint64_t data_len, const uint8_t *data,
                                    qwi_tensor *t, qwi_st_span *span) {
    if (!json_is_object(v))
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: entry is not a JSON object", path, name);

    json_t *jdt = json_object_get(v, "dtype");
    if (!json_is_string(jdt))
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: \"dtype\" missing or not a string",
                        path, name);
    qw_status st = qwi_st_parse_dtype(json_string_value(jdt), path, name, &t->dtype);
    if (st != QW_OK) return st;

    json_t *jshape = json_object_get(v, "shape");
    if (!json_is_array(jshape))
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: \"shape\" missing or not an array",
                        path, name);
    size_t nd = json_array_size(jshape);
    if (nd > QWI_MAX_DIMS)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: %zu dimensions, at most %d supported",
                        path, name, nd, QWI_MAX_DIMS);
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(jshape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: shape[%zu] is not a non-negative integer",
                            path, name, i);
        uint64_t n = (uint64_t)json_integer_value(d);
        /* A zero dimension makes numel 0 whatever the others say, so the
         * byte-count check alone would let an absurd one through. */
        if (n > QWI_ST_MAX_DIM)
            return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: shape[%zu] = %llu is absurd (limit %llu; "
                            "sizes computed from it could overflow)", path, name, i,
                            (unsigned long long)n, (unsigned long long)QWI_ST_MAX_DIM);
        if (n != 0 && numel > UINT64_MAX / n)
            return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: shape overflows", path, name);
        numel *= n;
        t->shape[i] = (int64_t)n;
    }
    for (size_t i = nd; i < QWI_MAX_DIMS; i++) t->shape[i] = 0;
    t->ndim = (int)nd;
    size_t esize = qwi_dtype_size(t->dtype);
    if (numel > UINT64_MAX / esize)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: shape overflows", path, name);
    uint64_t want = numel * esize;

    json_t *joff = json_object_get(v, "data_offsets");
    if (!json_is_array(joff) || json_array_size(joff) != 2)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: \"data_offsets\" missing or not [begin, end]",
                        path, name);
    json_t *jb = json_array_get(joff, 0), *je = json_array_get(joff, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < 0)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: data_offsets are not non-negative integers",
                        path, name);
    uint64_t begin = (uint64_t)json_integer_value(jb), end = (uint64_t)json_integer_value(je);
    if (begin > end)
        return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s: data_offsets begin %llu > end %llu",
                        path, name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return qwi_fail(QW_ERR_FORMAT,
                        "%s: tensor %s: data_offsets end %llu past the data section (%llu bytes; "
                        "file truncated?)",
                        path, name, (unsigned long long)end, (unsigned long long)data_len);
    if (end - begin != want)
        return qwi_fail(QW_ERR_FORMAT,
                        "%s: tensor %s: %llu bytes in data_offsets, shape and dtype need %llu",
                        path, name, (unsigned long long)(end - begin), (unsigned long long)want);

    t->data = data + begin;
    t->nbytes = (size_t)want;
    span->begin = begin;
    span->end = end;
    return QW_OK;
}

static int qwi_st_span_cmp(const void *a, const void *b) {
    const qwi_st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The data section must be exactly tiled by the tensors: an overlap means
 * two tensors alias, a gap or tail means the header and data disagree. */
static qw_status qwi_st_check_tiling(const char *path, qwi_st_span *spans, size_t n,
                                     uint64_t data_len) {
    qsort(spans, n, sizeof *spans, qwi_st_span_cmp);
    uint64_t expect = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        if (spans[i].begin < expect)
            return qwi_fail(QW_ERR_FORMAT, "%s: tensor %s overlaps tensor %s in the data section",
                            path, spans[i].name, prev);
        if (spans[i].begin > expect)
            return qwi_fail(QW_ERR_FORMAT,
                            "%s: tensor %s: gap of %llu bytes before it in the data section",
                            path, spans[i].name, (unsigned long long)(spans[i].begin - expect));
        expect = spans[i].end;
        prev = spans[i].name;
    }
    if (expect != data_len)
        return qwi_fail(QW_ERR_FORMAT,
                        "%s: %llu bytes of the data section are not covered by any tensor",
                        path, (unsigned long long)(data_len - expect));
    return QW_OK;
}

/* Parse the JSON header of a mapped file and append its tensors to set. */
static qw_status qwi_st_parse_header(qwi_st_set *set, const qwi_st_file *f) {
    const uint8_t *base = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | base[i];
    uint64_t avail = (uint64_t)f->map_len - 8;
    if (hlen > avail)
        return qwi_fail(QW_ERR_FORMAT, "%s: header length %llu runs past the end of the file "
                        "(%llu bytes after the length)",
                        f->path, (unsigned long long)hlen, (unsigned long long)avail);
    if (hlen > QWI_ST_MAX_HEADER)
        return qwi_fail(QW_ERR_FORMAT, "%s: header length %llu is absurd (limit %u)", f->path,
                        (unsigned long long)hlen, QWI_ST_MAX_HEADER);
    if (hlen < 2)
        return qwi_fail(QW_ERR_FORMAT, "%s: header of %llu bytes cannot be a JSON object",
                        f->path, (unsigned long long)hlen);

    json_error_t jerr;
    /* Duplicate keys would make a tensor's identity ambiguous. */
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return qwi_fail(QW_ERR_FORMAT, "%s: header is not valid JSON: %s (at byte %d)", f->path,
                        jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return qwi_fail(QW_ERR_FORMAT, "%s: header is not a JSON object", f->path);
    }

    const uint8_t *data = base + 8 + hlen;
    uint64_t data_len = avail - hlen;
    size_t n = json_object_size(root);
    qwi_st_span *spans = calloc(n ? n : 1, sizeof *spans);
    if (!spans) {
        json_decref(root);
        return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    }
    size_t ns = 0;
    qw_status st = QW_OK;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) continue; /* free-form strings */
        qwi_tensor t = {0};
        st = qwi_st_parse_entry(f->path, key, val, data_len, data, &t, &spans[ns]);
        if (st != QW_OK) break;
        t.file = f->path;
        t.name = strdup(key);
        if (!t.name) {
            st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
            break;
        }
        st = qwi_st_push_tensor(set, &t);
        if (st != QW_OK) {
            free((char *)t.name);
            break;
        }
        /* The span borrows the set's copy of the name: root's key dies first. */
        spans[ns++].name = t.name;
    }
    if (st == QW_OK) st = qwi_st_check_tiling(f->path, spans, ns, data_len);
    free(spans);
    json_decref(root);
    return st;
}

/* Map one file and append its tensors (not yet sorted). */
static qw_status qwi_st_add_file(qwi_st_set *set, const char *path) {
    if (set->num_files == set->cap_files) {
        size_t cap = set->cap_files ? set->cap_files * 2 : 4;
        qwi_st_file *nf = realloc(set->files, cap * sizeof *nf);
        if (!nf) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        set->files = nf;
        set->cap_files = cap;
    }
    qwi_st_file *f = &set->files[set->num_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return qwi_fail(QW_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
    set->num_files++; /* from here on qwi_st_close frees it */

    int fd;
    uint64_t size;
    qw_status st = qwi_file_open(path, false, &fd, &size);
    if (st != QW_OK) return st;
    if (size < 8) {
        close(fd);
        return qwi_fail(QW_ERR_FORMAT, "%s: %llu bytes, too short for a safetensors file",
                        path, (unsigned long long)size);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return qwi_fail(QW_ERR_IO, "%s: too large to map", path);
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (m == MAP_FAILED) return qwi_fail(QW_ERR_IO, "mmap %s: %s", path, strerror(e));
    f->map = m;
    f->map_len = (size_t)size;
    return qwi_st_parse_header(set, f);
}

static int qwi_st_tensor_cmp(const void *a, const void *b) {
    return strcmp(((const qwi_tensor *)a)->name, ((const qwi_tensor *)b)->name);
}

/* Sort by name for bsearch and reject a name that two shards both define. */
static qw_status qwi_st_finish(qwi_st_set *set) {
    if (set->num_tensors > 1)
        qsort(set->tensors, set->num_tensors, sizeof *set->tensors, qwi_st_tensor_cmp);
    for (size_t i = 1; i < set->num_tensors; i++) {
        const qwi_tensor *a = &set->tensors[i - 1], *b = &set->tensors[i];
        if (strcmp(a->name, b->name) == 0)
            return qwi_fail(QW_ERR_FORMAT, "tensor %s is defined in both %s and %s", a->name,
                            a->file, b->file);
    }
    return QW_OK;
}

/* Map and validate one file. On success *out owns the mapping; on failure
 * *out is NULL, nothing is mapped, and the message names path (and tensor). */
qw_status qwi_st_open_file(const char *path, qwi_st_set **out) {
    *out = NULL;
    qwi_st_set *set;
    qw_status st = qwi_st_set_new(&set);
    if (st != QW_OK) return st;
    st = qwi_st_add_file(set, path);
    if (st == QW_OK) st = qwi_st_finish(set);
    if (st != QW_OK) {
        qwi_st_close(set);
        return st;
    }
    *out = set;
    return QW_OK;
}

/* A shard name must stay inside the model directory. */
static bool qwi_st_shard_name_ok(const char *s) {
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 &&
           strstr(s, "..") == NULL;
}

static qw_status qwi_st_open_index(const char *dir, const char *index_path, qwi_st_set *set) {
    char *text = NULL;
    size_t len = 0;
    qw_status st = qwi_file_read(index_path, false, &text, &len);
    if (st != QW_OK) return st;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return qwi_fail(QW_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", index_path,
                        jerr.text, jerr.line);
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        st = qwi_fail(QW_ERR_FORMAT, "%s: \"weight_map\" missing or not an object", index_path);
        goto done;
    }
    if (json_object_size(wm) == 0) {
        st = qwi_fail(QW_ERR_FORMAT, "%s: \"weight_map\" names no tensors", index_path);
        goto done;
    }
    const char *key;
    json_t *val;
    /* Validate every entry before opening anything. */
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val)) {
            st = qwi_fail(QW_ERR_FORMAT, "%s: weight_map[%s] is not a string", index_path, key);
            goto done;
        }
        if (!qwi_st_shard_name_ok(json_string_value(val))) {
            st = qwi_fail(QW_ERR_FORMAT, "%s: weight_map[%s]: shard \"%s\" is not a plain file "
                          "name in the model directory", index_path, key, json_string_value(val));
            goto done;
        }
    }
    /* Open each distinct shard once: the set's file list doubles as the
     * "already opened" record. */
    json_object_foreach(wm, key, val) {
        const char *shard = json_string_value(val);
        char *p = qwi_path_join(dir, shard);
        if (!p) {
            st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: out of memory", index_path);
            goto done;
        }
        bool seen = false;
        for (size_t i = 0; i < set->num_files && !seen; i++)
            seen = strcmp(set->files[i].path, p) == 0;
        if (!seen) st = qwi_st_add_file(set, p);
        free(p);
        if (st != QW_OK) goto done;
    }
    st = qwi_st_finish(set);
    if (st != QW_OK) goto done;
    json_object_foreach(wm, key, val) {
        const qwi_tensor *t = qwi_st_find(set, key);
        const char *shard = json_string_value(val);
        size_t fl = t ? strlen(t->file) : 0, sl = strlen(shard);
        /* t->file is "<dir>/<shard>": compare the last component. */
        if (!t || fl <= sl || t->file[fl - sl - 1] != '/' || strcmp(t->file + fl - sl, shard) != 0) {
            st = qwi_fail(QW_ERR_FORMAT, "%s: tensor %s is mapped to %s/%s but that shard does "
                          "not contain it", index_path, key, dir, shard);
            goto done;
        }
    }
done:
    json_decref(root);
    return st;
}

/* Open <dir>'s index and all its shards, else <dir>/model.safetensors.
 * Neither present -> QW_ERR_IO naming dir. *out as in qwi_st_open_file. */
qw_status qwi_st_open_dir(const char *dir, qwi_st_set **out) {
    *out = NULL;
    qw_status dst = qwi_file_check_dir(dir, "the model path (QW_OPT_MODEL_PATH)");
    if (dst != QW_OK) return dst;
    char *index_path = qwi_path_join(dir, "model.safetensors.index.json");
    char *single_path = qwi_path_join(dir, "model.safetensors");
    qwi_st_set *set = NULL;
    qw_status st = QW_OK;
    if (!index_path || !single_path) {
        st = qwi_fail(QW_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        goto done;
    }
    st = qwi_st_set_new(&set);
    if (st != QW_OK) goto done;
    struct stat sb;
    if (stat(index_path, &sb) == 0) {
        st = qwi_st_open_index(dir, index_path, set);
    } else if (errno != ENOENT) {
        st = qwi_fail(QW_ERR_IO, "stat %s: %s", index_path, strerror(errno));
    } else if (stat(single_path, &sb) != 0 && errno == ENOENT) {
        st = qwi_fail(QW_ERR_IO, "%s: neither model.safetensors.index.json nor model.safetensors "
                      "found", dir);
    } else {
        st = qwi_st_add_file(set, single_path);
        if (st == QW_OK) st = qwi_st_finish(set);
    }
done:
    free(index_path);
    free(single_path);
    if (st != QW_OK) {
        qwi_st_close(set);
        return st;
    }
    *out = set;
    return QW_OK;
}

/* Binary search over the name-sorted table; NULL when absent. The result
 * is borrowed from set. */
const qwi_tensor *qwi_st_find(const qwi_st_set *set, const char *name) {
    if (!set || !name) return NULL;
    size_t lo = 0, hi = set->num_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, set->tensors[mid].name);
        if (c == 0) return &set->tensors[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

/* Tensors in set (0 for NULL). */
size_t qwi_st_count(const qwi_st_set *set) { return set ? set->num_tensors : 0; }

/* The i-th tensor in name order, borrowed; NULL when i is out of range. */
const qwi_tensor *qwi_st_at(const qwi_st_set *set, size_t i) {
    return set && i < set->num_tensors ? &set->tensors[i] : NULL;
}

/* Drop the resident pages of [data, data+nbytes) from this process when the
 * range lies in one of set's mappings. MADV_DONTNEED on a read-only private
 * file mapping only unmaps the pages: the mapping (and every pointer into
 * it) stays valid, and a later read faults the bytes back in from the page
 * cache or the file, unchanged. The range is widened to whole pages, so a
 * neighbour's pages go too; that is harmless for the same reason. Memory
 * that is not in a mapping (a heap buffer a test built) is left alone:
 * MADV_DONTNEED would zero anonymous memory. */
size_t qwi_st_evict(const qwi_st_set *set, const void *data, size_t nbytes) {
    if (!set || !data || nbytes == 0) return 0;
    const uintptr_t p = (uintptr_t)data;
    for (size_t i = 0; i < set->num_files; i++) {
        const qwi_st_file *f = &set->files[i];
        const uintptr_t b = (uintptr_t)f->map;
        if (!f->map || p < b || p - b >= f->map_len || nbytes > f->map_len - (p - b)) continue;
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t lo = p & ~(page - 1), hi = (p + nbytes + page - 1) & ~(page - 1);
        /* The map starts on a page; its last page may be partial. */
        uintptr_t end = (b + f->map_len + page - 1) & ~(page - 1);
        if (hi > end) hi = end;
        if (madvise((void *)lo, (size_t)(hi - lo), MADV_DONTNEED) != 0) return 0;
        return (size_t)(hi - lo);
    }
    return 0;
}

/* Evict every mapping of set whole (see qwi_st_evict). */
size_t qwi_st_evict_all(const qwi_st_set *set) {
    size_t n = 0;
    if (!set) return 0;
    for (size_t i = 0; i < set->num_files; i++)
        if (set->files[i].map) n += qwi_st_evict(set, set->files[i].map, set->files[i].map_len);
    return n;
}
