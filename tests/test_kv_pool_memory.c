/*
 * test_kv_pool_memory.c - the CPU KV pool's memory (cpu/page_map.h,
 * docs/api.md "KV cache sizing"): a pool costs address space, not memory,
 * until sequences write to it, and then about what they wrote (rounded up
 * to 4 KiB pages); a pool the process cannot map fails
 * qw_engine_create with QW_ERR_OUT_OF_MEMORY and a message naming the KV
 * pool, and leaves nothing behind that stops the next create.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "qwinfer.h"
#include "util/engine_util.h"
#include "util/testutil.h"

/* The tiny shape (2 layers, 2 kv heads of 16 dims) in bf16 KV: 4 KiB a
 * block of 16 positions over both layers' K and V. */
#define TINY_BLOCK_BYTES 4096

static char *tiny(void) {
    char *dir = qwt_model("kvmem-tiny", "--shape tiny --dtype bf16 --seed 43");
    cr_assert_not_null(dir);
    return dir;
}

/* A field of /proc/self/status in kB ("VmRSS", "VmSize"). */
static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert_not_null(f);
    char line[256];
    long kb = -1;
    const size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') kb = strtol(line + n + 1, NULL, 10);
    fclose(f);
    cr_assert_geq(kb, 0, "%s not in /proc/self/status", field);
    return kb;
}

static qw_status create(const char *dir, int64_t blocks, qw_engine **e) {
    qw_engine_options *o = NULL;
    cr_assert_eq(qw_engine_options_create(&o), QW_OK);
    cr_assert_eq(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 2), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, blocks), QW_OK);
    cr_assert_eq(qw_engine_options_set_int(o, QW_OPT_KV_CACHE_DTYPE, QW_KV_CACHE_BF16), QW_OK);
    *e = NULL;
    qw_status st = qw_engine_create(o, e);
    qw_engine_options_destroy(o);
    return st;
}

static void generate(qw_engine *e) {
    int32_t p[40];
    qwt_make_prompt(p, 40, 256, 5);
    qwt_job job = { .prompt = p, .num_prompt = 40, .max_tokens = 24, .ignore_eos = 1, .seed = -1 };
    qwt_result res;
    qwt_run_jobs(e, &job, 1, &res);
    cr_assert_eq(res.num_tokens, 24);
    qwt_results_free(&res, 1);
}

Test(kv_pool_memory, a_1_gib_pool_costs_what_is_written) {
    char *dir = tiny();
    const int64_t blocks = ((int64_t)1 << 30) / TINY_BLOCK_BYTES;
    const long before = status_kb("VmRSS");
    qw_engine *e = NULL;
    cr_assert_eq(create(dir, blocks, &e), QW_OK, "%s", qw_last_error());
    /* the allocator's per-block tables (~60 bytes a block) are real memory;
     * the 1 GiB of pages is not */
    const long created = status_kb("VmRSS");
    cr_assert_lt(created - before, 128 * 1024, "%ld kB resident after create", created - before);
    generate(e);
    /* 64 positions written: 4 blocks of 1 KiB in each layer's K and V, a
     * few 4 KiB pages (0.25-0.42 MiB in all with the step's scratch, on
     * Zen 5); 2 MiB pages would commit 8 MiB (page_map.h) */
    const long used = status_kb("VmRSS");
    cr_assert_lt(used - created, 4 * 1024, "%ld kB more resident after one request", used - created);
    qw_engine_destroy(e);
    free(dir);
}

Test(kv_pool_memory, an_unmappable_pool_is_out_of_memory_and_leaves_no_damage) {
#ifdef QWT_UNDER_SANITIZER
    cr_skip_test("the sanitizers reserve their shadow memory: an address-space limit breaks them");
#else
    char *dir = tiny();
    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
    /* 512 MiB of address space beyond what the process holds now: enough
     * for the engine's threads, scratch and block tables, not for a 4 GiB
     * pool (which physical memory would allow on any CI machine the
     * tests run on; if not, that check refuses it first, same status) */
    const rlim_t limit = (rlim_t)(status_kb("VmSize") + 512 * 1024) * 1024;
    struct rlimit lim = { .rlim_cur = limit, .rlim_max = old.rlim_max };
    cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
    qw_engine *e = NULL;
    const qw_status st = create(dir, ((int64_t)4 << 30) / TINY_BLOCK_BYTES, &e);
    cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
    cr_assert_eq(st, QW_ERR_OUT_OF_MEMORY, "status %d: %s", (int)st, qw_last_error());
    cr_assert_null(e);
    cr_assert_not_null(strstr(qw_last_error(), "KV pool"), "%s", qw_last_error());
    /* everything the failed create took was given back: a normal one works */
    cr_assert_eq(create(dir, 256, &e), QW_OK, "%s", qw_last_error());
    generate(e);
    qw_engine_destroy(e);
    free(dir);
#endif
}
