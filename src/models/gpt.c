/* GPT: a decoder-only transformer language model (GPT-2 layout, pre-LayerNorm,
 * tied LM head), after llm.c's train_gpt2.c. Parameter names follow nanoGPT's
 * module (validation/torch_models.py):
 *   transformer.wte.weight (V,C), transformer.wpe.weight (T,C),
 *   transformer.h.{l}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
 *   mlp.c_proj}.{weight,bias}, transformer.ln_f.{weight,bias};
 * lm_head.weight is transformer.wte.weight. A sample is a window of T + 1
 * tokens: inputs [0,T), targets [1,T]; its loss is the mean over its T
 * positions, so the mean over samples is the mean over tokens. It has no
 * logits per sample; asked for rows of T*V (st->logits_len) it gives each
 * position's logits before the softmax (text generation's tests compare
 * models/gpt_generate.c's cached ones against them). The model
 * in float and in double (-precision fp64) is one template, gpt_t.h. */
#define MT_NN_GENERIC
#include "core/core.h"
#include "models/models.h"
#include "nn/lowp.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MT_PURPOSE_INIT_GPT 4
#define NPER 12 /* parameter tensors per block */
#define LN_EPS ((REAL)1e-5)

/* -gpt_layers, -gpt_heads, -gpt_embd, -gpt_block, -gpt_gelu and
 * -gpt_dropout into hp (mt_model_read_options): the names, defaults,
 * ranges and messages mt_config had. */
static int gpt_read(mt_model_hparams *h) {
  mt_gpt_hparams *hp = &h->gpt;
  static const char *const gelus[] = {"tanh", "erf", NULL};
  long layers = 4, heads = 4, embd = 128, block = 64;
  char gelu[8];
  int err = mt_option_real("-gpt_dropout",
                           "gpt: dropout probability of the embedding and of the projections into "
                           "the residual stream", 0, 0, 0.999999, &hp->dropout);
  err = mt_first_err(err, mt_option_int("-gpt_layers", "gpt: transformer blocks", 4, 1, 1024, &layers));
  err = mt_first_err(err, mt_option_int("-gpt_heads", "gpt: attention heads", 4, 1, 1024, &heads));
  err = mt_first_err(err, mt_option_int("-gpt_embd", "gpt: embedding width (a multiple of heads)",
                                         128, 1, 1 << 16, &embd));
  err = mt_first_err(err, mt_option_int("-gpt_block",
                                         "gpt: context length T; a token file's samples are windows "
                                         "of T + 1 tokens", 64, 1, 1 << 16, &block));
  err = mt_first_err(err, mt_model_option_choice("-gpt_gelu",
                                                 "gpt: GELU form (tanh as GPT-2, or exact erf)", gelus,
                                                 gelu, sizeof(gelu)));
  hp->layers = (int)layers, hp->heads = (int)heads, hp->embd = (int)embd, hp->block = (int)block;
  hp->gelu_tanh = !strcmp(gelu, "tanh");
  if (!err && hp->embd % hp->heads)
    err = MT_ERR(MT_ERR_OPTION, "option -gpt_embd: %d is not a multiple of -gpt_heads %d", hp->embd,
                 hp->heads);
  return err;
}

static void gpt_defaults(mt_model_hparams *h) {
  *h = (mt_model_hparams){.gpt = {.layers = 4, .heads = 4, .embd = 128, .block = 64,
                                  .gelu_tanh = 1, .dropout = 0.0}};
}

static int gpt_check(const mt_gpt_hparams *hp) {
  MT_CHECK(hp->layers >= 1 && hp->heads >= 1 && hp->embd >= 1 && hp->block >= 1, MT_ERR_OPTION,
           "option -gpt_layers, -gpt_heads, -gpt_embd, -gpt_block: %d, %d, %d, %d are not all "
           "positive", hp->layers, hp->heads, hp->embd, hp->block);
  MT_CHECK(hp->embd % hp->heads == 0, MT_ERR_OPTION,
           "option -gpt_embd: %d is not a multiple of -gpt_heads %d", hp->embd, hp->heads);
  MT_CHECK(hp->dropout >= 0 && hp->dropout < 1, MT_ERR_OPTION,
           "option -gpt_dropout: %g is not in [0, 1)", hp->dropout);
  return 0;
}

/* parameter index of tensor k of block l, and of the outer tensors */
enum { WTE = 0, WPE = 1 };
static int bidx(int l, int k) { return 2 + l * NPER + k; }
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB };
static int lnf_idx(int L, int k) { return 2 + L * NPER + k; }

static int add(mt_model *m, const char *name, int ndim, int64_t d0, int64_t d1, int unit) {
  int64_t shape[2] = {d0, d1};
  return mt_param_table_add(&m->params, name, ndim, shape, unit);
}

#define PW(k) (params + m->params.p[(k)].offset)
#define GW(k) (grads + m->params.p[(k)].offset)

#define MT_TEMPLATE "models/gpt_t.h"
#include "core/real_t.h"

/* GPT-2 initialisation: N(0, 0.02) for embeddings and linear weights,
 * N(0, 0.02 / sqrt(2 L)) for the projections into the residual stream,
 * zero biases, LayerNorm weight 1 and bias 0. */
static int gpt_init(mt_model *m, float *params, uint64_t seed) {
  const int L = (m->params.n - 4) / NPER; /* blocks: all but wte, wpe, ln_f */
  for (int k = 0; k < m->params.n; k++) {
    const mt_param *q = &m->params.p[k];
    float *p = params + q->offset;
    const char *nm = q->name;
    size_t len = strlen(nm);
    int is_ln = strstr(nm, "ln_") != NULL;
    int is_bias = len > 5 && !strcmp(nm + len - 5, ".bias");
    if (is_ln || is_bias) {
      float v = (is_ln && !is_bias) ? 1.0f : 0.0f;
      for (size_t i = 0; i < q->numel; i++) p[i] = v;
      continue;
    }
    double std = 0.02;
    if (strstr(nm, "c_proj.weight")) std = 0.02 / sqrt(2.0 * L);
    uint64_t key = mt_key(seed, MT_PURPOSE_INIT_GPT, (uint64_t)k);
    for (size_t i = 0; i < q->numel; i++) { /* Box-Muller */
      double u1 = (mt_rand64(key, 2 * i) >> 11) * (1.0 / 9007199254740992.0);
      double u2 = (mt_rand64(key, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
      p[i] = (float)(std * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2));
    }
  }
  return 0;
}

static int gpt_setup_hp(mt_model *m, const mt_model_hparams *hp, const mt_data_spec *spec,
                        int max_batch, const mt_nn_policy *pol) {
  MT_CALL(gpt_check(&hp->gpt));
  return m->dtype == MT_FP64 ? gpt_setup_f64(m, &hp->gpt, spec, max_batch, pol)
                             : gpt_setup(m, &hp->gpt, spec, max_batch, pol);
}

/* The ops' options and setup: the registry's block of hyper-parameters, no
 * policy (fp32; the trainer makes the model with its own through
 * mt_model_create_policy) */
static int gpt_options(void) { return gpt_read(mt_model_builtin_hparams(&mt_gpt_ops)); }

static int gpt_setup_dt(mt_model *m, const mt_data_spec *spec, int max_batch) {
  return gpt_setup_hp(m, mt_model_builtin_hparams(&mt_gpt_ops), spec, max_batch, NULL);
}

const mt_gpt_hparams *mt_gpt_hparams_of(const mt_model *m) {
  if (!m || m->ops != &mt_gpt_ops || !m->data) return NULL;
  return m->dtype == MT_FP64 ? &((const gpt_f64 *)m->data)->hp : &((const gpt *)m->data)->hp;
}

/* a token data set's samples are windows of -gpt_block + 1 tokens */
static int gpt_window(const mt_model_hparams *h) { return h->gpt.block; }

static double gpt_flops_dt(const mt_model *m) {
  return m->dtype == MT_FP64 ? gpt_flops_f64(m, NULL) : gpt_flops(m, NULL);
}

static double gpt_forward_flops_dt(const mt_model *m) {
  double f = 0;
  (void)(m->dtype == MT_FP64 ? gpt_flops_f64(m, &f) : gpt_flops(m, &f));
  return f;
}

static void gpt_destroy_dt(mt_model *m) {
  if (m->dtype == MT_FP64)
    gpt_destroy_f64(m);
  else
    gpt_destroy(m);
}

const mt_model_ops mt_gpt_ops = {
    .name = "gpt",
    .options = gpt_options,
    .setup = gpt_setup_dt,
    .init = gpt_init,
    .forward = gpt_forward,
    .backward = gpt_backward,
    .flops_per_sample = gpt_flops_dt,
    .forward_flops_per_sample = gpt_forward_flops_dt,
    .destroy = gpt_destroy_dt,
    .forward64 = gpt_forward_f64,
    .backward64 = gpt_backward_f64,
};

static const char *const gpt_train_only[] = {"-gpt_dropout", NULL};

const mt_model_builtin mt_gpt_builtin = {
    .ops = &mt_gpt_ops,
    .defaults = gpt_defaults,
    .setup = gpt_setup_hp,
    .window = gpt_window,
    .print = NULL,
    .train_only = gpt_train_only,
};
