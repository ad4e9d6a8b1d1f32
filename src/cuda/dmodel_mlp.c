/* The mlp model on a CUDA device: models/mlp_t.h's forward and backward
 * with the kernels of cuda/kernels.h, in float. The sizes come from the
 * CPU model's table (layers.{2l}.weight is (dim[l+1], dim[l])). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/dmodel.h"

#include <string.h>

typedef struct {
  int nl;
  int dim[MT_MAX_HIDDEN + 2];
  float *act[MT_MAX_HIDDEN + 1], *dact[MT_MAX_HIDDEN + 1];
  uint8_t *mask[MT_MAX_HIDDEN + 1];
  float *probs;
  float p;
  int regression;
  const float *x, *target;
  const int32_t *y;
  int B, dropped;
} dmlp;

static int mlp_setup(mt_dmodel *d) {
  const mt_model *m = d->host;
  const mt_mlp_hparams *hp = mt_mlp_hparams_of(m);
  dmlp *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "mlp on the device"));
  d->data = s;
  MT_CHECK(m->params.n >= 2 && m->params.n % 2 == 0 && m->params.n / 2 <= MT_MAX_HIDDEN + 1,
           MT_ERR_STATE, "mlp on the device: %d tensors", m->params.n);
  MT_CHECK(hp, MT_ERR_STATE, "mlp on the device: the CPU model is not the built-in mlp");
  s->nl = m->params.n / 2;
  s->regression = m->spec.ntargets > 0;
  s->p = (float)hp->dropout;
  s->dim[0] = (int)m->params.p[0].shape[1];
  d->losses_per_sample = 1;
  const size_t B = (size_t)d->max_batch;
  for (int l = 0; l < s->nl; l++) {
    s->dim[l + 1] = (int)m->params.p[2 * l].shape[0];
    MT_CALL(mt_dmodel_alloc(d, &s->act[l], B * s->dim[l + 1] * sizeof(float)));
    MT_CALL(mt_dmodel_alloc(d, &s->dact[l], B * s->dim[l + 1] * sizeof(float)));
    if (s->p > 0 && l < s->nl - 1) MT_CALL(mt_dmodel_alloc(d, &s->mask[l], B * s->dim[l + 1]));
  }
  MT_CALL(mt_dmodel_alloc(d, &s->probs, B * s->dim[s->nl] * sizeof(float)));
  return 0;
}

#define W(l) ((const float *)mt_dmodel_at(d, params, 0, 2 * (l)))
#define BIAS(l) ((const float *)mt_dmodel_at(d, params, 0, 2 * (l) + 1))

static int mlp_forward(mt_dmodel *d, const float *params, const mt_dbatch *b, const mt_dsums *sum) {
  dmlp *s = d->data;
  mt_cuda_ctx *cx = d->cx;
  const int B = b->n, K = s->dim[s->nl];
  MT_CHECK(B <= d->max_batch, MT_ERR_ARG, "batch %d exceeds %d", B, d->max_batch);
  MT_CHECK(b->x && b->x_len == s->dim[0] && (s->regression ? b->targets != NULL : b->labels != NULL),
           MT_ERR_DATA, "model mlp needs inputs /x of %d values and %s /y", s->dim[0],
           s->regression ? "float targets" : "class labels");
  MT_CHECK(!s->regression || b->targets_len == K, MT_ERR_DATA,
           "model mlp was set up for %d targets per sample, the batch has %lld", K,
           (long long)b->targets_len);
  s->x = b->x, s->y = b->labels, s->target = b->targets, s->B = B;
  s->dropped = b->train && s->p > 0;
  const float *in = b->x;
  for (int l = 0; l < s->nl; l++) {
    const int64_t n = (int64_t)B * s->dim[l + 1];
    MT_CALL(mt_dmodel_unit_use(d, l, 0));
    MT_CALL(mt_cuda_linear_forward(s->act[l], in, W(l), BIAS(l), B, s->dim[l], s->dim[l + 1], cx));
    if (l < s->nl - 1) {
      MT_CALL(mt_cuda_relu_forward(s->act[l], s->act[l], n, cx->stream));
      if (s->dropped)
        MT_CALL(mt_cuda_model_dropout(s->act[l], s->mask[l], s->p, b->key, b->ids, B, l,
                                      s->dim[l + 1], cx->stream));
    }
    in = s->act[l];
  }
  const float *out = s->act[s->nl - 1];
  if (s->regression)
    return mt_cuda_mse_forward(sum->losses, sum->loss_sum, out, b->targets, B, K, cx);
  return mt_cuda_softmax_xent_forward(s->probs, sum->losses, sum->loss_sum, sum->correct, out,
                                      b->labels, B, K, cx);
}

static int mlp_backward(mt_dmodel *d, const float *params, float *grads, float scale, int B) {
  dmlp *s = d->data;
  mt_cuda_ctx *cx = d->cx;
  const int K = s->dim[s->nl];
  MT_CHECK(B == s->B, MT_ERR_STATE, "mlp backward of %d samples after a forward of %d", B, s->B);
  for (int l = 0; l < s->nl; l++)
    MT_CUDA_RT(cudaMemsetAsync(s->dact[l], 0, (size_t)B * s->dim[l + 1] * sizeof(float),
                               cx->stream));
  if (s->regression)
    MT_CALL(mt_cuda_mse_backward(s->dact[s->nl - 1], s->act[s->nl - 1], s->target,
                                 scale / (float)K, B, K, cx->stream));
  else
    MT_CALL(mt_cuda_softmax_xent_backward(s->dact[s->nl - 1], s->probs, s->y, scale, B, K,
                                          cx->stream));
  for (int l = s->nl - 1; l >= 0; l--) {
    float *dout = s->dact[l];
    const int64_t n = (int64_t)B * s->dim[l + 1];
    if (l < s->nl - 1) {
      if (s->dropped)
        MT_CALL(mt_cuda_model_dropout_backward(dout, s->mask[l], s->p, n, cx->stream));
      MT_CALL(mt_cuda_relu_backward(dout, dout, s->act[l], n, cx->stream));
    }
    const float *in = l ? s->act[l - 1] : s->x;
    MT_CALL(mt_dmodel_unit_use(d, l, 1));
    float *dw = mt_dmodel_at(d, grads, 1, 2 * l), *db = mt_dmodel_at(d, grads, 1, 2 * l + 1);
    MT_CALL(mt_cuda_linear_backward(l ? s->dact[l - 1] : NULL, dw, db, dout, in, W(l), B,
                                    s->dim[l], s->dim[l + 1], cx));
    mt_dmodel_unit_done(d, l);
  }
  return 0;
}

static void mlp_destroy(mt_dmodel *d) {
  dmlp *s = d->data;
  if (!s) return;
  for (int l = 0; l < MT_MAX_HIDDEN + 1; l++) {
    cudaFree(s->act[l]);
    cudaFree(s->dact[l]);
    cudaFree(s->mask[l]);
  }
  cudaFree(s->probs);
  mt_free(&d->data);
}

static int mlp_per_sample(const mt_dmodel *d) {
  const dmlp *s = d->data;
  return s->regression ? s->dim[s->nl] : 1; /* the CPU's sse / K */
}

static const float *mlp_outputs(const mt_dmodel *d, int *len) {
  const dmlp *s = d->data;
  *len = s->dim[s->nl];
  return s->act[s->nl - 1];
}

const mt_dmodel_ops mt_dmodel_mlp = {"mlp",       mlp_setup,      mlp_forward, mlp_backward,
                                     mlp_destroy, mlp_per_sample, mlp_outputs};
