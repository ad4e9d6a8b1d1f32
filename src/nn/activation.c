/* Element-wise activations. */
#include "nn/nn.h"

void mt_relu_forward(float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 262144)
  for (int64_t i = 0; i < n; i++) out[i] = inp[i] < 0.0f ? 0.0f : inp[i]; /* NaN passes, as in PyTorch */
}

void mt_relu_backward(float *dinp, const float *dout, const float *out, int64_t n) {
  if (dinp == dout) {
#pragma omp parallel for simd schedule(static) if (n > 262144)
    for (int64_t i = 0; i < n; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
  } else {
#pragma omp parallel for simd schedule(static) if (n > 262144)
    for (int64_t i = 0; i < n; i++) dinp[i] += out[i] > 0.0f ? dout[i] : 0.0f;
  }
}
