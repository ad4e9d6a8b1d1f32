/* The training step's skeleton and its privacy policy "none" (step.h). */
#include "trainer/step.h"
#include "backends/backends.h"
#include "trainer/own.h"
#include "gpu/gpu.h"
#include "trainer/amp.h"

#include <string.h>

/* ------------------------------------------------- privacy policy: none */

/* This rank's micro-batches of the epoch, in order. */
static int none_plan(mt_trainer *t, int epoch, int64_t first) {
  const mt_config *c = t->cfg;
  mt_sampler_permutation(c->seed, epoch, t->train.n, t->perm);
  int nb = 0;
  for (int64_t s = first; s < t->steps_per_epoch; s++)
    for (int k = 0; k < c->accum_steps; k++, nb++) {
      int64_t first = mt_sampler_train_first(s, c->batch_size, c->world_size, t->comm->rank, k,
                                             c->micro_batch_size);
      memcpy(t->plan + (size_t)nb * c->micro_batch_size, t->perm + first,
             (size_t)c->micro_batch_size * sizeof(int64_t));
      t->plan_counts[nb] = c->micro_batch_size;
    }
  MT_CALL(mt_loader_start(t->train_loader, t->plan, t->plan_counts, nb));
  return 0;
}

static int none_micro_steps(mt_trainer *t, int *k) {
  *k = t->cfg->accum_steps;
  return 0;
}

static int none_next(mt_trainer *t, mt_batch *b) { return mt_loader_next(t->train_loader, b); }

static int none_micro(mt_trainer *t, const mt_batch *b, double scale, mt_batch_stats *st) {
  return mt_compute(t, b, scale, 1, NULL, st);
}

const mt_privacy_ops mt_privacy_none = {.name = "none",
                                        .plan_epoch = none_plan,
                                        .micro_steps = none_micro_steps,
                                        .next_batch = none_next,
                                        .micro = none_micro};

/* ------------------------------------------------------------ the step */

#define MT_PURPOSE_STEP 11 /* the random key of a training step (dropout) */

/* Clipping by the global norm: of the whole gradient, or of the owned part
 * with the norm the owner finds (the shards' squared norms summed). */
static int clip_norm(mt_trainer *t, void *g, size_t n) {
  double norm; /* < 0: computed by mt_trainer_clip */
  MT_CALL(t->owner->grad_norm(t, &norm));
  return mt_trainer_clip(t, g, n, 0, t->cfg->clip_grad_norm, norm);
}

/* ------------------------------------------------- where it computes */

/* The CPU: the rank's model(s) on its threads (compute.c), the gradient
 * as its owner holds it (own.h: whole, or the view of fsdp's units). */
static int cpu_begin(mt_trainer *t) {
  t->owner->step_begin(t);
  return mt_amp_step_begin(t);
}

static int cpu_micro(mt_trainer *t, const mt_batch *b, int k, int last, double scale,
                     mt_batch_stats *st) {
  (void)k;
  t->last_micro = last; /* its backward may overlap the reduction */
  return t->privacy->micro(t, b, scale, st);
}

static int cpu_micro_done(mt_trainer *t) {
  mt_compute_sum_grads(t);
  mt_amp_step_compute_done(t);
  return 0;
}

/* the owner sums the gradient in its step (own.h: zero1's fused slices) */
static int owner_sums(const mt_trainer *t) {
  return t->owner->sums_in_step && t->owner->sums_in_step(t);
}

static int cpu_reduce(mt_trainer *t) {
  if (owner_sums(t)) return 0;
  return mt_backend_reduce(t->backend, t->grads, t->model->params.total);
}

static int cpu_clip(mt_trainer *t) {
  const mt_config *c = t->cfg;
  void *g; /* the whole gradient, or this rank's shard of it */
  size_t n;
  mt_trainer_step_grads(t, &g, &n);
  if (c->clip_grad_value > 0) MT_CALL(mt_trainer_clip(t, g, n, c->clip_grad_value, 0, -1));
  if (c->clip_grad_norm > 0) MT_CALL(clip_norm(t, g, n));
  return 0;
}

static int cpu_optim(mt_trainer *t, double lr, long step, int all_decay) {
  if (owner_sums(t)) return t->owner->reduce_step(t, lr, step, all_decay);
  mt_owned o;
  mt_trainer_owned(t, &o);
  MT_CALL(mt_optimizer_step(t->optim, o.table, o.params, o.grads, 0, lr, step, all_decay));
  /* zero1: the node's ranks stepped their slices of the shared copy */
  return t->owner->params_done ? t->owner->params_done(t) : 0;
}


typedef struct {
  int (*begin)(mt_trainer *t);
  int (*micro)(mt_trainer *t, const mt_batch *b, int k, int last, double scale,
               mt_batch_stats *st);
  int (*micro_done)(mt_trainer *t); /* optional: after the last micro-step */
  int (*reduce)(mt_trainer *t);
  int (*after_reduce)(mt_trainer *t, int *skip);
  int (*clip)(mt_trainer *t);
  int (*optim)(mt_trainer *t, double lr, long step, int all_decay);
  int (*buffers)(mt_trainer *t); /* the model buffers agreed (rank 0's)  */
  /* Optional: the step waited for and the loss sum added (the CPU adds it
   * at each micro-step) */
  int (*end)(mt_trainer *t, double *loss_sum);
} place_ops;

static const place_ops cpu_place = {.begin = cpu_begin,
                                    .micro = cpu_micro,
                                    .micro_done = cpu_micro_done,
                                    .reduce = cpu_reduce,
                                    .after_reduce = mt_amp_after_reduce,
                                    .clip = cpu_clip,
                                    .optim = cpu_optim,
                                    .buffers = mt_trainer_sync_buffers};

#ifdef MT_HAVE_CUDA
static int gpu_micro(mt_trainer *t, const mt_batch *b, int k, int last, double scale,
                     mt_batch_stats *st) {
  (void)st; /* the losses are summed on the device and added by end */
  return mt_gpu_step_micro(t, b, k, last, scale);
}

static const place_ops gpu_place = {.begin = mt_gpu_step_begin,
                                    .micro = gpu_micro,
                                    .reduce = mt_gpu_step_reduce,
                                    .after_reduce = mt_gpu_after_reduce,
                                    .clip = mt_gpu_clip,
                                    .optim = mt_gpu_optim_step,
                                    .buffers = mt_gpu_step_buffers,
                                    .end = mt_gpu_step_end};
#endif

/* ------------------------------------------------------------ the step */

#define HOOK(t, op) ((t)->privacy->op ? (t)->privacy->op(t) : 0)

int mt_step(mt_trainer *t, double *loss_sum) {
  const mt_config *c = t->cfg;
  const mt_privacy_ops *pv = t->privacy;
  const place_ops *pl = &cpu_place;
#ifdef MT_HAVE_CUDA
  if (t->gpu) pl = &gpu_place;
#endif
  const uint64_t key = mt_key(c->seed, MT_PURPOSE_STEP, (uint64_t)t->global_step);
  /* begin */
  MT_CALL(pl->begin(t));
  /* fp32: formed in float as always (and exact as a double); fp64: 1/B */
  const double scale = t->dtype == MT_FP64 ? 1.0 / (double)c->batch_size
                                           : (double)(mt_amp_loss_scale(t) / (float)c->batch_size);
  /* micro-steps */
  int K;
  mt_guard_mark(t->guard, t->epoch, t->global_step, MT_PHASE_TRAIN);
  MT_CALL(pv->micro_steps(t, &K));
  for (int k = 0; k < K; k++) {
    mt_batch b;
    mt_batch_stats st = {0};
    mt_guard_mark(t->guard, t->epoch, t->global_step, MT_PHASE_TRAIN);
    mt_ev_begin(MT_EV_DATA);
    MT_CALL(pv->next_batch(t, &b));
    mt_ev_end(MT_EV_DATA);
    b.train = 1;
    b.key = key;
    MT_CALL(pl->micro(t, &b, k, k == K - 1, scale, &st));
    *loss_sum += st.loss_sum;
  }
  /* reduce */
  if (pl->micro_done) MT_CALL(pl->micro_done(t));
  MT_CALL(HOOK(t, before_reduce));
  mt_ev_begin(MT_EV_COMM);
  MT_CALL(pl->reduce(t));
  mt_ev_end(MT_EV_COMM);
  MT_CALL(HOOK(t, after_reduce));
  int skip = 0; /* fp16 loss scaling: an overflow on any rank skips the step */
  MT_CALL(pl->after_reduce(t, &skip));
  /* clip, learning rate, optimizer; skipped: parameters, optimizer state
   * and lr schedule stay */
  if (!skip) MT_CALL(pl->clip(t));
  const long lr_step = mt_amp_lr_step(t);
  const double lr = mt_lr_at(&t->sched, lr_step);
  mt_ev_begin(MT_EV_OPTIM);
  /* the optimizer's steps so far: the schedule's (skipped steps are none) */
  if (!skip) MT_CALL(pl->optim(t, lr, lr_step, !c->weight_decay_skip_1d));
  MT_CALL(pl->buffers(t));
  mt_ev_end(MT_EV_OPTIM);
  if (pl->end) MT_CALL(pl->end(t, loss_sum));
  MT_CALL(HOOK(t, after_step));
  t->step_skipped = skip; /* its non-finite loss is then no error (trainer.c) */
  t->global_step++;
  return 0;
}
