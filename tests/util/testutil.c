/*
 * testutil.c - see testutil.h.
 */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/testutil.h"

static char build_dir[4096];

const char *qwt_build_dir(void) {
    if (build_dir[0]) return build_dir;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        strcpy(build_dir, "build");
        return build_dir;
    }
    exe[n] = '\0';
    /* <build>/tests/<name> -> <build> */
    char *d = dirname(exe);   /* <build>/tests */
    d = dirname(d);           /* <build>       */
    snprintf(build_dir, sizeof build_dir, "%s", d);
    return build_dir;
}

const char *qwt_tool(const char *name) {
    static char path[4096 + 64];
    snprintf(path, sizeof path, "%s/bin/%s", qwt_build_dir(), name);
    return path;
}

int qwt_system(const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc == -1) return -1;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void *qwt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len) *len = (size_t)n;
    }
    return buf;
}

int qwt_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    int rc = fclose(f);
    return (w == len && rc == 0) ? 0 : -1;
}

/* FNV-1a, enough to name a model directory after its generation key. */
static uint64_t key_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

char *qwt_model(const char *name, const char *args_in) {
    /* The key also records the generator binary's mtime: a rebuilt
     * generator (new files, new format) regenerates every model. */
    struct stat gst;
    long long gen_mtime = stat(qwt_tool("qw-makemodel"), &gst) == 0 ? (long long)gst.st_mtime : 0;
    char key[4200];
    snprintf(key, sizeof key, "%s #generator %lld", args_in, gen_mtime);
    /* One directory per key, never deleted or replaced: a test process
     * reading a model can never see it vanish under it because another
     * process (Criterion runs tests in parallel) regenerated it. */
    char dir[8192], stamp[8300];
    snprintf(dir, sizeof dir, "%s/testmodels/%s-%016llx", qwt_build_dir(), name,
             (unsigned long long)key_hash(key));
    snprintf(stamp, sizeof stamp, "%s/.qwt-args", dir);
    size_t n = 0;
    char *old = qwt_read_file(stamp, &n);
    int ok = old && strcmp(old, key) == 0;
    free(old);
    if (ok) return strdup(dir);
    /* Generate into a private temporary directory and rename it into place,
     * so concurrently running test processes never see a half-written model;
     * the stamp is written last, so a directory with it is complete. */
    char tmp[8400];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", dir, (int)getpid());
    if (qwt_system("mkdir -p '%s/testmodels' && rm -rf '%s' && '%s' %s --out '%s' >/dev/null",
                   qwt_build_dir(), tmp, qwt_tool("qw-makemodel"), args_in, tmp) != 0) {
        fprintf(stderr, "qwt_model: qw-makemodel %s failed\n", args_in);
        return NULL;
    }
    char stamp_tmp[8500];
    snprintf(stamp_tmp, sizeof stamp_tmp, "%s/.qwt-args", tmp);
    if (qwt_write_file(stamp_tmp, key, strlen(key)) != 0) return NULL;
    if (rename(tmp, dir) != 0) {
        /* Another process won the race (rename never replaces a non-empty
         * directory): use theirs, which is complete since it has a stamp;
         * a directory without one is a crashed run's leftover: replace it. */
        old = qwt_read_file(stamp, &n);
        ok = old && strcmp(old, key) == 0;
        free(old);
        if (!ok && qwt_system("rm -rf '%s'", dir) == 0 && rename(tmp, dir) == 0) return strdup(dir);
        qwt_system("rm -rf '%s'", tmp);
        if (!ok) return NULL;
    }
    return strdup(dir);
}

char *qwt_tmpdir(const char *tag) {
    static int counter;
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/testtmp/%s.%d.%d", qwt_build_dir(), tag, (int)getpid(), counter++);
    if (qwt_system("rm -rf '%s' && mkdir -p '%s'", dir, dir) != 0) return NULL;
    return strdup(dir);
}

const char *qwt_qwen_tokenizer_dir(void) {
    static char dir[4096];
    const char *sh = getenv("QW_SHARED_DIR");
    snprintf(dir, sizeof dir, "%s/data/qwen-tokenizer/vocab.json", sh ? sh : "../shared");
    struct stat st;
    if (stat(dir, &st) != 0) return NULL;
    snprintf(dir, sizeof dir, "%s/data/qwen-tokenizer", sh ? sh : "../shared");
    return dir;
}

double qwt_matmul_ref(const float *x, const float *w, int64_t K, const float *bias,
                      const float *init, double *mag) {
    double v = 0, g = 0;
    for (int64_t k = 0; k < K; k++) {
        v += (double)x[k] * w[k];
        g += fabs((double)x[k] * w[k]);
    }
    if (bias) v += *bias, g += fabs(*bias);
    if (init) v += *init, g += fabs(*init);
    *mag = g;
    return v;
}
