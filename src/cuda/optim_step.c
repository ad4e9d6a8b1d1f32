/* Optimizer steps on the GPU, the C side (only built with CUDA): the
 * parameter table on the device, and the SGD and AdamW steps for float and
 * double (the template optim_step_t.h) with the CPU's checks and scalars;
 * the kernels are in optim.cu. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/cuda_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int mt_cuda_table_create(mt_cuda_table *dt, const mt_param_table *t) {
  memset(dt, 0, sizeof(*dt));
  MT_CHECK(t->n >= 1, MT_ERR_ARG, "an empty parameter table");
  mt_cuda_seg *h = calloc((size_t)t->n, sizeof(*h));
  MT_CHECK(h, MT_ERR_MEM, "parameter table of %d tensors", t->n);
  int rc = 0;
  for (int k = 0; k < t->n && !rc; k++) {
    h[k] = (mt_cuda_seg){.offset = t->p[k].offset, .numel = t->p[k].numel, .decay = t->p[k].decay};
    if (k && t->p[k].offset < t->p[k - 1].offset + t->p[k - 1].numel)
      rc = MT_ERR(MT_ERR_ARG, "parameter table: tensor %s overlaps or precedes %s", t->p[k].name,
                  t->p[k - 1].name);
  }
  cudaError_t e = cudaSuccess;
  if (!rc) e = cudaMalloc((void **)&dt->seg, (size_t)t->n * sizeof(*h));
  if (!rc && e == cudaSuccess)
    e = cudaMemcpy(dt->seg, h, (size_t)t->n * sizeof(*h), cudaMemcpyHostToDevice);
  free(h);
  if (!rc && e != cudaSuccess)
    rc = MT_ERR(MT_ERR_LIB, "parameter table on the GPU: %s", cudaGetErrorString(e));
  if (rc) {
    mt_cuda_table_destroy(dt);
    return rc;
  }
  dt->n = t->n;
  dt->total = t->total;
  return 0;
}

void mt_cuda_table_destroy(mt_cuda_table *dt) {
  if (!dt) return;
  cudaFree(dt->seg);
  memset(dt, 0, sizeof(*dt));
}

#define MT_TEMPLATE "cuda/optim_step_t.h"
#include "core/real_t.h"
