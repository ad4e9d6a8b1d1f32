/* MLP: Linear -> ReLU [-> Dropout] -> ... -> Linear, then softmax
 * cross-entropy over class labels, or mean-squared error over float
 * targets (regression: /y float (N,K), K outputs, per-sample loss the mean
 * over K, so the batch loss is PyTorch's MSELoss(reduction='mean')).
 * Parameter names follow torch.nn.Sequential: layers.0.weight, layers.0.bias,
 * layers.2.weight, ... (ReLUs take the odd indices; dropout, -mlp_dropout,
 * is functional and has no index, as in validation/torch_models.py).
 * The model in float and in double (-precision fp64) is one template,
 * mlp_t.h; the layers are called by their plain names (MT_NN_GENERIC). */
#define MT_NN_GENERIC
#include "models/models.h"
#include "nn/nn.h"
#include "core/core.h"
#include "optim/dpsgd.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MT_PURPOSE_INIT 2

static int hidden_[MT_MAX_HIDDEN] = {1024, 1024};
static int nhidden_ = 2;
static double dropout_ = 0.0;

int mt_mlp_set(const int *sizes, int n, double dropout) {
  MT_CHECK(n >= 1 && n <= MT_MAX_HIDDEN, MT_ERR_OPTION, "option -mlp_hidden: 1 to %d layers", MT_MAX_HIDDEN);
  MT_CHECK(dropout >= 0 && dropout < 1, MT_ERR_OPTION, "option -mlp_dropout: %g is not in [0, 1)", dropout);
  memcpy(hidden_, sizes, (size_t)n * sizeof(int));
  nhidden_ = n;
  dropout_ = dropout;
  return 0;
}

/* PyTorch's nn.Linear default: kaiming_uniform_(a=sqrt(5)) for the weight,
 * i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias. */
static int mlp_init(mt_model *m, float *params, uint64_t seed) {
  return mt_init_torch_default(m, params, seed, MT_PURPOSE_INIT);
}

#define MT_TEMPLATE "models/mlp_t.h"
#include "core/real_t.h"

static int mlp_setup_dt(mt_model *m, const mt_data_spec *spec, int max_batch) {
  return m->dtype == MT_FP64 ? mlp_setup_f64(m, spec, max_batch) : mlp_setup(m, spec, max_batch);
}

static double mlp_flops_dt(const mt_model *m) {
  return m->dtype == MT_FP64 ? mlp_flops_f64(m) : mlp_flops(m);
}

static void mlp_destroy_dt(mt_model *m) {
  if (m->dtype == MT_FP64)
    mlp_destroy_f64(m);
  else
    mlp_destroy(m);
}

const mt_model_ops mt_mlp_ops = {
    .name = "mlp",
    .setup = mlp_setup_dt,
    .init = mlp_init,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .flops_per_sample = mlp_flops_dt,
    .destroy = mlp_destroy_dt,
    .forward64 = mlp_forward_f64,
    .backward64 = mlp_backward_f64,
    .backward_clipped = mlp_backward_clipped,
};
