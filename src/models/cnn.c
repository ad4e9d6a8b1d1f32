/* CNN: blocks of Conv2d (k x k, padding k/2) [-> BatchNorm2d] -> ReLU ->
 * MaxPool2d(2), then Flatten -> Linear(hidden) -> ReLU [-> Dropout] ->
 * Linear(classes), softmax cross-entropy. Parameter names follow the
 * PyTorch module
 *
 *   features   = Sequential(Conv2d, [BatchNorm2d,] ReLU, MaxPool2d, ...)
 *   classifier = Sequential(Flatten, Linear, ReLU, Linear)
 *
 * i.e. features.{3l} (or {4l} conv and {4l+1} batch norm with
 * -cnn_batchnorm) and classifier.1 / classifier.3; dropout (-cnn_dropout)
 * is functional, with no index (see validation/torch_models.py). Batch
 * norm's running_mean and running_var are model buffers (mt_model): in
 * training the statistics are those of the forward's batch and the
 * running ones are updated with momentum 0.1 (PyTorch's defaults, eps
 * 1e-5); in evaluation the running ones normalise. The input shape comes
 * from the data file: (C,H,W), or (H,W) read as one channel. The model in
 * float and in double (-precision fp64) is one template, cnn_t.h. */
#define MT_NN_GENERIC
#include "core/core.h"
#include "optim/dpsgd.h"
#include "models/models.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MT_PURPOSE_INIT_CNN 3
#define MAX_BLOCKS MT_CNN_MAX_BLOCKS
#define BN_EPS 1e-5 /* as the model's type: (REAL)BN_EPS */
#define BN_MOMENTUM 0.1
#define DROPOUT_LAYER 64 /* the classifier's dropout in mt_model_dropout keys */

/* -cnn_channels, -cnn_kernel, -cnn_hidden, -cnn_batchnorm and -cnn_dropout
 * into hp (mt_model_read_options): the names, defaults, ranges and
 * messages mt_config had. */
static int cnn_read(mt_model_hparams *h) {
  mt_cnn_hparams *hp = &h->cnn;
  long kernel = 3, hidden = 128;
  int err = mt_model_option_ints("-cnn_channels",
                                 "cnn: output channels of each conv block (conv, ReLU, 2x2 max-pool)",
                                 "32,64", hp->channels, MAX_BLOCKS, &hp->nblocks);
  if (!err && hp->nblocks < 1)
    err = MT_ERR(MT_ERR_OPTION, "option -cnn_channels: 1 to %d blocks", MAX_BLOCKS);
  int e = mt_option_int("-cnn_kernel", "cnn: odd kernel size (padding k/2)", 3, 1, 31, &kernel);
  if (!e && kernel % 2 == 0)
    e = MT_ERR(MT_ERR_OPTION, "option -cnn_kernel: %ld must be odd (allowed: 1, 3, ..., 31)", kernel);
  err = mt_first_err(err, e);
  err = mt_first_err(err, mt_option_int("-cnn_hidden", "cnn: hidden units of the classifier", 128,
                                         1, 1 << 20, &hidden));
  err = mt_first_err(err, mt_model_option_bool("-cnn_batchnorm",
                                               "cnn: BatchNorm2d after each convolution (running "
                                               "statistics; under ddp rank 0's are broadcast every "
                                               "step)", 0, &hp->batchnorm));
  err = mt_first_err(err, mt_option_real("-cnn_dropout",
                                         "cnn: dropout probability after the hidden layer", 0, 0,
                                         0.999999, &hp->dropout));
  hp->kernel = (int)kernel;
  hp->hidden = (int)hidden;
  return err;
}

static void cnn_defaults(mt_model_hparams *h) {
  *h = (mt_model_hparams){.cnn = {.channels = {32, 64}, .nblocks = 2, .kernel = 3, .hidden = 128,
                                  .batchnorm = 0, .dropout = 0.0}};
}

static int cnn_check(const mt_cnn_hparams *hp) {
  MT_CHECK(hp->nblocks >= 1 && hp->nblocks <= MAX_BLOCKS, MT_ERR_OPTION,
           "option -cnn_channels: 1 to %d blocks", MAX_BLOCKS);
  for (int l = 0; l < hp->nblocks; l++)
    MT_CHECK(hp->channels[l] >= 1, MT_ERR_OPTION, "option -cnn_channels: %d is not a positive count",
             hp->channels[l]);
  MT_CHECK(hp->kernel >= 1 && hp->kernel % 2 == 1, MT_ERR_OPTION,
           "option -cnn_kernel: %d must be odd (padding k/2 keeps the size)", hp->kernel);
  MT_CHECK(hp->hidden >= 1, MT_ERR_OPTION, "option -cnn_hidden: %d is not a positive count",
           hp->hidden);
  MT_CHECK(hp->dropout >= 0 && hp->dropout < 1, MT_ERR_OPTION,
           "option -cnn_dropout: %g is not in [0, 1)", hp->dropout);
  return 0;
}

static size_t numel(const mt_pool2d_shape *s, int out) {
  return (size_t)s->C * (out ? (size_t)s->OH * s->OW : (size_t)s->H * s->W);
}

#define MT_TEMPLATE "models/cnn_t.h"
#include "core/real_t.h"

/* PyTorch's Conv2d/Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
 * weight and bias, fan_in = in_channels * kh * kw (or in_features); batch
 * norm: weight 1, bias 0, running mean 0, running variance 1 (cnn_init_bn).
 * Always float: mt_model_init widens it for -precision fp64. */
static int cnn_init(mt_model *m, float *params, uint64_t seed) {
  MT_CALL(mt_init_torch_default(m, params, seed, MT_PURPOSE_INIT_CNN));
  if (m->dtype == MT_FP64)
    cnn_init_bn_f64(m, params);
  else
    cnn_init_bn(m, params);
  return 0;
}

static int cnn_setup_hp(mt_model *m, const mt_model_hparams *hp, const mt_data_spec *spec,
                        int max_batch, const mt_nn_policy *pol) {
  MT_CALL(cnn_check(&hp->cnn));
  return m->dtype == MT_FP64 ? cnn_setup_f64(m, &hp->cnn, spec, max_batch, pol)
                             : cnn_setup(m, &hp->cnn, spec, max_batch, pol);
}

/* The ops' options and setup: the registry's block of hyper-parameters, no
 * policy (fp32; the trainer makes the model with its own through
 * mt_model_create_policy) */
static int cnn_options(void) { return cnn_read(mt_model_builtin_hparams(&mt_cnn_ops)); }

static int cnn_setup_dt(mt_model *m, const mt_data_spec *spec, int max_batch) {
  return cnn_setup_hp(m, mt_model_builtin_hparams(&mt_cnn_ops), spec, max_batch, NULL);
}

const mt_cnn_hparams *mt_cnn_hparams_of(const mt_model *m) {
  if (!m || m->ops != &mt_cnn_ops || !m->data) return NULL;
  return m->dtype == MT_FP64 ? &((const cnn_f64 *)m->data)->hp : &((const cnn *)m->data)->hp;
}

static void cnn_print(const mt_model_hparams *h, FILE *f, int line) {
  if (!line) return;
  fprintf(f, "  cnn: channels %d blocks, kernel %d, hidden %d, batchnorm %d, dropout %g\n",
          h->cnn.nblocks, h->cnn.kernel, h->cnn.hidden, h->cnn.batchnorm, h->cnn.dropout);
}

static double cnn_flops_dt(const mt_model *m) {
  return m->dtype == MT_FP64 ? cnn_flops_f64(m, NULL) : cnn_flops(m, NULL);
}

static double cnn_forward_flops_dt(const mt_model *m) {
  double f = 0;
  (void)(m->dtype == MT_FP64 ? cnn_flops_f64(m, &f) : cnn_flops(m, &f));
  return f;
}

static void cnn_destroy_dt(mt_model *m) {
  if (m->dtype == MT_FP64)
    cnn_destroy_f64(m);
  else
    cnn_destroy(m);
}

const mt_model_ops mt_cnn_ops = {
    .name = "cnn",
    .options = cnn_options,
    .setup = cnn_setup_dt,
    .init = cnn_init,
    .forward = cnn_forward,
    .backward = cnn_backward,
    .flops_per_sample = cnn_flops_dt,
    .forward_flops_per_sample = cnn_forward_flops_dt,
    .destroy = cnn_destroy_dt,
    .forward64 = cnn_forward_f64,
    .backward64 = cnn_backward_f64,
    .backward_clipped = cnn_backward_clipped,
};

static const char *const cnn_train_only[] = {"-cnn_dropout", NULL};

const mt_model_builtin mt_cnn_builtin = {
    .ops = &mt_cnn_ops,
    .defaults = cnn_defaults,
    .setup = cnn_setup_hp,
    .window = NULL,
    .print = cnn_print,
    .train_only = cnn_train_only,
};
