/* -mode predict -model_file F -data X: each sample's prediction written
 * collectively to one HDF5 file (-predictions, default
 * OUTPUT_DIR/predictions.h5; io/outputs.h's layout, set "predict"): every
 * sample once, in data-set order, the same file at any rank count. /y is
 * not needed (without it no /label nor /loss is written); class data give
 * /pred, with -outputs_logits /logits and with -outputs_probs /probs (the
 * logits' softmax, /logits beside them); a regression gives /values. A
 * model of token data (gpt) is refused: its per-sample rows would be
 * windows, not samples (-mode evaluate gives its loss). */
#include "trainer/mode.h"

#include <string.h>

static const char *const options_[] = {"-data", "-predictions", "-outputs_logits",
                                       "-outputs_probs", NULL};

static int predict(mt_trainer *t, const mt_data_spec *spec) {
  const mt_config *c = t->cfg;
  MPI_Comm w = t->comm->world;
  char whose[MT_PATH_MAX + 64], path[MT_PATH_MAX + 32];
  snprintf(whose, sizeof(whose), "the model of %s (-model_file)", c->model_file);
  if (c->predictions[0])
    snprintf(path, sizeof(path), "%s", c->predictions);
  else
    snprintf(path, sizeof(path), "%s/predictions.h5", c->output_dir);
  const mt_dataset_how how = {spec, whose, t->window, (mt_data_check)c->data_check, 1};
  MT_CALL(mt_dataset_open_as(&t->val[0], c->data, w, &how));
  t->nval_open = 1;
  MT_CALL(mt_agree(w, mt_loader_create(&t->val_loader[0], &t->val[0],
                                       mt_eval_rows(c->val_batch_size, mt_eval_piece(t)),
                                       c->prefetch)));
  const mt_dataset *d = &t->val[0];
  const mt_eval_write out = {path, "predict", 0, c->outputs_probs, spec->ntargets > 0,
                             d->unlabelled};
  double loss, acc;
  int64_t n;
  MT_CALL(mt_eval_pass(t, &t->val[0], t->val_loader[0], &out, &loss, &acc, &n));
  if (d->unlabelled)
    mt_print0("predict %s: %lld samples -> %s\n", c->data, (long long)n, path);
  else if (spec->ntargets)
    mt_print0("predict %s: %lld samples -> %s (its /y: mse %.6g)\n", c->data, (long long)n, path,
              loss);
  else
    mt_print0("predict %s: %lld samples -> %s (its /y: loss %.6g accuracy %.6g)\n", c->data,
              (long long)n, path, loss, acc);
  return 0;
}

static int run(const mt_config *c, const mt_comm *comm, mt_mode_end *end) {
  (void)end;
  mt_data_spec spec;
  MT_CALL(mt_mode_model_spec(c, comm, c->data, &spec));
  int err = 0;
  if (spec.tokens)
    err = MT_ERR(MT_ERR_OPTION, "option -mode predict: the model of %s reads token windows, not "
                 "samples of /x (-mode evaluate gives its loss on a token file)", c->model_file);
  else if (spec.ntargets && c->outputs_probs)
    err = MT_ERR(MT_ERR_OPTION, "option -outputs_probs: the model of %s predicts %d float "
                 "targets, not classes", c->model_file, spec.ntargets);
  MT_CALL(mt_agree(comm->world, err));
  mt_trainer *t = NULL;
  err = mt_trainer_create_use(&t, c, comm, &spec);
  if (!err) err = predict(t, &spec);
  mt_trainer_destroy(&t);
  return err;
}

const mt_mode_ops mt_mode_predict = {
    .name = "predict",
    .help = "per-sample predictions of -model_file for -data, in one HDF5 file",
    .options = options_,
    .run = run,
};
