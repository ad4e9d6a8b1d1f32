// Causal multi-head self-attention on the GPU, llm.c's layout, a template
// for REAL = float and double (attention.cu). inp, dinp (B,T,3C): q, k, v
// side by side, head h of each at columns h*hs .. h*hs+hs-1 (hs = C/NH),
// so a head's q is a (T,hs) matrix with leading dimension 3C; the heads
// of one image are one strided batch (stride hs), one head's images
// another (stride 3TC). preatt, att, scratch (B,NH,T,T); out, dout
// (B,T,C). Each product is looped over the smaller of B and NH and
// batched over the larger (gemm_bh).
//   preatt = q k^T / sqrt(hs)
//   att    = causal softmax of each row (one block per row, all rows at
//            once); entries above the diagonal are 0 in both
//   out_h  = att v
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

// The (image, head) pairs are a 2-d batch, and cuBLAS's strided batch has
// one stride: one call per value of the smaller of B and NH, each batched
// over the larger (per image alone, a batch of 128 short windows made 9216
// GEMM calls a step at 12 layers, and launches took most of it). Operand X
// of image b, head h is at X + b * x_img + h * x_head.
typedef struct {
  int64_t a_img, a_head, b_img, b_head, c_img, c_head;
} MT_T(bh_strides);

static int MT_T(gemm_bh)(char ta, char tb, int64_t M, int64_t N, int64_t K, REAL alpha,
                         const REAL *A, int64_t lda, const REAL *Bm, int64_t ldb, REAL beta,
                         REAL *Cm, int64_t ldc, MT_T(bh_strides) st, int B, int NH,
                         mt_cuda_ctx *cx) {
  const int per_image = B <= NH;
  const int outer = per_image ? B : NH, inner = per_image ? NH : B;
  for (int o = 0; o < outer; o++) {
    const int64_t ao = o * (per_image ? st.a_img : st.a_head),
                  bo = o * (per_image ? st.b_img : st.b_head),
                  co = o * (per_image ? st.c_img : st.c_head);
    MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)(ta, tb, M, N, K, alpha, A + ao, lda,
                                            per_image ? st.a_head : st.a_img, Bm + bo, ldb,
                                            per_image ? st.b_head : st.b_img, beta, Cm + co, ldc,
                                            per_image ? st.c_head : st.c_img, inner, cx));
  }
  return 0;
}

int MT_T(mt_cuda_attention_forward)(REAL *out, REAL *preatt, REAL *att, const REAL *inp, int B,
                                    int T, int C, int NH, mt_cuda_ctx *cx) {
  MT_CUDA_TRY(attention_check(B, T, C, NH));
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T, rows = (int64_t)B * NH * T;
  const int64_t qkv_img = (int64_t)T * C3, att_img = (int64_t)NH * TT, out_img = (int64_t)T * C;
  const REAL scale = (REAL)1 / MT_SQRT((REAL)hs);
  const REAL *q = inp, *k = inp + C, *v = inp + 2 * C;
  /* preatt = scale q k^T */
  MT_CUDA_TRY(MT_T(gemm_bh)('N', 'T', T, T, hs, scale, q, C3, k, C3, (REAL)0, preatt, T,
                            (MT_T(bh_strides)){qkv_img, hs, qkv_img, hs, att_img, TT}, B, NH, cx));
  MT_T(causal_softmax_k)<<<(unsigned)rows, mtc::row_threads(T), 0, cx->stream>>>(preatt, att, T);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  /* out_h = att v */
  MT_CUDA_TRY(MT_T(gemm_bh)('N', 'N', T, hs, T, (REAL)1, att, T, v, C3, (REAL)0, out, C,
                            (MT_T(bh_strides)){att_img, TT, qkv_img, hs, out_img, hs}, B, NH, cx));
  return 0;
}

int MT_T(mt_cuda_attention_backward)(REAL *dinp, REAL *scratch, const REAL *dout,
                                     const REAL *inp, const REAL *att, int B, int T, int C,
                                     int NH, mt_cuda_ctx *cx) {
  MT_CUDA_TRY(attention_check(B, T, C, NH));
  const int hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T, rows = (int64_t)B * NH * T;
  const int64_t qkv_img = (int64_t)T * C3, att_img = (int64_t)NH * TT, out_img = (int64_t)T * C;
  const REAL scale = (REAL)1 / MT_SQRT((REAL)hs);
  const REAL *q = inp, *k = inp + C, *v = inp + 2 * C;
  REAL *dq = dinp, *dk = dinp + C, *dv = dinp + 2 * C;
  /* datt = dout_h v^T (into scratch); dv += att^T dout_h */
  MT_CUDA_TRY(MT_T(gemm_bh)('N', 'T', T, T, hs, (REAL)1, dout, C, v, C3, (REAL)0, scratch, T,
                            (MT_T(bh_strides)){out_img, hs, qkv_img, hs, att_img, TT}, B, NH, cx));
  MT_CUDA_TRY(MT_T(gemm_bh)('T', 'N', T, hs, T, (REAL)1, att, T, dout, C, (REAL)1, dv, C3,
                            (MT_T(bh_strides)){att_img, TT, out_img, hs, qkv_img, hs}, B, NH, cx));
  MT_T(causal_softmax_bwd_k)<<<(unsigned)rows, mtc::row_threads(T), 0, cx->stream>>>(scratch, att,
                                                                                     T);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  /* pre = scale q k^T: dq += scale dpre k; dk += scale dpre^T q */
  MT_CUDA_TRY(MT_T(gemm_bh)('N', 'N', T, hs, T, scale, scratch, T, k, C3, (REAL)1, dq, C3,
                            (MT_T(bh_strides)){att_img, TT, qkv_img, hs, qkv_img, hs}, B, NH, cx));
  MT_CUDA_TRY(MT_T(gemm_bh)('T', 'N', T, hs, T, scale, scratch, T, q, C3, (REAL)1, dk, C3,
                            (MT_T(bh_strides)){att_img, TT, qkv_img, hs, qkv_img, hs}, B, NH, cx));
  return 0;
}
