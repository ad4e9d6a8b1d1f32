/* Mixed-precision options: read with mt_option_* (so -help lists them and
 * they are not unknown), checked against the backend's precision policy
 * (c->amp: autocast-style O1 or O2, src/trainer/amp.c).
 * And -precision fp32 | fp64: the element type of the parameters,
 * gradients, optimizer state, activations and losses (src/trainer/state.c),
 * with what fp64 does not cover refused by name. */
#include "config/mt_config.h"
#include "core/core.h"
#include "nn/precision.h"
#include "optim/optim.h"

#include <stdlib.h>
#include <string.h>

int mt_config_amp(mt_config *c) {
  char s[64];
  mt_precision p;
  MT_CALL(mt_option_string("-amp_dtype",
                           "*-amp backends: low-precision type of the GEMMs and convolutions "
                           "(bf16 | fp16)", "bf16", s, sizeof(s)));
  MT_CALL(mt_precision_parse(s, "option -amp_dtype", &p));
  MT_CHECK(p != MT_PREC_FP32, MT_ERR_OPTION, "option -amp_dtype: choose bf16 or fp16");
  c->amp_dtype = (int)p;
  MT_CALL(mt_option_string("-ddp_reduce_dtype",
                           "*-amp backends: type the gradients are all-reduced in (fp32 | bf16 | "
                           "fp16; summed in fp32 on arrival)", "fp32", s, sizeof(s)));
  MT_CALL(mt_precision_parse(s, "option -ddp_reduce_dtype", &p));
  c->ddp_reduce_dtype = (int)p;
  MT_CALL(mt_option_string("-loss_scale",
                           "*-amp backends: loss scaling: auto (dynamic for fp16, none for bf16) | "
                           "dynamic | none | a static scale", "auto", s, sizeof(s)));
  mt_scaler_opts d = mt_scaler_defaults();
  double stat = 0;
  if (!strcmp(s, "auto"))
    c->loss_scale_mode = c->amp_dtype == MT_PREC_FP16 ? 1 : 0;
  else if (!strcmp(s, "dynamic"))
    c->loss_scale_mode = 1;
  else if (!strcmp(s, "none"))
    c->loss_scale_mode = 0;
  else {
    char *end;
    stat = strtod(s, &end);
    MT_CHECK(*s && !*end && stat > 0 && stat < 3.0e38, MT_ERR_OPTION,
             "option -loss_scale: '%s' is not auto, dynamic, none or a positive number", s);
    c->loss_scale_mode = 2;
  }
  MT_CALL(mt_option_real("-loss_scale_init", "dynamic loss scale: initial scale", d.init_scale,
                         1e-30, 3.0e38, &c->loss_scale_init));
  if (c->loss_scale_mode == 2) c->loss_scale_init = stat;
  MT_CALL(mt_option_real("-loss_scale_growth_factor", "dynamic loss scale: growth factor (> 1)",
                         d.growth_factor, 1.0, 1e6, &c->loss_scale_growth_factor));
  MT_CALL(mt_option_real("-loss_scale_backoff_factor",
                         "dynamic loss scale: back-off factor on overflow, in (0, 1)",
                         d.backoff_factor, 0.0, 1.0, &c->loss_scale_backoff_factor));
  MT_CALL(mt_option_int("-loss_scale_growth_interval",
                        "dynamic loss scale: clean steps before the scale grows",
                        d.growth_interval, 1, 1000000000L, &c->loss_scale_growth_interval));
  MT_CALL(mt_option_int("-loss_scale_hysteresis",
                        "dynamic loss scale: overflows absorbed before a back-off (DeepSpeed)",
                        d.hysteresis, 1, 1000000L, &c->loss_scale_hysteresis));
  double mn = d.min_scale < c->loss_scale_init ? d.min_scale : c->loss_scale_init;
  MT_CALL(mt_option_real("-loss_scale_min", "dynamic loss scale: minimum scale (stop below)", mn,
                         1e-30, 3.0e38, &c->loss_scale_min));
  if (c->loss_scale_mode) { /* the scaler's own range checks, naming the options */
    mt_scaler_opts o = d;
    o.init_scale = c->loss_scale_init;
    o.growth_factor = c->loss_scale_growth_factor;
    o.backoff_factor = c->loss_scale_backoff_factor;
    o.growth_interval = c->loss_scale_growth_interval;
    o.hysteresis = c->loss_scale_hysteresis;
    o.min_scale = c->loss_scale_mode == 2 ? c->loss_scale_init : c->loss_scale_min;
    o.dynamic = c->loss_scale_mode == 1;
    MT_CALL(mt_scaler_check(&o));
  }
  /* given under a backend without the policy (or, -ddp_reduce_dtype, whose
   * strategy all-reduces in fp32 only): refused by config_applies.c */
  if (!c->amp) c->loss_scale_mode = 0;
  return 0;
}

int mt_config_precision(mt_config *c) {
  char s[64];
  MT_CALL(mt_option_string("-precision",
                           "Element type of the parameters, gradients, optimizer state, "
                           "activations and losses: fp32 | fp64 (double end to end, as PyTorch's "
                           "model.double(); backends sp and ddp)", "fp32", s, sizeof(s)));
  MT_CHECK(!strcmp(s, "fp32") || !strcmp(s, "fp64"), MT_ERR_OPTION,
           "option -precision: '%s' is not one of: fp32, fp64", s);
  c->dtype = !strcmp(s, "fp64") ? MT_FP64 : MT_FP32;
  if (c->dtype == MT_FP32) return 0;
  /* fp64 runs the sp and ddp rules on double buffers; the rest is fp32 */
  MT_CHECK(!c->amp, MT_ERR_OPTION,
           "option -precision fp64: -backend %s is mixed precision (low-precision compute on "
           "fp32 parameters); fp64 runs with -backend sp or ddp", c->backend);
  MT_CHECK(!c->dp, MT_ERR_OPTION,
           "option -precision fp64: the DP-SGD backend %s is fp32 only; use -backend sp or ddp",
           c->backend);
  MT_CHECK(!c->fsdp, MT_ERR_OPTION,
           "option -precision fp64: -backend %s shards fp32 buffers only; use -backend ddp",
           c->backend);
  MT_CHECK(c->backend_fp64, MT_ERR_OPTION,
           "option -precision fp64: backend %s has no double-precision operations "
           "(sync_params64, reduce_grads64 in its mt_backend_ops)", c->backend);
  const mt_model_ops *m = mt_model_find(c->model);
  MT_CHECK(m && m->forward64 && m->backward64, MT_ERR_OPTION,
           "option -precision fp64: model %s has no double-precision operations (forward64, "
           "backward64 in its mt_model_ops)", c->model);
  return 0;
}
