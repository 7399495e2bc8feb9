/*
 * weights_check.h - the load-time scan of weight tensors for NaN and
 * infinity. A checkpoint with one non-finite weight otherwise loads and
 * generates garbage (token 0 forever) with QW_OK; the scan turns that into
 * a QW_ERR_FORMAT naming the tensor and the element. Engine option
 * QW_OPT_CHECK_WEIGHTS (default 1) decides whether qw_engine_create runs it.
 */
#ifndef QWI_WEIGHTS_CHECK_H
#define QWI_WEIGHTS_CHECK_H

#include "common.h"
#include "safetensors.h"
#include "progress.h"

/* Index of the first element of t (F32, BF16, F16 or F8_E4M3, data of any
 * alignment) that is NaN or +-infinity, or -1 when every element is finite
 * (always -1 for I32: packed integer codes hold no floats). Reads
 * t->nbytes bytes; integer operations only (the exponent bits), so it runs
 * at memory speed and never raises a floating-point exception. */
int64_t qwi_weights_first_nonfinite(const qwi_tensor *t);

/* Scan every tensor of set. QW_OK when all are finite; else QW_ERR_FORMAT
 * with a message naming the file, the tensor, the element index and its
 * value class (NaN, +inf, -inf), and the option that skips the scan.
 * Each finite tensor's bytes go to progress (may be NULL), whose
 * QW_ERR_CANCELLED stops the scan. Reads only; the set is unchanged. */
qw_status qwi_weights_check(const qwi_st_set *set, qwi_progress *progress);

#endif
