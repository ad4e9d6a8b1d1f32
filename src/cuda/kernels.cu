// Elementwise CUDA kernels (only built with CUDA): the same formulas as
// src/nn/elementwise.c, float math. Launchers only: they return the launch's
// cudaError_t, and src/cuda/ops.c turns it into an mpitrain error (so that
// nvcc needs neither MPI nor the error machinery).
#include "cuda/kernels.h"

namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kGeluBeta = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluKappa = 0.044715f;

__global__ void gelu_forward_kernel(float *out, const float *inp, int64_t n, int kind) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float x = inp[i];
    if (kind == 1)
      out[i] = 0.5f * x * (1.0f + tanhf(kGeluBeta * (x + kGeluKappa * x * x * x)));
    else
      out[i] = 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  }
}

__global__ void gelu_backward_kernel(float *dinp, const float *dout, const float *inp, int64_t n,
                                     int kind) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float x = inp[i];
    float d;
    if (kind == 1) {
      const float th = tanhf(kGeluBeta * (x + kGeluKappa * x * x * x));
      const float dinner = kGeluBeta * (1.0f + 3.0f * kGeluKappa * x * x);
      d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dinner;
    } else {
      const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
      const float pdf = 0.39894228040143267794f * expf(-0.5f * x * x);
      d = cdf + x * pdf;
    }
    dinp[i] += dout[i] * d;
  }
}

unsigned grid_for(int64_t n, unsigned block) {
  int64_t g = (n + block - 1) / block;
  if (g > 65535 * 8) g = 65535 * 8;
  return g > 0 ? (unsigned)g : 1u;
}

}  // namespace

extern "C" int mt_cuda_launch_gelu_forward(float *out, const float *inp, int64_t n, int kind,
                                           cudaStream_t s) {
  if (n <= 0) return 0;
  const unsigned block = 256;
  gelu_forward_kernel<<<grid_for(n, block), block, 0, s>>>(out, inp, n, kind);
  return (int)cudaGetLastError();
}

extern "C" int mt_cuda_launch_gelu_backward(float *dinp, const float *dout, const float *inp,
                                            int64_t n, int kind, cudaStream_t s) {
  if (n <= 0) return 0;
  const unsigned block = 256;
  gelu_backward_kernel<<<grid_for(n, block), block, 0, s>>>(dinp, dout, inp, n, kind);
  return (int)cudaGetLastError();
}
