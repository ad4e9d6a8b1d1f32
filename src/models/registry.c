/* Models by name: the built-ins plus any a user registers. */
#include "core/core.h"
#include "models/models.h"
#include "nn/nn.h"

#include <math.h>

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define MAX_MODELS 32
static const mt_model_ops *models_[MAX_MODELS];
static int nmodels_;

static void builtins(void) {
  if (nmodels_) return;
  models_[nmodels_++] = &mt_mlp_ops;
  models_[nmodels_++] = &mt_cnn_ops;
  models_[nmodels_++] = &mt_gpt_ops;
}

const mt_model_ops *mt_model_find(const char *name) {
  builtins();
  for (int i = 0; i < nmodels_; i++)
    if (!strcmp(models_[i]->name, name)) return models_[i];
  return NULL;
}

void mt_model_names(char *buf, size_t len) {
  builtins();
  size_t k = 0;
  if (len) buf[0] = '\0';
  for (int i = 0; i < nmodels_ && k < len; i++) {
    int w = snprintf(buf + k, len - k, "%s%s", i ? ", " : "", models_[i]->name);
    if (w < 0) break;
    k += (size_t)w;
  }
}

int mt_model_register(const mt_model_ops *ops) {
  builtins();
  MT_CHECK(ops && ops->name && ops->setup && ops->init && ops->forward && ops->backward,
           MT_ERR_ARG, "mt_model_register: name, setup, init, forward and backward are required");
  for (int i = 0; i < nmodels_; i++)
    if (!strcmp(models_[i]->name, ops->name)) {
      models_[i] = ops;
      return 0;
    }
  MT_CHECK(nmodels_ < MAX_MODELS, MT_ERR_ARG, "too many models registered");
  models_[nmodels_++] = ops;
  return 0;
}

int mt_model_create(const char *name, const mt_data_spec *spec, int max_batch, mt_model **out) {
  builtins();
  *out = NULL;
  const mt_model_ops *ops = NULL;
  for (int i = 0; i < nmodels_; i++)
    if (!strcmp(models_[i]->name, name)) ops = models_[i];
  MT_CHECK(ops, MT_ERR_OPTION, "option -model: unknown model '%s'", name);
  mt_model *m;
  MT_CALL(mt_calloc(&m, 1, sizeof(*m), "model"));
  m->ops = ops;
  m->spec = *spec;
  m->max_batch = max_batch;
  *out = m;
  MT_CALL(ops->setup(m, spec, max_batch));
  if (m->buffers.total)
    MT_CALL(mt_calloc(&m->buf, m->buffers.total, sizeof(float), "model buffers"));
  return 0;
}

void mt_model_destroy(mt_model **pm) {
  mt_model *m = *pm;
  if (!m) return;
  if (m->ops && m->ops->destroy) m->ops->destroy(m);
  mt_param_table_free(&m->params);
  mt_param_table_free(&m->buffers);
  mt_free(&m->buf);
  mt_free(pm);
}

int mt_init_torch_default(const mt_model *m, float *params, uint64_t seed, uint64_t purpose) {
  for (int k = 0; k < m->params.n; k++) {
    const mt_param *q = &m->params.p[k];
    const mt_param *w = q;
    for (int j = k - 1; w->ndim < 2 && j >= 0; j--) w = &m->params.p[j];
    MT_CHECK(w && w->ndim >= 2, MT_ERR_STATE, "tensor %s has no weight before it to take fan-in from",
             q->name);
    int64_t fan_in = 1;
    for (int d = 1; d < w->ndim; d++) fan_in *= w->shape[d];
    float bound = (float)(1.0 / sqrt((double)fan_in));
    uint64_t key = mt_key(seed, purpose, (uint64_t)k);
    float *p = params + q->offset;
    for (size_t i = 0; i < q->numel; i++) p[i] = (2.0f * mt_randu(key, i) - 1.0f) * bound;
  }
  return 0;
}

int mt_model_put_outputs(const char *model, mt_batch_stats *st, const float *logits, int B, int C) {
  if (st->logits) {
    MT_CHECK(st->logits_len == C, MT_ERR_ARG,
             "model %s: logits rows of %d asked for, it has %d classes", model, st->logits_len, C);
    memcpy(st->logits, logits, (size_t)B * C * sizeof(float));
  }
  for (int i = 0; st->pred && i < B; i++) {
    const float *l = logits + (size_t)i * C;
    int arg = 0;
    for (int j = 1; j < C; j++)
      if (l[j] > l[arg]) arg = j;
    st->pred[i] = arg;
  }
  return 0;
}

void mt_model_dropout(float *x, uint8_t *mask, float p, const mt_batch *b, int layer,
                      int64_t row_len) {
  if (!b->train || p <= 0.0f) return;
  for (int i = 0; i < b->n; i++) {
    uint64_t id = b->ids ? (uint64_t)b->ids[i] : (uint64_t)i;
    uint64_t key = mt_key(b->key, (uint64_t)layer + 1, id);
    float *r = x + (int64_t)i * row_len;
    mt_dropout_forward(r, mask + (int64_t)i * row_len, r, p, key, 0, 1, row_len);
  }
}

void mt_model_dropout_backward(float *d, const uint8_t *mask, float p, int64_t n) {
  if (p <= 0.0f) return;
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp simd
  for (int64_t i = 0; i < n; i++) d[i] = mask[i] ? d[i] * scale : 0.0f;
}
