/*
 * testutil.h - shared helpers for the Criterion tests: generated models,
 * temporary directories, the paths of the build's own tools, and the
 * float64 reference of one matmul output the kernel tests share.
 */
#ifndef QWT_TESTUTIL_H
#define QWT_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Defined in the ASan/UBSan and TSan trees (GCC and Clang spell it
 * differently): for the few tests that cannot run there (an address-space
 * limit) or that repeat there, at many times the cost, a measurement the
 * normal tree already makes. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define QWT_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define QWT_UNDER_SANITIZER 1
#endif
#endif

/* Directory of the running test binary's build tree (e.g. "build"), derived
 * from /proc/self/exe (<build>/tests/<name>). Static storage. */
const char *qwt_build_dir(void);

/* Path of a tool built into <build>/bin (e.g. "qw-makemodel"). Static storage,
 * overwritten by the next call. */
const char *qwt_tool(const char *name);

/* Return the directory of a generated model, creating it on first use by
 * running `qw-makemodel <args> --out <dir>`; <dir> is
 * <build>/testmodels/<name>. Models are reused between tests and runs when
 * the args are unchanged (a stamp file holds them). Calls cr_assert-free
 * abort()-free code: returns NULL on failure and prints why to stderr.
 * Returned string is malloc'd; the caller frees it. */
char *qwt_model(const char *name, const char *args);

/* Make a fresh empty directory under <build>/testtmp/ and return its path
 * (malloc'd). */
char *qwt_tmpdir(const char *tag);

/* Run a shell command; return its exit status (or -1). */
int qwt_system(const char *fmt, ...);

/* Read a whole file into a malloc'd buffer; *len gets its size. NULL on error. */
void *qwt_read_file(const char *path, size_t *len);

/* Write len bytes to path (truncating). Returns 0 on success. */
int qwt_write_file(const char *path, const void *data, size_t len);

/* The real Qwen tokenizer data (vocab.json, merges.txt, ...): under
 * $QW_SHARED_DIR, else ../shared (beside the checkout), + data/qwen-tokenizer.
 * NULL when absent (a user's clone): tests then skip. Static storage. */
const char *qwt_qwen_tokenizer_dir(void);

/* One matmul output in float64: x[0..K) . w[0..K), + *bias if bias, +
 * *init if init (a residual add); *mag gets the sum of the terms'
 * magnitudes, the scale a float result's rounding error is judged by. */
double qwt_matmul_ref(const float *x, const float *w, int64_t K, const float *bias,
                      const float *init, double *mag);

#endif
