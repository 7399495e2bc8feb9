/*
 * q4i_ymm.h - the AVX2 matmul_q4i (cpu/q4i.h), written once and included
 * by one translation unit per integer dot product (its helpers are static,
 * so each instance lives in its own file):
 *   q4i_x86.c      AVX2: vpmaddwd + vpaddd for the int16 pairs, vpmaddubsw
 *                  into int16 sums widened by vpmaddwd by 1 for bytes;
 *   q4i_avxvnni.c  AVX-VNNI: the same with vpdpwssd and vpdpbusd on ymm,
 *                  VEX encoded, for the Intel client cores from Alder
 *                  Lake on (AVX-VNNI without AVX-512: they run the avx2
 *                  table);
 *   q4i_avxvnni_evex.c  the same instructions in AVX512_VNNI + AVX512VL's
 *                  EVEX encoding: the identical arithmetic on AVX-512
 *                  CPUs, so that the tests check it where no AVX-VNNI
 *                  core is at hand.
 * The includer defines A2_TARGET_ATTR (its __attribute__((target(...))),
 * spelled out in the .c file, where the Makefile looks for kernel files),
 * A2_ENTRY (the exported function's name, qwr_matmul_q4i_fn's contract),
 * A2_VNNI (0 or 1) and, with A2_VNNI, A2_DPWSSD(acc, a, b) (int16 pair
 * products of a and b added to the int32 lanes of acc) and
 * A2_DPBUSD(acc, u, s) (products of the unsigned bytes u and the signed
 * bytes s, four to a lane). Not a public header.
 *
 * With VNNI each int16 pair step is one instruction instead of two, and
 * each byte step one instead of three (no int16 sums to widen). Integer
 * sums are exact either way (the byte products' int16 sums never
 * saturate: see a2_b8_run), so every instance gives the portable kernel's
 * bits (tests/test_quant_kernels.c).
 */

/* Prefetch distance of the M <= 2 path, as measured on Zen 4
 * (gemv_prefetch.h; QWINFER_GEMV_PREFETCH overrides it). */
#define A2_PF 256

#if A2_VNNI
#define A2_DOT(acc, c, x) A2_DPWSSD((acc), (c), (x))
#else
#define A2_DOT(acc, c, x) _mm256_add_epi32((acc), _mm256_madd_epi16((c), (x)))
#endif

/* One ymm = half a panel (slots 0-7: block bytes 0-31, slots 8-15: 32-63).
 * M <= 2: 1 row x 4 panels or 2 rows x 2 panels decoded in registers
 * next to the dots (a2_direct; a2_b8_run's byte products for U4 with int8
 * activations);
 * M > 2: decoded chunks swept by 4-row x 1-panel tiles
 * (a2_chunked), as on AVX-512 with narrower tiles (16 ymm registers); for
 * U4 with int8 activations the chunks hold code bytes (a2_chunk_tile_b8). */
#define A2_INLINE static inline __attribute__((always_inline)) A2_TARGET_ATTR

/* Slots 0-7 from entry e (qwi_qpanel_scale's index) of w's scales as f32
 * (f16 ones widened, exact) and of its zero points as int32 (zeros_i:
 * bytes for U4, uint16 for U8; none stored: zero_all). */
A2_INLINE __m256 a2_scales8(const qwi_qpanel *w, int64_t e) {
    return w->scales_h ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w->scales_h + e)))
                       : _mm256_loadu_ps(w->scales + e);
}

A2_INLINE __m256i a2_zeros8(const qwi_qpanel *w, int64_t e) {
    if (!w->zeros_i) return _mm256_set1_epi32(w->zero_all);
    return w->fmt == QWI_QFMT_U8
               ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w->zeros_i + 2 * e)))
               : _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w->zeros_i + e)));
}

/* Pair jj of the block half in v: (word >> w*jj) & cm per 16-bit word
 * (w = 4 for U4, 8 for U8; cm = 15 or 255). */
A2_INLINE __m256i a2_code(__m256i v, int jj, __m256i cm, const int u8) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128((u8 ? 8 : 4) * jj)), cm);
}

/* Pair jj (a constant after unrolling) of the block half at p, as
 * a2_code gives it: an immediate shift with the load folded in, no shift
 * for the first pair and no mask for the last (the fields above it are
 * gone). */
A2_INLINE __m256i a2_code_at(const uint8_t *p, const int jj, __m256i cm, const int u8) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (jj == 0) return _mm256_and_si256(v, cm);
    const __m256i f = _mm256_srli_epi16(v, (u8 ? 8 : 4) * jj);
    return jj == (u8 ? 1 : 3) ? f : _mm256_and_si256(f, cm);
}

/* The M <= 2 kernels' register tiles: [row][panel][half] of 8 lanes. */
A2_INLINE void a2_zero_i(__m256i a[2][4][2], const int mr, const int np) {
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) a[r][q][h] = _mm256_setzero_si256();
}

A2_INLINE void a2_zero_f(__m256 a[2][4][2], const int mr, const int np) {
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) a[r][q][h] = _mm256_setzero_ps();
}

/* tot's totals to res[r*64 + q*16 ..] */
A2_INLINE void a2_store(__m256 tot[2][4][2], float *res, const int mr, const int np) {
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                _mm256_storeu_ps(res + r * 64 + q * 16 + 8 * h, tot[r][q][h]);
}

/* One pair j of the block at blk into the M <= 2 kernels' int32 sums acc
 * (the int16 step, for a block that a group edge cuts): pair j's codes
 * times the rows' int16 activation pairs. */
A2_INLINE void a2_pair_step(const qwi_q4act *x, const uint8_t *blk, int64_t j, int PB,
                            __m256i acc[2][4][2], const int mr, const int np, const int u8) {
    const __m256i cm = _mm256_set1_epi16(u8 ? 255 : 15);
    _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i c = a2_code(
                _mm256_loadu_si256((const __m256i *)(const void *)(blk + q * 64 + 32 * h)),
                (int)(j % PB), cm, u8);
            _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++)
                acc[r][q][h] = A2_DOT(acc[r][q][h], c, _mm256_set1_epi32((int)x->q[r * x->KP + j]));
        }
}

/* The contract's epilogue (cpu/q4i.h) for 8 lanes of one row, with the
 * zero term: tot + (float)(acc - z * sum) * (sc * d), the product and the
 * sum fused as the contract has them. z: the lanes' zero points as int32
 * (they are integers, packing made sure), sc their scales; sum and d the
 * row's for the group. */
A2_INLINE __m256 a2_epilogue_z(__m256i acc, __m256i z, __m256 sc, int32_t sum, float d, __m256 tot) {
    const __m256i i = _mm256_sub_epi32(acc, _mm256_mullo_epi32(z, _mm256_set1_epi32(sum)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(sc, _mm256_set1_ps(d)), tot);
}

/* A U4 block half's 32 bytes as its codes in bytes: *lo the low nibbles,
 * *hi the high ones (the byte form's word 2b and 2b+1 order, cpu/q4i.h). */
A2_INLINE void a2_nibbles(__m256i v, __m256i *lo, __m256i *hi) {
    const __m256i nib = _mm256_set1_epi8(15);
    *lo = _mm256_and_si256(v, nib);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
}

/* The contract's epilogue of group g for the M <= 2 kernels: tot +=
 * (float)(acc - zero * sum(q)) * (scale * d), per row, panel and half. */
A2_INLINE void a2_group_end(const qwi_q4act *x, const qwi_qpanel *w, int64_t p0, int64_t g,
                            __m256i acc[2][4][2], __m256 tot[2][4][2], const int mr, const int np) {
    const int64_t G = w->ngroups;
    _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const int64_t zi = ((p0 + q) * G + g) * 16 + 8 * h;
            const __m256i z = a2_zeros8(w, zi);
            const __m256 sc = a2_scales8(w, zi);
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
                tot[r][q][h] = a2_epilogue_z(acc[r][q][h], z, sc, x->sum[r * x->G + g],
                                             x->d[r * x->G + g], tot[r][q][h]);
        }
}

/* a2_direct's step for U4 with the byte form of x (x->q8, Q <= 127: the
 * int8 activations of QW_NUMERICS_FAST_INT8, cpu/q4i.h), blocks [b0, b0 +
 * nb) (nb <= A2_B8_RUN) into the int32 sums acc: a block lane's low nibbles (a mask) and high nibbles (a shift and a
 * mask) are its 8 codes as bytes, and vpmaddubsw multiplies them with the
 * rows' activation bytes (two 32-bit words per block, broadcast) and adds
 * neighbours: 16 int16 sums per ymm, 32 products, where a2_direct's
 * vpmaddwd makes 16 and needs a shift and a mask per pair. Per 64 weights
 * 7 operations instead of 14; on a Zen 1, which splits each ymm operation
 * in two and is bound here by the multiplier, int4 GEMV went from 7.1 to
 * 10.3 GB/s on one core and from 12.4 to 16.7 on two (qw-qbench --k 1024
 * --n 3072 --ms 1; docs/benchmarks.md).
 * Exactness: each int16 sum is at most 2 * 15 * 127 = 3810 in magnitude
 * (no saturation), a run of up to A2_B8_RUN blocks adds 2 per block per
 * int16 lane (8 * 3810 = 30480 < 2^15), and vpmaddwd by 1 then widens
 * the run's neighbouring lanes (one output's even- and odd-column sums)
 * into acc: the same integer as the int16 step's. With VNNI, vpdpbusd
 * adds the same products straight into acc (two per block half and row,
 * no int16 sums). Pairs that are not in
 * whole blocks of a group (a group edge inside a block, the last partial
 * block) take the int16 step (a2_pair_step). */
#define A2_B8_RUN 4
A2_INLINE void a2_b8_run(const qwi_q4act *x, const uint8_t *pc, int64_t bs, int64_t pf, int64_t b0,
                         int64_t nb, __m256i acc[2][4][2], const int mr, const int np) {
    const int64_t W8 = QWI_Q4I_Q8_WORDS(x->KP);
#if !A2_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a16[2][4][2];
    a2_zero_i(a16, mr, np);
#endif
    for (int64_t b = b0; b < b0 + nb; b++) {
        const uint8_t *blk = pc + b * bs;
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _mm_prefetch((const char *)(blk + q * 64 + pf), _MM_HINT_T0);
        __m256i xl[2], xh[2];
        _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {
            xl[r] = _mm256_set1_epi32((int)x->q8[r * W8 + 2 * b]);
            xh[r] = _mm256_set1_epi32((int)x->q8[r * W8 + 2 * b + 1]);
        }
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const __m256i v =
                    _mm256_loadu_si256((const __m256i *)(const void *)(blk + q * 64 + 32 * h));
                __m256i lo, hi;
                a2_nibbles(v, &lo, &hi);
                _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++)
#if A2_VNNI
                    acc[r][q][h] = A2_DPBUSD(A2_DPBUSD(acc[r][q][h], lo, xl[r]), hi, xh[r]);
#else
                    a16[r][q][h] = _mm256_add_epi16(
                        a16[r][q][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl[r]),
                                                       _mm256_maddubs_epi16(hi, xh[r])));
#endif
            }
    }
#if !A2_VNNI
    _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                acc[r][q][h] = _mm256_add_epi32(acc[r][q][h], _mm256_madd_epi16(a16[r][q][h], ones));
#endif
}

/* M <= 2: MR (1-2) rows x NP panels from p0 (in p0's group of interleaved
 * panels; MR * NP <= 4), all groups, the contract's totals to
 * res[r*64 + q*16]; codes decoded in registers, the zero point applied in
 * the group's epilogue. A whole code block's PB pairs at a time where the
 * group holds it, so that each pair's field is a constant shift (a shift
 * by a run-time count is two instructions on Intel, and this loop is
 * bound by instructions, not bandwidth), and 4 panels at M = 1, the
 * group's lines read in the order they lie. The int32 sums are exact, so
 * any order of the pairs gives the same bits. b8 (U4 with x->q8): whole
 * blocks through a2_b8_run instead. */
A2_INLINE void a2_direct(const qwi_q4act *x, const qwi_qpanel *w, int64_t p0, float *res,
                         const int mr, const int np, const int u8, const int b8) {
    const int64_t G = w->ngroups, gk = w->group_k, KP = x->KP;
    const int64_t bs = qwi_qpanel_line_stride(w, p0);   /* panel q of block j: j * bs + q * 64 */
    const int PB = u8 ? 2 : 4;   /* pairs per 64-byte block */
    const __m256i cm = _mm256_set1_epi16(u8 ? 255 : 15);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p0, 0);
    const int64_t pf = qwi_cpu_gemv_prefetch(A2_PF);
    __m256 tot[2][4][2];
    __m256i acc[2][4][2];
    a2_zero_f(tot, mr, np);
    for (int64_t g = 0; g < G; g++) {
        const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
        a2_zero_i(acc, mr, np);
        for (int64_t j = js; j < je;) {
            if (b8 && j % 4 == 0 && j + 4 <= je) {   /* a run of whole blocks, int8 */
                const int64_t nb = QWI_MIN((int64_t)A2_B8_RUN, (je - j) / 4);
                a2_b8_run(x, pc, bs, pf, j / 4, nb, acc, mr, np);
                j += 4 * nb;
                continue;
            }
            const uint8_t *blk = pc + (j / PB) * bs;
            if (j % PB == 0)
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    _mm_prefetch((const char *)(blk + q * 64 + pf), _MM_HINT_T0);
            if (!b8 && j % PB == 0 && j + PB <= je) {   /* the whole block (b8: above) */
                /* Each block half is loaded once and its PB pairs consumed
                 * at once: with the pairs outside the halves, GCC kept all
                 * 4 * np halves live and summed each accumulator's
                 * products as a tree, which spilled 24 of them to the
                 * stack per block of 4 panels (on a Zen 1, int4 GEMV at
                 * 5.1 GB/s per core instead of 6.6). At M = 1 the PB
                 * broadcasts stay in registers; at M = 2 they would not
                 * fit, and come from memory at each use. */
                __m256i xb1[4];
                if (mr == 1)
                    _Pragma("GCC unroll 4") for (int jj = 0; jj < PB; jj++)
                        xb1[jj] = _mm256_set1_epi32((int)x->q[j + jj]);
                _Pragma("GCC unroll 8") for (int q = 0; q < np; q++)
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
                        _Pragma("GCC unroll 4") for (int jj = 0; jj < PB; jj++) {
                            const __m256i c = a2_code_at(blk + q * 64 + 32 * h, jj, cm, u8);
                            _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {
                                const __m256i xr =
                                    mr == 1 ? xb1[jj]
                                            : _mm256_set1_epi32((int)x->q[r * KP + j + jj]);
                                acc[r][q][h] = A2_DOT(acc[r][q][h], c, xr);
                            }
                        }
                j += PB;
                continue;
            }
            /* a group edge inside a block (group_k not a multiple of 2 * PB) */
            a2_pair_step(x, blk, j, PB, acc, mr, np, u8);
            j++;
        }
        a2_group_end(x, w, p0, g, acc, tot, mr, np);
    }
    a2_store(tot, res, mr, np);
}

/* M > 2: pairs [j0, j1) (within group g) of panel p into buf[(j - j0) * 16
 * ..] as int16 pairs of code - zero (slots 0-7, then 8-15), as the AVX-512
 * decode_chunk does: exact, so the epilogue has no zero term. */
A2_INLINE void a2_decode_chunk(const qwi_qpanel *w, int64_t p, int64_t g, int64_t j0, int64_t j1,
                               uint32_t *buf, const int u8) {
    const int64_t bs = qwi_qpanel_line_stride(w, p);
    const int PB = u8 ? 2 : 4;
    const __m256i cm = _mm256_set1_epi16(u8 ? 255 : 15);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p, 0);
    __m256i zz[2];   /* each lane's zero point in both 16-bit halves */
    for (int h = 0; h < 2; h++) {
        const __m256i z = a2_zeros8(w, (p * w->ngroups + g) * 16 + 8 * h);
        zz[h] = _mm256_or_si256(z, _mm256_slli_epi32(z, 16));
    }
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *blk = pc + (j / PB) * bs;
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 32 * h));
            _mm256_storeu_si256((__m256i *)(void *)(buf + (j - j0) * 16 + 8 * h),
                                _mm256_sub_epi16(a2_code(v, (int)(j % PB), cm, u8), zz[h]));
        }
    }
}

/* MR rows (xr: the first at the chunk's first pair, row stride KP) x the
 * decoded pairs [0, jn) of one panel: acc from part (or 0 when first; int32,
 * row stride 16) and back there, or at the group's last chunk the
 * contract's epilogue tot[r] = fma((float)acc, scale * d(r), tot[r])
 * (sc: the panel's 16 scales of the group; d: the rows' steps, stride
 * d_stride; tot row stride 16). */
A2_INLINE void a2_chunk_tile(const uint32_t *xr, int64_t KP, const uint32_t *buf, int64_t jn,
                             int32_t *part, int first, int last, float *tot, const float *sc,
                             const float *d, int64_t d_stride, const int mr) {
    __m256i acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++)
            acc[r][h] = first ? _mm256_setzero_si256()
                              : _mm256_loadu_si256((const __m256i *)(const void *)(part + r * 16 + 8 * h));
    for (int64_t j = 0; j < jn; j++) {
        const __m256i c0 = _mm256_loadu_si256((const __m256i *)(const void *)(buf + j * 16));
        const __m256i c1 = _mm256_loadu_si256((const __m256i *)(const void *)(buf + j * 16 + 8));
        _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++) {
            const __m256i xb = _mm256_set1_epi32((int)xr[r * KP + j]);
            acc[r][0] = A2_DOT(acc[r][0], c0, xb);
            acc[r][1] = A2_DOT(acc[r][1], c1, xb);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++) {
        const __m256 dr = _mm256_set1_ps(d[r * d_stride]);
        for (int h = 0; h < 2; h++) {
            if (last) {
                float *t = tot + r * 16 + 8 * h;
                const __m256 scd = _mm256_mul_ps(_mm256_loadu_ps(sc + 8 * h), dr);
                _mm256_storeu_ps(t, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), scd,
                                                    _mm256_loadu_ps(t)));
            } else {
                _mm256_storeu_si256((__m256i *)(void *)(part + r * 16 + 8 * h), acc[r][h]);
            }
        }
    }
}

/* M > 2 with the byte form (U4, x->q8, group_k a multiple of 8, so that
 * a group is whole blocks): blocks [b0, b0 + nb) of panel p as unsigned
 * code bytes into buf[(b - b0) * 128 ..]: slots 0-7's low nibbles (the
 * block's columns in q8's word 2b order), their high nibbles (word 2b+1),
 * then slots 8-15's the same; the zero point stays for the epilogue, as
 * in a2_direct, since code - zero is no longer an unsigned byte. */
A2_INLINE void a2_decode_chunk_b8(const qwi_qpanel *w, int64_t p, int64_t b0, int64_t nb,
                                  uint8_t *buf) {
    const int64_t bs = qwi_qpanel_line_stride(w, p);
    const uint8_t *pc = w->codes + qwi_qpanel_block_at(w, p, 0);
    for (int64_t b = 0; b < nb; b++)
        for (int h = 0; h < 2; h++) {
            __m256i lo, hi;
            a2_nibbles(_mm256_loadu_si256((const __m256i *)(const void *)(pc + (b0 + b) * bs + 32 * h)),
                       &lo, &hi);
            uint8_t *o = buf + b * 128 + 64 * h;
            _mm256_storeu_si256((__m256i *)(void *)o, lo);
            _mm256_storeu_si256((__m256i *)(void *)(o + 32), hi);
        }
}

/* MR rows (x8: row 0's byte form at the chunk's first block, row stride
 * W8 words) x the decoded blocks [0, nb) in buf (a2_decode_chunk_b8): as
 * a2_chunk_tile, but each block one vpmaddubsw per 32 codes and row, into
 * int16 sums widened by vpmaddwd by 1 after runs of A2_B8_RUN blocks (the
 * bound of a2_b8_run), and at the group's last chunk the epilogue with the
 * zero term, acc - zero * sum(q) (zf: the panel's 16 zero points of the
 * group; sum: the rows' sums, stride d_stride, as d). Rows outside: the
 * row's two int32 sums stay in registers for the whole chunk and each
 * code vector is reloaded from L1 per row, which keeps 4 rows in 16 ymm
 * registers. Same integer as a2_chunk_tile's, so the same bits. */
A2_INLINE void a2_chunk_tile_b8(const uint32_t *x8, int64_t W8, const uint8_t *buf, int64_t nb,
                                int32_t *part, int first, int last, float *tot, const float *sc,
                                const float *zf, const float *d, const int32_t *sum,
                                int64_t d_stride, const int mr) {
#if !A2_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256i acc[4][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
            acc[r][h] = first ? _mm256_setzero_si256()
                              : _mm256_loadu_si256((const __m256i *)(const void *)(part + r * 16 + 8 * h));
    for (int64_t b0 = 0; b0 < nb; b0 += A2_B8_RUN) {
        const int64_t b1 = QWI_MIN(nb, b0 + A2_B8_RUN);
        _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++) {
#if A2_VNNI
            for (int64_t b = b0; b < b1; b++) {
                const __m256i xl = _mm256_set1_epi32((int)x8[r * W8 + 2 * b]);
                const __m256i xh = _mm256_set1_epi32((int)x8[r * W8 + 2 * b + 1]);
                const __m256i *c = (const __m256i *)(const void *)(buf + b * 128);
                acc[r][0] = A2_DPBUSD(A2_DPBUSD(acc[r][0], _mm256_load_si256(c), xl),
                                      _mm256_load_si256(c + 1), xh);
                acc[r][1] = A2_DPBUSD(A2_DPBUSD(acc[r][1], _mm256_load_si256(c + 2), xl),
                                      _mm256_load_si256(c + 3), xh);
            }
#else
            __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
            for (int64_t b = b0; b < b1; b++) {
                const __m256i xl = _mm256_set1_epi32((int)x8[r * W8 + 2 * b]);
                const __m256i xh = _mm256_set1_epi32((int)x8[r * W8 + 2 * b + 1]);
                const __m256i *c = (const __m256i *)(const void *)(buf + b * 128);
                a0 = _mm256_add_epi16(a0, _mm256_add_epi16(
                                              _mm256_maddubs_epi16(_mm256_load_si256(c), xl),
                                              _mm256_maddubs_epi16(_mm256_load_si256(c + 1), xh)));
                a1 = _mm256_add_epi16(a1, _mm256_add_epi16(
                                              _mm256_maddubs_epi16(_mm256_load_si256(c + 2), xl),
                                              _mm256_maddubs_epi16(_mm256_load_si256(c + 3), xh)));
            }
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(a0, ones));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(a1, ones));
#endif
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < mr; r++)
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            if (last) {
                float *t = tot + r * 16 + 8 * h;
                _mm256_storeu_ps(t, a2_epilogue_z(acc[r][h],
                                                  _mm256_cvttps_epi32(_mm256_loadu_ps(zf + 8 * h)),
                                                  _mm256_loadu_ps(sc + 8 * h), sum[r * d_stride],
                                                  d[r * d_stride], _mm256_loadu_ps(t)));
            } else {
                _mm256_storeu_si256((__m256i *)(void *)(part + r * 16 + 8 * h), acc[r][h]);
            }
        }
}

/* M > 2: per panel and row block of A2_MB rows, each chunk of up to A2_KP
 * pairs of a group is decoded once and swept by 4-row tiles. Decoding in
 * the tile, as a2_direct does, cost 4 shift/mask operations per pair next
 * to the 4 rows' 16 (int4 prefill at 85% of bf16's with the table forced
 * on a Zen 4). b8 (U4 with x->q8, group_k a multiple of 8, so every group
 * starts on a block): the chunks in whole blocks, as code bytes for
 * vpmaddubsw (a2_chunk_tile_b8); a partial last block (K not a multiple of
 * 8) would be read whole, its codes and bytes past K being 0. Int4 prefill
 * and concurrent decode with int8 activations on a Zen 1: 68 -> 91 GFLOP/s
 * at M = 512, 62 -> 85 at M = 16 (qw-qbench --k 1024 --n 3072 --threads 2;
 * docs/benchmarks.md). Other group sizes take the int16 chunks (the same
 * integers). */
#define A2_KP 64
#define A2_MB 48
A2_INLINE void a2_chunked(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0, int64_t N,
                          const float *bias, float *out, int64_t ldo, int accumulate, const int u8,
                          const int b8) {
    uint32_t buf[A2_KP * 16] __attribute__((aligned(32)));
    int32_t part[A2_MB * 16] __attribute__((aligned(32)));
    float tot[A2_MB * 16] __attribute__((aligned(32)));
    _Static_assert(sizeof buf >= A2_KP / 4 * 128, "a chunk's blocks as code bytes fit buf");
    const int64_t G = w->ngroups, gk = w->group_k, KP = x->KP, W8 = QWI_Q4I_Q8_WORDS(KP);
    for (int64_t j0n = 0; j0n < N; j0n += 16) {
        const int64_t p = (n0 + j0n) / 16;
        for (int64_t m0 = 0; m0 < M; m0 += A2_MB) {
            const int64_t mb = QWI_MIN((int64_t)A2_MB, M - m0);
            memset(tot, 0, sizeof(float) * 16 * (size_t)mb);
            for (int64_t g = 0; g < G; g++) {
                const int64_t js = g * gk / 2, je = QWI_MIN(KP, (g + 1) * gk / 2);
                /* the group's scales and zero points as f32, once for its row block */
                float sc[16] __attribute__((aligned(32))), zf[16] __attribute__((aligned(32)));
                for (int h = 0; h < 2; h++) {
                    _mm256_store_ps(sc + 8 * h, a2_scales8(w, (p * G + g) * 16 + 8 * h));
                    _mm256_store_ps(zf + 8 * h, _mm256_cvtepi32_ps(a2_zeros8(w, (p * G + g) * 16 + 8 * h)));
                }
                for (int64_t c0 = js; c0 < je; c0 += A2_KP) {
                    const int64_t c1 = QWI_MIN(je, c0 + A2_KP);
                    if (b8) {
                        const int64_t nb = QWI_DIV_UP(c1 - c0, 4);
                        a2_decode_chunk_b8(w, p, c0 / 4, nb, (uint8_t *)buf);
#define A2_TILE8(r, MR)                                                                           \
    a2_chunk_tile_b8(x->q8 + (m0 + (r)) * W8 + 2 * (c0 / 4), W8, (const uint8_t *)buf, nb,       \
                     part + (r) * 16, c0 == js, c1 == je, tot + (r) * 16, sc, zf,               \
                     x->d + (m0 + (r)) * x->G + g, x->sum + (m0 + (r)) * x->G + g, x->G, MR)
                        QWI_ROW_TILES(4, mb, A2_TILE8);
#undef A2_TILE8
                        continue;
                    }
                    a2_decode_chunk(w, p, g, c0, c1, buf, u8);
#define A2_TILE(r, MR)                                                                          \
    a2_chunk_tile(x->q + (m0 + (r)) * KP + c0, KP, buf, c1 - c0, part + (r) * 16, c0 == js,     \
                  c1 == je, tot + (r) * 16, sc, x->d + (m0 + (r)) * x->G + g, x->G, MR)
                    QWI_ROW_TILES(4, mb, A2_TILE);
#undef A2_TILE
                }
            }
            for (int64_t r = 0; r < mb; r++)
                qwi_put16(tot + r * 16, j0n, N, bias, out + (m0 + r) * ldo, accumulate);
        }
    }
}

/* The exported entry (qwr_matmul_q4i_fn's contract). */
A2_TARGET_ATTR void A2_ENTRY(const qwi_q4act *x, int64_t M, const qwi_qpanel *w, int64_t n0,
                             int64_t N, const float *bias, float *out, int64_t ldo,
                             int accumulate) {
    if (M <= 0 || N <= 0) return;
    const int64_t P0 = n0 / 16, np_all = QWI_DIV_UP(N, 16);
    const int u8 = w->fmt == QWI_QFMT_U8;
    if (M > 2) {
        if (u8) a2_chunked(x, M, w, n0, N, bias, out, ldo, accumulate, 1, 0);
        else if (x->q8 && w->group_k % 8 == 0)
            a2_chunked(x, M, w, n0, N, bias, out, ldo, accumulate, 0, 1);
        else a2_chunked(x, M, w, n0, N, bias, out, ldo, accumulate, 0, 0);
        return;
    }
    float res[2 * 64] __attribute__((aligned(32)));
    for (int64_t pq = 0, np; pq < np_all; pq += np) {
        np = qwi_qpanel_run(w, P0 + pq, QWI_MIN(M == 2 ? (int64_t)2 : 4, np_all - pq));
#define A2_D(K, U8)                                                                             \
    do {                                                                                        \
        if (M == 2) {                                                                           \
            if (np == 2) K(2, 2, U8);                                                           \
            else K(2, 1, U8);                                                                   \
        } else {                                                                                \
            switch (np) {                                                                       \
            case 4: K(1, 4, U8); break;                                                         \
            case 3: K(1, 3, U8); break;                                                         \
            case 2: K(1, 2, U8); break;                                                         \
            default: K(1, 1, U8); break;                                                        \
            }                                                                                   \
        }                                                                                       \
    } while (0)
#define A2_B8(mr_, np_, u8_) a2_direct(x, w, P0 + pq, res, mr_, np_, u8_, 1)
#define A2_D16(mr_, np_, u8_) a2_direct(x, w, P0 + pq, res, mr_, np_, u8_, 0)
        if (u8) A2_D(A2_D16, 1);
        else if (x->q8) A2_D(A2_B8, 0);
        else A2_D(A2_D16, 0);
#undef A2_D
#undef A2_B8
#undef A2_D16
        for (int64_t r = 0; r < M; r++)
            for (int q = 0; q < np; q++)
                qwi_put16(res + r * 64 + q * 16, 16 * (pq + q), N, bias, out + r * ldo,
                          accumulate);
    }
}

#undef A2_DOT
#undef A2_PF
