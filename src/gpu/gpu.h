/* -device cuda in the trainer (gpu.c, only built with CUDA).
 *
 * Each rank drives one GPU of its own (mt_device_select: local rank mod
 * the devices it sees; device.c refuses two ranks on one GPU). The flat parameter and gradient buffers, the optimizer state
 * and the model's activations live in device memory; a training step runs
 * forward, backward, the gradient all-reduce (NCCL, on a stream of its own,
 * each bucket started as soon as the backward has finished its units),
 * clipping and the optimizer step on the device, and reads back only the
 * step's loss. The host buffers (t->params, the optimizer state) stay the
 * run's files' view: mt_gpu_download fills them before a checkpoint, an
 * evaluation or a save, and mt_gpu_upload puts them back after a restart
 * or a best-model restore, so a GPU checkpoint restarts on the CPU and a
 * CPU checkpoint on the GPU. Evaluation passes (validation, test, -outputs)
 * run on the device too (mt_gpu_eval). fsdp shard_grad_op shards the
 * optimizer state over the ranks, or keeps it on the host with
 * -fsdp_cpu_offload (gpu_optim.c).
 *
 * What a device run supports is decided by mt_config_device_why
 * (src/config/config_device.c); the rest is refused there, naming -device. */
#ifndef MT_TRAINER_GPU_H
#define MT_TRAINER_GPU_H

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "trainer/trainer.h"

/* Chooses the device of every rank into t->device (-device; collective,
 * agreed): the run is on GPUs on all ranks, one each, or on none (-1).
 * Before the model is sharded: fsdp on the GPU shards on the device. */
int mt_gpu_choose(mt_trainer *t);
/* With a GPU, makes t->gpu (buffers, device model, NCCL); mt_trainer_run
 * copies the host's buffers up (mt_gpu_upload) after its restart. */
int mt_gpu_setup(mt_trainer *t);
/* The free and total memory of the rank's device in bytes, before
 * anything of the run is on it (the memory forecast's limit for the
 * device's buffers); 0 and 0 on the CPU. */
int mt_gpu_device_memory(const mt_trainer *t, double *free_bytes, double *total_bytes);

#ifdef MT_HAVE_CUDA
/* t->gpu on CUDA device `device`: buffers, the device model, and with more
 * than one rank the NCCL communicator. Collective (agreed). */
int mt_gpu_create(mt_trainer *t, int device);
void mt_gpu_destroy(mt_trainer *t);
/* The parts of one global step on the device, which the trainer's step
 * skeleton (trainer/step.c, its place "cuda") runs in this order:
 *  begin: the gradient zeroed, the step's loss scale, O2's working copy;
 *  micro: micro-batch k's forward and backward (scale: the loss gradient's
 *    factor; last: its backward may start the reduction);
 *  reduce: the gradient summed onto its owners (ddp buckets, shard_grad_op's
 *    pieces, full_shard's units);
 *  after_reduce: O2's rounding, the loss scaler's agreed inf/NaN check and
 *    unscale (*skip: no optimizer step);
 *  clip, optim_step: on this rank's part of the gradient (the optimizer
 *    object's device kernels, or with -fsdp_cpu_offload the object itself on
 *    the host), the parameters gathered after it;
 *  buffers: the model buffers from rank 0 (queued);
 *  end: the step waited for, this rank's loss sum added. */
int mt_gpu_step_begin(mt_trainer *t);
int mt_gpu_step_micro(mt_trainer *t, const mt_batch *b, int k, int last, double scale);
int mt_gpu_step_reduce(mt_trainer *t);
int mt_gpu_after_reduce(mt_trainer *t, int *skip);
int mt_gpu_clip(mt_trainer *t);
int mt_gpu_optim_step(mt_trainer *t, double lr, long step, int all_decay);
int mt_gpu_step_buffers(mt_trainer *t);
int mt_gpu_step_end(mt_trainer *t, double *loss_sum);
/* An evaluation forward of batch b on the device (mt_compute without a
 * backward): st's sums and outputs and the per-sample losses (may be NULL)
 * as the CPU model gives them. */
int mt_gpu_eval(mt_trainer *t, const mt_batch *b, float *losses, mt_batch_stats *st);
/* Device -> host: the parameters, and with optim the optimizer state. */
int mt_gpu_download(mt_trainer *t, int optim);
/* Host -> device: the parameters, and with optim the optimizer state. */
int mt_gpu_upload(mt_trainer *t, int optim);
/* fsdp full_shard / hybrid_shard: every unit gathered on the device for
 * evaluations (pin) and given back after (unpin); no-ops otherwise.
 * Collective. */
int mt_gpu_pin(mt_trainer *t);
int mt_gpu_unpin(mt_trainer *t);
/* The device memory in use at the end, and under fsdp full_shard /
 * hybrid_shard the peak of the units' buffers in training (largest over
 * the ranks; collective). */
int mt_gpu_memory_report(mt_trainer *t);
#else
/* a CPU-only build never makes t->gpu (mt_gpu_setup refuses -device cuda) */
static inline void mt_gpu_destroy(mt_trainer *t) { (void)t; }
/* (the step skeleton has no place "cuda" then: these are never called) */
static inline int mt_gpu_eval(mt_trainer *t, const mt_batch *b, float *losses,
                              mt_batch_stats *st) {
  (void)t, (void)b, (void)losses, (void)st;
  return MT_ERR(MT_ERR_STATE, "-device cuda: this mpitrain was built without CUDA");
}
static inline int mt_gpu_download(mt_trainer *t, int optim) {
  (void)t, (void)optim;
  return 0;
}
static inline int mt_gpu_upload(mt_trainer *t, int optim) {
  (void)t, (void)optim;
  return 0;
}
static inline int mt_gpu_pin(mt_trainer *t) {
  (void)t;
  return 0;
}
static inline int mt_gpu_unpin(mt_trainer *t) {
  (void)t;
  return 0;
}
static inline int mt_gpu_memory_report(mt_trainer *t) {
  (void)t;
  return 0;
}
#endif

#endif
