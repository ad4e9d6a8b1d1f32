/* CUDA kernels against their CPU versions (built only with CUDA), part 2:
 * the layers of the CNN and GPT models, float and double
 * (cuda_layers_t.h): LayerNorm and BatchNorm2d (training and eval, with
 * and without affine parameters; outputs, mean, rstd, running statistics,
 * every gradient), max and average pooling (overlapping windows, padding,
 * ties and NaNs; max-pool's output, argmax and gradient bit for bit),
 * global average pooling, conv2d (stride, padding, dilation, groups,
 * depthwise, 1x1, kernel the size of the input, a partial batch, one image
 * per column chunk; against oneDNN for float and the direct loops for
 * double), the embedding (forward and both gradients bit for bit, a bad
 * token) and causal attention (out, preatt, att, dq/dk/dv).
 * Tolerances relative to the largest CPU value: fp32 1e-5 (GEMM-based,
 * normalised), 1e-6 (statistics, averages); fp64 1e-12 to 1e-15; exact
 * where the GPU adds the CPU's values in the CPU's order.
 * Without a CUDA device: one line "skipped: no CUDA device", exit 77. */
#include "cudatest.h"
#include "nn/nn.h"

#define MT_TEMPLATE "tests/cuda_layers_t.h"
#include "core/real_t.h"

int main(void) {
  cu_start("test_cuda_layers");
  test_layers();
  test_layers_f64();
  return cu_finish("test_cuda_layers");
}
