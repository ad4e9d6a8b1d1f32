/* Fully connected layer, PyTorch layout (w is (OC, IC)), a template for
 * REAL = float and double (linear.c). */

int MT_T(mt_linear_forward_ex)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                               int IC, int OC, unsigned flags, const mt_nn_policy *pol) {
  // inp is (B,IC), w is (OC,IC), b is (OC), out is (B,OC)
  /* the bias carried by the GEMM (its epilogue where a kept oneDNN
   * primitive runs it: no pass over the output of its own; O2's rounding
   * of the product and of the sum included) */
  MT_CALL(MT_T(mt_gemm_bias)('N', 'T', B, OC, IC, (REAL)1, inp, IC, w, IC, (REAL)0, out, OC, b,
                             pol));
  if (!(flags & MT_LINEAR_RELU)) return 0;
  /* the ReLU in a pass over the output; NaN passes it (x < 0 is false), as
   * in PyTorch */
#pragma omp parallel for schedule(static) if ((long)B * OC > 65536)
  for (int i = 0; i < B; i++) {
    REAL *o = out + (size_t)i * OC;
#pragma omp simd
    for (int j = 0; j < OC; j++) o[j] = o[j] < (REAL)0 ? (REAL)0 : o[j];
  }
  return 0;
}

int MT_T(mt_linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                            int IC, int OC, const mt_nn_policy *pol) {
  return MT_T(mt_linear_forward_ex)(out, inp, w, b, B, IC, OC, 0, pol);
}

int MT_T(mt_linear_backward_ex)(REAL *dinp, REAL *dw, REAL *db, REAL *dout, const REAL *out,
                                const REAL *inp, const REAL *w, int B, int IC, int OC,
                                unsigned flags, const mt_nn_policy *pol) {
  // dout is (B,OC); dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp; db += sum_b dout
  const int relu = (flags & MT_LINEAR_RELU) != 0, set = (flags & MT_LINEAR_SET_GRADS) != 0;
  MT_CHECK(!relu || out, MT_ERR_ARG, "mt_linear_backward_ex: MT_LINEAR_RELU without the output");
  if (db && set)
    for (int j = 0; j < OC; j++) db[j] = 0; /* then summed in the same order as added */
  /* dout feeds both products: converted once under a low precision; under
   * bf16, when there is a pass over dout below, converted in it */
  uint16_t *hb = NULL;
#if !MT_F64
  mt_nn_holds *held = mt_nn_holds_local();
  const int held0 = held->n;
  mt_nn_policy with;
  if (dinp && (relu || db)) hb = mt_nn_hold_out(held, pol, dout, (size_t)B * OC);
#endif
  if (relu || db) {
    /* the ReLU's mask and the bias gradient in one pass over dout, a row at
     * a time within blocks of columns that the threads share (each db[j]
     * sums the rows in their order, as without the mask: the same bits at
     * any thread count), and dout's bf16 copy */
#pragma omp parallel for schedule(static) if ((long)B * OC > 65536)
    for (int j0 = 0; j0 < OC; j0 += 256) {
      const int j1 = OC - j0 > 256 ? j0 + 256 : OC;
      for (int i = 0; i < B; i++) {
        REAL *d = dout + (size_t)i * OC;
        if (relu) {
          const REAL *o = out + (size_t)i * OC;
#pragma omp simd
          for (int j = j0; j < j1; j++) d[j] = o[j] > (REAL)0 ? d[j] : (REAL)0;
        }
        if (db) {
#pragma omp simd
          for (int j = j0; j < j1; j++) db[j] += d[j];
        }
        if (hb) MT_T(mt_to_bf16)(hb + (size_t)i * OC + j0, d + j0, j1 - j0);
      }
    }
  }
#if !MT_F64
  if (dinp) {
    if (!hb) mt_nn_hold(held, pol, dout, (size_t)B * OC);
    pol = mt_nn_with_holds(pol, held, &with);
  }
#endif
  int e = 0;
  if (dinp)
    e = MT_T(mt_gemm)('N', 'N', B, IC, OC, (REAL)1, dout, OC, w, IC,
                      (flags & MT_LINEAR_SET_DINP) ? (REAL)0 : (REAL)1, dinp, IC, pol);
  if (!e)
    e = MT_T(mt_gemm)('T', 'N', OC, IC, B, (REAL)1, dout, OC, inp, IC, set ? (REAL)0 : (REAL)1,
                      dw, IC, pol);
#if !MT_F64
  mt_nn_holds_clear(held, held0);
#endif
  return e;
}

int MT_T(mt_linear_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout, const REAL *inp,
                             const REAL *w, int B, int IC, int OC, const mt_nn_policy *pol) {
  /* without MT_LINEAR_RELU dout is only read */
  return MT_T(mt_linear_backward_ex)(dinp, dw, db, (REAL *)dout, NULL, inp, w, B, IC, OC, 0, pol);
}
