/* The DP-SGD options: read with mt_option_* (so -help lists them and the
 * configuration hash covers them) after the other options are derived, and
 * checked against the backend and the options DP-SGD changes the meaning
 * of. Every message names the option. */
#include "config/mt_config.h"
#include "core/core.h"
#include "models/models.h"

#include <petscsys.h>
#include <string.h>

static int given(const char *name) {
  PetscBool set = PETSC_FALSE;
  if (PetscOptionsHasName(NULL, NULL, name, &set)) return 0;
  return set == PETSC_TRUE;
}

int mt_config_dp(mt_config *c) {
  long v;
  MT_CALL(mt_option_real("-dp_noise_multiplier",
                         "DP-SGD: noise standard deviation / -dp_max_grad_norm (or give "
                         "-dp_target_epsilon)", 0, 0, 1e6, &c->dp_noise_multiplier));
  if (!given("-dp_noise_multiplier")) c->dp_noise_multiplier = -1;
  MT_CALL(mt_option_real("-dp_max_grad_norm", "DP-SGD: per-sample gradient clipping norm C", 1.0,
                         0, 1e30, &c->dp_max_grad_norm));
  MT_CHECK(c->dp_max_grad_norm > 0, MT_ERR_OPTION,
           "option -dp_max_grad_norm: must be > 0 (it is %g)", c->dp_max_grad_norm);
  MT_CALL(mt_option_real("-dp_delta",
                         "DP-SGD: delta of the (epsilon, delta) guarantee (0: 1/N rounded down "
                         "to a power of ten)", 0, 0, 0.999999, &c->dp_delta));
  MT_CALL(mt_option_real("-dp_target_epsilon",
                         "DP-SGD: privacy budget; alone, the noise multiplier is solved for the "
                         "planned epochs; training stops before a step would exceed it (0: none)",
                         0, 0, 1e6, &c->dp_target_epsilon));
  MT_CALL(mt_option_string("-dp_sampling",
                           "DP-SGD: poisson (each sample joins each step with probability "
                           "batch_size/N) or shuffle (fixed batches of a permutation)",
                           "poisson", c->dp_sampling, sizeof(c->dp_sampling)));
  MT_CHECK(!strcmp(c->dp_sampling, "poisson") || !strcmp(c->dp_sampling, "shuffle"),
           MT_ERR_OPTION, "option -dp_sampling: '%s' is not one of: poisson, shuffle",
           c->dp_sampling);
  MT_CALL(mt_option_int("-dp_max_physical_batch",
                        "DP-SGD: a rank processes its share of a logical batch in chunks of at "
                        "most this many samples (0: -batch_size / ranks)", 0, 0, 1 << 24, &v));
  c->dp_max_physical_batch = (int)v;
  MT_CALL(mt_option_string("-dp_accountant", "DP-SGD: privacy accountant (rdp)", "rdp",
                           c->dp_accountant, sizeof(c->dp_accountant)));
  MT_CHECK(!strcmp(c->dp_accountant, "rdp"), MT_ERR_OPTION,
           "option -dp_accountant: '%s' is not one of: rdp", c->dp_accountant);
  MT_CALL(mt_option_string("-dp_grad_sample",
                           "DP-SGD: per-sample clipping in batched passes where the model finds "
                           "its per-sample norms (auto: the mlp and the cnn; Opacus's ghost "
                           "clipping) or one forward+backward per sample (exact)",
                           "auto", c->dp_grad_sample, sizeof(c->dp_grad_sample)));
  MT_CHECK(!strcmp(c->dp_grad_sample, "auto") || !strcmp(c->dp_grad_sample, "exact"),
           MT_ERR_OPTION, "option -dp_grad_sample: '%s' is not one of: auto, exact",
           c->dp_grad_sample);
  if (!c->dp) return 0; /* given under another backend: refused by config_applies.c */
  MT_CHECK(c->dp_noise_multiplier >= 0 || c->dp_target_epsilon > 0, MT_ERR_OPTION,
           "option -dp_noise_multiplier: -backend %s needs -dp_noise_multiplier or "
           "-dp_target_epsilon", c->backend);
  /* the cnn's -cnn_batchnorm as given, whatever -model (every built-in's
   * options are read and checked; mt_model_read_options) */
  const mt_model_hparams *cnn = mt_model_builtin_hparams(&mt_cnn_ops);
  MT_CHECK(!cnn || !cnn->cnn.batchnorm, MT_ERR_OPTION,
           "option -cnn_batchnorm: batch norm mixes the samples of a batch, so per-sample "
           "gradients do not exist and DP-SGD cannot bound them (Opacus refuses it too); "
           "not available with -backend %s", c->backend);
  MT_CHECK(!given("-micro_batch_size") && c->accum_steps == 1, MT_ERR_OPTION,
           "option -micro_batch_size: not used by -backend %s, which processes a logical batch "
           "in chunks of -dp_max_physical_batch", c->backend);
  MT_CHECK(c->clip_grad_norm == 0 && c->clip_grad_value == 0, MT_ERR_OPTION,
           "option %s: -backend %s clips each sample's gradient (-dp_max_grad_norm); global "
           "clipping is not available", c->clip_grad_norm > 0 ? "-clip_grad_norm" :
           "-clip_grad_value", c->backend);
  return 0;
}

void mt_config_dp_print(const mt_config *c, FILE *f) {
  if (!c->dp) return;
  fprintf(f, "  dp-sgd: sampling %s, max_grad_norm %g, ", c->dp_sampling, c->dp_max_grad_norm);
  if (c->dp_noise_multiplier >= 0)
    fprintf(f, "noise_multiplier %g", c->dp_noise_multiplier);
  else
    fprintf(f, "noise_multiplier solved");
  if (c->dp_target_epsilon > 0) fprintf(f, ", target_epsilon %g", c->dp_target_epsilon);
  if (c->dp_delta > 0) fprintf(f, ", delta %g", c->dp_delta);
  else fprintf(f, ", delta 1/N rounded down");
  fprintf(f, ", max_physical_batch %d, accountant %s, grad_sample %s\n",
          c->dp_max_physical_batch, c->dp_accountant, c->dp_grad_sample);
}
