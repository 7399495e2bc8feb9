/*
 * quant_dynamic.h - GPTQModel's per-module overrides ("dynamic" in a GPTQ
 * quantization_config): an ordered object of regular expressions over
 * module names ("model.layers.3.mlp.down_proj", "lm_head") to overrides.
 *
 *   "dynamic": {"-:.*\\.mlp\\.down_proj": {},
 *               "+:model\\.layers\\.1\\..*": {"bits": 8, "group_size": 32}}
 *
 * The first pattern that matches a module's name at its start (Python's
 * re.match; PCRE2 here) decides: "-:" means the module is not quantized
 * (it ships a float "<name>.weight"), "+:" or no prefix applies the
 * overrides (bits, group_size, sym, desc_act) to the top-level config for
 * that module. No match: the top-level config. This is how GPTQModel
 * writes mixed-precision checkpoints and how vLLM reads them.
 *
 * Owns: the compiled patterns (qwi_quant_rules_free).
 */
#ifndef QWI_QUANT_DYNAMIC_H
#define QWI_QUANT_DYNAMIC_H

#include "quant.h"

typedef struct qwi_quant_rules qwi_quant_rules;

/* Parse q's "dynamic" (q: a "quantization_config" object) against base,
 * the top-level config it overrides. *out = NULL when the key is absent,
 * null or an empty object. Not an object, a rule that is not an object or
 * a pattern that does not compile -> QW_ERR_FORMAT naming it; an override
 * of a key that would change what the stored numbers mean beyond bits,
 * group_size, sym and desc_act (checkpoint_format, pack_dtype, ...), or a
 * value the top level would refuse -> QW_ERR_UNSUPPORTED naming it.
 * Bookkeeping keys (damp_percent, ...) are ignored. path names the config
 * file in messages. On failure *out is NULL and nothing leaks. */
qw_status qwi_quant_rules_parse(struct json_t *q, const char *path, const qwi_quant_config *base,
                                qwi_quant_rules **out);

/* The rules' verdict for module `name`: *skip = true when a "-:" pattern
 * matches first (the module is not quantized); else *out = base with the
 * first matching "+:" rule's overrides (or base itself). r may be NULL
 * (no rules). Cannot fail; not thread-safe (each rule's match data is
 * reused): the loader calls it from one thread. */
void qwi_quant_rules_apply(const qwi_quant_rules *r, const char *name, const qwi_quant_config *base,
                           qwi_quant_config *out, bool *skip);

/* Free rules; NULL is a no-op. */
void qwi_quant_rules_free(qwi_quant_rules *r);

#endif
