// Causal multi-head self-attention on the GPU, llm.c's layout, a template
// for REAL = float and double (attention.cu). inp, dinp (B,T,3C): q, k, v
// side by side, head h of each at columns h*hs .. h*hs+hs-1 (hs = C/NH),
// so a head's q is a (T,hs) matrix with leading dimension 3C, and the
// heads of one image are one strided batch (stride hs). preatt, att,
// scratch (B,NH,T,T); out, dout (B,T,C).
//   preatt = q k^T / sqrt(hs) (one batched GEMM per image)
//   att    = causal softmax of each row (one block per row, all rows at
//            once); entries above the diagonal are 0 in both
//   out_h  = att v (one batched GEMM per image)
// backward: datt = dout_h v^T; dv += att^T dout_h; dpre = att (datt -
// <att, datt>) on the causal part (in place in scratch); dq += scale dpre
// k; dk += scale dpre^T q.

namespace {

// row r of the (B*NH*T) rows of T values: t = r % T
__global__ void MT_T(causal_softmax_k)(REAL *preatt, REAL *att, int T) {
  const int64_t r = blockIdx.x;
  const int t = (int)(r % T);
  REAL *pr = preatt + r * T, *ar = att + r * T;
  REAL mx = (REAL)-INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) mx = fmax(mx, pr[j]);
  mx = mtc::block_max(mx);
  REAL sum = (REAL)0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const REAL e = MT_EXP(pr[j] - mx);
    ar[j] = e;
    sum += e;
  }
  sum = mtc::block_sum(sum);
  const REAL inv = (REAL)1 / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    if (j <= t) {
      ar[j] *= inv;
    } else {
      pr[j] = (REAL)0;
      ar[j] = (REAL)0;
    }
  }
}

// in place: d = att (d - <att, d>) over j <= t, 0 above
__global__ void MT_T(causal_softmax_bwd_k)(REAL *datt, const REAL *att, int T) {
  const int64_t r = blockIdx.x;
  const int t = (int)(r % T);
  const REAL *ar = att + r * T;
  REAL *dr = datt + r * T;
  REAL dot = (REAL)0;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) dot += ar[j] * dr[j];
  dot = mtc::block_sum(dot);
  for (int j = threadIdx.x; j < T; j += blockDim.x) dr[j] = j <= t ? ar[j] * (dr[j] - dot) : (REAL)0;
}

} // namespace

int MT_T(mt_cuda_attention_forward)(REAL *out, REAL *preatt, REAL *att, const REAL *inp, int B,
                                    int T, int C, int NH, mt_cuda_ctx *cx) {
  MT_CUDA_TRY(attention_check(B, T, C, NH));
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T, rows = (int64_t)B * NH * T;
  const REAL scale = (REAL)1 / MT_SQRT((REAL)hs);
  for (int b = 0; b < B; b++) {
    const REAL *q = inp + (int64_t)b * T * C3, *k = q + C;
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('N', 'T', T, T, hs, scale, q, C3, hs, k, C3, hs,
                                            (REAL)0, preatt + (int64_t)b * NH * TT, T, TT, NH, cx));
  }
  MT_T(causal_softmax_k)<<<(unsigned)rows, mtc::row_threads(T), 0, cx->stream>>>(preatt, att, T);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  for (int b = 0; b < B; b++) {
    const REAL *v = inp + (int64_t)b * T * C3 + 2 * C;
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('N', 'N', T, hs, T, (REAL)1, att + (int64_t)b * NH * TT, T, TT,
                                            v, C3, hs, (REAL)0, out + (int64_t)b * T * C, C, hs,
                                            NH, cx));
  }
  return 0;
}

int MT_T(mt_cuda_attention_backward)(REAL *dinp, REAL *scratch, const REAL *dout,
                                     const REAL *inp, const REAL *att, int B, int T, int C,
                                     int NH, mt_cuda_ctx *cx) {
  MT_CUDA_TRY(attention_check(B, T, C, NH));
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T, rows = (int64_t)B * NH * T;
  const REAL scale = (REAL)1 / MT_SQRT((REAL)hs);
  for (int b = 0; b < B; b++) {
    const int64_t off = (int64_t)b * T * C3;
    const REAL *v = inp + off + 2 * C, *d = dout + (int64_t)b * T * C, *a = att + (int64_t)b * NH * TT;
    REAL *da = scratch + (int64_t)b * NH * TT, *dv = dinp + off + 2 * C;
    /* datt = dout_h v^T; dv += att^T dout_h */
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('N', 'T', T, T, hs, (REAL)1, d, C, hs, v, C3, hs,
                                            (REAL)0, da, T, TT, NH, cx));
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('T', 'N', T, hs, T, (REAL)1, a, T, TT, d, C, hs,
                                            (REAL)1, dv, C3, hs, NH, cx));
  }
  MT_T(causal_softmax_bwd_k)<<<(unsigned)rows, mtc::row_threads(T), 0, cx->stream>>>(scratch, att,
                                                                                     T);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  for (int b = 0; b < B; b++) {
    const int64_t off = (int64_t)b * T * C3;
    const REAL *q = inp + off, *k = q + C, *da = scratch + (int64_t)b * NH * TT;
    REAL *dq = dinp + off, *dk = dq + C;
    /* pre = scale q k^T: dq += scale dpre k; dk += scale dpre^T q */
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('N', 'N', T, hs, T, scale, da, T, TT, k, C3, hs,
                                            (REAL)1, dq, C3, hs, NH, cx));
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('T', 'N', T, hs, T, scale, da, T, TT, q, C3, hs,
                                            (REAL)1, dk, C3, hs, NH, cx));
  }
  return 0;
}
