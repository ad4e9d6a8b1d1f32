/* Causal multi-head self-attention in llm.c's layout, with the per-head
 * products through mt_gemm: q, k, v of head h are (T,hs) matrices with
 * leading dimension 3C inside inp, so no copy is needed. The full (T,T)
 * score matrix is formed (twice the causal work) because one GEMM beats a
 * triangle of scalar dot products by far; the masked half is then zeroed.
 * The (b,h) pairs run in parallel; oneDNN's GEMM runs single-threaded
 * inside a parallel region, and every pair writes its own slices. */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>

int mt_attention_forward(float *out, float *preatt, float *att, const float *inp, int B, int T,
                         int C, int NH) {
  // inp is (B,T,3C); preatt and att are (B,NH,T,T); out is (B,T,C)
  MT_CHECK(B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0, MT_ERR_ARG,
           "attention: C=%d must be a positive multiple of NH=%d (B=%d, T=%d)", C, NH, B, T);
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  int err = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * NH > 1)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *q = inp + (int64_t)b * T * C3 + (int64_t)h * hs;
      const float *k = q + C, *v = q + 2 * (int64_t)C;
      float *pre = preatt + ((int64_t)b * NH + h) * TT;
      float *a = att + ((int64_t)b * NH + h) * TT;
      /* pre (T,T) = scale * q k^T */
      if (mt_gemm('N', 'T', T, T, hs, scale, q, C3, k, C3, 0.0f, pre, T)) {
#pragma omp atomic write
        err = 1;
      }
      for (int t = 0; t < T; t++) {
        float *pr = pre + (int64_t)t * T, *ar = a + (int64_t)t * T;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) mx = pr[t2] > mx ? pr[t2] : mx;
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          ar[t2] = expf(pr[t2] - mx);
          sum += ar[t2];
        }
        const float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++) ar[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) pr[t2] = ar[t2] = 0.0f;
      }
      /* out_h (T,hs) = att v */
      if (mt_gemm('N', 'N', T, hs, T, 1.0f, a, T, v, C3, 0.0f, out + (int64_t)b * T * C + h * hs,
                  C)) {
#pragma omp atomic write
        err = 1;
      }
    }
  MT_CHECK(!err, MT_ERR_LIB, "attention forward: a GEMM failed (B=%d T=%d C=%d NH=%d)", B, T, C,
           NH);
  return 0;
}

int mt_attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                          const float *att, int B, int T, int C, int NH) {
  // dout is (B,T,C); inp and dinp are (B,T,3C); att and scratch are (B,NH,T,T)
  MT_CHECK(B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0, MT_ERR_ARG,
           "attention: C=%d must be a positive multiple of NH=%d (B=%d, T=%d)", C, NH, B, T);
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  int err = 0;
#pragma omp parallel for collapse(2) schedule(static) if (B * NH > 1)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const int64_t off = (int64_t)b * T * C3 + (int64_t)h * hs;
      const float *q = inp + off, *k = q + C, *v = q + 2 * (int64_t)C;
      float *dq = dinp + off, *dk = dq + C, *dv = dq + 2 * (int64_t)C;
      const float *d = dout + (int64_t)b * T * C + h * hs;
      const float *a = att + ((int64_t)b * NH + h) * TT;
      float *da = scratch + ((int64_t)b * NH + h) * TT;
      int e = 0;
      /* datt (T,T) = dout_h v^T; dv += att^T dout_h */
      e |= mt_gemm('N', 'T', T, T, hs, 1.0f, d, C, v, C3, 0.0f, da, T);
      e |= mt_gemm('T', 'N', T, hs, T, 1.0f, a, T, d, C, 1.0f, dv, C3);
      /* softmax backward per row, in place: dpre = att * (datt - <att, datt>) */
      for (int t = 0; t < T; t++) {
        const float *ar = a + (int64_t)t * T;
        float *dr = da + (int64_t)t * T;
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) dot += ar[t2] * dr[t2];
        for (int t2 = 0; t2 <= t; t2++) dr[t2] = ar[t2] * (dr[t2] - dot);
        for (int t2 = t + 1; t2 < T; t2++) dr[t2] = 0.0f;
      }
      /* pre = scale q k^T: dq += scale dpre k; dk += scale dpre^T q */
      e |= mt_gemm('N', 'N', T, hs, T, scale, da, T, k, C3, 1.0f, dq, C3);
      e |= mt_gemm('T', 'N', T, hs, T, scale, da, T, q, C3, 1.0f, dk, C3);
      if (e) {
#pragma omp atomic write
        err = 1;
      }
    }
  MT_CHECK(!err, MT_ERR_LIB, "attention backward: a GEMM failed (B=%d T=%d C=%d NH=%d)", B, T, C,
           NH);
  return 0;
}
