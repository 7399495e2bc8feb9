/*
 * cli.c - qw-serve: the command line (docs/serve.md lists every option).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: qw-serve --model DIR [options]\n"
            "  --host ADDR                 listen address (default 127.0.0.1)\n"
            "  --port N                    TCP port (default 8000; 0 = any free port)\n"
            "  --served-model-name NAME    model id of the API (default: last component of DIR)\n"
            "  --device cpu|cuda:N  --threads N  --max-num-seqs N  --max-num-batched-tokens N\n"
            "  --max-model-len N  --kv-cache-bytes N  --block-size N  --numerics fast|exact|fast-int8\n"
            "  --kv-cache-dtype auto|f32|bf16|fp8  --seed N  --no-prefix-caching\n"
            "                              engine options\n"
            "  --max-queue N               waiting requests before 503 (default 256)\n"
            "  --max-body-bytes N          request body limit (default 4194304)\n"
            "  --request-timeout S         per-request deadline, seconds (default 600; 0 = none)\n"
            "  --shutdown-timeout S        SIGTERM drain deadline, seconds (default 30)\n"
            "  --cache-salt-header NAME    header giving the cache salt (default X-Cache-Salt)\n"
            "  --degrade-queue N --degrade-max-tokens M\n"
            "                              cap max_tokens at M while more than N requests wait\n"
            "  --max-connections N         (default 512)\n"
            "  --log-requests              one line per finished request on stderr\n");
}

static int bad(const char *flag, const char *v) {
    fprintf(stderr, "qw-serve: %s: bad value '%s'\n", flag, v ? v : "(missing)");
    return 2;
}

static int int_arg(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    if (!v) return bad(flag, v);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return bad(flag, v);
    *out = x;
    return 0;
}

static int secs_arg(const char *flag, const char *v, double *out) {
    if (!v) return bad(flag, v);
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* above ~24 days a deadline in ms would overflow an int on the way */
    if (errno || end == v || *end || !isfinite(x) || x < 0 || x > 2e6) return bad(flag, v);
    *out = x;
    return 0;
}

int qws_config_parse(int argc, char **argv, qws_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8000;
    c->threads = c->max_num_seqs = c->max_num_batched_tokens = c->max_model_len = c->block_size = -1;
    c->kv_cache_bytes = -1;
    c->numerics = -1;
    c->kv_cache_dtype = -1;
    c->max_queue = 256;
    c->max_body_bytes = 4194304;
    c->request_timeout = 600;
    c->shutdown_timeout = 30;
    c->cache_salt_header = "X-Cache-Salt";
    c->max_connections = 512;

    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x = 0;
        int rc = 0, takes = 1;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(f, "--model")) {
            if (!v || !*v) rc = bad(f, v); else c->model = v;
        } else if (!strcmp(f, "--host")) {
            if (!v || !*v) rc = bad(f, v); else c->host = v;
        } else if (!strcmp(f, "--port")) {
            if (!(rc = int_arg(f, v, 0, 65535, &x))) c->port = (long)x;
        } else if (!strcmp(f, "--served-model-name")) {
            if (!v || !*v || strlen(v) >= 256) rc = bad(f, v); else c->served_model_name = v;
        } else if (!strcmp(f, "--device")) {
            if (!v || !*v) rc = bad(f, v); else c->device = v;
        } else if (!strcmp(f, "--threads")) {
            if (!(rc = int_arg(f, v, 0, 4096, &x))) c->threads = (long)x;
        } else if (!strcmp(f, "--max-num-seqs")) {
            if (!(rc = int_arg(f, v, 1, 1 << 20, &x))) c->max_num_seqs = (long)x;
        } else if (!strcmp(f, "--max-num-batched-tokens")) {
            if (!(rc = int_arg(f, v, 1, 1 << 24, &x))) c->max_num_batched_tokens = (long)x;
        } else if (!strcmp(f, "--max-model-len")) {
            if (!(rc = int_arg(f, v, 1, 1 << 24, &x))) c->max_model_len = (long)x;
        } else if (!strcmp(f, "--kv-cache-bytes")) {
            rc = int_arg(f, v, 1, (long long)1 << 50, &c->kv_cache_bytes);
        } else if (!strcmp(f, "--block-size")) {
            if (!(rc = int_arg(f, v, 1, 1024, &x))) c->block_size = (long)x;
        } else if (!strcmp(f, "--numerics")) {
            if (v && !strcmp(v, "fast")) c->numerics = QW_NUMERICS_FAST;
            else if (v && !strcmp(v, "exact")) c->numerics = QW_NUMERICS_EXACT;
            else if (v && !strcmp(v, "fast-int8")) c->numerics = QW_NUMERICS_FAST_INT8;
            else rc = bad(f, v);
        } else if (!strcmp(f, "--kv-cache-dtype")) {
            if (v && !strcmp(v, "auto")) c->kv_cache_dtype = QW_KV_CACHE_AUTO;
            else if (v && !strcmp(v, "f32")) c->kv_cache_dtype = QW_KV_CACHE_F32;
            else if (v && !strcmp(v, "bf16")) c->kv_cache_dtype = QW_KV_CACHE_BF16;
            else if (v && !strcmp(v, "fp8")) c->kv_cache_dtype = QW_KV_CACHE_FP8_E4M3;
            else rc = bad(f, v);
        } else if (!strcmp(f, "--seed")) {
            if (!(rc = int_arg(f, v, INT64_MIN, INT64_MAX, &c->seed))) c->has_seed = 1;
        } else if (!strcmp(f, "--no-prefix-caching")) {
            c->no_prefix_caching = 1;
            takes = 0;
        } else if (!strcmp(f, "--max-queue")) {
            if (!(rc = int_arg(f, v, 1, 1 << 24, &x))) c->max_queue = (long)x;
        } else if (!strcmp(f, "--max-body-bytes")) {
            rc = int_arg(f, v, 1, (long long)1 << 32, &c->max_body_bytes);
        } else if (!strcmp(f, "--request-timeout")) {
            rc = secs_arg(f, v, &c->request_timeout);
        } else if (!strcmp(f, "--shutdown-timeout")) {
            rc = secs_arg(f, v, &c->shutdown_timeout);
        } else if (!strcmp(f, "--cache-salt-header")) {
            if (!v || !*v) rc = bad(f, v); else c->cache_salt_header = v;
        } else if (!strcmp(f, "--degrade-queue")) {
            if (!(rc = int_arg(f, v, 0, 1 << 24, &x))) c->degrade_queue = (long)x;
        } else if (!strcmp(f, "--degrade-max-tokens")) {
            if (!(rc = int_arg(f, v, 0, 1 << 24, &x))) c->degrade_max_tokens = (long)x;
        } else if (!strcmp(f, "--max-connections")) {
            if (!(rc = int_arg(f, v, 1, 65536, &x))) c->max_connections = (long)x;
        } else if (!strcmp(f, "--log-requests")) {
            c->log_requests = 1;
            takes = 0;
        } else {
            fprintf(stderr, "qw-serve: unknown option '%s'\n", f);
            rc = 2;
        }
        if (rc) {
            usage(stderr);
            return 2;
        }
        i += takes;
    }
    if (!c->model) {
        fprintf(stderr, "qw-serve: --model DIR is required\n");
        usage(stderr);
        return 2;
    }
    /* degradation is on when M > 0 (N = 0 then means "while anything waits") */
    if (c->degrade_queue > 0 && c->degrade_max_tokens == 0) {
        fprintf(stderr, "qw-serve: --degrade-queue needs --degrade-max-tokens M > 0\n");
        return 2;
    }
    return 0;
}
