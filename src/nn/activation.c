/* Element-wise activations. Branch-free loops so they vectorize; threads
 * only for large arrays (small ones are cheaper on one core). */
#include "nn/nn.h"

#define MT_PAR_MIN 1048576

void mt_relu_forward(float *out, const float *inp, int64_t n) {
  // NaN passes through (inp < 0 is false for NaN), as in PyTorch
#pragma omp parallel for simd schedule(static) if (n > MT_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = inp[i] < 0.0f ? 0.0f : inp[i];
}

void mt_relu_backward(float *dinp, const float *dout, const float *out, int64_t n) {
  if (dinp == dout) {
#pragma omp parallel for simd schedule(static) if (n > MT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
      float g = dout[i];
      dinp[i] = out[i] > 0.0f ? g : 0.0f;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n > MT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
      float g = dout[i];
      dinp[i] += out[i] > 0.0f ? g : 0.0f;
    }
  }
}
