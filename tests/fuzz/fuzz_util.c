/*
 * fuzz_util.c - container splitting, the scratch directory and the status
 * contract shared by the fuzz harnesses (see fuzz_util.h).
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fuzz/fuzz_util.h"

int qwf_split(const uint8_t *data, size_t size, qwf_part parts[QWF_MAX_PARTS]) {
    int n = 0;
    size_t start = 0;
    while (n < QWF_MAX_PARTS - 1) {
        const uint8_t *hit = size - start >= QWF_SEP_LEN
                                 ? memmem(data + start, size - start, QWF_SEP, QWF_SEP_LEN)
                                 : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - data);
        parts[n].data = data + start;
        parts[n].len = at - start;
        n++;
        start = at + QWF_SEP_LEN;
    }
    parts[n].data = data + start;
    parts[n].len = size - start;
    return n + 1;
}

static char qwf_dir_path[4096];

/* Remove every entry of directory path (files only: scratch directories
 * hold nothing else), then the directory. */
static void qwf_remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            unlink(qwf_path(path, de->d_name));
        }
        closedir(d);
    }
    rmdir(path);
}

static void qwf_remove_dir(void) {
    if (qwf_dir_path[0]) qwf_remove_tree(qwf_dir_path);
}

/* Scratch directories of processes that died without their atexit (a
 * crash, libFuzzer's _Exit): qwfuzz-<tag>-<pid> whose pid is gone. */
static void qwf_remove_stale(const char *base, const char *tag) {
    char prefix[256];
    int pl = snprintf(prefix, sizeof prefix, "qwfuzz-%s-", tag);
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, (size_t)pl) != 0) continue;
        char *end;
        long pid = strtol(de->d_name + pl, &end, 10);
        if (*end != '\0' || pid <= 0) continue;
        /* Signal 0 only asks whether the process exists (ESRCH: it does not). */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", base, de->d_name);
        qwf_remove_tree(p);
    }
    closedir(d);
}

static int qwf_writable_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode) && access(p, W_OK | X_OK) == 0;
}

const char *qwf_dir(const char *tag) {
    if (qwf_dir_path[0]) return qwf_dir_path;
    const char *base = getenv("QWFUZZ_TMPDIR");
    if (!base || !*base) base = qwf_writable_dir("/dev/shm") ? "/dev/shm" : "/tmp";
    qwf_remove_stale(base, tag);
    snprintf(qwf_dir_path, sizeof qwf_dir_path, "%s/qwfuzz-%s-%ld", base, tag, (long)getpid());
    qwf_remove_dir(); /* a leftover of a crashed process with the same pid */
    if (mkdir(qwf_dir_path, 0700) != 0)
        qwf_fail(__FILE__, __LINE__, "mkdir %s: %s", qwf_dir_path, strerror(errno));
    atexit(qwf_remove_dir);
    return qwf_dir_path;
}

const char *qwf_path(const char *dir, const char *name) {
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

void qwf_write_files(const char *dir, const char *const *names, int num_names,
                     const qwf_part *parts, int nparts) {
    for (int i = 0; i < num_names; i++) {
        const char *p = qwf_path(dir, names[i]);
        if (i >= nparts || parts[i].len == 0) {
            if (unlink(p) != 0 && errno != ENOENT)
                qwf_fail(__FILE__, __LINE__, "unlink %s: %s", p, strerror(errno));
            continue;
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) qwf_fail(__FILE__, __LINE__, "open %s: %s", p, strerror(errno));
        const uint8_t *d = parts[i].data;
        size_t left = parts[i].len;
        while (left > 0) {
            ssize_t w = write(fd, d, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) qwf_fail(__FILE__, __LINE__, "write %s: %s", p, strerror(errno));
            d += w;
            left -= (size_t)w;
        }
        if (close(fd) != 0) qwf_fail(__FILE__, __LINE__, "close %s: %s", p, strerror(errno));
    }
}

void qwf_clear_error(void) { qwi_fail(QW_OK, "%s", ""); }

qw_status qwf_check_status(qw_status st, const char *what) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("QWFUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "qwfuzz: %s: %s%s%s\n", what, qw_status_string(st), st ? ": " : "",
                st ? qw_last_error() : "");
    QWF_CHECK(strcmp(qw_status_string(st), "unknown status") != 0,
              "%s returned %d, a status the header does not define", what, (int)st);
    QWF_CHECK(st != QW_ERR_INTERNAL, "%s returned QW_ERR_INTERNAL (\"a bug in qwinfer\"): %s",
              what, qw_last_error());
    QWF_CHECK(st == QW_OK || qw_last_error()[0] != '\0',
              "%s failed with %s but left no qw_last_error() message", what,
              qw_status_string(st));
    return st;
}

void qwf_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qwfuzz: %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    abort();
}

void qwf_run_engine(const char *dir) {
    qw_engine_options *o = NULL;
    QWF_CHECK(qw_engine_options_create(&o) == QW_OK, "options");
    QWF_CHECK(qw_engine_options_set_string(o, QW_OPT_MODEL_PATH, dir) == QW_OK, "model path");
    QWF_CHECK(qw_engine_options_set_int(o, QW_OPT_NUM_THREADS, 1) == QW_OK, "threads");
    QWF_CHECK(qw_engine_options_set_int(o, QW_OPT_NUM_KV_BLOCKS, 64) == QW_OK, "kv blocks");
    QWF_CHECK(qw_engine_options_set_int(o, QW_OPT_MAX_NUM_SEQS, 4) == QW_OK, "max seqs");
    qw_engine *e = (qw_engine *)1;
    qwf_clear_error();
    qw_status st = qwf_check_status(qw_engine_create(o, &e), "qw_engine_create");
    qw_engine_options_destroy(o);
    QWF_CHECK((st == QW_OK) == (e != NULL), "qw_engine_create: status %d with engine %p", (int)st,
              (void *)e);
    if (!e) return;

    int32_t vocab = qw_engine_vocab_size(e);
    QWF_CHECK(vocab > 0 && qw_engine_max_model_len(e) > 0, "engine without vocab or length");
    int32_t total = qw_engine_num_kv_blocks(e);
    qw_request *r = NULL;
    QWF_CHECK(qw_request_create(&r) == QW_OK, "request");
    const int32_t prompt[3] = {1 % vocab, 2 % vocab, 3 % vocab};
    QWF_CHECK(qw_request_set_prompt(r, prompt, 3) == QW_OK, "prompt");
    QWF_CHECK(qw_request_set_int(r, QW_REQ_MAX_TOKENS, 2) == QW_OK, "max tokens");
    QWF_CHECK(qw_request_set_double(r, QW_REQ_TEMPERATURE, 0.0) == QW_OK, "temperature");
    qwf_clear_error();
    st = qwf_check_status(qw_engine_submit(e, r), "qw_engine_submit");
    if (st == QW_OK) {
        int finishes = 0, tokens = 0;
        for (int step = 0; qw_engine_has_work(e); step++) {
            QWF_CHECK(step < 64, "a 2-token request is not done after 64 steps");
            qw_event ev[8];
            size_t n = 0;
            qwf_clear_error();
            st = qwf_check_status(qw_engine_step(e, ev, 8, sizeof ev[0], &n), "qw_engine_step");
            QWF_CHECK(n <= 8, "step wrote %zu events into 8", n);
            for (size_t k = 0; k < n; k++) {
                if (ev[k].kind == QW_EVENT_TOKEN) {
                    QWF_CHECK(ev[k].token >= 0 && ev[k].token < vocab, "token %d outside [0, %d)",
                              ev[k].token, vocab);
                    tokens++;
                }
                if (ev[k].finish_reason != QW_FINISH_NONE) finishes++;
            }
        }
        QWF_CHECK(finishes == 1, "the request finished %d times", finishes);
        QWF_CHECK(tokens <= 2, "%d tokens for max tokens 2", tokens);
        QWF_CHECK(qw_request_get_state(r) == QW_STATE_FINISHED, "request not finished");
        QWF_CHECK(qw_engine_num_free_kv_blocks(e) == total, "%d of %d KV blocks free at the end",
                  qw_engine_num_free_kv_blocks(e), total);
    }
    qw_request_release(r);
    qw_engine_destroy(e);
}
