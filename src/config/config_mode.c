/* The options of the modes that use a trained model (-mode evaluate,
 * predict, ...; trainer/mode.h): what they need, and their lines of
 * mt_config_print. The training options they do not read are refused by
 * the mode (mt_mode_check_options), by name. */
#include "config/mt_config.h"
#include "models/models.h"
#include "mpitrain/mpitrain.h"

#include <string.h>

int mt_config_mode(mt_config *c) {
  const int predict = !strcmp(c->mode, "predict"), evaluate = !strcmp(c->mode, "evaluate");
  /* one forward of a rank takes an evaluation batch */
  c->micro_batch_size = c->val_batch_size;
  c->accum_steps = 1;
  MT_CHECK(c->model_file[0], MT_ERR_OPTION,
           "option -model_file: -mode %s needs the trained model's file (model_final.h5, "
           "model_best.h5 or a checkpoint)", c->mode);
  MT_CHECK(!evaluate || c->nval > 0, MT_ERR_OPTION,
           "option -data_val: -mode evaluate needs the data sets to evaluate (comma-separated)");
  MT_CHECK(!predict || c->data[0], MT_ERR_OPTION,
           "option -data: -mode predict needs the data file to predict");
  MT_CHECK(predict || !(c->data[0] || c->predictions[0] || c->outputs_probs), MT_ERR_OPTION,
           "option %s: only -mode predict uses it, not -mode %s",
           c->data[0] ? "-data" : c->predictions[0] ? "-predictions" : "-outputs_probs", c->mode);
  MT_CHECK(!(c->outputs & ~MT_OUTPUTS_VAL), MT_ERR_OPTION,
           "option -outputs: -mode %s writes the outputs of its data sets (-outputs val)", c->mode);
  MT_CHECK(!c->outputs || evaluate, MT_ERR_OPTION,
           "option -outputs: only -mode evaluate and train use it, not -mode %s", c->mode);
  MT_CHECK(!c->outputs_logits || c->outputs || predict, MT_ERR_OPTION,
           "option -outputs_logits: needs -outputs val");
  return 0;
}

void mt_config_mode_print(const mt_config *c, FILE *f) {
  fprintf(f, "mpitrain %s: -mode %s, precision %s, model %s", MPITRAIN_VERSION, c->mode,
          c->dtype == MT_FP64 ? "fp64" : "fp32", c->model);
  mt_model_print(c->model, f, 0);
  fprintf(f, " from %s, %d rank%s x %d thread%s\n", c->model_file, c->world_size,
          c->world_size > 1 ? "s" : "", c->threads, c->threads > 1 ? "s" : "");
  fprintf(f, "  data:");
  if (c->data[0]) fprintf(f, " %s", c->data);
  for (int i = 0; i < c->nval; i++) fprintf(f, "%s%s", i ? ", " : " ", c->data_val[i]);
  fprintf(f, "; batch %d per rank; output_dir %s\n", c->val_batch_size, c->output_dir);
  if (strcmp(c->device, "cpu")) fprintf(f, "  device: %s\n", c->device);
}
