// LayerNorm and BatchNorm2d on the GPU (only built with CUDA), forward and
// backward, training and eval, for float and double (the template
// norm_t.cuh).
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#define MT_TEMPLATE "cuda/norm_t.cuh"
#include "core/real_t.h"
