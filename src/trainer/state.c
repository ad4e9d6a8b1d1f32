/* The trainer's state below the loop and the step: what this rank owns of
 * the layout (its owner's, own.h), the model buffers' agreement, and the
 * operations that depend on -precision fp32 | fp64, the element type of
 * its flat buffers. Every other trainer file may call these; they call no
 * other trainer file, so they close no circle. Under fp64 (PyTorch's model.double())
 * the parameters, gradients (also the per-thread ones), the optimizer state,
 * the best-model copy and the model buffers are double, the model runs its
 * forward64/backward64, and the optimizer (its object has the type too),
 * clipping, the backend's
 * reduction, checkpoints and model files work on double; under fp32 every
 * call here is the float function the trainer called before. */
#include "trainer/own.h"

void *mt_flat_at(const mt_trainer *t, void *buf, size_t i) { return (char *)buf + i * t->esz; }

MPI_Datatype mt_flat_mpi(const mt_trainer *t) {
  return t->dtype == MT_FP64 ? MPI_DOUBLE : MPI_FLOAT;
}

void *mt_trainer_model_buf(const mt_trainer *t) {
  return t->dtype == MT_FP64 ? (void *)t->model->buf64 : (void *)t->model->buf;
}

int mt_trainer_forward(const mt_trainer *t, mt_model *m, const mt_batch *b, void *losses,
                       mt_batch_stats *st) {
  if (t->dtype == MT_FP64) return m->ops->forward64(m, t->params, b, losses, st);
  return m->ops->forward(m, t->params, b, losses, st);
}

int mt_trainer_backward(const mt_trainer *t, mt_model *m, void *grads, double scale, int B) {
  if (t->dtype == MT_FP64) return m->ops->backward64(m, t->params, grads, scale, B);
  return m->ops->backward(m, t->params, grads, (float)scale, B);
}

int mt_trainer_clip(const mt_trainer *t, void *g, size_t n, double max_value, double max_norm,
                    double norm) {
  const int f64 = t->dtype == MT_FP64;
  if (max_value > 0)
    MT_CALL(f64 ? mt_clip_grad_value_f64(g, n, max_value) : mt_clip_grad_value(g, n, max_value));
  if (max_norm > 0 && norm < 0) {
    if (f64)
      mt_clip_grad_norm_f64(g, n, max_norm);
    else
      mt_clip_grad_norm(g, n, max_norm);
  } else if (max_norm > 0) {
    if (f64)
      mt_clip_grad_norm_given_f64(g, n, norm, max_norm);
    else
      mt_clip_grad_norm_given(g, n, norm, max_norm);
  }
  return 0;
}

void mt_trainer_owned(const mt_trainer *t, mt_owned *o) { t->owner->owned(t, o); }

void mt_trainer_step_grads(const mt_trainer *t, void **g, size_t *n) {
  mt_owned o;
  t->owner->owned(t, &o);
  *g = t->owner->whole_grads ? t->grads : o.grads;
  *n = t->owner->whole_grads ? t->model->params.total : o.n;
}

/* Model buffers (batch norm's running statistics): rank 0's win, as in
 * PyTorch DDP with broadcast_buffers=True (there before every forward;
 * here after every step and at start, which every later forward sees). */
int mt_trainer_sync_buffers(mt_trainer *t) {
  const mt_model *m = t->model;
  if (m->buffers.total == 0 || t->comm->size == 1) return 0;
  MT_MPI(MPI_Bcast(mt_trainer_model_buf(t), (int)m->buffers.total, mt_flat_mpi(t), 0,
                   t->comm->world));
  return 0;
}

