/* Norms and clipping (by global norm, by value) of flat gradient buffers; a
 * template for REAL = float and double (clip.c). */

double MT_T(mt_l2_norm)(const REAL *g, size_t n) {
  double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (parallel : n > 262144)
  for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
  return sqrt(s);
}

double MT_T(mt_clip_grad_norm)(REAL *g, size_t n, double max_norm) {
  return MT_T(mt_clip_grad_norm_given)(g, n, MT_T(mt_l2_norm)(g, n), max_norm);
}

double MT_T(mt_clip_grad_norm_given)(REAL *g, size_t n, double norm, double max_norm) {
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const REAL c = (REAL)coef;
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
    for (size_t i = 0; i < n; i++) g[i] *= c;
  }
  return norm;
}

int MT_T(mt_clip_grad_value)(REAL *g, size_t n, double clip_value) {
  MT_CHECK(clip_value > 0.0, MT_ERR_ARG, "clip_grad_value %g: must be > 0", clip_value);
  const REAL hi = (REAL)clip_value, lo = -hi;
  /* comparisons, not fminf/fmaxf: a NaN gradient must stay NaN (clamp_) */
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
  for (size_t i = 0; i < n; i++) {
    const REAL x = g[i];
    g[i] = x < lo ? lo : (x > hi ? hi : x);
  }
  return 0;
}
