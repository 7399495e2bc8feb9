/*
 * minimal.c - the smallest complete qwinfer program: one greedy request.
 *
 *   minimal MODEL_DIR     prints the 8 generated token ids on one line
 */
#include <stdio.h>

#include "qwinfer.h"

static int fail(const char *what, qw_status st) {
    fprintf(stderr, "%s: %s: %s\n", what, qw_status_string(st), qw_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
        return 2;
    }
    qw_engine_options *opts;
    qw_status st = qw_engine_options_create(&opts);
    if (st != QW_OK) return fail("options", st);
    st = qw_engine_options_set_string(opts, QW_OPT_MODEL_PATH, argv[1]);
    qw_engine *engine = NULL;
    if (st == QW_OK) st = qw_engine_create(opts, &engine);
    qw_engine_options_destroy(opts);
    if (st != QW_OK) return fail("engine", st);

    static const int32_t prompt[4] = {1, 2, 3, 4};
    qw_request *req = NULL;
    st = qw_request_create(&req);
    if (st == QW_OK) st = qw_request_set_prompt(req, prompt, 4);
    if (st == QW_OK) st = qw_request_set_double(req, QW_REQ_TEMPERATURE, 0.0); /* greedy */
    if (st == QW_OK) st = qw_request_set_int(req, QW_REQ_MAX_TOKENS, 8);
    if (st == QW_OK) st = qw_engine_submit(engine, req);

    qw_event ev[16];
    size_t n;
    while (st == QW_OK && qw_engine_has_work(engine)) {
        st = qw_engine_step(engine, ev, 16, sizeof ev[0], &n);
        for (size_t i = 0; st == QW_OK && i < n; i++)
            if (ev[i].kind == QW_EVENT_TOKEN) printf("%d ", (int)ev[i].token);
    }
    printf("\n");
    int rc = st == QW_OK ? 0 : fail("generate", st);
    qw_request_release(req);
    qw_engine_destroy(engine);
    return rc;
}
