/* Mixed precision in the trainer (amp.c): the policy of the *-amp and
 * *-amp-apex backends around each training step.
 *
 *  O1 (sp-amp, ddp-amp): fp32 parameters, gradients and optimizer; the
 *    layers' GEMMs and convolutions compute in -amp_dtype (nn/lowp.h), the
 *    weights converted once per step into a cast cache.
 *  O2 (sp-amp-apex, ddp-amp-apex): the flat fp32 buffer t->params is the
 *    master copy the optimizer updates; forward and backward run on a
 *    working copy rounded to -amp_dtype before every step (norm weights and
 *    biases, i.e. tensors whose module weight is 1-d, stay fp32), GEMM and
 *    convolution outputs and the parameter gradients are rounded to
 *    -amp_dtype (the gradients after their reduction). Evaluation passes (validation, test) run on the master
 *    weights with the O1 casts.
 *  Loss scaling (-loss_scale; dynamic by default for fp16, off for bf16):
 *    the backward's loss gradient is multiplied by the scale, the reduced
 *    gradients are checked for inf/NaN (the flag all-reduced: an overflow
 *    on any rank skips the step on every rank) and unscaled before
 *    clipping; a skipped step does not advance the lr schedule or the
 *    optimizer (mt_amp_lr_step). Rank 0 writes OUTPUT_DIR/loss_scale.csv
 *    (step, scale used, overflow, skipped) and the run's last line counts
 *    the skipped steps. The scaler's state is in checkpoints.
 *
 * Test hook (tests/test_amp_train.sh only): MT_DEBUG_INF_STEP=k puts an
 * inf into rank MT_DEBUG_INF_RANK's (default: the last rank's) reduced
 * gradient at global step k (k+ : at every step from k on), after the
 * all-reduce, so only the found_inf agreement can make the other ranks
 * skip. Read once at setup, used only with loss scaling on. */
#ifndef MT_TRAINER_AMP_H
#define MT_TRAINER_AMP_H

#include "io/checkpoint.h"
#include "trainer/trainer.h"

/* Sets t->policy, the layers' precision policy, from -amp and -amp_dtype:
 * before the models are made (they keep a pointer to it, and their
 * convolutions fix their precision from it). */
int mt_amp_policy(mt_trainer *t);
/* Buffers (cast cache, working copy), the scaler: after the model. */
int mt_amp_setup(mt_trainer *t);
void mt_amp_destroy(mt_trainer *t);
/* Around the micro-batches of a step: the cast cache (and O2's working
 * copy) in, and out again; the factor the loss gradient is scaled by. */
int mt_amp_step_begin(mt_trainer *t);
void mt_amp_step_compute_done(mt_trainer *t);
float mt_amp_loss_scale(const mt_trainer *t);
/* After the gradient reduction: overflow check (agreed), unscale, scaler
 * update; *skip: the optimizer must not step. MT_ERR_NUMERIC at the
 * minimum scale. */
int mt_amp_after_reduce(mt_trainer *t, int *skip);
/* 1 when mt_amp_after_reduce reads or writes the reduced gradient (O2's
 * rounding, the loss scaler's check and unscale); 0 without -amp. */
int mt_amp_reads_grads(const mt_trainer *t);
/* The device path (gpu/gpu.c), which keeps its gradients on the GPU:
 * the step's loss scale without the host's cast cache or working copy
 * (mt_amp_loss_scale then gives it); whether loss scaling is on; and the
 * agreement after the reduction: *found (this rank's part of the gradient
 * holds an inf/NaN) made the MAX over the ranks, the scaler updated, *skip
 * set, *inv the factor to unscale by (when nothing was found); the csv row
 * and the message as mt_amp_after_reduce. Collective. */
void mt_amp_device_step_begin(mt_trainer *t);
int mt_amp_scaling(const mt_trainer *t);
/* O2: the (offset, numel) of the tensors held in low precision (norms and
 * 1-d tensors of norm layers stay fp32); returns how many, 0 without O2. */
int mt_amp_o2_ranges(const mt_trainer *t, const size_t (**ranges)[2]);
int mt_amp_found(mt_trainer *t, int *found, int *skip, float *inv);
/* The schedule's step: global steps minus skipped ones. */
long mt_amp_lr_step(const mt_trainer *t);
/* Checkpoint state (resume.c). */
int mt_amp_state_put(const mt_trainer *t, mt_ckpt_state *st);
int mt_amp_state_get(mt_trainer *t, const mt_ckpt_state *st);
/* Rank 0: loss_scale.csv's rows so far onto the disk (the picture reads
 * them after every epoch). */
void mt_amp_flush(const mt_trainer *t);
/* A summary for the end of the run (rank 0 prints). */
void mt_amp_report(const mt_trainer *t);

#endif
