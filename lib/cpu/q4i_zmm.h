/*
 * q4i_zmm.h - the AVX-512 matmul_q4i (cpu/q4i.h), written once and
 * included by q4i_x86.c for each integer dot product: Q4I_FN(name) names a
 * function of this instance, Q4I_TARGET is its target attribute string and
 * Q4I_DOT(acc, c, x) adds the int16 pair products of c and x to the int32
 * lanes of acc (vpdpwssd, or vpmaddwd + vpaddd), Q4I_DOTB(acc, c, x) the
 * products of the unsigned bytes c and the signed bytes x, four to a lane
 * (vpdpbusd, or vpmaddubsw + vpmaddwd by 1 + vpaddd: the int16 sums of two
 * products are at most 2 * 15 * 127 there, no saturation). Not a public
 * header.
 *
 * One zmm = one 16-output panel; a 64-byte code block holds PB pairs of
 * each slot (U4: 4, pair jj = (word >> 4jj) & 15; U8: 2, pair jj =
 * (word >> 8jj) & 255, per 16-bit word; qpanel.h), so a pair costs a shift
 * and a mask (no shift for jj = 0, no mask for the last pair) next to its
 * dot. Every function below takes u8 (0: U4, 1: U8) as a constant.
 *   M <= 2 (decode): up to 4 panels decoded in registers next to the dots,
 *     the weights streamed once (what decode is bound by).
 *   M > 2: per row block of Q4I_MB rows, chunks of up to Q4I_KP pairs of
 *     one group of 4 panels are decoded once (as code - zero) into an L1
 *     buffer and swept by 6 x 4 register tiles, so decoding costs 1/48 of
 *     the dots; the tile that ends a group applies its epilogue from the
 *     registers (no zero term: the codes carry it).
 * U4 with the byte form of x (x->q8: int8 activations, Q <= 127, the
 * QW_NUMERICS_FAST_INT8 mode) multiplies bytes instead (b8): a block
 * lane's low nibbles (a mask) and high nibbles (a shift and a mask) are
 * its 8 codes as bytes in the byte form's word order (cpu/q4i.h), so a
 * block costs 2 Q4I_DOTB per row and panel where the int16 pairs cost 4
 * Q4I_DOT and 5 shifts and masks; the zero term returns to the epilogue
 * (code - zero is no unsigned byte). With vpdpbusd that is 64 products
 * per instruction against vpdpwssd's 32.
 * U4 at M <= 2 with the split byte form of x (x->q8s: the default fast
 * mode's Q of 32767 as 256 * high byte + low byte, cpu/q4i.h) takes the
 * same bytes twice (b8 = 2): per block and panel 4 Q4I_DOTB per row and
 * 3 shifts and masks, where the int16 pairs take 4 Q4I_DOT per row and 6
 * shifts and masks (one pair of each 16-bit field at a time). The high
 * bytes' sums are shifted left by 8 and added before the epilogue.
 * Integer sums are exact, so every path (and any tile) give the contract's
 * bits; only the per-group epilogue is float, and it is the same code.
 */

/* Code pair jj (0..PB-1, a constant after unrolling) of the block in v;
 * cm = the field mask (15 or 255) in every 16-bit word. */
#define Q4I_CODE(v, jj, cm, u8)                                                                 \
    ((jj) == 0 ? _mm512_and_si512((v), (cm))                                                    \
               : (jj) == ((u8) ? 1 : 3) ? _mm512_srli_epi16((v), ((u8) ? 8 : 4) * (jj))         \
                           : _mm512_and_si512(_mm512_srli_epi16((v), ((u8) ? 8 : 4) * (jj)), (cm)))

/* The same for a jj known only at run time. */
static inline __attribute__((always_inline, target(Q4I_TARGET))) __m512i
Q4I_FN(code_var)(__m512i v, int jj, __m512i cm, const int u8) {
    return _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128((u8 ? 8 : 4) * jj)), cm);
}

/* The 16 scales of entry e (qwi_qpanel_scale's index of a panel's group,
 * slot 0) as f32: f16 ones widened (exact). */
static inline __attribute__((always_inline, target(Q4I_TARGET))) __m512
Q4I_FN(scales)(const qwi_qpanel *w, int64_t e) {
    return w->scales_h ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w->scales_h + e)))
                       : _mm512_loadu_ps(w->scales + e);
}

/* The 16 zero points of entry e as int32 (zeros_i: bytes for U4, uint16
 * for U8; none stored: zero_all). */
static inline __attribute__((always_inline, target(Q4I_TARGET))) __m512i
Q4I_FN(zeros)(const qwi_qpanel *w, int64_t e, const int u8) {
    if (!w->zeros_i) return _mm512_set1_epi32(w->zero_all);
    return u8 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w->zeros_i + 2 * e)))
              : _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(w->zeros_i + e)));
}

/* tot[r] += (float)(acc[r] - zero * sum(r, g)) * (scale * d(r, g)) for the
 * rows of one panel q (the contract's epilogue of group g). */
static inline __attribute__((always_inline, target(Q4I_TARGET))) __m512
Q4I_FN(epilogue)(__m512i acc, __m512i zero, __m512 sc, int32_t sum, float d, __m512 tot) {
    const __m512i i = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zero, _mm512_set1_epi32(sum)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(sc, _mm512_set1_ps(d)), tot);
}

/* The np panels' lines of one code block (panel q at blk + q * 64) into
 * v, each with a prefetch pf bytes ahead: decoding keeps the core busy
 * enough that the hardware prefetchers alone leave the loads waiting on
 * memory. */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(load_block)(const uint8_t *blk, int64_t pf, const int np, __m512i v[4]) {
    _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
        _mm_prefetch((const char *)(blk + q * 64 + pf), _MM_HINT_T0);
        v[q] = _mm512_loadu_si512(blk + q * 64);
    }
}

/* M <= 2: MR rows x NP panels from panel p0 (all in p0's group of
 * interleaved panels, qwi_qpanel_run), all groups, totals to
 * res[r*64 + q*16]. x's rows start at the call's first row. b8 = 1 (U4
 * with x->q8) or 2 (U4 with x->q8s): the whole blocks of a group that
 * starts on a block multiply bytes (Q4I_DOTB); the pairs outside whole
 * blocks take the int16 step. */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(direct)(const qwi_q4act *x, const qwi_qpanel *w, int64_t p0, float *res, const int mr,
               const int np, const int u8, const int b8) {
    const int64_t G = w->ngroups, gk = w->group_k, KP = x->KP, W8 = QWI_Q4I_Q8_WORDS(KP);
    const __m512i nib = _mm512_set1_epi8(15);
    const int64_t bs = qwi_qpanel_line_stride(w, p0);   /* panel q of block j: j * bs + q * 64 */
    const int PB = u8 ? 2 : 4;
    const __m512i cm = _mm512_set1_epi16(u8 ? 255 : 15);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);
    const int64_t pf = qwi_cpu_gemv_prefetch(Q4I_PF);
    /* One row: the odd pairs of a block add into a second accumulator, so
     * each chain is 2 dots deep per block instead of 4 (the dot latency,
     * not the core's throughput, bounded the loop); the two are summed,
     * exactly, before the group's epilogue. Two rows have 8 chains already
     * (and no registers to spare). */
    const int na = mr == 1 ? 2 : 1;
    __m512 tot[2][4];
    __m512i acc[2][4], acc_odd[4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) tot[r][q] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; g++) {
        const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc[r][q] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc_odd[q] = _mm512_setzero_si512();
        int64_t j = js;
        if (b8 == 2 && js % 4 == 0) {
            /* the split byte form: x's low bytes (unsigned) times the codes
             * (signed) into acc, the codes (unsigned) times its high bytes
             * (signed) into acc_hi, which counts 256 times (q4i.h) */
            __m512i acc_hi[2][4];
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc_hi[r][q] = _mm512_setzero_si512();
            for (; j + 4 <= je; j += 4) {
                __m512i v[4];
                Q4I_FN(load_block)(pc + (j / 4) * bs, pf, np, v);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                    const __m512i lo = _mm512_and_si512(v[q], nib);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v[q], 4), nib);
                    _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {
                        const uint32_t *xs = x->q8s + r * 2 * W8 + j / 2;
                        acc[r][q] = Q4I_DOTB(Q4I_DOTB(acc[r][q], _mm512_set1_epi32((int)xs[0]), lo),
                                             _mm512_set1_epi32((int)xs[1]), hi);
                        acc_hi[r][q] = Q4I_DOTB(Q4I_DOTB(acc_hi[r][q], lo, _mm512_set1_epi32((int)xs[W8])),
                                                hi, _mm512_set1_epi32((int)xs[W8 + 1]));
                    }
                }
            }
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    acc[r][q] = _mm512_add_epi32(acc[r][q], _mm512_slli_epi32(acc_hi[r][q], 8));
        } else if (b8 == 1 && js % 4 == 0)
            for (; j + 4 <= je; j += 4) {
                __m512i v[4];
                Q4I_FN(load_block)(pc + (j / 4) * bs, pf, np, v);
                __m512i xl[2], xh[2];
                _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {
                    xl[r] = _mm512_set1_epi32((int)x->q8[r * W8 + j / 2]);
                    xh[r] = _mm512_set1_epi32((int)x->q8[r * W8 + j / 2 + 1]);
                }
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                    const __m512i lo = _mm512_and_si512(v[q], nib);
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v[q], 4), nib);
                    _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {
                        if (na == 2) {   /* one row: the high nibbles' own chain */
                            acc[0][q] = Q4I_DOTB(acc[0][q], lo, xl[0]);
                            acc_odd[q] = Q4I_DOTB(acc_odd[q], hi, xh[0]);
                        } else {
                            acc[r][q] = Q4I_DOTB(Q4I_DOTB(acc[r][q], lo, xl[r]), hi, xh[r]);
                        }
                    }
                }
            }
        else if (js % PB == 0)
            for (; j + PB <= je; j += PB) {
                __m512i v[4];
                Q4I_FN(load_block)(pc + (j / PB) * bs, pf, np, v);
                _Pragma("GCC unroll 8") for (int jj = 0; jj < PB; jj++) {
                    __m512i c[4];
                    _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) c[q] = Q4I_CODE(v[q], jj, cm, u8);
                    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                        const __m512i xb = _mm512_set1_epi32((int)x->q[r * KP + j + jj]);
                        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
                            if (na == 2 && (jj & 1)) acc_odd[q] = Q4I_DOT(acc_odd[q], c[q], xb);
                            else acc[r][q] = Q4I_DOT(acc[r][q], c[q], xb);
                        }
                    }
                }
            }
        for (; j < je; j++) {   /* a group that starts or ends inside a block */
            const uint8_t *blk = pc + (j / PB) * bs;
            __m512i c[4];
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                c[q] = Q4I_FN(code_var)(_mm512_loadu_si512(blk + q * 64), (int)(j % PB), cm, u8);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                const __m512i xb = _mm512_set1_epi32((int)x->q[r * KP + j]);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    acc[r][q] = Q4I_DOT(acc[r][q], c[q], xb);
            }
        }
        if (na == 2)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) acc[0][q] = _mm512_add_epi32(acc[0][q], acc_odd[q]);
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            const __m512i z = Q4I_FN(zeros)(w, ((p0 + q) * G + g) * 16, u8);
            const __m512 sc = Q4I_FN(scales)(w, ((p0 + q) * G + g) * 16);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                tot[r][q] = Q4I_FN(epilogue)(acc[r][q], z, sc, x->sum[r * x->G + g],
                                             x->d[r * x->G + g], tot[r][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm512_storeu_ps(res + r * 64 + q * 16, tot[r][q]);
}

/* M > 2: pairs [j0, j1) (within group g) of NP panels from p0 (in p0's
 * group of interleaved panels) into buf[q][j - j0][16] as int16 pairs of
 * code - zero (|code - zero| <= 2^bits: the same exact int32 sums as
 * sum(code * q) - zero * sum(q), with no per-row zero term left for the
 * epilogue). Blocks outside, panels inside: the group's lines are read in
 * the order they lie, one stream for the hardware prefetchers. */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(decode_chunk)(const qwi_qpanel *w, int64_t p0, int64_t g, int64_t j0, int64_t j1,
                     uint32_t *buf, const int np, const int u8) {
    const int64_t bs = qwi_qpanel_line_stride(w, p0);
    const int PB = u8 ? 2 : 4;
    const __m512i cm = _mm512_set1_epi16(u8 ? 255 : 15);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);   /* panel q: + q * 64 */
    __m512i zz[4];   /* each lane's zero point in both 16-bit halves */
    _Pragma("GCC unroll 4") for (int q = 0; q < np; q++) {
        const __m512i z = Q4I_FN(zeros)(w, ((p0 + q) * w->ngroups + g) * 16, u8);
        zz[q] = _mm512_or_si512(z, _mm512_slli_epi32(z, 16));
    }
    int64_t j = j0;
    if (j0 % PB == 0)
        for (; j + PB <= j1; j += PB)
            _Pragma("GCC unroll 4") for (int q = 0; q < np; q++) {
                const __m512i v = _mm512_loadu_si512(pc + (j / PB) * bs + q * 64);
                uint32_t *o = buf + ((int64_t)q * Q4I_KP + j - j0) * 16;
                _Pragma("GCC unroll 4") for (int jj = 0; jj < PB; jj++)
                    _mm512_storeu_si512(o + jj * 16, _mm512_sub_epi16(Q4I_CODE(v, jj, cm, u8), zz[q]));
            }
    for (; j < j1; j++)
        for (int q = 0; q < np; q++)
            _mm512_storeu_si512(buf + ((int64_t)q * Q4I_KP + j - j0) * 16,
                                _mm512_sub_epi16(Q4I_FN(code_var)(_mm512_loadu_si512(pc + (j / PB) * bs + q * 64),
                                                                  (int)(j % PB), cm, u8),
                                                 zz[q]));
}

/* The end of a chunk's MR x NP tile of int32 sums acc. Not the group's
 * last chunk: acc to part (int32, row stride 64). Its last: the contract's
 * epilogue from the registers, tot[r][q] += (float)i * (scale[q] * d[r])
 * with i = acc, or acc - zero[q] * sum[r] when sum is given (the U4 chunks
 * of unsigned code bytes; int16 chunks carry the zero point in their
 * codes) (tot: f32, row stride 64; the panels' scales and zero points of
 * the group: w's entries e0 + q * e_stride; d, sum: the rows' steps and
 * sums of the group, row stride d_stride). With dst (the last chunk of the
 * last group, all panels whole) the finished tot goes to the output from
 * the registers instead (qwi_tile_dest, tile_out.h). */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(tile_end)(__m512i acc[6][4], int32_t *part, int last, float *tot, const qwi_qpanel *w,
                 int64_t e0, int64_t e_stride, const float *d, const int32_t *sum,
                 int64_t d_stride, const qwi_tile_dest *dst, const int mr, const int np) {
    if (!last) {
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                _mm512_storeu_si512(part + r * 64 + q * 16, acc[r][q]);
        return;
    }
    __m512 sc[4];   /* widened once for the tile's rows */
    __m512i zq[4];
    _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
        sc[q] = Q4I_FN(scales)(w, e0 + q * e_stride);
        zq[q] = sum ? Q4I_FN(zeros)(w, e0 + q * e_stride, 0) : _mm512_setzero_si512();
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
        const __m512 dr = _mm512_set1_ps(d[r * d_stride]);
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++) {
            float *t = tot + r * 64 + q * 16;
            __m512i i = acc[r][q];
            if (sum)
                i = _mm512_sub_epi32(i, _mm512_mullo_epi32(zq[q], _mm512_set1_epi32(sum[r * d_stride])));
            const __m512 scd = _mm512_mul_ps(sc[q], dr);
            const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), scd, _mm512_loadu_ps(t));
            if (dst) qwi_tile_dest_put_zmm(dst, r, q, v);
            else _mm512_storeu_ps(t, v);
        }
    }
}

/* MR x NP tile over the decoded pairs [0, jn): acc from part (or 0 when
 * first), then tile_end (no zero term: the codes carry it). xr: the
 * tile's first row at the chunk's first pair, row stride KP. */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(tile)(const uint32_t *xr, int64_t KP, const uint32_t *buf, int64_t jn, int32_t *part,
             int first, int last, float *tot, const qwi_qpanel *w, int64_t e0, int64_t e_stride,
             const float *d, int64_t d_stride, const qwi_tile_dest *dst, const int mr,
             const int np) {
    __m512i acc[6][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_si512() : _mm512_loadu_si512(part + r * 64 + q * 16);
    for (int64_t j = 0; j < jn; j++) {
        __m512i c[4];
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            c[q] = _mm512_loadu_si512(buf + (q * Q4I_KP + j) * 16);
        _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
            const __m512i xb = _mm512_set1_epi32((int)xr[r * KP + j]);
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                acc[r][q] = Q4I_DOT(acc[r][q], c[q], xb);
        }
    }
    Q4I_FN(tile_end)(acc, part, last, tot, w, e0, e_stride, d, NULL, d_stride, dst, mr, np);
}

/* M > 2, b8 (U4 with x->q8, group_k a multiple of 8: every group is whole
 * blocks): blocks [b0, b0 + nb) of NP panels from p0 (in p0's group of
 * interleaved panels) as unsigned code bytes into buf: block b, panel q
 * at buf + ((b - b0) * 4 + q) * 32 words, its low nibbles (the byte
 * form's word 2b order) then its high nibbles (word 2b + 1). The zero
 * point stays for the epilogue. A last block past K is read whole (its
 * codes, like the byte form's values there, are 0). */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(decode_chunk_b8)(const qwi_qpanel *w, int64_t p0, int64_t b0, int64_t nb, uint32_t *buf,
                        const int np) {
    const int64_t bs = qwi_qpanel_line_stride(w, p0);
    const __m512i nib = _mm512_set1_epi8(15);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);
    for (int64_t b = 0; b < nb; b++)
        _Pragma("GCC unroll 4") for (int q = 0; q < np; q++) {
            const __m512i v = _mm512_loadu_si512(pc + (b0 + b) * bs + q * 64);
            uint32_t *o = buf + (b * 4 + q) * 32;
            _mm512_storeu_si512(o, _mm512_and_si512(v, nib));
            _mm512_storeu_si512(o + 16, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
        }
}

/* MR x NP tile over the decoded blocks [0, nb) of decode_chunk_b8, as
 * Q4I_FN(tile) with bytes: x8 is the tile's first row's byte form at the
 * chunk's first block (row stride W8 words); tile_end with the zero term
 * (the zero points and sum). The low and the high nibbles of
 * a block are swept one after the other, so that 4 code vectors and 24
 * sums fit the 32 registers; the activations come broadcast from memory. */
static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(tile_b8)(const uint32_t *x8, int64_t W8, const uint32_t *buf, int64_t nb, int32_t *part,
                int first, int last, float *tot, const qwi_qpanel *w, int64_t e0,
                int64_t e_stride, const float *d, const int32_t *sum, int64_t d_stride,
                const qwi_tile_dest *dst, const int mr, const int np) {
    __m512i acc[6][4];
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            acc[r][q] = first ? _mm512_setzero_si512() : _mm512_loadu_si512(part + r * 64 + q * 16);
    for (int64_t b = 0; b < nb; b++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i c[4];
            _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                c[q] = _mm512_loadu_si512(buf + (b * 4 + q) * 32 + 16 * h);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {
                const __m512i xb = _mm512_set1_epi32((int)x8[r * W8 + 2 * b + h]);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    acc[r][q] = Q4I_DOTB(acc[r][q], c[q], xb);
            }
        }
    Q4I_FN(tile_end)(acc, part, last, tot, w, e0, e_stride, d, sum, d_stride, dst, mr, np);
}

/* F(NP) with NP = np (1-4) a constant, so that each panel count gets its
 * own unrolled instance. */
#define Q4I_BY_NP(np, F)                                                                        \
    do {                                                                                        \
        switch (np) {                                                                           \
        case 4: F(4); break;                                                                    \
        case 3: F(3); break;                                                                    \
        case 2: F(2); break;                                                                    \
        default: F(1); break;                                                                   \
        }                                                                                       \
    } while (0)

/* The tile over rows r.. of the row block, for the chunk's NP. */
#define Q4I_TILE_NP(NP)                                                                         \
    Q4I_FN(tile)(x->q + (m0 + r_t) * KP + j0, KP, buf, j1 - j0, part + r_t * 64, j0 == js,      \
                 j1 == je, tot + r_t * 64, w, ((P0 + pq) * G + g) * 16, G * 16,                 \
                 x->d + (m0 + r_t) * x->G + g, x->G, dst_t, mr_t, NP)
#define Q4I_TILE_B8_NP(NP)                                                                      \
    Q4I_FN(tile_b8)(x->q8 + (m0 + r_t) * W8 + j0 / 2, W8, buf, QWI_DIV_UP(j1 - j0, 4),          \
                    part + r_t * 64, j0 == js, j1 == je, tot + r_t * 64, w,                     \
                    ((P0 + pq) * G + g) * 16, G * 16, x->d + (m0 + r_t) * x->G + g,             \
                    x->sum + (m0 + r_t) * x->G + g, x->G, dst_t, mr_t, NP)
#define Q4I_TILE(r, MR)                                                                         \
    do {                                                                                        \
        const int64_t r_t = (r);                                                                \
        const int mr_t = (MR);                                                                  \
        const qwi_tile_dest dt_ = qwi_tile_dest_rows(dest, r_t);                                \
        const qwi_tile_dest *dst_t = dt_.o && g == G - 1 ? &dt_ : NULL;                         \
        if (b8) Q4I_BY_NP(np, Q4I_TILE_B8_NP);                                                  \
        else Q4I_BY_NP(np, Q4I_TILE_NP);                                                        \
    } while (0)

static inline __attribute__((always_inline, target(Q4I_TARGET))) void
Q4I_FN(chunked)(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0, int64_t N,
                const float *bias, float *out, int64_t ldo, int accumulate, const int u8,
                const int b8) {
    uint32_t buf[4 * Q4I_KP * 16] __attribute__((aligned(64)));
    _Static_assert(Q4I_KP % 4 == 0 && Q4I_KP / 4 * 4 * 32 <= 4 * Q4I_KP * 16,
                   "a chunk's blocks as code bytes fit buf");
    const int64_t W8 = QWI_Q4I_Q8_WORDS(x->KP);
    int32_t part[Q4I_MB * 64] __attribute__((aligned(64)));
    float tot[Q4I_MB * 64] __attribute__((aligned(64)));
    const int64_t P0 = n0 / 16, np_all = QWI_DIV_UP(N, 16), G = w->ngroups, gk = w->group_k;
    const int64_t KP = x->KP;
    for (int64_t pq = 0, np; pq < np_all; pq += np) {
        np = qwi_qpanel_run(w, P0 + pq, QWI_MIN((int64_t)4, np_all - pq));
        for (int64_t m0 = 0; m0 < M; m0 += Q4I_MB) {
            const int64_t mb = QWI_MIN((int64_t)Q4I_MB, M - m0);
            const qwi_tile_dest dest =
                qwi_tile_dest_group(out + m0 * ldo, ldo, 16 * pq, 16 * np, N, bias, accumulate);
            memset(tot, 0, sizeof(float) * (size_t)mb * 64);
            for (int64_t g = 0; g < G; g++) {
                const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
                for (int64_t j0 = js; j0 < je; j0 += Q4I_KP) {
                    const int64_t j1 = QWI_MIN(je, j0 + Q4I_KP);
                    if (b8) Q4I_FN(decode_chunk_b8)(w, P0 + pq, j0 / 4, QWI_DIV_UP(j1 - j0, 4), buf, np);
                    else Q4I_FN(decode_chunk)(w, P0 + pq, g, j0, j1, buf, np, u8);
                    QWI_ROW_TILES(6, mb, Q4I_TILE);
                }
            }
            if (!dest.o)
                for (int64_t r = 0; r < mb; r++)
                    for (int q = 0; q < np; q++)
                        qwi_put16(tot + r * 64 + q * 16, 16 * (pq + q), N, bias,
                                  out + (m0 + r) * ldo, accumulate);
        }
    }
}
#undef Q4I_TILE
#undef Q4I_TILE_NP
#undef Q4I_TILE_B8_NP

__attribute__((target(Q4I_TARGET))) void Q4I_FN(matmul)(const qwi_q4act *x, int64_t M,
                                                        const qwi_qpanel *w, int64_t n0, int64_t N,
                                                        const float *bias, float *out, int64_t ldo,
                                                        int accumulate) {
    if (M <= 0 || N <= 0) return;
    const int u8 = w->fmt == QWI_QFMT_U8;
    /* 1: int4 on int8 activations (the byte form); 2: int4 on the split
     * byte form (batch-1 only, where decoding is not amortized over rows) */
    const int b8 = u8 ? 0 : x->q8 ? 1 : x->q8s && M <= 2 ? 2 : 0;
    if (M > 2) {
        if (u8) Q4I_FN(chunked)(x, M, w, n0, N, bias, out, ldo, accumulate, 1, 0);
        else if (b8 == 1 && w->group_k % 8 == 0)
            Q4I_FN(chunked)(x, M, w, n0, N, bias, out, ldo, accumulate, 0, 1);
        else Q4I_FN(chunked)(x, M, w, n0, N, bias, out, ldo, accumulate, 0, 0);
        return;
    }
    const int64_t P0 = n0 / 16, np_all = QWI_DIV_UP(N, 16);
    float res[2 * 64] __attribute__((aligned(64)));
    for (int64_t pq = 0, np; pq < np_all; pq += np) {
        np = qwi_qpanel_run(w, P0 + pq, QWI_MIN((int64_t)4, np_all - pq));
#define Q4I_D(NP)                                                                               \
    do {                                                                                        \
        if (u8) {                                                                               \
            if (M == 1) Q4I_FN(direct)(x, w, P0 + pq, res, 1, NP, 1, 0);                        \
            else Q4I_FN(direct)(x, w, P0 + pq, res, 2, NP, 1, 0);                               \
        } else if (b8 == 1) {                                                                   \
            if (M == 1) Q4I_FN(direct)(x, w, P0 + pq, res, 1, NP, 0, 1);                        \
            else Q4I_FN(direct)(x, w, P0 + pq, res, 2, NP, 0, 1);                               \
        } else if (b8 == 2) {                                                                   \
            if (M == 1) Q4I_FN(direct)(x, w, P0 + pq, res, 1, NP, 0, 2);                        \
            else Q4I_FN(direct)(x, w, P0 + pq, res, 2, NP, 0, 2);                               \
        } else {                                                                                \
            if (M == 1) Q4I_FN(direct)(x, w, P0 + pq, res, 1, NP, 0, 0);                        \
            else Q4I_FN(direct)(x, w, P0 + pq, res, 2, NP, 0, 0);                               \
        }                                                                                       \
    } while (0)
        Q4I_BY_NP(np, Q4I_D);
#undef Q4I_D
        for (int64_t r = 0; r < M; r++)
            for (int64_t q = 0; q < np; q++)
                qwi_put16(res + r * 64 + q * 16, 16 * (pq + q), N, bias, out + r * ldo, accumulate);
    }
}

#undef Q4I_CODE
#undef Q4I_BY_NP
