/* Fully connected layer, PyTorch layout (w is (OC, IC)), a template for
 * REAL = float and double (linear.c). */

int MT_T(mt_linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                            int IC, int OC, const mt_nn_policy *pol) {
  // inp is (B,IC), w is (OC,IC), b is (OC), out is (B,OC)
  MT_CALL(MT_T(mt_gemm)('N', 'T', B, OC, IC, (REAL)1, inp, IC, w, IC, (REAL)0, out, OC, pol));
  if (b) {
#pragma omp parallel for schedule(static) if ((long)B * OC > 65536)
    for (int i = 0; i < B; i++) {
      REAL *o = out + (size_t)i * OC;
#pragma omp simd
      for (int j = 0; j < OC; j++) o[j] += b[j];
    }
#if !MT_F64
    /* O2 (nn/lowp.h): the output is a low-precision tensor, bias included */
    if (mt_nn_rounds(pol)) mt_round_to(pol->compute, out, (size_t)B * OC);
#endif
  }
  return 0;
}

int MT_T(mt_linear_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout, const REAL *inp,
                             const REAL *w, int B, int IC, int OC, const mt_nn_policy *pol) {
  // dout is (B,OC); dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp; db += sum_b dout
  if (dinp)
    MT_CALL(MT_T(mt_gemm)('N', 'N', B, IC, OC, (REAL)1, dout, OC, w, IC, (REAL)1, dinp, IC, pol));
  MT_CALL(MT_T(mt_gemm)('T', 'N', OC, IC, B, (REAL)1, dout, OC, inp, IC, (REAL)1, dw, IC, pol));
  if (db) {
    for (int i = 0; i < B; i++) {
      const REAL *d = dout + (size_t)i * OC;
#pragma omp simd
      for (int j = 0; j < OC; j++) db[j] += d[j];
    }
  }
  return 0;
}
