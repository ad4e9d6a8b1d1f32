/* Causal multi-head self-attention, a template for REAL = float and double
 * (attention.c). */

/* a row's vector length in elements: 16 floats fill an AVX-512 register
 * (and two AVX2 ones, or doubles' two 512-bit ones) */
#ifndef ATT_VROW
#define ATT_VROW 16
/* row t's causal part [0, t] rounded up to whole ATT_VROW vectors, within T */
static inline int att_row_span(int t, int T) {
  const int up = (t + ATT_VROW) / ATT_VROW * ATT_VROW;
  return up < T ? up : T;
}
#endif

/* the largest of pr[0..t] (NaNs skipped, as `>` skips them): ATT_VROW
 * lanes over whole vectors, the lanes past t masked, then halved in a
 * tree. An `omp simd reduction(max)` combined its lanes one after another
 * (16 dependent steps a row, half the softmax's time at T = 64); the max
 * is exact, so the order does not change it. */
static inline REAL MT_T(att_row_max)(const REAL *pr, int t) {
  REAL lane[ATT_VROW];
#pragma omp simd
  for (int l = 0; l < ATT_VROW; l++) lane[l] = -INFINITY;
  for (int t0 = 0; t0 <= t; t0 += ATT_VROW) {
#pragma omp simd
    for (int l = 0; l < ATT_VROW; l++) {
      const REAL p = t0 + l <= t ? pr[t0 + l] : -INFINITY;
      lane[l] = p > lane[l] ? p : lane[l];
    }
  }
  for (int w = ATT_VROW / 2; w >= 1; w /= 2) {
#pragma omp simd
    for (int l = 0; l < w; l++) lane[l] = lane[l + w] > lane[l] ? lane[l + w] : lane[l];
  }
  return lane[0];
}

/* Softmax of each row's causal part [0, t] of pre (T,T) into a (the rest
 * of a and of pre zeroed). Its length is rarely a whole number of
 * vectors, and a loop's remainder runs scalar (an exponential per element
 * there, most of the softmax's time at T = 64): the max and the
 * exponentials run over [0, t] rounded up to whole vectors (within T), the
 * lanes past t masked (-inf, then 0). The sum keeps a loop of its own over
 * [0, t], in the order it had. */
static inline void MT_T(att_softmax)(REAL *pre, REAL *a, int T) {
  for (int t = 0; t < T; t++) {
    REAL *pr = pre + (int64_t)t * T, *ar = a + (int64_t)t * T;
    const int nv = att_row_span(t, T);
    const REAL mx = MT_T(att_row_max)(pr, t);
    REAL sum = (REAL)0;
#pragma omp simd
    for (int t2 = 0; t2 < nv; t2++) ar[t2] = t2 <= t ? MT_T(mt_vexp)(pr[t2] - mx) : (REAL)0;
#pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; t2++) sum += ar[t2];
    const REAL inv = (REAL)1 / sum;
#pragma omp simd
    for (int t2 = 0; t2 < nv; t2++) ar[t2] *= inv;
#pragma omp simd
    for (int t2 = nv; t2 < T; t2++) ar[t2] = (REAL)0;
#pragma omp simd
    for (int t2 = t + 1; t2 < T; t2++) pr[t2] = (REAL)0;
  }
}

/* The softmax's backward per row, in place: da (T,T) holds datt and
 * becomes dpre = att * (datt - <att, datt>), 0 above the diagonal. */
static inline void MT_T(att_softmax_bwd)(const REAL *a, REAL *da, int T) {
  for (int t = 0; t < T; t++) {
    const REAL *ar = a + (int64_t)t * T;
    REAL *dr = da + (int64_t)t * T;
    const int nv = att_row_span(t, T);
    REAL dot = (REAL)0;
#pragma omp simd reduction(+ : dot)
    for (int t2 = 0; t2 <= t; t2++) dot += ar[t2] * dr[t2];
    /* whole vectors, the lanes past t masked, as in the forward */
#pragma omp simd
    for (int t2 = 0; t2 < nv; t2++) dr[t2] = t2 <= t ? ar[t2] * (dr[t2] - dot) : (REAL)0;
#pragma omp simd
    for (int t2 = nv; t2 < T; t2++) dr[t2] = (REAL)0;
  }
}

#if !MT_F64
/* ---------------------------------------------- bf16: dense head operands
 * Under a bf16 policy each (b, h) pair lays its head's q, k, v (and, in
 * the backward, its output gradient) out as dense (T, hs) bf16 matrices
 * in the thread's scratch, taken from the held copy of inp (the gpt holds
 * it: mt_model_hold) or converted from it, and the softmax writes the bf16
 * copy of att (and of dpre) that the next products read. So every product
 * has dense bf16 operands, which oneDNN runs as kept brgemm matmul
 * primitives where the CPU has bf16 instructions (mt_gemm_bf16): rows 3C
 * apart it declined, and ran its gemm call instead. Each T x T matrix is
 * converted once (the strided calls converted att once more and dpre
 * twice). Only where oneDNN's bf16 kernels run (mt_gemm_bf16_native):
 * where bf16 is emulated the products would be the strided calls' anyway,
 * widened from the same bf16 values (the same bits), and the dense copies
 * cost 5% of the layer's step there (X1, bench/attn_parts: 3.45 against
 * 3.26 ms). Tests force either path (mt_attention_dense_heads). */
static _Atomic int att_dense_ = -1; /* -1: where native; 1: always; 0: never */

void mt_attention_dense_heads(int on) { att_dense_ = on < 0 ? -1 : on != 0; }

static int att_dense_heads(const mt_nn_policy *pol) {
  return mt_nn_compute(pol) == MT_PREC_BF16 &&
         (att_dense_ < 0 ? mt_gemm_bf16_native() : att_dense_);
}

/* the head slice X (T rows of hs values, rows ld apart) as a dense bf16
 * (T, hs) in dst: the rows of hx (the held copy of X, at X's offset), or X
 * converted when none is held */
static void att_gather(uint16_t *dst, const float *X, const uint16_t *hx, int T, int hs,
                       int64_t ld) {
  for (int t = 0; t < T; t++) {
    if (hx)
      memcpy(dst + (int64_t)t * hs, hx + (int64_t)t * ld, (size_t)hs * sizeof(uint16_t));
    else
      mt_nn_to_bf16(dst + (int64_t)t * hs, X + (int64_t)t * ld, (size_t)hs);
  }
}

static int att_forward_bf16(float *out, float *preatt, float *att, const float *inp, int B, int T,
                            int C, int NH, const mt_nn_policy *pol) {
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T, ths = (int64_t)T * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  const uint16_t *held = mt_nn_held_copy(pol, inp, (size_t)((int64_t)B * T * C3));
  int err = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * NH > 1)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      uint16_t *qd;
      if (mt_nn_scratch(2, (size_t)(3 * ths + TT) * sizeof(uint16_t), (void **)&qd)) {
#pragma omp atomic write
        err = 1;
        continue;
      }
      uint16_t *kd = qd + ths, *vd = kd + ths, *ad = vd + ths;
      const int64_t off = (int64_t)b * T * C3 + (int64_t)h * hs;
      att_gather(qd, inp + off, held ? held + off : NULL, T, hs, C3);
      att_gather(kd, inp + off + C, held ? held + off + C : NULL, T, hs, C3);
      att_gather(vd, inp + off + 2 * C, held ? held + off + 2 * C : NULL, T, hs, C3);
      float *pre = preatt + ((int64_t)b * NH + h) * TT, *a = att + ((int64_t)b * NH + h) * TT;
      int e = mt_gemm_bf16_ops('N', 'T', T, T, hs, scale, qd, hs, kd, hs, 0.0f, pre, T, pol);
      MT_T(att_softmax)(pre, a, T);
      mt_nn_to_bf16(ad, a, (size_t)TT);
      e |= mt_gemm_bf16_ops('N', 'N', T, hs, T, 1.0f, ad, T, vd, hs, 0.0f,
                            out + (int64_t)b * T * C + h * hs, C, pol);
      if (e) {
#pragma omp atomic write
        err = 1;
      }
    }
  MT_CHECK(!err, MT_ERR_LIB, "attention forward (bf16): a GEMM or its scratch failed (B=%d T=%d "
           "C=%d NH=%d)", B, T, C, NH);
  return 0;
}

static int att_backward_bf16(float *dinp, float *scratch, const float *dout, const float *inp,
                             const float *att, int B, int T, int C, int NH, float beta,
                             const mt_nn_policy *pol) {
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T, ths = (int64_t)T * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  const uint16_t *held = mt_nn_held_copy(pol, inp, (size_t)((int64_t)B * T * C3));
  const uint16_t *heldd = mt_nn_held_copy(pol, dout, (size_t)((int64_t)B * T * C));
  int err = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * NH > 1)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      uint16_t *qd;
      if (mt_nn_scratch(2, (size_t)(4 * ths + 2 * TT) * sizeof(uint16_t), (void **)&qd)) {
#pragma omp atomic write
        err = 1;
        continue;
      }
      uint16_t *kd = qd + ths, *vd = kd + ths, *dd = vd + ths, *ad = dd + ths, *dad = ad + TT;
      const int64_t off = (int64_t)b * T * C3 + (int64_t)h * hs, doff = (int64_t)b * T * C + h * hs;
      att_gather(qd, inp + off, held ? held + off : NULL, T, hs, C3);
      att_gather(kd, inp + off + C, held ? held + off + C : NULL, T, hs, C3);
      att_gather(vd, inp + off + 2 * C, held ? held + off + 2 * C : NULL, T, hs, C3);
      att_gather(dd, dout + doff, heldd ? heldd + doff : NULL, T, hs, C);
      const float *a = att + ((int64_t)b * NH + h) * TT;
      float *da = scratch + ((int64_t)b * NH + h) * TT;
      float *dq = dinp + off, *dk = dq + C, *dv = dq + 2 * (int64_t)C;
      mt_nn_to_bf16(ad, a, (size_t)TT);
      /* datt = dout_h v^T; dv += att^T dout_h */
      int e = mt_gemm_bf16_ops('N', 'T', T, T, hs, 1.0f, dd, hs, vd, hs, 0.0f, da, T, pol);
      e |= mt_gemm_bf16_ops('T', 'N', T, hs, T, 1.0f, ad, T, dd, hs, beta, dv, C3, pol);
      MT_T(att_softmax_bwd)(a, da, T);
      mt_nn_to_bf16(dad, da, (size_t)TT);
      /* dq += scale dpre k; dk += scale dpre^T q */
      e |= mt_gemm_bf16_ops('N', 'N', T, hs, T, scale, dad, T, kd, hs, beta, dq, C3, pol);
      e |= mt_gemm_bf16_ops('T', 'N', T, hs, T, scale, dad, T, qd, hs, beta, dk, C3, pol);
      if (e) {
#pragma omp atomic write
        err = 1;
      }
    }
  MT_CHECK(!err, MT_ERR_LIB, "attention backward (bf16): a GEMM or its scratch failed (B=%d T=%d "
           "C=%d NH=%d)", B, T, C, NH);
  return 0;
}
#endif

int MT_T(mt_attention_forward)(REAL *out, REAL *preatt, REAL *att, const REAL *inp, int B, int T,
                               int C, int NH, const mt_nn_policy *pol) {
  // inp is (B,T,3C); preatt and att are (B,NH,T,T); out is (B,T,C)
  MT_CHECK(B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0, MT_ERR_ARG,
           "attention: C=%d must be a positive multiple of NH=%d (B=%d, T=%d)", C, NH, B, T);
#if !MT_F64
  if (att_dense_heads(pol)) return att_forward_bf16(out, preatt, att, inp, B, T, C, NH, pol);
#endif
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  const REAL scale = (REAL)1 / MT_SQRT((REAL)hs);
  int err = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * NH > 1)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const REAL *q = inp + (int64_t)b * T * C3 + (int64_t)h * hs;
      const REAL *k = q + C, *v = q + 2 * (int64_t)C;
      REAL *pre = preatt + ((int64_t)b * NH + h) * TT;
      REAL *a = att + ((int64_t)b * NH + h) * TT;
      /* pre (T,T) = scale * q k^T */
      if (MT_T(mt_gemm)('N', 'T', T, T, hs, scale, q, C3, k, C3, (REAL)0, pre, T, pol)) {
#pragma omp atomic write
        err = 1;
      }
      MT_T(att_softmax)(pre, a, T);
      /* out_h (T,hs) = att v */
      if (MT_T(mt_gemm)('N', 'N', T, hs, T, (REAL)1, a, T, v, C3, (REAL)0,
                        out + (int64_t)b * T * C + h * hs, C, pol)) {
#pragma omp atomic write
        err = 1;
      }
    }
  MT_CHECK(!err, MT_ERR_LIB, "attention forward: a GEMM failed (B=%d T=%d C=%d NH=%d)", B, T, C,
           NH);
  return 0;
}

int MT_T(mt_attention_backward_ex)(REAL *dinp, REAL *scratch, const REAL *dout, const REAL *inp,
                                   const REAL *att, int B, int T, int C, int NH, unsigned flags,
                                   const mt_nn_policy *pol) {
  // dout is (B,T,C); inp and dinp are (B,T,3C); att and scratch are (B,NH,T,T)
  MT_CHECK(B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0, MT_ERR_ARG,
           "attention: C=%d must be a positive multiple of NH=%d (B=%d, T=%d)", C, NH, B, T);
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  const REAL scale = (REAL)1 / MT_SQRT((REAL)hs);
  /* each of dq, dk, dv of a head is one product's: set (=) or added to */
  const REAL beta = (flags & MT_ATTN_SET_DINP) ? (REAL)0 : (REAL)1;
  int err = 0;
#if !MT_F64
  if (att_dense_heads(pol))
    return att_backward_bf16(dinp, scratch, dout, inp, att, B, T, C, NH, beta, pol);
  /* every head's dout slice feeds two products: converted once (the
   * workers read the table through the policy) */
  mt_nn_holds *held = mt_nn_holds_local();
  const int held0 = held->n;
  mt_nn_policy with;
  mt_nn_hold(held, pol, dout, (size_t)B * T * C);
  pol = mt_nn_with_holds(pol, held, &with);
#endif
#pragma omp parallel for collapse(2) schedule(static) if (B * NH > 1)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const int64_t off = (int64_t)b * T * C3 + (int64_t)h * hs;
      const REAL *q = inp + off, *k = q + C, *v = q + 2 * (int64_t)C;
      REAL *dq = dinp + off, *dk = dq + C, *dv = dq + 2 * (int64_t)C;
      const REAL *d = dout + (int64_t)b * T * C + h * hs;
      const REAL *a = att + ((int64_t)b * NH + h) * TT;
      REAL *da = scratch + ((int64_t)b * NH + h) * TT;
      int e = 0;
      /* datt (T,T) = dout_h v^T; dv += att^T dout_h */
      e |= MT_T(mt_gemm)('N', 'T', T, T, hs, (REAL)1, d, C, v, C3, (REAL)0, da, T, pol);
      e |= MT_T(mt_gemm)('T', 'N', T, hs, T, (REAL)1, a, T, d, C, beta, dv, C3, pol);
      MT_T(att_softmax_bwd)(a, da, T);
      /* pre = scale q k^T: dq += scale dpre k; dk += scale dpre^T q */
      e |= MT_T(mt_gemm)('N', 'N', T, hs, T, scale, da, T, k, C3, beta, dq, C3, pol);
      e |= MT_T(mt_gemm)('T', 'N', T, hs, T, scale, da, T, q, C3, beta, dk, C3, pol);
      if (e) {
#pragma omp atomic write
        err = 1;
      }
    }
#if !MT_F64
  mt_nn_holds_clear(held, held0);
#endif
  MT_CHECK(!err, MT_ERR_LIB, "attention backward: a GEMM failed (B=%d T=%d C=%d NH=%d)", B, T, C,
           NH);
  return 0;
}

int MT_T(mt_attention_backward)(REAL *dinp, REAL *scratch, const REAL *dout, const REAL *inp,
                                const REAL *att, int B, int T, int C, int NH,
                                const mt_nn_policy *pol) {
  return MT_T(mt_attention_backward_ex)(dinp, scratch, dout, inp, att, B, T, C, NH, 0, pol);
}
