/* Element-wise activations, a template for REAL = float and double
 * (activation.c). Branch-free loops so they vectorize; threads only for
 * large arrays (small ones are cheaper on one core). */

void MT_T(mt_relu_forward)(REAL *out, const REAL *inp, int64_t n) {
  // NaN passes through (inp < 0 is false for NaN), as in PyTorch
#pragma omp parallel for simd schedule(static) if (parallel : n > MT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = inp[i] < (REAL)0 ? (REAL)0 : inp[i];
}

void MT_T(mt_relu_backward)(REAL *dinp, const REAL *dout, const REAL *out, int64_t n) {
  if (dinp == dout) {
#pragma omp parallel for simd schedule(static) if (parallel : n > MT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
      REAL g = dout[i];
      dinp[i] = out[i] > (REAL)0 ? g : (REAL)0;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (parallel : n > MT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
      REAL g = dout[i];
      dinp[i] += out[i] > (REAL)0 ? g : (REAL)0;
    }
  }
}
