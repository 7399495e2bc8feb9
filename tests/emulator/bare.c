/*
 * bare.c - the bare-metal checks' output and their stand-ins for the C
 * library and Linux (bare.h). There is no operating system: boot.S left
 * the CPU in long mode with the vector and tile state enabled, one thread,
 * no interrupts. Each stand-in does what the library objects linked with
 * a check ask of it there, no more.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <immintrin.h>

#include "bare.h"
#include "common.h"

static inline void outb(uint16_t port, uint8_t v) { __asm__ volatile("outb %0, %1" ::"a"(v), "Nd"(port)); }

void put_c(char c) {
    outb(0x3f8, (uint8_t)c);
    outb(0xe9, (uint8_t)c);
}

void put_s(const char *s) {
    while (*s) put_c(*s++);
}

void put_u(uint64_t v) {
    char b[24];
    int n = 0;
    do b[n++] = (char)('0' + v % 10); while (v /= 10);
    while (n) put_c(b[--n]);
}

void *memcpy(void *d, const void *s, size_t n) {
    char *a = d;
    const char *b = s;
    while (n--) *a++ = *b++;
    return d;
}

void *memset(void *d, int c, size_t n) {
    char *a = d;
    while (n--) *a++ = (char)c;
    return d;
}

void *memmove(void *d, const void *s, size_t n) {
    char *a = d;
    const char *b = s;
    if (a < b)
        while (n--) *a++ = *b++;
    else
        while (n--) a[n] = b[n];
    return d;
}

int memcmp(const void *x, const void *y, size_t n) {
    const unsigned char *a = x, *b = y;
    for (; n; n--, a++, b++)
        if (*a != *b) return *a - *b;
    return 0;
}

int strcmp(const char *x, const char *y) {
    while (*x && *x == *y) x++, y++;
    return (unsigned char)*x - (unsigned char)*y;
}

/* one thread: run once, here and now */
int pthread_once(int *once, void (*fn)(void)) {
    if (!*once) {
        *once = 1;
        fn();
    }
    return 0;
}

/* arch_prctl (158): the tile state is the image's (boot.S enabled it in
 * XCR0), so grant it and report it as Linux would */
long syscall(long nr, long op, long arg) {
    if (nr == 158 && op == 0x1023) return 0;
    if (nr == 158 && op == 0x1022) {
        *(unsigned long *)arg = 0x600e7;
        return 0;
    }
    return -1;
}

/* no environment: every QWINFER_* knob at its default */
char *getenv(const char *name) {
    (void)name;
    return NULL;
}

long strtol(const char *s, char **end, int base) {
    (void)s, (void)end, (void)base;
    return 0;
}

/* 64 MiB, handed out in order, all returned at once by bare_heap_reset */
static _Alignas(64) char heap[64 << 20];
static size_t heap_top;

void bare_heap_reset(void) { heap_top = 0; }

void *aligned_alloc(size_t align, size_t n) {
    heap_top = (heap_top + align - 1) & ~(align - 1);
    if (n > sizeof heap - heap_top) return NULL;
    void *p = heap + heap_top;
    heap_top += n;
    return p;
}

void *malloc(size_t n) { return aligned_alloc(64, n); }

void *calloc(size_t a, size_t b) {
    void *p = malloc(a * b);
    if (p) memset(p, 0, a * b);
    return p;
}

void free(void *p) { (void)p; }

/* libm's, from the emulated CPU's own instructions: an exact fused
 * multiply-add (FMA3) and round-to-nearest-even (the default MXCSR) */
__attribute__((target("fma"))) float fmaf(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

long lrintf(float x) { return _mm_cvtss_si64(_mm_set_ss(x)); }

/* the library's error reporting: say it and carry on (the check fails on
 * the returned status) */
qw_status qwi_fail(qw_status status, const char *fmt, ...) {
    put_s("qwi_fail: ");
    put_s(fmt);
    put_s("\n");
    return status;
}
