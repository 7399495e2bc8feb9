/*
 * testutil.h - shared helpers for the Criterion tests: generated models,
 * temporary directories, the paths of the build's own tools.
 */
#ifndef QWT_TESTUTIL_H
#define QWT_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

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

#endif
