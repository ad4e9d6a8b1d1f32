/* Models by name: the built-ins plus any a user registers. */
#include "core/core.h"
#include "models/models.h"
#include "nn/nn.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>

#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_MODELS 32
#define NBUILTINS 3
static const mt_model_ops *models_[MAX_MODELS];
static int nmodels_;
/* the built-ins, each with its block of hyper-parameters (mt_model_hparams):
 * the defaults, then what its options op read */
static struct {
  const mt_model_builtin *b;
  mt_model_hparams hp;
} builtin_[NBUILTINS];

static void builtins(void) {
  if (nmodels_) return;
  const mt_model_builtin *const b[NBUILTINS] = {&mt_mlp_builtin, &mt_cnn_builtin, &mt_gpt_builtin};
  for (int i = 0; i < NBUILTINS; i++) {
    builtin_[i].b = b[i];
    b[i]->defaults(&builtin_[i].hp);
    models_[nmodels_++] = b[i]->ops;
  }
}

const mt_model_builtin *mt_model_builtin_of(const mt_model_ops *ops) {
  builtins();
  for (int i = 0; ops && i < NBUILTINS; i++)
    if (builtin_[i].b->ops == ops) return builtin_[i].b;
  return NULL;
}

mt_model_hparams *mt_model_builtin_hparams(const mt_model_ops *ops) {
  builtins();
  for (int i = 0; ops && i < NBUILTINS; i++)
    if (builtin_[i].b->ops == ops) return &builtin_[i].hp;
  return NULL;
}

/* The options each model's options op read (mt_model_options_of), taken
 * from the option records the op added at its first reading. */
#define MAX_MODEL_OPTIONS 32
static struct {
  const mt_model_ops *ops;
  int n;
  const char *names[MAX_MODEL_OPTIONS];
} read_[MAX_MODELS];
static int nread_;

static int read_model_options(const mt_model_ops *ops) {
  const int before = mt_option_count();
  int err = ops->options();
  int k = 0;
  while (k < nread_ && read_[k].ops != ops) k++;
  if (k == nread_ && k < MAX_MODELS) { /* the first reading: what it added */
    read_[k].ops = ops;
    for (int i = before; i < mt_option_count() && read_[k].n < MAX_MODEL_OPTIONS; i++) {
      const char *v;
      int set;
      const char *n = mt_option_read(i, &v, &set);
      if (n) read_[k].names[read_[k].n++] = n;
    }
    nread_++;
  }
  return err;
}

int mt_model_read_options(const char *name) {
  builtins();
  int err = 0;
  for (int i = 0; i < NBUILTINS; i++) err = mt_first_err(err, read_model_options(builtin_[i].b->ops));
  const mt_model_ops *ops = mt_model_find(name);
  if (ops && !mt_model_builtin_of(ops) && ops->options)
    err = mt_first_err(err, read_model_options(ops));
  return err;
}

int mt_model_options_of(const mt_model_ops *ops, const char **names, int *shapes, int max) {
  const mt_model_builtin *b = mt_model_builtin_of(ops);
  for (int k = 0; k < nread_; k++) {
    if (read_[k].ops != ops) continue;
    int n = read_[k].n < max ? read_[k].n : max;
    for (int i = 0; i < n; i++) {
      names[i] = read_[k].names[i];
      shapes[i] = 1;
      for (int j = 0; b && b->train_only && b->train_only[j]; j++)
        if (!strcmp(b->train_only[j], names[i])) shapes[i] = 0;
    }
    return n;
  }
  return 0;
}

int mt_model_window(const char *name) {
  const mt_model_builtin *b = mt_model_builtin_of(mt_model_find(name));
  if (!b || !b->window) b = &mt_gpt_builtin;
  return b->window(mt_model_builtin_hparams(b->ops));
}

void mt_model_print(const char *name, FILE *f, int line) {
  const mt_model_builtin *b = mt_model_builtin_of(mt_model_find(name));
  if (b && b->print) b->print(mt_model_builtin_hparams(b->ops), f, line);
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

/* A model of ops: a built-in set up by its built-in's setup from hp (NULL:
 * the registry's block, what ops->setup reads) under pol, any other model
 * by ops->setup. */
static int create(const mt_model_ops *ops, const mt_model_hparams *hp, const mt_nn_policy *pol,
                  const char *name, const mt_data_spec *spec, int max_batch, mt_dtype dtype,
                  mt_model **out) {
  MT_CHECK(ops, MT_ERR_OPTION, "option -model: unknown model '%s'", name);
  MT_CHECK(dtype == MT_FP32 || (dtype == MT_FP64 && ops->forward64 && ops->backward64),
           MT_ERR_OPTION,
           "option -precision fp64: model %s has no double-precision operations (forward64 and "
           "backward64 in its mt_model_ops); run it with -precision fp32", name);
  const mt_model_builtin *b = mt_model_builtin_of(ops);
  MT_CHECK(!hp || b, MT_ERR_ARG, "model %s: hyper-parameters are given to the built-in models only",
           name);
  mt_model *m;
  MT_CALL(mt_calloc(&m, 1, sizeof(*m), "model"));
  m->ops = ops;
  m->spec = *spec;
  m->max_batch = max_batch;
  m->dtype = dtype;
  *out = m;
  MT_CALL(b ? b->setup(m, hp ? hp : mt_model_builtin_hparams(ops), spec, max_batch, pol)
            : ops->setup(m, spec, max_batch));
  if (m->buffers.total)
    MT_CALL(mt_calloc(&m->buf, m->buffers.total, sizeof(float), "model buffers"));
  if (m->buffers.total && dtype == MT_FP64)
    MT_CALL(mt_calloc(&m->buf64, m->buffers.total, sizeof(double), "model buffers"));
  return 0;
}

int mt_model_create_as(const char *name, const mt_data_spec *spec, int max_batch, mt_dtype dtype,
                       mt_model **out) {
  *out = NULL;
  MT_CALL(create(mt_model_find(name), NULL, NULL, name, spec, max_batch, dtype, out));
  return 0;
}

int mt_model_create_policy(const char *name, const mt_data_spec *spec, int max_batch,
                           mt_dtype dtype, const mt_nn_policy *pol, mt_model **out) {
  *out = NULL;
  MT_CALL(create(mt_model_find(name), NULL, pol, name, spec, max_batch, dtype, out));
  return 0;
}

int mt_model_create_hp(const char *name, const mt_model_hparams *hp, const mt_data_spec *spec,
                       int max_batch, mt_dtype dtype, mt_model **out) {
  *out = NULL;
  MT_CHECK(hp, MT_ERR_ARG, "mt_model_create_hp: no hyper-parameters");
  MT_CALL(create(mt_model_find(name), hp, NULL, name, spec, max_batch, dtype, out));
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

/* ------------------------------------------ the built-ins' options readers */

int mt_model_option_ints(const char *name, const char *help, const char *def, int *v, int max,
                         int *n) {
  char s[4096], buf[512];
  *n = 0;
  MT_CALL(mt_option_string(name, help, def, s, sizeof(s)));
  MT_CHECK(strlen(s) < sizeof(buf), MT_ERR_OPTION, "option %s: value too long", name);
  MT_CHECK(!mt_list_empty_entry(s), MT_ERR_OPTION, "option %s: '%s' has an empty entry", name, s);
  memcpy(buf, s, strlen(s) + 1);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    long x;
    MT_CHECK(*n < max, MT_ERR_OPTION, "option %s: more than %d values", name, max);
    MT_CHECK(!mt_parse_long(tok, &x) && x >= 1 && x <= (1L << 20), MT_ERR_OPTION,
             "option %s: '%s' is not a positive integer (allowed: 1..%ld)", name, tok, 1L << 20);
    v[(*n)++] = (int)x;
  }
  return 0;
}

int mt_model_option_bool(const char *name, const char *help, int def, int *out) {
  char s[64];
  *out = def;
  MT_CALL(mt_option_string(name, help, def ? "1" : "0", s, sizeof(s)));
  if (!s[0] || !strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") ||
      !strcasecmp(s, "on")) /* given without a value: on */
    *out = 1;
  else if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
           !strcasecmp(s, "off"))
    *out = 0;
  else
    return MT_ERR(MT_ERR_OPTION,
                  "option %s: '%s' is not a boolean (allowed: 0, 1, true, false, yes, no, on, off)",
                  name, s);
  return 0;
}

int mt_model_option_choice(const char *name, const char *help, const char *const *choices,
                           char *out, size_t len) {
  char s[256], all[256] = "";
  snprintf(out, len, "%s", choices[0]);
  MT_CALL(mt_option_string(name, help, choices[0], s, sizeof(s)));
  for (int i = 0; choices[i]; i++) {
    if (!strcmp(s, choices[i]) && strlen(s) < len) {
      memcpy(out, s, strlen(s) + 1);
      return 0;
    }
    size_t k = strlen(all);
    snprintf(all + k, sizeof(all) - k, "%s%s", i ? ", " : "", choices[i]);
  }
  return MT_ERR(MT_ERR_OPTION, "option %s: '%s' is not one of: %s", name, s, all);
}

#define MT_TEMPLATE "models/registry_t.h"
#include "core/real_t.h"
