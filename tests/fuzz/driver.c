/*
 * driver.c - a standalone main for the fuzz harnesses, so `make test` runs
 * them over their corpora without clang's libFuzzer (regression mode):
 *
 *   fuzz_<name> [-v] PATH...
 *
 * Every PATH that is a directory contributes its regular files (sorted by
 * name, not recursing), every other PATH is itself an input; each input is
 * fed once to LLVMFuzzerTestOneInput. The last line says how many ran.
 * An input that makes the harness fail is named on stderr before the
 * process dies (sanitizer report, failed invariant, signal), so the check
 * script can show which file to reproduce with.
 *
 * Built with gcc and ASan+UBSan like the rest of the sanitizer tree; the
 * allocation limit below is libFuzzer's default (-malloc_limit_mb = the
 * 2048 MB RSS limit), so an input that makes the library ask for gigabytes
 * fails here exactly as it does under `make fuzz`.
 */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* The sanitizer runtime reads these defaults before main (exported: gcc's
 * runtime is a shared library, and the build hides symbols by default). */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
__attribute__((visibility("default"))) const char *__asan_default_options(void) {
    return "max_allocation_size_mb=2048:allocator_may_return_null=0:detect_leaks=1";
}

static const char *current_input = "(none)";

static void say_input(void) {
    static const char a[] = "\nfuzz driver: failing input: ";
    (void)!write(2, a, sizeof a - 1);
    (void)!write(2, current_input, strlen(current_input));
    (void)!write(2, "\n", 1);
}

/* Sanitizer death callback (ASan/UBSan reports) and SIGABRT (a failed
 * invariant): name the input, then die the normal way. */
static void on_death(void) { say_input(); }

static void on_signal(int sig) {
    say_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static int run_file(const char *path, int verbose) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz driver: cannot open %s\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                fclose(f);
                free(buf);
                fprintf(stderr, "fuzz driver: out of memory reading %s\n", path);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    /* An exact-size copy, so ASan catches a harness reading past the input
     * as libFuzzer would. */
    uint8_t *in = malloc(len ? len : 1);
    if (!in) {
        free(buf);
        return -1;
    }
    memcpy(in, buf, len);
    free(buf);
    current_input = path;
    if (verbose) fprintf(stderr, "fuzz driver: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(in, len);
    current_input = "(none)";
    free(in);
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file of dir in name order; returns the count or -1. */
static long run_dir(const char *dir, int verbose) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz driver: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) break;
            names = nn;
        }
        size_t l = strlen(dir) + strlen(de->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n]) break;
        snprintf(names[n], l, "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    long ran = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (run_file(names[i], verbose) != 0) ran = -1;
            else if (ran >= 0) ran++;
        }
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv) {
    int verbose = 0;
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        verbose = 1;
        argv++;
        argc--;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: %s [-v] CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_death);
    /* abort() from a failed invariant; faults are the sanitizer's to report
     * (its handler runs the death callback). */
    signal(SIGABRT, on_signal);
    long total = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "fuzz driver: %s does not exist\n", argv[i]);
            bad = 1;
            continue;
        }
        long n = S_ISDIR(sb.st_mode) ? run_dir(argv[i], verbose)
                                     : (run_file(argv[i], verbose) == 0 ? 1 : -1);
        if (n < 0) bad = 1;
        else total += n;
    }
    printf("%s: %ld inputs ran without a failure\n", argv[0], total);
    return bad ? 1 : 0;
}
