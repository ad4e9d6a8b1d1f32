/* The linear layer on the GPU, a template for REAL = float and double
 * (blas.c): mt_linear_forward / mt_linear_backward's GEMMs through
 * mt_cuda_gemm (so a low-precision context applies, as mt_gemm's policy
 * does on the CPU), the bias by a kernel or fused by cuBLASLt. */

int MT_T(mt_cuda_linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                                 int IC, int OC, mt_cuda_ctx *cx) {
  // inp is (B,IC), w is (OC,IC), b is (OC), out is (B,OC)
  MT_CHECK(B >= 0 && IC >= 0 && OC >= 0, MT_ERR_ARG, "linear: sizes B=%d IC=%d OC=%d", B, IC, OC);
  if (B == 0 || OC == 0) return 0;
#if !MT_F64
  if (b && cx->use_lt && IC > 0 && !(cx->prec != MT_PREC_FP32 && cx->round_outputs)) {
    const int rc = linear_forward_lt(out, inp, w, b, B, IC, OC, cx);
    if (rc != 1) return rc; /* done, or an error; 1: no algorithm, fall back */
  }
#endif
  MT_CALL(MT_T(mt_cuda_gemm)('N', 'T', B, OC, IC, (REAL)1, inp, IC, w, IC, (REAL)0, out, OC, cx));
  if (b) {
    MT_CALL(MT_T(mt_cuda_bias_add)(out, b, B, OC, cx->stream));
#if !MT_F64
    /* O2: the output is a low-precision tensor, bias included (as the CPU) */
    if (cx->prec != MT_PREC_FP32 && cx->round_outputs)
      MT_CALL(mt_cuda_round_to(cx->prec, out, (size_t)B * OC, cx->stream));
#endif
  }
  return 0;
}

int MT_T(mt_cuda_linear_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,
                                  const REAL *inp, const REAL *w, int B, int IC, int OC,
                                  mt_cuda_ctx *cx) {
  // dout is (B,OC); dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp; db += sum_b dout
  MT_CHECK(B >= 0 && IC >= 0 && OC >= 0, MT_ERR_ARG, "linear: sizes B=%d IC=%d OC=%d", B, IC, OC);
  if (dinp)
    MT_CALL(MT_T(mt_cuda_gemm)('N', 'N', B, IC, OC, (REAL)1, dout, OC, w, IC, (REAL)1, dinp, IC, cx));
  if (dw)
    MT_CALL(MT_T(mt_cuda_gemm)('T', 'N', OC, IC, B, (REAL)1, dout, OC, inp, IC, (REAL)1, dw, IC, cx));
  if (db) MT_CALL(MT_T(mt_cuda_sum_rows)(db, dout, B, OC, cx));
  return 0;
}
