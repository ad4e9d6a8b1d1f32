/* The cnn model on a CUDA device: models/cnn_t.h's forward and backward
 * with the kernels of cuda/kernels.h, in float. The geometry comes from the
 * CPU model's table: each block a conv (features.*.weight, (OC,IC,K,K),
 * padding K/2) with its bias, batch norm when the model has buffers (its
 * running statistics, d->buf), ReLU, 2x2 max pooling; then classifier.1
 * (hidden), ReLU, dropout, classifier.3 (classes). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/dmodel.h"

#include <string.h>

#define MAXB 8
#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f
#define DROPOUT_LAYER 64 /* as models/cnn.c */

typedef struct {
  int nb, C0, H0, W0, flat, hidden, classes, bn, pcls;
  int pconv[MAXB], pbn[MAXB];
  mt_conv2d_shape conv[MAXB];
  mt_pool2d_shape pool[MAXB];
  float *z[MAXB], *dz[MAXB], *mean[MAXB], *rstd[MAXB];
  float *a[MAXB], *da[MAXB], *p[MAXB], *dp[MAXB];
  int32_t *arg[MAXB];
  float *h, *dh, *logits, *dlogits, *probs;
  uint8_t *mask;
  float drop;
  const float *x;
  const int32_t *y;
  int B, train, dropped;
} dcnn;

static size_t pool_numel(const mt_pool2d_shape *s, int out) {
  return (size_t)s->C * (out ? (size_t)s->OH * s->OW : (size_t)s->H * s->W);
}

static int cnn_setup(mt_dmodel *d) {
  const mt_model *m = d->host;
  const mt_cnn_hparams *hp = mt_cnn_hparams_of(m);
  const mt_param_table *tb = &m->params;
  dcnn *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "cnn on the device"));
  d->data = s;
  MT_CHECK(hp, MT_ERR_STATE, "cnn on the device: the CPU model is not the built-in cnn");
  d->losses_per_sample = 1;
  const mt_data_spec *sp = &m->spec;
  s->C0 = sp->ndim == 3 ? (int)sp->shape[0] : 1;
  s->H0 = (int)sp->shape[sp->ndim - 2];
  s->W0 = (int)sp->shape[sp->ndim - 1];
  s->bn = m->buffers.n > 0;
  s->drop = (float)hp->dropout;
  const size_t B = (size_t)d->max_batch;
  int k = 0, C = s->C0, H = s->H0, W = s->W0;
  while (k < tb->n && tb->p[k].ndim == 4) {
    const int l = s->nb;
    MT_CHECK(l < MAXB, MT_ERR_STATE, "cnn on the device: more than %d blocks", MAXB);
    const mt_param *w = &tb->p[k];
    const int K = (int)w->shape[2], OC = (int)w->shape[0];
    s->pconv[l] = k;
    s->conv[l] = (mt_conv2d_shape){.B = d->max_batch, .IC = C, .H = H, .W = W, .OC = OC,
                                   .KH = K, .KW = K, .stride_h = 1, .stride_w = 1,
                                   .pad_h = K / 2, .pad_w = K / 2, .dil_h = 1, .dil_w = 1,
                                   .groups = 1};
    MT_CALL(mt_conv2d_shape_init(&s->conv[l]));
    k += 2;
    if (s->bn) s->pbn[l] = k, k += 2;
    C = OC;
    s->pool[l] = (mt_pool2d_shape){.B = d->max_batch, .C = C, .H = H, .W = W, .KH = 2, .KW = 2,
                                   .stride_h = 2, .stride_w = 2};
    MT_CALL(mt_pool2d_shape_init(&s->pool[l]));
    const size_t in = pool_numel(&s->pool[l], 0) * B, out = pool_numel(&s->pool[l], 1) * B;
    if (s->bn) {
      MT_CALL(mt_dmodel_alloc(d, &s->z[l], in * sizeof(float)));
      MT_CALL(mt_dmodel_alloc(d, &s->dz[l], in * sizeof(float)));
      MT_CALL(mt_dmodel_alloc(d, &s->mean[l], (size_t)C * sizeof(float)));
      MT_CALL(mt_dmodel_alloc(d, &s->rstd[l], (size_t)C * sizeof(float)));
    }
    MT_CALL(mt_dmodel_alloc(d, &s->a[l], in * sizeof(float)));
    MT_CALL(mt_dmodel_alloc(d, &s->da[l], in * sizeof(float)));
    MT_CALL(mt_dmodel_alloc(d, &s->p[l], out * sizeof(float)));
    MT_CALL(mt_dmodel_alloc(d, &s->dp[l], out * sizeof(float)));
    MT_CALL(mt_dmodel_alloc(d, &s->arg[l], out * sizeof(int32_t)));
    H = s->pool[l].OH, W = s->pool[l].OW;
    s->nb++;
  }
  MT_CHECK(s->nb >= 1 && k + 4 == tb->n && (!s->bn || m->buffers.n == 2 * s->nb), MT_ERR_STATE,
           "cnn on the device: an unexpected parameter table (%d tensors)", tb->n);
  s->pcls = k;
  s->flat = C * H * W;
  s->hidden = (int)tb->p[k].shape[0];
  s->classes = (int)tb->p[k + 2].shape[0];
  MT_CHECK(tb->p[k].shape[1] == s->flat, MT_ERR_STATE, "cnn on the device: classifier of %lld "
           "inputs after %d features", (long long)tb->p[k].shape[1], s->flat);
  MT_CALL(mt_dmodel_alloc(d, &s->h, B * s->hidden * sizeof(float)));
  MT_CALL(mt_dmodel_alloc(d, &s->dh, B * s->hidden * sizeof(float)));
  if (s->drop > 0) MT_CALL(mt_dmodel_alloc(d, &s->mask, B * s->hidden));
  MT_CALL(mt_dmodel_alloc(d, &s->logits, B * s->classes * sizeof(float)));
  MT_CALL(mt_dmodel_alloc(d, &s->dlogits, B * s->classes * sizeof(float)));
  MT_CALL(mt_dmodel_alloc(d, &s->probs, B * s->classes * sizeof(float)));
  return 0;
}

#define P(k) ((const float *)mt_dmodel_at(d, params, 0, (k)))
#define G(k) mt_dmodel_at(d, grads, 1, (k))
#define BUF(i) (d->buf + d->host->buffers.p[(i)].offset)

static int cnn_forward(mt_dmodel *d, const float *params, const mt_dbatch *b, const mt_dsums *sum) {
  dcnn *s = d->data;
  mt_cuda_ctx *cx = d->cx;
  cudaStream_t st = cx->stream;
  const int B = b->n;
  MT_CHECK(b->x && b->labels && b->x_len == (int64_t)s->C0 * s->H0 * s->W0, MT_ERR_DATA,
           "model cnn needs inputs /x of %dx%dx%d and class labels /y", s->C0, s->H0, s->W0);
  MT_CHECK(B <= d->max_batch, MT_ERR_ARG, "batch %d exceeds %d", B, d->max_batch);
  s->x = b->x, s->y = b->labels, s->B = B, s->train = b->train;
  s->dropped = b->train && s->drop > 0;
  if (B == 0) {
    MT_CUDA_RT(cudaMemsetAsync(sum->loss_sum, 0, sizeof(double), st));
    return 0;
  }
  const float *in = s->x;
  for (int l = 0; l < s->nb; l++) {
    mt_pool2d_shape ps = s->pool[l];
    ps.B = B;
    const int64_t na = (int64_t)B * (int64_t)pool_numel(&ps, 0);
    const int k = s->pconv[l];
    MT_CALL(mt_dmodel_unit_use(d, l, 0));
    MT_CALL(mt_cuda_conv2d_forward(s->bn ? s->z[l] : s->a[l], in, P(k), P(k + 1), B, &s->conv[l],
                                   cx));
    if (s->bn)
      MT_CALL(mt_cuda_batchnorm2d_forward(s->a[l], s->mean[l], s->rstd[l], BUF(2 * l),
                                          BUF(2 * l + 1), s->z[l], P(s->pbn[l]),
                                          P(s->pbn[l] + 1), B, ps.C, ps.H * ps.W, BN_EPS,
                                          BN_MOMENTUM, s->train, cx));
    MT_CALL(mt_cuda_relu_forward(s->a[l], s->a[l], na, st));
    MT_CALL(mt_cuda_maxpool2d_forward(s->p[l], s->arg[l], s->a[l], &ps, st));
    in = s->p[l];
  }
  const int k = s->pcls;
  MT_CALL(mt_dmodel_unit_use(d, s->nb, 0));
  MT_CALL(mt_cuda_linear_forward(s->h, in, P(k), P(k + 1), B, s->flat, s->hidden, cx));
  MT_CALL(mt_cuda_relu_forward(s->h, s->h, (int64_t)B * s->hidden, st));
  if (s->dropped)
    MT_CALL(mt_cuda_model_dropout(s->h, s->mask, s->drop, b->key, b->ids, B, DROPOUT_LAYER,
                                  s->hidden, st));
  MT_CALL(mt_dmodel_unit_use(d, s->nb + 1, 0));
  MT_CALL(mt_cuda_linear_forward(s->logits, s->h, P(k + 2), P(k + 3), B, s->hidden, s->classes,
                                 cx));
  return mt_cuda_softmax_xent_forward(s->probs, sum->losses, sum->loss_sum, sum->correct,
                                      s->logits, s->y, B, s->classes, cx);
}

static int cnn_backward(mt_dmodel *d, const float *params, float *grads, float scale, int B) {
  dcnn *s = d->data;
  mt_cuda_ctx *cx = d->cx;
  cudaStream_t st = cx->stream;
  MT_CHECK(B == s->B, MT_ERR_STATE, "cnn backward of %d samples after a forward of %d", B, s->B);
  if (B == 0) return 0;
  const int k = s->pcls;
  MT_CUDA_RT(cudaMemsetAsync(s->dlogits, 0, (size_t)B * s->classes * sizeof(float), st));
  MT_CUDA_RT(cudaMemsetAsync(s->dh, 0, (size_t)B * s->hidden * sizeof(float), st));
  MT_CALL(mt_cuda_softmax_xent_backward(s->dlogits, s->probs, s->y, scale, B, s->classes, st));
  const float *last = s->p[s->nb - 1];
  float *dlast = s->dp[s->nb - 1];
  MT_CALL(mt_dmodel_unit_use(d, s->nb + 1, 1));
  MT_CALL(mt_cuda_linear_backward(s->dh, G(k + 2), G(k + 3), s->dlogits, s->h, P(k + 2), B,
                                  s->hidden, s->classes, cx));
  mt_dmodel_unit_done(d, s->nb + 1);
  if (s->dropped)
    MT_CALL(mt_cuda_model_dropout_backward(s->dh, s->mask, s->drop, (int64_t)B * s->hidden, st));
  MT_CALL(mt_cuda_relu_backward(s->dh, s->dh, s->h, (int64_t)B * s->hidden, st));
  MT_CUDA_RT(cudaMemsetAsync(dlast, 0, (size_t)B * s->flat * sizeof(float), st));
  MT_CALL(mt_dmodel_unit_use(d, s->nb, 1));
  MT_CALL(mt_cuda_linear_backward(dlast, G(k), G(k + 1), s->dh, last, P(k), B, s->flat, s->hidden,
                                  cx));
  mt_dmodel_unit_done(d, s->nb);
  for (int l = s->nb - 1; l >= 0; l--) {
    mt_pool2d_shape ps = s->pool[l];
    ps.B = B;
    const int64_t na = (int64_t)B * (int64_t)pool_numel(&ps, 0);
    MT_CUDA_RT(cudaMemsetAsync(s->da[l], 0, (size_t)na * sizeof(float), st));
    MT_CALL(mt_cuda_maxpool2d_backward(s->da[l], s->dp[l], s->arg[l], &ps, st));
    MT_CALL(mt_cuda_relu_backward(s->da[l], s->da[l], s->a[l], na, st));
    const float *dconv = s->da[l];
    MT_CALL(mt_dmodel_unit_use(d, l, 1));
    if (s->bn) {
      const int kb = s->pbn[l];
      MT_CUDA_RT(cudaMemsetAsync(s->dz[l], 0, (size_t)na * sizeof(float), st));
      MT_CALL(mt_cuda_batchnorm2d_backward(s->dz[l], G(kb), G(kb + 1), s->da[l], s->z[l], P(kb),
                                           s->mean[l], s->rstd[l], B, ps.C, ps.H * ps.W, s->train,
                                           cx));
      dconv = s->dz[l];
    }
    float *dinp = NULL;
    if (l > 0) {
      dinp = s->dp[l - 1];
      MT_CUDA_RT(cudaMemsetAsync(dinp, 0, (size_t)B * pool_numel(&s->pool[l - 1], 1) *
                                               sizeof(float), st));
    }
    const int kc = s->pconv[l];
    MT_CALL(mt_cuda_conv2d_backward(dinp, G(kc), G(kc + 1), dconv, l ? s->p[l - 1] : s->x, P(kc),
                                    B, &s->conv[l], cx));
    mt_dmodel_unit_done(d, l);
  }
  return 0;
}

static void cnn_destroy(mt_dmodel *d) {
  dcnn *s = d->data;
  if (!s) return;
  for (int l = 0; l < MAXB; l++) {
    void *f[] = {s->z[l], s->dz[l], s->mean[l], s->rstd[l], s->a[l], s->da[l], s->p[l], s->dp[l],
                 s->arg[l]};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) cudaFree(f[i]);
  }
  void *f[] = {s->h, s->dh, s->logits, s->dlogits, s->probs, s->mask};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) cudaFree(f[i]);
  mt_free(&d->data);
}

static int cnn_per_sample(const mt_dmodel *d) {
  (void)d;
  return 1;
}

static const float *cnn_outputs(const mt_dmodel *d, int *len) {
  const dcnn *s = d->data;
  *len = s->classes;
  return s->logits;
}

const mt_dmodel_ops mt_dmodel_cnn = {"cnn",       cnn_setup,      cnn_forward, cnn_backward,
                                     cnn_destroy, cnn_per_sample, cnn_outputs};
