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

/* -mlp_hidden and -mlp_dropout into hp (mt_model_read_options): the names,
 * defaults, ranges and messages mt_config had. */
static int mlp_read(mt_model_hparams *h) {
  mt_mlp_hparams *hp = &h->mlp;
  int err = mt_model_option_ints("-mlp_hidden", "MLP hidden layer sizes, comma-separated",
                                 "1024,1024", hp->hidden, MT_MAX_HIDDEN, &hp->nhidden);
  if (!err && hp->nhidden < 1) err = MT_ERR(MT_ERR_OPTION, "option -mlp_hidden: at least one hidden layer");
  err = mt_first_err(err, mt_option_real("-mlp_dropout", "mlp: dropout probability after each hidden layer",
                                         0, 0, 0.999999, &hp->dropout));
  return err;
}

static void mlp_defaults(mt_model_hparams *h) {
  *h = (mt_model_hparams){.mlp = {.hidden = {1024, 1024}, .nhidden = 2, .dropout = 0.0}};
}

static int mlp_check(const mt_mlp_hparams *hp) {
  MT_CHECK(hp->nhidden >= 1 && hp->nhidden <= MT_MAX_HIDDEN, MT_ERR_OPTION,
           "option -mlp_hidden: 1 to %d layers", MT_MAX_HIDDEN);
  for (int i = 0; i < hp->nhidden; i++)
    MT_CHECK(hp->hidden[i] >= 1, MT_ERR_OPTION, "option -mlp_hidden: %d is not a positive size",
             hp->hidden[i]);
  MT_CHECK(hp->dropout >= 0 && hp->dropout < 1, MT_ERR_OPTION,
           "option -mlp_dropout: %g is not in [0, 1)", hp->dropout);
  return 0;
}

/* PyTorch's nn.Linear default: kaiming_uniform_(a=sqrt(5)) for the weight,
 * i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias. */
static int mlp_init(mt_model *m, float *params, uint64_t seed) {
  return mt_init_torch_default(m, params, seed, MT_PURPOSE_INIT);
}

#define MT_TEMPLATE "models/mlp_t.h"
#include "core/real_t.h"

static int mlp_setup_hp(mt_model *m, const mt_model_hparams *hp, const mt_data_spec *spec,
                        int max_batch, const mt_nn_policy *pol) {
  MT_CALL(mlp_check(&hp->mlp));
  return m->dtype == MT_FP64 ? mlp_setup_f64(m, &hp->mlp, spec, max_batch, pol)
                             : mlp_setup(m, &hp->mlp, spec, max_batch, pol);
}

/* The ops' options and setup: the registry's block of hyper-parameters, no
 * policy (fp32; the trainer makes the model with its own through
 * mt_model_create_policy) */
static int mlp_options(void) { return mlp_read(mt_model_builtin_hparams(&mt_mlp_ops)); }

static int mlp_setup_dt(mt_model *m, const mt_data_spec *spec, int max_batch) {
  return mlp_setup_hp(m, mt_model_builtin_hparams(&mt_mlp_ops), spec, max_batch, NULL);
}

const mt_mlp_hparams *mt_mlp_hparams_of(const mt_model *m) {
  if (!m || m->ops != &mt_mlp_ops || !m->data) return NULL;
  return m->dtype == MT_FP64 ? &((const mlp_f64 *)m->data)->hp : &((const mlp *)m->data)->hp;
}

static void mlp_print(const mt_model_hparams *h, FILE *f, int line) {
  if (line) return;
  fprintf(f, " (hidden ");
  for (int i = 0; i < h->mlp.nhidden; i++) fprintf(f, "%s%d", i ? "," : "", h->mlp.hidden[i]);
  fprintf(f, ")");
}

static double mlp_flops_dt(const mt_model *m) {
  return m->dtype == MT_FP64 ? mlp_flops_f64(m, NULL) : mlp_flops(m, NULL);
}

static double mlp_forward_flops_dt(const mt_model *m) {
  double f = 0;
  (void)(m->dtype == MT_FP64 ? mlp_flops_f64(m, &f) : mlp_flops(m, &f));
  return f;
}

static void mlp_destroy_dt(mt_model *m) {
  if (m->dtype == MT_FP64)
    mlp_destroy_f64(m);
  else
    mlp_destroy(m);
}

const mt_model_ops mt_mlp_ops = {
    .name = "mlp",
    .options = mlp_options,
    .setup = mlp_setup_dt,
    .init = mlp_init,
    .forward = mlp_forward,
    .backward = mlp_backward,
    .flops_per_sample = mlp_flops_dt,
    .forward_flops_per_sample = mlp_forward_flops_dt,
    .destroy = mlp_destroy_dt,
    .forward64 = mlp_forward_f64,
    .backward64 = mlp_backward_f64,
    .backward_clipped = mlp_backward_clipped,
    .sets_grads = 1,
};

static const char *const mlp_train_only[] = {"-mlp_dropout", NULL};

const mt_model_builtin mt_mlp_builtin = {
    .ops = &mt_mlp_ops,
    .defaults = mlp_defaults,
    .setup = mlp_setup_hp,
    .window = NULL,
    .print = mlp_print,
    .train_only = mlp_train_only,
};
