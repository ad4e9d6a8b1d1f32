// Element-wise layers on the GPU (only built with CUDA): ReLU, GELU, the
// residual add, dropout with the CPU's counter-based generator, the bias
// of a linear layer and its gradient, scaling; for float and double (the
// template elementwise_t.cuh). Errors go through ops.c (kernels.h), so
// nvcc needs neither MPI nor the error machinery.
#include "cuda/bits.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#define MT_TEMPLATE "cuda/elementwise_t.cuh"
#include "core/real_t.h"
