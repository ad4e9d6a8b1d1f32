/* The smoothed validation loss, the best model and early stopping. Every
 * rank holds the same validation loss (an all-reduced sum), so every rank
 * takes the same decisions without communication; only writing
 * model_best.h5 (rank 0) is agreed. */
#include "trainer/trainer.h"
#include "gpu/gpu.h"

#include <math.h>
#include <string.h>

int mt_best_setup(mt_trainer *t) {
  t->smooth_loss = NAN;
  t->best_loss = INFINITY;
  t->best_epoch = 0;
  t->bad_epochs = 0;
  if (t->cfg->restore_best) {
    const mt_model *m = t->model;
    mt_owned o; /* fsdp: this rank's shard */
    mt_trainer_owned(t, &o);
    MT_CALL(mt_calloc(&t->best_params, o.n ? o.n : 1, t->esz, "best model"));
    if (m->buffers.total)
      MT_CALL(mt_calloc(&t->best_buf, m->buffers.total, t->esz, "best model buffers"));
  }
  return 0;
}

void mt_best_destroy(mt_trainer *t) {
  mt_free(&t->best_params);
  mt_free(&t->best_buf);
}

int mt_best_update(mt_trainer *t, int epoch, double val_loss, int *stop) {
  const mt_config *c = t->cfg;
  const mt_model *m = t->model;
  *stop = 0;
  const double a = c->val_smoothing;
  t->smooth_loss = isnan(t->smooth_loss) ? val_loss : a * t->smooth_loss + (1.0 - a) * val_loss;
  if (a > 0)
    mt_print0("epoch %d/%d smoothed validation loss %.4f\n", epoch + 1, c->epochs, t->smooth_loss);
  /* a NaN loss is never better, so it counts against the patience */
  if (t->smooth_loss < t->best_loss - c->early_stop_min_delta) {
    t->best_loss = t->smooth_loss;
    t->best_epoch = epoch + 1;
    t->bad_epochs = 0;
    if (t->best_params) {
      mt_owned o;
      mt_trainer_owned(t, &o);
      memcpy(t->best_params, o.params, o.n * t->esz);
      if (m->buffers.total) memcpy(t->best_buf, mt_trainer_model_buf(t), m->buffers.total * t->esz);
    }
    char path[MT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/model_best.h5", c->output_dir);
    int err = t->comm->rank == 0 ? mt_h5_save_model(path, m, t->params) : 0;
    MT_CALL(mt_agree(t->comm->world, err));
  } else {
    t->bad_epochs++;
  }
  if (c->early_stop_patience > 0 && t->bad_epochs >= c->early_stop_patience) {
    mt_print0("early stop after epoch %d: no better validation loss for %d epoch%s (best %.4f at "
              "epoch %d)\n", epoch + 1, t->bad_epochs, t->bad_epochs > 1 ? "s" : "", t->best_loss,
              t->best_epoch);
    *stop = 1;
  }
  return 0;
}

int mt_best_restore(mt_trainer *t) {
  const mt_model *m = t->model;
  if (!t->best_params || t->best_epoch == 0) return 0;
  mt_owned o;
  mt_trainer_owned(t, &o);
  memcpy(o.params, t->best_params, o.n * t->esz);
  if (m->buffers.total) memcpy(mt_trainer_model_buf(t), t->best_buf, m->buffers.total * t->esz);
  mt_print0("restored the best model: epoch %d, validation loss %.4f\n", t->best_epoch, t->best_loss);
  if (t->gpu) MT_CALL(mt_agree(t->comm->world, mt_gpu_upload(t, 0)));
  return 0;
}

void mt_best_pack(const mt_trainer *t, double *v) {
  v[0] = t->smooth_loss;
  v[1] = t->best_loss;
  v[2] = t->best_epoch;
  v[3] = t->bad_epochs;
}

void mt_best_unpack(mt_trainer *t, const double *v) {
  t->smooth_loss = v[0];
  t->best_loss = v[1];
  t->best_epoch = (int)v[2];
  t->bad_epochs = (int)v[3];
}
