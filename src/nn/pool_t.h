/* 2-d max and average pooling and global average pooling, a template for
 * REAL = float and double (pool.c). */

/* Whether x takes the place of the maximum m so far, the max-pool's rule
 * (scan order, the first maximum wins, a NaN always wins) as a value, for
 * selects instead of branches, so that the loops around it vectorise; the
 * branchy loop mispredicted on real activations and took a third of a CNN
 * step. */
static inline __attribute__((always_inline)) int MT_T(wins)(REAL x, REAL m) {
  return (x > m) | (x != x);
}

/* The maximum of a 2x2 window a b / c d whose a is at index ia of a plane W
 * wide, and (*at) its index. */
static inline __attribute__((always_inline)) REAL MT_T(max4)(REAL a, REAL b, REAL c, REAL d,
                                                            int32_t ia, int W, int32_t *at) {
  REAL m = a;
  int32_t i = ia;
  int t = MT_T(wins)(b, m);
  m = t ? b : m, i = t ? ia + 1 : i;
  t = MT_T(wins)(c, m);
  m = t ? c : m, i = t ? ia + W : i;
  t = MT_T(wins)(d, m);
  m = t ? d : m, i = t ? ia + W + 1 : i;
  *at = i;
  return m;
}

/* 2x2 windows, stride 2, no padding (the CNN's pool) on an NCHW input,
 * vectorised over a row; the output (and argmax) NCHW, or blocked
 * nChw{ob}c for the convolution after it (a store every ob elements: an
 * NCHW convolution output before a blocked input, which the CNN had under
 * native bf16 until its first convolution kept a blocked output; the
 * branchy general loop took a fifth of that CNN step). */
static void MT_T(maxpool_2x2)(REAL *out, int32_t *argmax, const REAL *inp,
                              const mt_pool2d_shape *s) {
  const int64_t planes = (int64_t)s->B * s->C, hw = (int64_t)s->H * s->W;
  const int64_t ohw = (int64_t)s->OH * s->OW;
  const int W = s->W, OW = s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    const REAL *x = inp + p * hw;
    int64_t st;
    const int64_t at = oplane_at(s, p, &st);
    REAL *o = out + at;
    int32_t *am = argmax + at;
    for (int oh = 0; oh < s->OH; oh++) {
      const REAL *r0 = x + 2 * oh * W, *r1 = r0 + W;
      const int32_t base = 2 * oh * W;
#pragma omp simd
      for (int ow = 0; ow < OW; ow++) {
        int32_t i;
        o[(oh * OW + ow) * st] = MT_T(max4)(r0[2 * ow], r0[2 * ow + 1], r1[2 * ow],
                                            r1[2 * ow + 1], base + 2 * ow, W, &i);
        am[(oh * OW + ow) * st] = i;
      }
    }
  }
}

/* The same on the blocked input nChw{cb}c: the cb channels of a block lie
 * side by side at each position, so the loop vectorises over them (one
 * AVX2 vector for cb = 8) with unit-stride loads; the output (and argmax)
 * in NCHW (ob 0: one store per plane) or in the input's nChw{cb}c (ob 1:
 * unit-stride stores). One block q (image, channel block) per call; ob and
 * cb constants after inlining (so inside the caller's parallel loop, not
 * around it: OpenMP's outlined body would get them as variables).
 *
 * The input is read in order: each window row pair in two passes over up
 * to POOL_RUN * 16 / cb windows, the upper row's (a b, into rm / ri) then
 * the lower row's (c d): the same comparisons in the same order as max4.
 * Reading both rows in one pass (two streams a row apart, a line of each
 * per window) ran the CNN's first pool (128 x 32 x 28 x 28, nChw8c) at
 * 2.62 ms against 1.26 in row order (A2, AVX2, bench/pool_bench, medians
 * of 5; a plain stream of the same bytes 0.7-1.1 ms). */
#define POOL_RUN 32
static inline __attribute__((always_inline)) void MT_T(maxpool_2x2_blk)(
    REAL *out, int32_t *argmax, const REAL *inp, const mt_pool2d_shape *s, int64_t q,
    const int ob, const int cb) {
  const int W = s->W, OW = s->OW;
  const int64_t hw = (int64_t)s->H * s->W, ohw = (int64_t)s->OH * s->OW;
  const REAL *x = inp + q * hw * cb;
  REAL *o = out + q * cb * ohw; /* planes q*cb .. q*cb+cb-1 of the output */
  int32_t *am = argmax + q * cb * ohw;
  const int64_t js = ob ? 1 : ohw;
  REAL rm[POOL_RUN * 16]; /* cb <= 16 (the caller's condition) */
  int32_t ri[POOL_RUN * 16];
  const int run = POOL_RUN * 16 / cb;
  for (int oh = 0; oh < s->OH; oh++)
    for (int w0 = 0; w0 < OW; w0 += run) {
      const int w1 = OW - w0 < run ? OW : w0 + run;
      for (int ow = w0; ow < w1; ow++) { /* the upper row: m of a b */
        const int32_t ia = 2 * oh * W + 2 * ow;
        const REAL *r0 = x + (int64_t)ia * cb;
        REAL *m = rm + (ow - w0) * cb;
        int32_t *mi = ri + (ow - w0) * cb;
#pragma omp simd
        for (int j = 0; j < cb; j++) {
          const REAL a = r0[j], b = r0[cb + j];
          const int t = MT_T(wins)(b, a);
          m[j] = t ? b : a, mi[j] = t ? ia + 1 : ia;
        }
      }
      for (int ow = w0; ow < w1; ow++) { /* the lower row: then c, then d */
        const int32_t ia = 2 * oh * W + 2 * ow;
        const REAL *r1 = x + (int64_t)(ia + W) * cb;
        const REAL *m = rm + (ow - w0) * cb;
        const int32_t *mi = ri + (ow - w0) * cb;
        const int64_t op = (int64_t)oh * OW + ow;
        REAL *oo = ob ? o + op * cb : o + op;
        int32_t *ao = ob ? am + op * cb : am + op;
#pragma omp simd
        for (int j = 0; j < cb; j++) {
          REAL v = m[j];
          int32_t i = mi[j];
          const REAL c = r1[j], d = r1[cb + j];
          int t = MT_T(wins)(c, v);
          v = t ? c : v, i = t ? ia + W : i;
          t = MT_T(wins)(d, v);
          v = t ? d : v, i = t ? ia + W + 1 : i;
          oo[j * js] = v;
          ao[j * js] = i;
        }
      }
    }
}

/* Calls body with cb a constant where the block is 8 or 16 floats (AVX2's
 * and AVX-512's), so the lanes' loops have no remainder. */
#define MT_POOL_CB(cb_, body) \
  do {                        \
    if ((cb_) == 8) {         \
      const int cbk = 8;      \
      body;                   \
    } else if ((cb_) == 16) { \
      const int cbk = 16;     \
      body;                   \
    } else {                  \
      const int cbk = (cb_);  \
      body;                   \
    }                         \
  } while (0)

static void MT_T(maxpool_2x2_blocked)(REAL *out, int32_t *argmax, const REAL *inp,
                                      const mt_pool2d_shape *s) {
  const int64_t blocks = (int64_t)s->B * (s->C / s->cblock);
  const int64_t work = (int64_t)s->B * s->C * s->OH * s->OW;
#define MT_POOL_FWD_BLK(ob)                                                               \
  MT_POOL_CB(s->cblock, {                                                                 \
    _Pragma("omp parallel for schedule(static) if (work > 32768)") for (int64_t q = 0;      \
                                                                         q < blocks; q++)  \
        MT_T(maxpool_2x2_blk)(out, argmax, inp, s, q, ob, cbk);                            \
  })
  if (s->oblock)
    MT_POOL_FWD_BLK(1);
  else
    MT_POOL_FWD_BLK(0);
#undef MT_POOL_FWD_BLK
}

/* Whether the 2x2 / stride 2 / no padding kernels serve s. */
static int MT_T(is_2x2)(const mt_pool2d_shape *s) {
  return s->KH == 2 && s->KW == 2 && s->stride_h == 2 && s->stride_w == 2 && s->pad_h == 0 &&
         s->pad_w == 0;
}

void MT_T(mt_maxpool2d_forward)(REAL *out, int32_t *argmax, const REAL *inp,
                                const mt_pool2d_shape *s) {
  // inp is (B,C,H,W) (blocked when s->cblock); out and argmax are (B,C,OH,OW) (when s->oblock)
  if (MT_T(is_2x2)(s) && s->cblock <= 16 && (!s->cblock || !s->oblock || s->oblock == s->cblock)) {
    if (s->cblock)
      MT_T(maxpool_2x2_blocked)(out, argmax, inp, s);
    else
      MT_T(maxpool_2x2)(out, argmax, inp, s);
    return;
  }
  const int64_t planes = (int64_t)s->B * s->C;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    int64_t st, ost;
    const REAL *x = inp + plane_at(s, p, &st);
    const int64_t oat = oplane_at(s, p, &ost);
    REAL *o = out + oat;
    int32_t *am = argmax + oat;
    for (int oh = 0; oh < s->OH; oh++) {
      const int h0 = imax(oh * s->stride_h - s->pad_h, 0);
      const int h1 = imin(oh * s->stride_h - s->pad_h + s->KH, s->H);
      for (int ow = 0; ow < s->OW; ow++) {
        const int w0 = imax(ow * s->stride_w - s->pad_w, 0);
        const int w1 = imin(ow * s->stride_w - s->pad_w + s->KW, s->W);
        int best = h0 * s->W + w0; /* pad <= kernel/2: never an empty window */
        REAL mx = -INFINITY;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) {
            const REAL v = x[(ih * s->W + iw) * st];
            if (MT_T(wins)(v, mx)) {
              mx = v;
              best = ih * s->W + iw;
            }
          }
        o[(oh * s->OW + ow) * ost] = mx;
        am[(oh * s->OW + ow) * ost] = best;
      }
    }
  }
}

/* g when c, else 0, by masking g's bits: GCC 12 vectorises this, where it
 * turned two or more "+= c ? g : 0" of one loop into branches and left the
 * loop scalar. */
static inline __attribute__((always_inline)) REAL MT_T(keep)(int c, REAL g) {
#if MT_F64
  uint64_t u;
  memcpy(&u, &g, sizeof(u));
  u &= -(uint64_t)c;
#else
  uint32_t u;
  memcpy(&u, &g, sizeof(u));
  u &= -(uint32_t)c;
#endif
  memcpy(&g, &u, sizeof(u));
  return g;
}

/* The 2x2 backward on a blocked input gradient nChw{cb}c, the output
 * gradient in NCHW (ob 0) or in the same nChw{cb}c (ob 1): each window's
 * four inputs get the gradient where the argmax points and 0 elsewhere,
 * one vector of cb channels at a time (the windows do not overlap), so no
 * scatter of single lanes; relu (out given) as in maxpool_bwd. With set the
 * four are written (=), not added to: the caller's whole input gradient
 * when the windows cover it (even H and W). The input gradient is written
 * in order, as the forward reads it: a window row's upper inputs in one
 * pass, its lower ones in a second (the output gradient's row read twice,
 * from L1); one pass writing both rows took the first pool's backward
 * 2.78 ms against 1.44 (as maxpool_2x2_blk). With an NCHW output gradient
 * (ob 0; cb <= 16, the caller's condition) each row's run of up to
 * POOL_RUN * 16 / cb windows is first gathered plane by plane into tg / ta
 * as [window][lane], the ReLU's mask applied there, so that the passes load
 * whole vectors: the second pool's backward (128 x 64 x 14 x 14, nChw8c)
 * 1.395 ms -> 1.031 (A2, bench/pool_bench, medians of 9 rounds). One block
 * q per call; ob, relu, set and cb constants after inlining (as
 * maxpool_2x2_blk). */
static inline __attribute__((always_inline)) void MT_T(maxpool_bwd_blk)(
    REAL *dinp, const REAL *dout, const int32_t *argmax, const REAL *out,
    const mt_pool2d_shape *s, int64_t q, const int ob, const int relu, const int set,
    const int cb) {
  const int W = s->W, OW = s->OW;
  const int64_t hw = (int64_t)s->H * s->W, ohw = (int64_t)s->OH * s->OW;
  REAL *x = dinp + q * hw * cb;
  const REAL *d = dout + q * cb * ohw, *y = relu ? out + q * cb * ohw : NULL;
  const int32_t *am = argmax + q * cb * ohw;
  REAL tg[POOL_RUN * 16]; /* ob 0 (cb <= 16): a run of the row's gradients, argmax [ow][j] */
  int32_t ta[POOL_RUN * 16];
  const int run = ob ? OW : POOL_RUN * 16 / cb;
  for (int oh = 0; oh < s->OH; oh++)
    for (int w0 = 0; w0 < OW; w0 += run) {
      const int w1 = OW - w0 < run ? OW : w0 + run;
      const int64_t r0 = (int64_t)oh * OW; /* the output row's first position */
      if (!ob) /* the cb planes' runs side by side, masked by the ReLU */
        for (int j = 0; j < cb; j++) {
          const int64_t pj = j * ohw + r0;
#pragma omp simd
          for (int ow = w0; ow < w1; ow++) {
            const REAL dj = d[pj + ow];
            tg[(ow - w0) * cb + j] = relu ? MT_T(keep)(y[pj + ow] > (REAL)0, dj) : dj;
            ta[(ow - w0) * cb + j] = am[pj + ow];
          }
        }
      for (int lo = 0; lo < 2; lo++) /* the window's upper inputs, then its lower */
        for (int ow = w0; ow < w1; ow++) {
          const int32_t ia = 2 * oh * W + 2 * ow + lo * W; /* the left input's index */
          REAL *r = x + (int64_t)ia * cb;
          const int64_t o0 = ob ? (r0 + ow) * cb : (int64_t)(ow - w0) * cb;
          const REAL *gp = ob ? d + o0 : tg + o0, *yp = ob && relu ? y + o0 : NULL;
          const int32_t *ap = ob ? am + o0 : ta + o0;
#pragma omp simd
          for (int j = 0; j < cb; j++) {
            const REAL g = ob && relu ? MT_T(keep)(yp[j] > (REAL)0, gp[j]) : gp[j];
            const int32_t a = ap[j];
            if (set) {
              r[j] = MT_T(keep)(a == ia, g);
              r[cb + j] = MT_T(keep)(a == ia + 1, g);
            } else {
              r[j] += MT_T(keep)(a == ia, g);
              r[cb + j] += MT_T(keep)(a == ia + 1, g);
            }
          }
        }
    }
}

static void MT_T(maxpool_bwd_blocked)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                      const REAL *out, const mt_pool2d_shape *s, int set) {
  const int64_t blocks = (int64_t)s->B * (s->C / s->cblock);
  const int64_t work = (int64_t)s->B * s->C * s->OH * s->OW;
#define MT_POOL_BWD_BLK(ob, relu, set)                                                     \
  MT_POOL_CB(s->cblock, {                                                                  \
    _Pragma("omp parallel for schedule(static) if (work > 32768)") for (int64_t q = 0;       \
                                                                         q < blocks; q++)   \
        MT_T(maxpool_bwd_blk)(dinp, dout, argmax, out, s, q, ob, relu, set, cbk);           \
  })
#define MT_POOL_BWD_SET(ob, relu)                                                  \
  do {                                                                             \
    if (set)                                                                       \
      MT_POOL_BWD_BLK(ob, relu, 1);                                                \
    else                                                                           \
      MT_POOL_BWD_BLK(ob, relu, 0);                                                \
  } while (0)
  if (s->oblock && out)
    MT_POOL_BWD_SET(1, 1);
  else if (s->oblock)
    MT_POOL_BWD_SET(1, 0);
  else if (out)
    MT_POOL_BWD_SET(0, 1);
  else
    MT_POOL_BWD_SET(0, 0);
#undef MT_POOL_BWD_SET
#undef MT_POOL_BWD_BLK
}

/* The max-pool's backward, through a ReLU before the pool when out (the
 * pool's output) is given: max-pool of ReLU = ReLU of max-pool, and the
 * ReLU's output at the argmax is the pooled value, so the gradient passes
 * where out > 0 and the ReLU needs no pass of its own. */
static void MT_T(maxpool_bwd)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                              const REAL *out, const mt_pool2d_shape *s, int flags) {
  const int set = (flags & MT_POOL_SET_DINP) != 0;
  if (MT_T(is_2x2)(s) && s->cblock &&
      (s->oblock == s->cblock || (!s->oblock && s->cblock <= 16))) { /* tg's size */
    /* written in the pass where the windows cover the input */
    const int cover = s->H == 2 * s->OH && s->W == 2 * s->OW;
    if (set && !cover) memset(dinp, 0, (size_t)s->B * s->C * s->H * s->W * sizeof(REAL));
    MT_T(maxpool_bwd_blocked)(dinp, dout, argmax, out, s, set && cover);
    return;
  }
  if (set) memset(dinp, 0, (size_t)s->B * s->C * s->H * s->W * sizeof(REAL));
  const int64_t planes = (int64_t)s->B * s->C;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    int64_t st, ost;
    REAL *dx = dinp + plane_at(s, p, &st);
    const int64_t oat = oplane_at(s, p, &ost);
    const REAL *d = dout + oat;
    const int32_t *am = argmax + oat;
    if (out) {
      const REAL *y = out + oat;
      for (int64_t i = 0; i < ohw; i++)
        dx[am[i * ost] * st] += y[i * ost] > (REAL)0 ? d[i * ost] : (REAL)0;
    } else {
      for (int64_t i = 0; i < ohw; i++) dx[am[i * ost] * st] += d[i * ost];
    }
  }
}

void MT_T(mt_maxpool2d_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                 const mt_pool2d_shape *s) {
  // dout and argmax are (B,C,OH,OW) (blocked when s->oblock); dinp is (B,C,H,W) (s->cblock)
  MT_T(maxpool_bwd)(dinp, dout, argmax, NULL, s, 0);
}

void MT_T(mt_maxpool2d_relu_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                      const REAL *out, const mt_pool2d_shape *s) {
  // dout, argmax and out are (B,C,OH,OW) (s->oblock); dinp is (B,C,H,W) (s->cblock)
  MT_T(maxpool_bwd)(dinp, dout, argmax, out, s, 0);
}

void MT_T(mt_maxpool2d_backward_ex)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                    const REAL *out, const mt_pool2d_shape *s, int flags) {
  MT_T(maxpool_bwd)(dinp, dout, argmax, out, s, flags);
}

/* Window [h0,h1) x [w0,w1) clipped to the input and its divisor. */
static inline void MT_T(avg_window)(const mt_pool2d_shape *s, int oh, int ow, int *h0, int *h1,
                                    int *w0, int *w1, REAL *inv) {
  const int hs = oh * s->stride_h - s->pad_h, ws = ow * s->stride_w - s->pad_w;
  *h0 = imax(hs, 0);
  *h1 = imin(hs + s->KH, s->H);
  *w0 = imax(ws, 0);
  *w1 = imin(ws + s->KW, s->W);
  /* floor mode: the window always lies inside the padded input, so with
   * count_include_pad the divisor is the whole kernel */
  const int n = s->count_include_pad ? s->KH * s->KW : (*h1 - *h0) * (*w1 - *w0);
  *inv = (REAL)1 / (REAL)n;
}

void MT_T(mt_avgpool2d_forward)(REAL *out, const REAL *inp, const mt_pool2d_shape *s) {
  // inp is (B,C,H,W) (blocked when s->cblock); out is (B,C,OH,OW) (when s->oblock)
  const int64_t planes = (int64_t)s->B * s->C;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    int64_t st, ost;
    const REAL *x = inp + plane_at(s, p, &st);
    REAL *o = out + oplane_at(s, p, &ost);
    for (int oh = 0; oh < s->OH; oh++)
      for (int ow = 0; ow < s->OW; ow++) {
        int h0, h1, w0, w1;
        REAL inv;
        MT_T(avg_window)(s, oh, ow, &h0, &h1, &w0, &w1, &inv);
        REAL acc = (REAL)0;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) acc += x[(ih * s->W + iw) * st];
        o[(oh * s->OW + ow) * ost] = acc * inv;
      }
  }
}

void MT_T(mt_avgpool2d_backward)(REAL *dinp, const REAL *dout, const mt_pool2d_shape *s) {
  // dout is (B,C,OH,OW) (blocked when s->oblock); dinp is (B,C,H,W) (when s->cblock)
  const int64_t planes = (int64_t)s->B * s->C;
#pragma omp parallel for schedule(static) if (planes * s->OH * s->OW > 32768)
  for (int64_t p = 0; p < planes; p++) {
    int64_t st, ost;
    REAL *dx = dinp + plane_at(s, p, &st);
    const REAL *d = dout + oplane_at(s, p, &ost);
    for (int oh = 0; oh < s->OH; oh++)
      for (int ow = 0; ow < s->OW; ow++) {
        int h0, h1, w0, w1;
        REAL inv;
        MT_T(avg_window)(s, oh, ow, &h0, &h1, &w0, &w1, &inv);
        const REAL g = d[(oh * s->OW + ow) * ost] * inv;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) dx[(ih * s->W + iw) * st] += g;
      }
  }
}

void MT_T(mt_global_avgpool_forward)(REAL *out, const REAL *inp, int B, int C, int HW) {
  // inp is (B,C,HW); out is (B,C)
  const int64_t planes = (int64_t)B * C;
#pragma omp parallel for schedule(static) if (planes * HW > 65536)
  for (int64_t p = 0; p < planes; p++) {
    const REAL *x = inp + p * HW;
    double acc = 0.0;
    for (int i = 0; i < HW; i++) acc += x[i];
    out[p] = (REAL)(acc / HW);
  }
}

void MT_T(mt_global_avgpool_backward)(REAL *dinp, const REAL *dout, int B, int C, int HW) {
  // dout is (B,C); dinp is (B,C,HW)
  const int64_t planes = (int64_t)B * C;
  const REAL inv = (REAL)1 / (REAL)HW;
#pragma omp parallel for schedule(static) if (planes * HW > 65536)
  for (int64_t p = 0; p < planes; p++) {
    REAL *dx = dinp + p * HW;
    const REAL g = dout[p] * inv;
    for (int i = 0; i < HW; i++) dx[i] += g;
  }
}
