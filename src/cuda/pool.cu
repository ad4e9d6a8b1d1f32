// 2-d max and average pooling and global average pooling on the GPU (only
// built with CUDA), NCHW, floor mode, PyTorch's semantics as on the CPU,
// for float and double (the template pool_t.cuh).
#include "cuda/bits.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#define MT_TEMPLATE "cuda/pool_t.cuh"
#include "core/real_t.h"
