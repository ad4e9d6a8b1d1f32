/* The smoothed validation loss, the best model and early stopping. Every
 * rank holds the same validation loss (an all-reduced sum), so every rank
 * takes the same decisions without communication; only writing
 * model_best.h5 (rank 0) is agreed. */
#include "trainer/own.h"
#include "gpu/gpu.h"

#include <math.h>
#include <string.h>

/* The state only this file reads and writes (t->best). */
struct mt_best {
  double smooth_loss; /* NAN before the first validation                  */
  double best_loss;   /* lowest smoothed loss so far (INFINITY: none)      */
  int best_epoch;     /* 1-based epoch of best_loss, 0: none               */
  int bad_epochs;     /* epochs since the last improvement                 */
  void *params, *buf; /* with -restore_best: the best model (the owned
                         part) and its buffers, of t->dtype                */
};

int mt_best_setup(mt_trainer *t) {
  struct mt_best *b;
  MT_CALL(mt_calloc(&b, 1, sizeof(*b), "best model state"));
  t->best = b;
  b->smooth_loss = NAN;
  b->best_loss = INFINITY;
  if (t->cfg->restore_best) {
    const mt_model *m = t->model;
    mt_owned o; /* sharded: this rank's shard */
    mt_trainer_owned(t, &o);
    MT_CALL(mt_calloc(&b->params, o.n ? o.n : 1, t->esz, "best model"));
    if (m->buffers.total)
      MT_CALL(mt_calloc(&b->buf, m->buffers.total, t->esz, "best model buffers"));
  }
  return 0;
}

void mt_best_destroy(mt_trainer *t) {
  if (!t->best) return;
  mt_free(&t->best->params);
  mt_free(&t->best->buf);
  mt_free(&t->best);
}

double mt_best_smooth_loss(const mt_trainer *t) { return t->best->smooth_loss; }
int mt_best_bad_epochs(const mt_trainer *t) { return t->best->bad_epochs; }
void *mt_best_params(const mt_trainer *t) { return t->best->params; }
void *mt_best_buf(const mt_trainer *t) { return t->best->buf; }

int mt_best_update(mt_trainer *t, int epoch, double val_loss, int *stop) {
  struct mt_best *b = t->best;
  const mt_config *c = t->cfg;
  const mt_model *m = t->model;
  *stop = 0;
  const double a = c->val_smoothing;
  b->smooth_loss = isnan(b->smooth_loss) ? val_loss : a * b->smooth_loss + (1.0 - a) * val_loss;
  if (a > 0)
    mt_print0("epoch %d/%d smoothed validation loss %.4f\n", epoch + 1, c->epochs, b->smooth_loss);
  /* a NaN loss is never better, so it counts against the patience */
  if (b->smooth_loss < b->best_loss - c->early_stop_min_delta) {
    b->best_loss = b->smooth_loss;
    b->best_epoch = epoch + 1;
    b->bad_epochs = 0;
    if (b->params) {
      mt_owned o;
      mt_trainer_owned(t, &o);
      memcpy(b->params, o.params, o.n * t->esz);
      if (m->buffers.total) memcpy(b->buf, mt_trainer_model_buf(t), m->buffers.total * t->esz);
    }
    char path[MT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/model_best.h5", c->output_dir);
    int err = t->comm->rank == 0 ? mt_h5_save_model(path, m, t->params) : 0;
    MT_CALL(mt_trainer_write_failed(t, mt_agree(t->comm->world, err)));
  } else {
    b->bad_epochs++;
  }
  if (c->early_stop_patience > 0 && b->bad_epochs >= c->early_stop_patience) {
    mt_print0("early stop after epoch %d: no better validation loss for %d epoch%s (best %.4f at "
              "epoch %d)\n", epoch + 1, b->bad_epochs, b->bad_epochs > 1 ? "s" : "", b->best_loss,
              b->best_epoch);
    *stop = 1;
  }
  return 0;
}

int mt_best_restore(mt_trainer *t, int *epoch) {
  const struct mt_best *b = t->best;
  const mt_model *m = t->model;
  *epoch = 0;
  if (!b->params || b->best_epoch == 0) return 0;
  *epoch = b->best_epoch;
  /* the restored model's validation results, from the curve: the run's
   * last line reports them */
  for (int i = 0; i < t->ncurve; i++)
    if (t->curve[i].epoch == b->best_epoch && t->curve[i].set >= 0 &&
        t->curve[i].set < MT_MAX_VAL) {
      t->last_val_loss[t->curve[i].set] = t->curve[i].val_loss;
      t->last_val_acc[t->curve[i].set] = t->curve[i].val_acc;
    }
  mt_owned o;
  mt_trainer_owned(t, &o);
  memcpy(o.params, b->params, o.n * t->esz);
  if (t->owner->params_done) MT_CALL(t->owner->params_done(t)); /* zero1: a shared copy */
  if (m->buffers.total) memcpy(mt_trainer_model_buf(t), b->buf, m->buffers.total * t->esz);
  mt_print0("restored the best model: epoch %d, validation loss %.4f\n", b->best_epoch, b->best_loss);
  if (t->gpu) MT_CALL(mt_agree(t->comm->world, mt_gpu_upload(t, 0)));
  return 0;
}

void mt_best_pack(const mt_trainer *t, double *v) {
  const struct mt_best *b = t->best;
  v[0] = b->smooth_loss;
  v[1] = b->best_loss;
  v[2] = b->best_epoch;
  v[3] = b->bad_epochs;
}

void mt_best_unpack(mt_trainer *t, const double *v) {
  struct mt_best *b = t->best;
  b->smooth_loss = v[0];
  b->best_loss = v[1];
  b->best_epoch = (int)v[2];
  b->bad_epochs = (int)v[3];
}
