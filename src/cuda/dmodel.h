/* Built-in models on a CUDA device (only built with CUDA): -device cuda.
 *
 * A device model is the twin of a CPU model (src/models/): it is made from
 * the CPU model of the same run, keeps that model's parameter table (the
 * same tensors at the same offsets of the flat buffers, so checkpoints and
 * saved models are the CPU's files) and computes forward and backward with
 * the kernels of cuda/kernels.h on device buffers, in float. It reads its
 * sizes from the table's shapes and the rest (heads, GELU form, dropout)
 * from the CPU model's hyper-parameters (mt_*_hparams_of, models/models.h),
 * not from the run's configuration.
 *
 * Nothing waits for the GPU: every call queues work on the context's
 * stream; the loss sum and the hits of a forward go to device scalars that
 * the trainer reads once per step. */
#ifndef MT_CUDA_DMODEL_H
#define MT_CUDA_DMODEL_H

#include "core/core.h"
#include "cuda/kernels.h"
#include "models/models.h"

/* A batch in device memory: the mt_batch of the CPU with device arrays. */
typedef struct {
  int n;
  const float *x;
  const int32_t *labels;
  const int32_t *tokens;
  const float *targets;
  int64_t x_len, tokens_len, targets_len;
  const int64_t *ids; /* device, or NULL (row numbers)                     */
  int train;
  uint64_t key;
} mt_dbatch;

/* What a forward adds up, in device memory. */
typedef struct {
  double *loss_sum; /* overwritten: the batch's loss sum (a class model's
                       per-sample losses; gpt: per-token, divided by T on
                       the host, as the CPU model does)                   */
  int64_t *correct; /* added to: top-1 hits (gpt: per token)              */
  int64_t *count;   /* gpt: the tokens counted (overwritten); may be NULL */
  float *losses;    /* NULL, or per-sample losses (B; gpt: per token, B*T) */
} mt_dsums;

typedef struct mt_dmodel mt_dmodel;

/* Units in buffers of their own (fsdp full_shard on the device): unit u
 * holds the layout's elements [ulo[u], ...) at slot[0][u] (parameters,
 * gathered) and slot[1][u] (its gradient); the slots change from one use
 * of a unit to the next. */
typedef struct {
  const int *unit_of; /* the model's unit (mt_param.unit) -> unit         */
  const size_t *ulo;
  float **slot[2];
} mt_dunits;

typedef struct {
  const char *name; /* the CPU model's -model name                        */
  int (*setup)(mt_dmodel *d);
  int (*forward)(mt_dmodel *d, const float *params, const mt_dbatch *b, const mt_dsums *s);
  /* ADDS the gradient of scale * sum of the last forward's losses */
  int (*backward)(mt_dmodel *d, const float *params, float *grads, float scale, int B);
  void (*destroy)(mt_dmodel *d);
  /* divisor of the loss sum and hits into per-sample ones (gpt: T) */
  int (*per_sample)(const mt_dmodel *d);
  /* the last forward's outputs before the softmax, (B, *len) on the
   * device, or NULL for a model without per-sample ones (gpt) */
  const float *(*outputs)(const mt_dmodel *d, int *len);
} mt_dmodel_ops;

struct mt_dmodel {
  const mt_dmodel_ops *ops;
  const mt_model *host;   /* the CPU model: table, spec, buffers          */
  mt_cuda_ctx *cx;
  int max_batch;
  int losses_per_sample; /* values of mt_dsums.losses per sample (setup)  */
  float *buf;            /* device: the model buffers (host->buffers: batch
                            norm's running statistics), set by the caller
                            after create; NULL for a model without        */
  /* as mt_model.unit_use and unit_done: the forward and the backward
   * announce each unit before its parameters are read (pass 0: forward,
   * 1: backward; may fail), the backward reports each finished unit */
  int (*unit_use)(void *ctx, int unit, int pass);
  void (*unit_done)(void *ctx, int unit);
  void *unit_ctx;
  /* NULL, or (fsdp full_shard and hybrid_shard: gpu/gpu_fsdp.c) where
   * each unit's parameters and gradient are: then the params and grads
   * arguments of forward and backward are not read */
  const mt_dunits *units;
  void *data;
};

static inline int mt_dmodel_unit_use(const mt_dmodel *d, int unit, int pass) {
  return d->unit_use ? d->unit_use(d->unit_ctx, unit, pass) : 0;
}
static inline void mt_dmodel_unit_done(const mt_dmodel *d, int unit) {
  if (d->unit_done) d->unit_done(d->unit_ctx, unit);
}

/* Tensor k of the layout: at base (params or grads) + its offset, or with
 * units in its unit's buffer (grad: the gradient's). */
static inline float *mt_dmodel_at(const mt_dmodel *d, const float *base, int grad, int k) {
  const mt_param *p = &d->host->params.p[k];
  if (!d->units) return (float *)base + p->offset;
  const int u = d->units->unit_of[p->unit];
  return d->units->slot[grad][u] + (p->offset - d->units->ulo[u]);
}

/* The device twin of a built-in CPU model's ops (NULL for any other model:
 * the caller says so, naming -device). */
const mt_dmodel_ops *mt_dmodel_find(const mt_model_ops *cpu);
/* Makes the twin of host for batches of up to max_batch samples on cx (the
 * host model's own activations may be smaller: they are not used). */
int mt_dmodel_create(mt_dmodel *d, const mt_model *host, int max_batch, mt_cuda_ctx *cx);
void mt_dmodel_destroy(mt_dmodel *d);

extern const mt_dmodel_ops mt_dmodel_mlp;
extern const mt_dmodel_ops mt_dmodel_gpt;
extern const mt_dmodel_ops mt_dmodel_cnn;

/* Device memory of n bytes, zeroed (stream-ordered on cx), into *p. */
int mt_dmodel_alloc(mt_dmodel *d, void *p, size_t bytes);

#endif
