/*
 * logit_bias.c - a request's penalties and logit bias: the public setter,
 * the submit-time check, and handing them to the sampler for each step
 * (the definition they follow is in penalties.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

QW_API qw_status qw_request_set_logit_bias(qw_request *req, const int32_t *ids, const float *bias, size_t n) {
    QWI_ERR_SCOPE(req);
    const char *fn = "qw_request_set_logit_bias";
    qw_status st = qwi_request_check_mutable(req, fn);
    if (st != QW_OK) return st;
    if (n > QW_MAX_LOGIT_BIAS)
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: %zu entries, at most QW_MAX_LOGIT_BIAS (%d)", fn, n,
                        QW_MAX_LOGIT_BIAS);
    if (n > 0 && (!ids || !bias))
        return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: ids or bias is NULL with n = %zu", fn, n);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(bias[i]) || bias[i] < -100.0f || bias[i] > 100.0f)
            return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: bias[%zu] (token %d) is %g; it must be finite and within [-100, 100]",
                            fn, i, ids[i], (double)bias[i]);
        /* n <= 300: the quadratic scan is cheaper than anything cleverer */
        for (size_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return qwi_fail(QW_ERR_INVALID_ARGUMENT, "%s: token %d appears twice (entries %zu and %zu)", fn,
                                ids[i], j, i);
    }
    int32_t *id_copy = NULL;
    float *bias_copy = NULL;
    if (n > 0) {
        id_copy = malloc(n * sizeof *id_copy);
        bias_copy = malloc(n * sizeof *bias_copy);
        if (!id_copy || !bias_copy) {
            free(id_copy);
            free(bias_copy);
            return qwi_fail(QW_ERR_OUT_OF_MEMORY, "%s: cannot copy %zu entries", fn, n);
        }
        memcpy(id_copy, ids, n * sizeof *id_copy);
        memcpy(bias_copy, bias, n * sizeof *bias_copy);
    }
    free(req->bias_ids);
    free(req->bias_values);
    req->bias_ids = id_copy;
    req->bias_values = bias_copy;
    req->num_bias = (int32_t)n;
    return QW_OK;
}

qw_status qwi_request_check_logit_bias(const qw_request *req, int32_t vocab) {
    for (int32_t i = 0; i < req->num_bias; i++)
        if (req->bias_ids[i] < 0 || req->bias_ids[i] >= vocab)
            return qwi_fail(QW_ERR_TOKEN_OUT_OF_RANGE,
                            "qw_engine_submit: logit bias token %d (entry %d) is outside the vocabulary [0, %d)",
                            req->bias_ids[i], i, vocab);
    return QW_OK;
}
