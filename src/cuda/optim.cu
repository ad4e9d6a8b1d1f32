// Optimizer kernels on the GPU (only built with CUDA): SGD and AdamW over
// the flat buffers with the parameter table's layout, the global L2 norm
// in two deterministic passes, clipping by norm and by value; for float
// and double (the template optim_t.cuh). The steps' checks and scalars
// are in optim_step.c (C: the CPU's hyper-parameter structs and checks).
#include "cuda/bits.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace {

// pass 2 of the L2 norm: one block adds the nb partial sums in a fixed
// order (thread t takes t, t + 1024, ..., then the tree) and takes the root
__global__ void sum_sqrt_k(double *norm, const double *part, int nb) {
  double s = 0.0;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];
  s = mtc::block_sum(s);
  if (threadIdx.x == 0) *norm = sqrt(s);
}

} // namespace

#define MT_TEMPLATE "cuda/optim_t.cuh"
#include "core/real_t.h"
