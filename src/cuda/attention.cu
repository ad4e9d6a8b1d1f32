// Causal multi-head self-attention on the GPU (only built with CUDA), in
// the CPU's llm.c layout (preatt and att kept for the backward), with the
// per-head products as cuBLAS strided-batched GEMMs straight on the
// interleaved q, k, v (no copies; looped over the smaller of images and
// heads, batched over the larger), for float and double (the template
// attention_t.cuh). Like the CPU it forms the full (T,T) score matrices
// and zeroes their upper half: twice the causal work in the products, in
// exchange for plain GEMMs. The products are in the buffers' type (a
// low-precision context does not apply here).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace {

int attention_check(int B, int T, int C, int NH) {
  MT_CUDA_ARG(B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0,
              "attention: C=%d must be a positive multiple of NH=%d (B=%d, T=%d)", C, NH, B, T);
  MT_CUDA_ARG((int64_t)B * NH * T <= INT32_MAX, "attention: %lld rows beyond int",
              (long long)B * NH * T);
  return 0;
}

} // namespace

#define MT_TEMPLATE "cuda/attention_t.cuh"
#include "core/real_t.h"
