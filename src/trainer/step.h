/* The training step (step.c): ONE skeleton for every backend on the CPU —
 *   begin (gradients zeroed, the precision policy's casts),
 *   micro-steps (each: a batch from the policy's loader, forward and
 *     backward, or the privacy policy's clipped per-sample backward),
 *   reduce (the threads' sum, the privacy policy's noise, the backend's
 *     reduction: none, ddp's buckets or fsdp's shards),
 *   after the reduction (the privacy policy's mean, the precision policy's
 *     overflow check and unscale),
 *   clip, learning rate, optimizer step (mt_optimizer over the owned part),
 *   the model buffers agreed, the privacy policy's accounting —
 * whose variable parts are chosen once by mt_trainer_create: the backend
 * (its strategy), the optimizer object, the precision policy (amp.h) and
 * the privacy policy below. The agreement after the step (the global loss,
 * signals, where every rank is) is the epoch loop's (trainer.c). Under
 * -device cuda the device step (src/gpu/gpu.c) runs instead; it calls the
 * same optimizer object, precision policy and agreement. */
#ifndef MT_TRAINER_STEP_H
#define MT_TRAINER_STEP_H

#include "io/checkpoint.h"
#include "trainer/trainer.h"

/* The privacy policy of the step: none (step.c) or DP-SGD (dp.c, the
 * backends' -dp suffix). NULL entries do nothing. */
typedef struct mt_privacy_ops {
  const char *name;
  int (*setup)(mt_trainer *t); /* collective errors are the caller's        */
  void (*destroy)(mt_trainer *t);
  /* This rank's batches of steps [first, steps_per_epoch) of epoch: the
   * loader started. */
  int (*plan_epoch)(mt_trainer *t, int epoch, int64_t first);
  /* The micro-batches of the next step (and the step taken from the plan). */
  int (*micro_steps)(mt_trainer *t, int *k);
  int (*next_batch)(mt_trainer *t, mt_batch *b);
  /* A micro-batch's gradient added into the rank's gradient buffers (the
   * loss gradient scaled by scale), its sums added to *st. */
  int (*micro)(mt_trainer *t, const mt_batch *b, double scale, mt_batch_stats *st);
  int (*before_reduce)(mt_trainer *t);
  int (*after_reduce)(mt_trainer *t);
  int (*after_step)(mt_trainer *t);
  /* 1 when no further step may be taken (a privacy budget is spent). */
  int (*spent)(mt_trainer *t);
  int (*epoch_end)(mt_trainer *t, int epoch);
  int (*report)(mt_trainer *t);
  int (*put_state)(const mt_trainer *t, mt_ckpt_state *st);
  int (*get_state)(mt_trainer *t, const mt_ckpt_state *st, const char *path);
} mt_privacy_ops;

extern const mt_privacy_ops mt_privacy_none, mt_privacy_dpsgd;

/* One global step; adds this rank's loss sum to *loss_sum. */
int mt_step(mt_trainer *t, double *loss_sum);

#endif
