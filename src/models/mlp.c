/* MLP: Linear -> ReLU [-> Dropout] -> ... -> Linear, then softmax
 * cross-entropy over class labels, or mean-squared error over float
 * targets (regression: /y float (N,K), K outputs, per-sample loss the mean
 * over K, so the batch loss is PyTorch's MSELoss(reduction='mean')).
 * Parameter names follow torch.nn.Sequential: layers.0.weight, layers.0.bias,
 * layers.2.weight, ... (ReLUs take the odd indices; dropout, -mlp_dropout,
 * is functional and has no index, as in validation/torch_models.py). */
#include "models/models.h"
#include "nn/nn.h"
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MT_PURPOSE_INIT 2

static int hidden_[MT_MAX_HIDDEN] = {1024, 1024};
static int nhidden_ = 2;
static float dropout_ = 0.0f;

int mt_mlp_set(const int *sizes, int n, double dropout) {
  MT_CHECK(n >= 1 && n <= MT_MAX_HIDDEN, MT_ERR_OPTION, "option -mlp_hidden: 1 to %d layers", MT_MAX_HIDDEN);
  MT_CHECK(dropout >= 0 && dropout < 1, MT_ERR_OPTION, "option -mlp_dropout: %g is not in [0, 1)", dropout);
  memcpy(hidden_, sizes, (size_t)n * sizeof(int));
  nhidden_ = n;
  dropout_ = (float)dropout;
  return 0;
}

typedef struct {
  int nl;                  /* linear layers                                  */
  int dim[MT_MAX_HIDDEN + 2]; /* dim[0] input, dim[l+1] output of layer l    */
  float *act[MT_MAX_HIDDEN + 1];  /* (B, dim[l+1]) outputs (post-ReLU)         */
  float *dact[MT_MAX_HIDDEN + 1]; /* their gradients                          */
  uint8_t *mask[MT_MAX_HIDDEN]; /* dropout masks of the hidden layers         */
  float *probs;
  float p;                 /* dropout probability                            */
  int regression;          /* MSE over dim[nl] targets                       */
  const float *x;          /* input of the last forward                      */
  const int32_t *y;
  const float *target;
  int B, dropped;          /* dropped: the last forward applied dropout      */
} mlp;

static int mlp_setup(mt_model *m, const mt_data_spec *spec, int max_batch) {
  mlp *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "mlp"));
  m->data = s;
  MT_CHECK(!spec->tokens && (spec->nclasses >= 2 || spec->ntargets > 0), MT_ERR_DATA,
           "model mlp needs inputs /x and class labels or float targets /y (this data set "
           "holds %s)", spec->tokens ? "/tokens" : "neither");
  s->nl = nhidden_ + 1;
  s->p = dropout_;
  s->regression = spec->ntargets > 0;
  s->dim[0] = (int)spec->sample_numel;
  for (int i = 0; i < nhidden_; i++) s->dim[i + 1] = hidden_[i];
  s->dim[s->nl] = s->regression ? spec->ntargets : spec->nclasses;
  for (int l = 0; l < s->nl; l++) {
    char name[MT_NAME_MAX];
    int64_t wshape[2] = {s->dim[l + 1], s->dim[l]}, bshape[1] = {s->dim[l + 1]};
    snprintf(name, sizeof(name), "layers.%d.weight", 2 * l);
    MT_CALL(mt_param_table_add(&m->params, name, 2, wshape, l));
    snprintf(name, sizeof(name), "layers.%d.bias", 2 * l);
    MT_CALL(mt_param_table_add(&m->params, name, 1, bshape, l));
    MT_CALL(mt_calloc(&s->act[l], (size_t)max_batch * s->dim[l + 1], sizeof(float), "activations"));
    MT_CALL(mt_calloc(&s->dact[l], (size_t)max_batch * s->dim[l + 1], sizeof(float), "activation gradients"));
    if (s->p > 0 && l < s->nl - 1)
      MT_CALL(mt_calloc(&s->mask[l], (size_t)max_batch * s->dim[l + 1], 1, "dropout masks"));
  }
  MT_CALL(mt_calloc(&s->probs, (size_t)max_batch * s->dim[s->nl], sizeof(float), "probabilities"));
  return 0;
}

/* PyTorch's nn.Linear default: kaiming_uniform_(a=sqrt(5)) for the weight,
 * i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias. */
static int mlp_init(mt_model *m, float *params, uint64_t seed) {
  return mt_init_torch_default(m, params, seed, MT_PURPOSE_INIT);
}

static const float *W(const mt_model *m, const float *params, int l) {
  return params + m->params.p[2 * l].offset;
}

static int mlp_forward(mt_model *m, const float *params, const mt_batch *bt, float *losses,
                       mt_batch_stats *st) {
  mlp *s = m->data;
  const float *x = bt->x;
  const int B = bt->n;
  MT_CHECK(x && (s->regression ? bt->targets != NULL : bt->labels != NULL), MT_ERR_DATA,
           "model mlp needs inputs /x and %s /y", s->regression ? "float targets" : "class labels");
  MT_CHECK(!s->regression || bt->targets_len == s->dim[s->nl], MT_ERR_DATA,
           "model mlp was set up for %d targets per sample, the batch has %lld", s->dim[s->nl],
           (long long)bt->targets_len);
  MT_CHECK(B <= m->max_batch, MT_ERR_ARG, "batch %d exceeds %d", B, m->max_batch);
  s->x = x;
  s->y = bt->labels;
  s->target = bt->targets;
  s->B = B;
  s->dropped = bt->train && s->p > 0;
  const float *in = x;
  for (int l = 0; l < s->nl; l++) {
    MT_CALL(mt_model_unit_use(m, l, 0));
    const float *b = params + m->params.p[2 * l + 1].offset;
    MT_CALL(mt_linear_forward(s->act[l], in, W(m, params, l), b, B, s->dim[l], s->dim[l + 1]));
    if (l < s->nl - 1) {
      mt_relu_forward(s->act[l], s->act[l], (int64_t)B * s->dim[l + 1]);
      if (s->dropped) mt_model_dropout(s->act[l], s->mask[l], s->p, bt, l, s->dim[l + 1]);
    }
    in = s->act[l];
  }
  const float *out = s->act[s->nl - 1];
  const int K = s->dim[s->nl];
  if (s->regression) {
    double sse = mt_mse_forward(losses, out, s->target, B, K);
    if (st) {
      st->loss_sum += sse / K;
      if (st->logits) {
        MT_CHECK(st->logits_len == K, MT_ERR_ARG, "model mlp: output rows of %d asked for, it has %d",
                 st->logits_len, K);
        memcpy(st->logits, out, (size_t)B * K * sizeof(float));
      }
      for (int i = 0; st->pred && i < B; i++) st->pred[i] = -1;
    }
    return 0;
  }
  int64_t correct = 0;
  double sum = mt_softmax_xent_forward(s->probs, losses, &correct, out, s->y, B, K);
  if (st) {
    st->loss_sum += sum;
    st->correct += (double)correct;
    MT_CALL(mt_model_put_outputs("mlp", st, out, B, K));
  }
  return 0;
}

static int mlp_backward(mt_model *m, const float *params, float *grads, float scale, int B) {
  mlp *s = m->data;
  MT_CHECK(B == s->B, MT_ERR_STATE, "mlp backward of %d samples after a forward of %d", B, s->B);
  for (int l = 0; l < s->nl; l++) memset(s->dact[l], 0, (size_t)B * s->dim[l + 1] * sizeof(float));
  const int K = s->dim[s->nl];
  if (s->regression)
    mt_mse_backward(s->dact[s->nl - 1], s->act[s->nl - 1], s->target, scale / (float)K, B, K);
  else
    mt_softmax_xent_backward(s->dact[s->nl - 1], s->probs, s->y, scale, B, K);
  for (int l = s->nl - 1; l >= 0; l--) {
    float *dout = s->dact[l];
    int64_t n = (int64_t)B * s->dim[l + 1];
    if (l < s->nl - 1) {
      /* act is after ReLU and dropout: positive exactly where both kept it */
      if (s->dropped) mt_model_dropout_backward(dout, s->mask[l], s->p, n);
      mt_relu_backward(dout, dout, s->act[l], n);
    }
    const float *in = l ? s->act[l - 1] : s->x;
    MT_CALL(mt_model_unit_use(m, l, 1));
    float *dw = grads + m->params.p[2 * l].offset, *db = grads + m->params.p[2 * l + 1].offset;
    MT_CALL(mt_linear_backward(l ? s->dact[l - 1] : NULL, dw, db, dout, in, W(m, params, l), B,
                               s->dim[l], s->dim[l + 1]));
    mt_model_unit_done(m, l);
  }
  return 0;
}

static double mlp_flops(const mt_model *m) {
  const mlp *s = m->data;
  double f = 0;
  for (int l = 0; l < s->nl; l++) f += 2.0 * s->dim[l] * s->dim[l + 1] * (l ? 3 : 2);
  return f;
}

static void mlp_destroy(mt_model *m) {
  mlp *s = m->data;
  if (!s) return;
  for (int l = 0; l < s->nl; l++) {
    mt_free(&s->act[l]);
    mt_free(&s->dact[l]);
    if (l < MT_MAX_HIDDEN) mt_free(&s->mask[l]);
  }
  mt_free(&s->probs);
  mt_free(&m->data);
}

const mt_model_ops mt_mlp_ops = {
    .name = "mlp",
    .setup = mlp_setup,
    .init = mlp_init,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .flops_per_sample = mlp_flops,
    .destroy = mlp_destroy,
};
