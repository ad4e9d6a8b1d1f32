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
  return mt_model_create_as(name, spec, max_batch, MT_FP32, out);
}

int mt_model_create_as(const char *name, const mt_data_spec *spec, int max_batch, mt_dtype dtype,
                       mt_model **out) {
  builtins();
  *out = NULL;
  const mt_model_ops *ops = NULL;
  for (int i = 0; i < nmodels_; i++)
    if (!strcmp(models_[i]->name, name)) ops = models_[i];
  MT_CHECK(ops, MT_ERR_OPTION, "option -model: unknown model '%s'", name);
  MT_CHECK(dtype == MT_FP32 || (dtype == MT_FP64 && ops->forward64 && ops->backward64),
           MT_ERR_OPTION,
           "option -precision fp64: model %s has no double-precision operations (forward64 and "
           "backward64 in its mt_model_ops); run it with -precision fp32", name);
  mt_model *m;
  MT_CALL(mt_calloc(&m, 1, sizeof(*m), "model"));
  m->ops = ops;
  m->spec = *spec;
  m->max_batch = max_batch;
  m->dtype = dtype;
  *out = m;
  MT_CALL(ops->setup(m, spec, max_batch));
  if (m->buffers.total)
    MT_CALL(mt_calloc(&m->buf, m->buffers.total, sizeof(float), "model buffers"));
  if (m->buffers.total && dtype == MT_FP64)
    MT_CALL(mt_calloc(&m->buf64, m->buffers.total, sizeof(double), "model buffers"));
  return 0;
}

int mt_model_init(mt_model *m, void *params, uint64_t seed) {
  if (m->dtype == MT_FP32) return m->ops->init(m, params, seed);
  /* PyTorch's model.double() after construction: made in float, widened */
  const size_t n = m->params.total;
  float *tmp = NULL;
  MT_CALL(mt_calloc(&tmp, n ? n : 1, sizeof(float), "float parameters for initialisation"));
  int err = m->ops->init(m, tmp, seed);
  double *p = params;
  for (size_t i = 0; !err && i < n; i++) p[i] = tmp[i];
  for (size_t i = 0; !err && i < m->buffers.total; i++) m->buf64[i] = m->buf[i];
  mt_free(&tmp);
  return err;
}

void mt_model_destroy(mt_model **pm) {
  mt_model *m = *pm;
  if (!m) return;
  if (m->ops && m->ops->destroy) m->ops->destroy(m);
  mt_param_table_free(&m->params);
  mt_param_table_free(&m->buffers);
  mt_free(&m->buf);
  mt_free(&m->buf64);
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

#define MT_TEMPLATE "models/registry_t.h"
#include "core/real_t.h"
