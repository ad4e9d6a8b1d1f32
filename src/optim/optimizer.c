/* Optimizers as objects (mpitrain.h: mt_optimizer_ops): the registry for
 * -optimizer, the wrappers every caller uses, and the built-ins SGD and
 * AdamW over the typed steps of optim.h (float, or double under
 * -precision fp64). The trainer's CPU and GPU steps, sharded or not, hold
 * one mt_optimizer and never ask which one it is; the GPU asks its device
 * trait (mt_optim_device). */
#include "core/core.h"
#include "optim/optim.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- SGD */

static int sgd_setup(mt_optimizer *o) {
  if (o->hp.momentum <= 0) return 0; /* no state */
  return mt_calloc(&o->data, o->n, o->dtype == MT_FP64 ? sizeof(double) : sizeof(float),
                   "momentum buffers");
}

mt_sgd_hparams mt_optim_sgd_hparams(const mt_optim_hparams *hp) {
  return (mt_sgd_hparams){hp->momentum, hp->dampening, hp->weight_decay, hp->nesterov};
}

static int sgd_step(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
                    size_t lo, double lr, long step, int all_decay) {
  const int first_step = step == 0; /* the momentum buffer starts as the gradient */
  const mt_sgd_hparams h = mt_optim_sgd_hparams(&o->hp);
  if (o->dtype == MT_FP64)
    return mt_sgd_step_f64(tab, params, grads, o->data ? (double *)o->data + lo : NULL,
                           first_step, &h, all_decay, lr);
  return mt_sgd_step(tab, params, grads, o->data ? (float *)o->data + lo : NULL, first_step, &h,
                     all_decay, lr);
}

static int sgd_state(mt_optimizer *o, int k, const char **name, void **data) {
  if (k != 0 || !o->data) return 0;
  *name = "momentum_buffer";
  *data = o->data;
  return 1;
}

static void sgd_destroy(mt_optimizer *o) { mt_free(&o->data); }

static const mt_optimizer_ops sgd_ops = {.name = "sgd",
                                         .setup = sgd_setup,
                                         .step = sgd_step,
                                         .state = sgd_state,
                                         .destroy = sgd_destroy,
                                         .device = MT_OPTIM_DEVICE_SGD};

/* -------------------------------------------------------------- AdamW */

typedef struct {
  mt_adamw_state s;
  mt_adamw_state_f64 s64;
} adamw_data;

mt_adamw_hparams mt_optim_adamw_hparams(const mt_optim_hparams *hp) {
  mt_adamw_hparams h = mt_adamw_defaults();
  h.beta1 = hp->beta1;
  h.beta2 = hp->beta2;
  h.eps = hp->eps;
  h.weight_decay = hp->weight_decay;
  h.amsgrad = hp->amsgrad;
  return h;
}

static mt_adamw_hparams adamw_h(const mt_optimizer *o) { return mt_optim_adamw_hparams(&o->hp); }

static int adamw_setup(mt_optimizer *o) {
  const mt_adamw_hparams h = adamw_h(o);
  MT_CALL(mt_adamw_check(&h));
  adamw_data *d;
  MT_CALL(mt_calloc(&d, 1, sizeof(*d), "AdamW state"));
  o->data = d;
  if (o->dtype == MT_FP64) return mt_adamw_state_init_f64(&d->s64, o->n, h.amsgrad);
  return mt_adamw_state_init(&d->s, o->n, h.amsgrad);
}

/* The state's piece from element lo on, for a step over a range of it. */
#define ADAMW_PIECE(S, lo)                                                    \
  do {                                                                       \
    (S).exp_avg += (lo);                                                     \
    (S).exp_avg_sq += (lo);                                                  \
    if ((S).max_exp_avg_sq) (S).max_exp_avg_sq += (lo);                      \
    (S).n -= (lo);                                                           \
  } while (0)

static int adamw_step(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
                      size_t lo, double lr, long step, int all_decay) {
  adamw_data *d = o->data;
  const mt_adamw_hparams h = adamw_h(o);
  MT_CHECK(lo <= o->n, MT_ERR_ARG, "AdamW: a range from %zu of %zu elements", lo, o->n);
  if (o->dtype == MT_FP64) {
    mt_adamw_state_f64 s = d->s64;
    ADAMW_PIECE(s, lo);
    s.step = step; /* the step makes it step + 1 */
    MT_CALL(mt_adamw_step_f64(tab, params, grads, &s, &h, all_decay, lr));
    return 0;
  }
  mt_adamw_state s = d->s;
  ADAMW_PIECE(s, lo);
  s.step = step; /* the step makes it step + 1 */
  MT_CALL(mt_adamw_step(tab, params, grads, &s, &h, all_decay, lr));
  return 0;
}

static int adamw_state(mt_optimizer *o, int k, const char **name, void **data) {
  adamw_data *d = o->data;
  const int f64 = o->dtype == MT_FP64;
  void *bufs[3] = {f64 ? (void *)d->s64.exp_avg : (void *)d->s.exp_avg,
                   f64 ? (void *)d->s64.exp_avg_sq : (void *)d->s.exp_avg_sq,
                   f64 ? (void *)d->s64.max_exp_avg_sq : (void *)d->s.max_exp_avg_sq};
  static const char *const names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  if (k < 0 || k > 2 || !bufs[k]) return 0;
  *name = names[k];
  *data = bufs[k];
  return 1;
}

static void adamw_destroy(mt_optimizer *o) {
  adamw_data *d = o->data;
  if (!d) return;
  mt_adamw_state_free(&d->s);
  mt_adamw_state_free_f64(&d->s64);
  mt_free(&o->data);
}

static const mt_optimizer_ops adamw_ops = {.name = "adamw",
                                           .setup = adamw_setup,
                                           .step = adamw_step,
                                           .state = adamw_state,
                                           .destroy = adamw_destroy,
                                           .device = MT_OPTIM_DEVICE_ADAMW};

/* ----------------------------------------------------------- registry */

#define MAX_OPTIMIZERS 16
static const mt_optimizer_ops *optims_[MAX_OPTIMIZERS];
static int noptims_;

static void builtins(void) {
  if (noptims_) return;
  optims_[noptims_++] = &sgd_ops;
  optims_[noptims_++] = &adamw_ops;
}

const mt_optimizer_ops *mt_optimizer_find(const char *name) {
  builtins();
  for (int i = 0; i < noptims_; i++)
    if (!strcmp(optims_[i]->name, name)) return optims_[i];
  return NULL;
}

void mt_optimizer_names(char *buf, size_t len) {
  builtins();
  size_t k = 0;
  if (len) buf[0] = '\0';
  for (int i = 0; i < noptims_ && k < len; i++) {
    int w = snprintf(buf + k, len - k, "%s%s", i ? ", " : "", optims_[i]->name);
    if (w < 0) break;
    k += (size_t)w;
  }
}

int mt_optimizer_register(const mt_optimizer_ops *ops) {
  builtins();
  MT_CHECK(ops && ops->name && ops->setup && ops->step, MT_ERR_ARG,
           "mt_optimizer_register: name, setup and step are required");
  /* the device kernels are the built-ins': their state is sgd's or adamw's */
  MT_CHECK(ops->device == MT_OPTIM_DEVICE_NONE, MT_ERR_ARG,
           "mt_optimizer_register %s: mt_optimizer_ops.device names the built-in sgd's and "
           "adamw's device kernels; a registered optimizer has none", ops->name);
  for (int i = 0; i < noptims_; i++)
    if (!strcmp(optims_[i]->name, ops->name)) {
      optims_[i] = ops;
      return 0;
    }
  MT_CHECK(noptims_ < MAX_OPTIMIZERS, MT_ERR_ARG, "too many optimizers registered");
  optims_[noptims_++] = ops;
  return 0;
}

int mt_optimizer_create(const char *name, const mt_optim_hparams *hp, mt_dtype dtype, size_t n,
                        mt_optimizer **out) {
  *out = NULL;
  const mt_optimizer_ops *ops = mt_optimizer_find(name);
  if (!ops) {
    char names[256];
    mt_optimizer_names(names, sizeof(names));
    return MT_ERR(MT_ERR_OPTION, "option -optimizer: '%s' is not one of: %s", name, names);
  }
  mt_optimizer *o;
  MT_CALL(mt_calloc(&o, 1, sizeof(*o), "optimizer"));
  *o = (mt_optimizer){ops, *hp, dtype, n, NULL};
  int err = ops->setup(o);
  if (err) {
    mt_optimizer_destroy(&o);
    return err;
  }
  *out = o;
  return 0;
}

int mt_optimizer_step(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
                      size_t lo, double lr, long step, int all_decay) {
  MT_CHECK(lo + tab->total <= o->n, MT_ERR_ARG,
           "optimizer %s: a step over [%zu, %zu) of a state of %zu elements", o->ops->name, lo,
           lo + tab->total, o->n);
  return o->ops->step(o, tab, params, grads, lo, lr, step, all_decay);
}

int mt_optimizer_state(mt_optimizer *o, const char **names, void **data, int max) {
  int k = 0;
  while (o->ops->state && k < max && o->ops->state(o, k, &names[k], &data[k])) k++;
  return k;
}

void mt_optimizer_destroy(mt_optimizer **po) {
  mt_optimizer *o = *po;
  if (!o) return;
  if (o->ops->destroy) o->ops->destroy(o);
  mt_free(po);
}
