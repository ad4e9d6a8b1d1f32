/* The device models' table and their common calls (only built with CUDA). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/dmodel.h"
#include "models/models.h"

#include <string.h>

const mt_dmodel_ops *mt_dmodel_find(const mt_model_ops *cpu) {
  /* the twins of the built-in models, not of a model registered under
   * their name */
  static const mt_model_ops *const host[] = {&mt_mlp_ops, &mt_cnn_ops, &mt_gpt_ops};
  static const mt_dmodel_ops *const dev[] = {&mt_dmodel_mlp, &mt_dmodel_cnn, &mt_dmodel_gpt};
  for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
    if (cpu == host[i]) return dev[i];
  return NULL;
}

int mt_dmodel_alloc(mt_dmodel *d, void *p, size_t bytes) {
  void **pp = p;
  *pp = NULL;
  cudaError_t e = cudaMalloc(pp, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *pp = NULL;
    return MT_ERR(MT_ERR_MEM, "model %s on the device: cannot allocate %.1f MiB of device memory: "
                  "%s (a smaller -micro_batch_size needs less)",
                  d->ops->name, (double)bytes / 1048576.0, cudaGetErrorString(e));
  }
  MT_CUDA_RT(cudaMemsetAsync(*pp, 0, bytes ? bytes : 1, d->cx->stream));
  return 0;
}

int mt_dmodel_create(mt_dmodel *d, const mt_model *host, int max_batch, mt_cuda_ctx *cx) {
  memset(d, 0, sizeof(*d));
  d->ops = mt_dmodel_find(host->ops);
  MT_CHECK(d->ops, MT_ERR_OPTION, "option -device cuda: model %s has no CUDA version (the built-in "
           "mlp, cnn and gpt have one; -device cpu runs it)", host->ops->name);
  d->host = host;
  d->cx = cx;
  d->max_batch = max_batch;
  int err = d->ops->setup(d);
  if (err) mt_dmodel_destroy(d);
  return err;
}

void mt_dmodel_destroy(mt_dmodel *d) {
  if (d->ops && d->data) {
    (void)cudaStreamSynchronize(d->cx->stream); /* nothing queued still uses them */
    d->ops->destroy(d);
  }
  memset(d, 0, sizeof(*d));
}
