/* Optimizer steps on the GPU (only built with CUDA): torch.optim.SGD and
 * torch.optim.AdamW over flat device buffers with the layout of the
 * parameter table, as optim/optim.h's mt_sgd_step and mt_adamw_step do on
 * the CPU (same hyper-parameter structs, same checks, same scalars formed
 * in double and rounded to the buffers' type once, same per-element
 * expressions). The norms and clipping are in cuda/kernels.h. */
#ifndef MT_CUDA_OPTIM_H
#define MT_CUDA_OPTIM_H

#include "cuda/kernels.h"
#include "optim/optim.h"

/* The table's tensors (offset, numel, decay) copied to the device: made
 * once (it allocates and waits for the copy), used by every step.
 * MT_ERR_ARG unless the offsets increase. Destroy accepts a zeroed or
 * destroyed table. */
int mt_cuda_table_create(mt_cuda_table *dt, const mt_param_table *t);
void mt_cuda_table_destroy(mt_cuda_table *dt);

#define MT_TEMPLATE "cuda/cuda_optim_decl_t.h"
#include "core/real_t.h"

#endif
