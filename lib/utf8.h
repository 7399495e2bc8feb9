/*
 * utf8.h - classifying UTF-8 byte sequences (Unicode Table 3-7), shared by
 * the encoder's input check and the streaming detokenizer.
 */
#ifndef QWI_UTF8_H
#define QWI_UTF8_H

#include <stddef.h>

enum { U8_VALID, U8_INVALID, U8_INCOMPLETE };

/* Classify the bytes at s[0..n): a whole valid character, an ill-formed
 * maximal subpart, or (only when the buffer ends first) a prefix that may
 * still become valid. *len gets the number of bytes concerned. */
static inline int qwi_utf8_step(const unsigned char *s, size_t n, size_t *len) {
    unsigned char b = s[0];
    if (b < 0x80) { *len = 1; return U8_VALID; }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) { need = 2; lo = 0xA0; }
    else if (b >= 0xE1 && b <= 0xEC) need = 2;
    else if (b == 0xED) { need = 2; hi = 0x9F; }
    else if (b >= 0xEE && b <= 0xEF) need = 2;
    else if (b == 0xF0) { need = 3; lo = 0x90; }
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) { need = 3; hi = 0x8F; }
    else { *len = 1; return U8_INVALID; }
    for (size_t k = 1; k <= need; k++) {
        if (k >= n) { *len = k; return U8_INCOMPLETE; }
        unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
        if (s[k] < lo_k || s[k] > hi_k) { *len = k; return U8_INVALID; }
    }
    *len = need + 1;
    return U8_VALID;
}

#endif
