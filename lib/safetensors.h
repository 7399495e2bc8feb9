/*
 * safetensors.h - memory-mapped loader for Hugging Face safetensors files,
 * single-file or sharded through model.safetensors.index.json.
 *
 * Owns: the mmaps of every shard and the parsed tensor directory. Tensors
 * handed out point into the mapping and live as long as the qwi_st_set.
 */
#ifndef QWI_SAFETENSORS_H
#define QWI_SAFETENSORS_H

#include "common.h"
#include "dtype.h"

#define QWI_MAX_DIMS 4

typedef struct qwi_tensor {
    const char *name;        /* owned by the set                       */
    const char *file;        /* shard path, for error messages         */
    qwi_dtype dtype;
    int ndim;
    int64_t shape[QWI_MAX_DIMS];
    const void *data;        /* into the mmap; NULL for an empty slot  */
    size_t nbytes;
} qwi_tensor;

/* Alignment: data is only as aligned as the file makes it (files written by
 * the reference library pad the header to 8 bytes, but a tensor that follows
 * an odd-sized 2-byte tensor can be 2-aligned). Readers of F32 data that need
 * 4-byte alignment should check ((uintptr_t)data % 4) or memcpy. */

typedef struct qwi_st_set qwi_st_set;

/* Open every safetensors file of a model directory: model.safetensors.index.json
 * (all shards it names) when present, else model.safetensors. Validates each
 * header strictly: 8-byte length within the file, JSON object in bounds,
 * known dtype, offsets inside the data section, tensors contiguous and not
 * overlapping, byte counts that match shape*dtype. On success *out owns the
 * mappings; on failure *out is NULL, nothing stays mapped and the message
 * names the file (and tensor). */
qw_status qwi_st_open_dir(const char *dir, qwi_st_set **out);

/* Open a single file (the same validation). */
qw_status qwi_st_open_file(const char *path, qwi_st_set **out);

/* Look a tensor up by exact name; NULL if absent (no error recorded). */
const qwi_tensor *qwi_st_find(const qwi_st_set *set, const char *name);

/* Number of tensors and the i-th, for iteration (order unspecified). */
size_t qwi_st_count(const qwi_st_set *set);
const qwi_tensor *qwi_st_at(const qwi_st_set *set, size_t i);

/* Release this process's resident pages of [data, data+nbytes) when that
 * range lies inside one of set's file mappings (widened to whole pages):
 * for a reader that has copied what it needs (the CPU backend's packed
 * weights), so that resident memory holds one copy of the weights, not
 * two. Content-preserving: the mapping and every qwi_tensor.data pointer
 * stay valid, and a later read faults the unchanged bytes back in from the
 * page cache (which keeps them: a warm reload stays warm). Returns the bytes
 * released, 0 when the range is not in a mapping (heap memory is never
 * touched), set or data is NULL, or madvise fails. Thread-safe with readers. */
size_t qwi_st_evict(const qwi_st_set *set, const void *data, size_t nbytes);

/* qwi_st_evict of every file mapping of set, whole; returns the bytes. */
size_t qwi_st_evict_all(const qwi_st_set *set);

/* Unmap and free. NULL is a no-op. */
void qwi_st_close(qwi_st_set *set);

#endif
