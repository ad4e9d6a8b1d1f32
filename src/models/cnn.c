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
#define MAX_BLOCKS 8
#define BN_EPS 1e-5 /* as the model's type: (REAL)BN_EPS */
#define BN_MOMENTUM 0.1
#define DROPOUT_LAYER 64 /* the classifier's dropout in mt_model_dropout keys */

static int channels_[MAX_BLOCKS] = {32, 64};
static int nblocks_ = 2, kernel_ = 3, hidden_ = 128, batchnorm_ = 0;
static double dropout_ = 0.0;

int mt_cnn_set(const int *channels, int n, int kernel, int hidden, int batchnorm, double dropout) {
  MT_CHECK(n >= 1 && n <= MAX_BLOCKS, MT_ERR_OPTION, "option -cnn_channels: 1 to %d blocks", MAX_BLOCKS);
  MT_CHECK(kernel >= 1 && kernel % 2 == 1, MT_ERR_OPTION,
           "option -cnn_kernel: %d must be odd (padding k/2 keeps the size)", kernel);
  MT_CHECK(dropout >= 0 && dropout < 1, MT_ERR_OPTION, "option -cnn_dropout: %g is not in [0, 1)", dropout);
  memcpy(channels_, channels, (size_t)n * sizeof(int));
  nblocks_ = n;
  kernel_ = kernel;
  hidden_ = hidden;
  batchnorm_ = batchnorm;
  dropout_ = dropout;
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

static int cnn_setup_dt(mt_model *m, const mt_data_spec *spec, int max_batch) {
  return m->dtype == MT_FP64 ? cnn_setup_f64(m, spec, max_batch) : cnn_setup(m, spec, max_batch);
}

static double cnn_flops_dt(const mt_model *m) {
  return m->dtype == MT_FP64 ? cnn_flops_f64(m) : cnn_flops(m);
}

static void cnn_destroy_dt(mt_model *m) {
  if (m->dtype == MT_FP64)
    cnn_destroy_f64(m);
  else
    cnn_destroy(m);
}

const mt_model_ops mt_cnn_ops = {
    .name = "cnn",
    .setup = cnn_setup_dt,
    .init = cnn_init,
    .forward = cnn_forward,
    .backward = cnn_backward,
    .flops_per_sample = cnn_flops_dt,
    .destroy = cnn_destroy_dt,
    .forward64 = cnn_forward_f64,
    .backward64 = cnn_backward_f64,
    .backward_clipped = cnn_backward_clipped,
};
