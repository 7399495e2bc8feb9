/*
 * fuzz_util.h - what the fuzz harnesses share: the container format that
 * carries several files in one fuzz input, a per-process scratch directory
 * the files are written to, and invariant checks that abort (so libFuzzer
 * and the regression driver both report the input).
 *
 * Container format (docs/testing.md): the input is cut at every occurrence
 * of QWF_SEP ("\n--qwfuzz--\n"). Part i becomes the file names[i] of the
 * harness's table; an empty part, or a part the input does not have, means
 * "no such file". Parts past the table are the harness's extra data (the
 * tokenizer harness encodes the first of them as text); the rest is ignored.
 */
#ifndef QWF_FUZZ_UTIL_H
#define QWF_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "qwinfer.h"

#define QWF_SEP "\n--qwfuzz--\n"
#define QWF_SEP_LEN (sizeof QWF_SEP - 1)
#define QWF_MAX_PARTS 8

/* One part of a container: a view into the fuzz input (not NUL-terminated). */
typedef struct qwf_part {
    const uint8_t *data;
    size_t len;
} qwf_part;

/* Cut data[0..size) at QWF_SEP into at most QWF_MAX_PARTS parts (the last
 * part keeps any further separators). Returns the number of parts (>= 1;
 * an empty input is one empty part). parts[] borrows from data. */
int qwf_split(const uint8_t *data, size_t size, qwf_part parts[QWF_MAX_PARTS]);

/* The harness's scratch directory, <base>/qwfuzz-<tag>-<pid>, created on the
 * first call (base: $QWFUZZ_TMPDIR, else /dev/shm when it is a writable
 * directory, else /tmp) and removed with every file in it at exit. Aborts
 * when it cannot be created: nothing can be tested without it. */
const char *qwf_dir(const char *tag);

/* Make the directory hold exactly the present parts: write parts[i] to
 * names[i] for i < num_names and i < nparts with a non-empty part, and
 * delete names[i] otherwise. Aborts on a write error. */
void qwf_write_files(const char *dir, const char *const *names, int num_names,
                     const qwf_part *parts, int nparts);

/* "dir/name" in a static buffer (valid until the next call). */
const char *qwf_path(const char *dir, const char *name);

/* Forget the last error message, so the next failing call must set its own. */
void qwf_clear_error(void);

/* The status contract of every entry point a harness calls: st is a status
 * the header defines, never QW_ERR_INTERNAL ("a bug in qwinfer"), and a
 * failure leaves a message in qw_last_error(). Aborts otherwise, naming
 * what (the call). Returns st. With $QWFUZZ_VERBOSE set, every status is
 * printed to stderr (to see how far an input gets). */
qw_status qwf_check_status(qw_status st, const char *what);

/* Create an engine on the model directory dir (1 thread, 64 KV blocks, 4
 * sequences), run one greedy request of 3 prompt tokens and at most 2
 * generated, and check the status contract of every call, that the
 * request ends exactly once with tokens inside the vocabulary, and that
 * every KV block is free again. An engine that cannot be created (a
 * refused model) is fine; anything else aborts. */
void qwf_run_engine(const char *dir);

/* Print "qwfuzz: <file>:<line>: <message>" and abort(). */
void qwf_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define QWF_CHECK(cond, ...) \
    do { if (!(cond)) qwf_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)

#endif
