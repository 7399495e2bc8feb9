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

/* Unmap and free. NULL is a no-op. */
void qwi_st_close(qwi_st_set *set);

#endif
