/*
 * bare.h - what tests/emulator's bare-metal checks share (bare.c): output
 * to COM1 and to the emulator's port 0xE9, and the few C library and
 * Linux calls the library objects they link make, done without either.
 */
#ifndef QW_EMULATOR_BARE_H
#define QW_EMULATOR_BARE_H

#include <stdint.h>

void put_c(char c);
void put_s(const char *s);
void put_u(uint64_t v);

/* Start the bump allocator behind malloc() over from empty: each check
 * case frees everything at once this way (free() does nothing). */
void bare_heap_reset(void);

#endif
