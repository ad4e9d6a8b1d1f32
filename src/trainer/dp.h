/* DP-SGD in the trainer (dp.c), for the backends sp-dp and ddp-dp.
 *
 * A global step is one noisy step of a logical batch:
 *  - members: with -dp_sampling poisson every sample joins step s of epoch
 *    e independently with probability q = batch_size / N, by a draw keyed
 *    by (seed, e, s, sample) that every rank makes alike with no
 *    communication (shuffle: the B samples of the step's range of the
 *    epoch's permutation, as the other backends); rank r takes the members
 *    whose position in the step's ascending member list is r mod ranks, so
 *    every rank runs every step, an empty one included;
 *  - each rank clips every member's own gradient to -dp_max_grad_norm C
 *    (src/optim/dpsgd.h) in chunks of at most -dp_max_physical_batch
 *    samples, over its threads (one model each), and sums them;
 *  - rank 0 adds Gaussian noise of std noise_multiplier * C, drawn from the
 *    stream keyed by (seed, global step): once per global batch, so ddp-dp
 *    on any number of ranks equals sp-dp;
 *  - the sum over ranks, divided by the expected batch size B (q N for
 *    poisson), is the gradient the optimizer takes;
 *  - the RDP accountant records (q, noise_multiplier); with
 *    -dp_target_epsilon training stops before a step would spend more.
 * The accountant's history is checkpointed ("dp_accountant"), so a
 * restarted run goes on spending the same budget. */
#ifndef MT_TRAINER_DP_H
#define MT_TRAINER_DP_H

#include "io/checkpoint.h"
#include "trainer/trainer.h"

/* Collective errors are the caller's (mt_agree). */
int mt_dp_setup(mt_trainer *t);
void mt_dp_destroy(mt_trainer *t);
/* Plans steps [first, steps_per_epoch) of epoch and starts the loader. */
int mt_dp_plan_epoch(mt_trainer *t, int epoch, int64_t first);
/* One noisy step; adds this rank's loss sum to *loss_sum. */
int mt_dp_train_step(mt_trainer *t, double *loss_sum);
/* 1 when -dp_target_epsilon is set and one more step would exceed it (the
 * same on every rank; says so once). */
int mt_dp_spent(mt_trainer *t);
/* After an epoch: epsilon printed and OUTPUT_DIR/dp.csv rewritten (rank 0;
 * agreed). At the end: the final guarantee and a RESULT line. */
int mt_dp_epoch_end(mt_trainer *t, int epoch);
int mt_dp_report(mt_trainer *t);
/* Checkpoint state. */
int mt_dp_put_state(const mt_trainer *t, mt_ckpt_state *st);
int mt_dp_get_state(mt_trainer *t, const mt_ckpt_state *st, const char *path);

#endif
