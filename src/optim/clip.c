/* Norms and clipping (by global norm, by value) of flat gradient buffers. */
#include "optim/optim.h"

#include <math.h>

double mt_l2_norm(const float *g, size_t n) {
  double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n > 262144)
  for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
  return sqrt(s);
}

double mt_clip_grad_norm(float *g, size_t n, double max_norm) {
  return mt_clip_grad_norm_given(g, n, mt_l2_norm(g, n), max_norm);
}

double mt_clip_grad_norm_given(float *g, size_t n, double norm, double max_norm) {
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = (float)coef;
#pragma omp parallel for simd schedule(static) if (n > 262144)
    for (size_t i = 0; i < n; i++) g[i] *= c;
  }
  return norm;
}

int mt_clip_grad_value(float *g, size_t n, double clip_value) {
  MT_CHECK(clip_value > 0.0, MT_ERR_ARG, "clip_grad_value %g: must be > 0", clip_value);
  const float hi = (float)clip_value, lo = -hi;
  /* comparisons, not fminf/fmaxf: a NaN gradient must stay NaN (clamp_) */
#pragma omp parallel for simd schedule(static) if (n > 262144)
  for (size_t i = 0; i < n; i++) {
    const float x = g[i];
    g[i] = x < lo ? lo : (x > hi ? hi : x);
  }
  return 0;
}
