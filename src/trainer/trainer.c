/* The training loop. */
#include "trainer/trainer.h"
#include "backends/backends.h"
#include "models/models.h"
#include "trainer/amp.h"
#include "trainer/own.h"
#include "trainer/step.h"
#include "gpu/gpu.h"
#include "backends/fsdp.h"
#include "io/plot.h"
#include "io/modelfile.h"
#include "io/io.h"
#include "nn/gemm_log.h"
#include "comm/shm_reduce.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_STEPS_UNTIMED 5

/* The epoch loop's own state: only this file reads and writes it (t->loop). */
struct mt_loop {
  double timed_seconds; /* throughput, measured after the warm-up steps   */
  long timed_samples;
  FILE *steps;          /* -log_step_losses: rank 0's steps.csv           */
  long run_steps;       /* steps this process ran (-log_gemm_shapes)      */
  int gemm_logged;      /* -log_gemm_shapes: the record is written        */
  double run_start;     /* when this run's training began                 */
  uint64_t cfg_hash;    /* of the resolved configuration, for step_agree  */
};

static int grow_curve(mt_trainer *t) {
  if (t->ncurve < t->capcurve) return 0;
  int cap = t->capcurve ? 2 * t->capcurve : 64;
  mt_curve_row *r = realloc(t->curve, (size_t)cap * sizeof(*r));
  MT_CHECK(r, MT_ERR_MEM, "cannot grow the learning curve");
  t->curve = r;
  t->capcurve = cap;
  return 0;
}

/* -ddp_overlap auto: overlap where the all-reduce waits on something other
 * than this node's computing cores -- a GPU's NCCL, another node's network
 * -- or where the node has a core no rank's thread computes on. On one node
 * whose cores all compute, the in-node all-reduce is those cores' own
 * memory traffic: run beside the backward it only takes turns with it, and
 * the overlap's waits and the comm thread's wake-ups cost (2 ranks x 1
 * thread on 2 cores, MLP 784-1024-1024-10, batch 128, alternating on the
 * nearly free machine: 10,080 / 8,575 / 9,546 samples/s without overlap,
 * 8,770 / 8,844 / 8,704 with the thread; bench/README.md). */
static int overlap_auto(const mt_trainer *t, int nthr) {
  const mt_comm *m = t->comm;
  return t->device >= 0 || m->nnodes > 1 || m->node_cores > m->local_size * nthr;
}

static int open_data(mt_trainer *t) {
  const mt_config *c = t->cfg;
  /* the model's options were read with the configuration: it knows its
   * window before it is made, and the data layer is told only the number */
  t->window = mt_model_window(c->model);
  MT_CALL(mt_dataset_open(&t->train, c->data_train, t->comm->world, NULL, t->window,
                          c->data_check));
  if (c->init_from[0]) /* the data the file's model was made for (io/modelfile.h) */
    MT_CALL(mt_agree(t->comm->world, mt_model_file_spec_check(c->init_from, "-init_from",
                                                             &t->train.spec, "-data_train",
                                                             c->data_train)));
  for (int i = 0; i < c->nval; i++) {
    MT_CALL(mt_dataset_open(&t->val[i], c->data_val[i], t->comm->world, &t->train.spec, t->window,
                            c->data_check));
    t->nval_open = i + 1;
  }
  t->steps_per_epoch = mt_sampler_train_steps(t->train.n, c->batch_size, c->max_train_steps);
  int err = 0;
  if (t->steps_per_epoch < 1)
    err = MT_ERR(MT_ERR_OPTION, "option -batch_size: %d is larger than the %lld samples of %s",
                 c->batch_size, (long long)t->train.n, c->data_train);
  MT_CALL(mt_agree(t->comm->world, err));
  return 0;
}

/* Optimizer, its state and the lr schedule; errors name the option. */
static int setup_optimizer(mt_trainer *t) {
  const mt_config *c = t->cfg;
  mt_owned o;
  mt_trainer_owned(t, &o);
  const mt_optim_hparams hp = {c->momentum, c->dampening, c->weight_decay, c->nesterov,
                               c->adam_beta1, c->adam_beta2, c->adam_eps, c->adam_amsgrad};
  MT_CALL(mt_optimizer_create(c->optimizer, &hp, t->dtype, o.n, &t->optim));
  mt_lr_kind kind;
  MT_CALL(mt_lr_kind_parse(c->lr_schedule, &kind));
  mt_lr_schedule_defaults(&t->sched, kind, c->lr);
  t->sched.gamma = c->lr_gamma;
  t->sched.min = c->lr_min;
  t->sched.step_size = c->lr_step_size;
  t->sched.warmup = c->warmup_steps;
  t->sched.total = (long)t->steps_per_epoch * c->epochs;
  t->sched.nmilestones = c->lr_nmilestones;
  for (int i = 0; i < c->lr_nmilestones; i++) t->sched.milestones[i] = c->lr_milestones[i];
  t->sched.end_factor = c->lr_end_factor;
  t->sched.pct_start = c->onecycle_pct_start;
  t->sched.div_factor = c->onecycle_div_factor;
  t->sched.final_div_factor = c->onecycle_final_div_factor;
  t->sched.patience = c->plateau_patience;
  t->sched.cooldown = c->plateau_cooldown;
  t->sched.threshold = c->plateau_threshold;
  MT_CALL(mt_lr_schedule_setup(&t->sched));
  return 0;
}

/* Model(s) of this rank, parameters initialised from the seed, buffers. */
static int create_model(mt_trainer *t) {
  const mt_config *c = t->cfg;
  int nthr, split;
  size_t a0 = mt_alloc_bytes();
  int err = mt_compute_make_model(t, 0, 0, &nthr, &split);
  size_t n = err ? 0 : t->model->params.total;
  t->mem.acts = (double)(mt_alloc_bytes() - a0);
  if (!err) err = mt_calloc(&t->params, n, t->esz, "parameters");
  if (!err) err = mt_calloc(&t->grads, n, t->esz, "gradients");
  if (!err) err = mt_model_init(t->model, t->params, c->seed);
  if (!err && c->init_from[0]) err = mt_h5_load_model(c->init_from, "-init_from", t->model, t->params);
  a0 = mt_alloc_bytes();
  /* the threads' models */
  if (!err) err = mt_compute_setup(t, t->device >= 0 ? 1 : t->max_batch, nthr);
  t->mem.acts += (double)(mt_alloc_bytes() - a0);
  if (split) omp_set_num_threads(c->threads);
  return err;
}

int mt_trainer_params_whole(mt_trainer *t) {
  if (t->gpu) { /* on the host, and (fsdp full_shard) gathered on the device */
    MT_CALL(mt_agree(t->comm->world, mt_gpu_download(t, 0)));
    return mt_agree(t->comm->world, mt_gpu_pin(t));
  }
  return t->owner->whole ? t->owner->whole(t) : 0;
}

int mt_trainer_params_release(mt_trainer *t) {
  if (t->gpu) return mt_agree(t->comm->world, mt_gpu_unpin(t));
  return t->owner->release ? t->owner->release(t) : 0;
}

/* ddp's window all-reduce sums the gradients where the backward writes
 * them when the buffer lies in the node's shared window: it moves there
 * (the same bytes per rank, as the forecast has them; zeroed, as calloc's
 * was). The replicated host buffer only: fsdp's are its shards' views, a
 * GPU's are on the device. */
static int grads_to_window(mt_trainer *t) {
  if ((t->owner->sharded && !t->owner->whole_grads) || t->device >= 0) return 0;
  void *w = NULL;
  const size_t bytes = t->model->params.total * t->esz;
  MT_CALL(mt_agree(t->comm->world, mt_backend_grads_window(t->backend, bytes, &w)));
  if (!w) return 0;
  mt_free(&t->grads);
  t->grads = w;
  t->grads_in_window = 1;
  return 0;
}

int mt_trainer_create(mt_trainer **out, const mt_config *c, const mt_comm *comm) {
  mt_trainer *t;
  *out = NULL;
  MT_CALL(mt_calloc(&t, 1, sizeof(*t), "trainer"));
  *out = t;
  t->cfg = c;
  t->comm = comm;
  t->train.file = t->train.dx = H5I_INVALID_HID;
  MT_CALL(mt_calloc(&t->loop, 1, sizeof(*t->loop), "epoch loop state"));
  MT_CALL(mt_compute_create(t));
  t->dtype = (mt_dtype)c->dtype;
  t->esz = t->dtype == MT_FP64 ? sizeof(double) : sizeof(float);
  t->owner = &mt_owner_replicated;
  MT_CALL(open_data(t));
  MT_CALL(mt_gpu_choose(t)); /* fsdp on GPUs shards there, not here */
  /* the parameters' owner (own.h), from the strategy's traits; fsdp's
   * no_shard is ddp */
  const int sharded = c->fsdp && /* the strategy's MT_TRAIT_SHARDED */
                      c->fsdp_strategy != MT_FSDP_NO_SHARD && t->device < 0;
  if (sharded) t->owner = &mt_owner_sharded;
  /* ddp's window (config_zero.c, own_zero.c); auto decides before the
   * model fixes the threads, taking the overlap as for one thread, never
   * less than the run's: with -ddp_comm_thread 0 and the batch split over
   * threads (no overlap: the window after all) it stays off */
  const int ov1 = (c->ddp_overlap >= 0 ? c->ddp_overlap : overlap_auto(t, 1)) && !c->dp;
  if (c->ddp_shard_optimizer > 0 || (c->ddp_shard_optimizer < 0 && mt_zero1_auto(t, ov1)))
    t->owner = &mt_owner_zero1;

  /* the same on every rank (same options, same data shape): agreed */
  MT_CALL(mt_amp_policy(t)); /* before the model: convolutions fix their precision */
  /* the memory forecast from shapes, agreed, before any large allocation */
  MT_CALL(mt_memory_forecast(t));
  MT_CALL(mt_agree(comm->world, create_model(t)));
  size_t n = t->model->params.total;
  const char *bname = c->fsdp && !sharded ? "ddp" : c->backend;
  MT_CALL(mt_backend_create(bname, comm->world, c->ddp_bucket_mb, &t->backend));
  t->backend->first_bucket_mb = c->ddp_first_bucket_mb;
  /* the backward reports finished units only when one model computes the
   * rank's batch (compute.c); with the batch split over threads the
   * threads' gradients are summed after it, and the buckets go then */
  /* DP: reduced after clipping */
  const int nthr = mt_compute_nthr(t);
  const int ov = c->ddp_overlap >= 0 ? c->ddp_overlap : overlap_auto(t, nthr);
  t->backend->overlap = ov && nthr == 1 && !c->dp;
  if (c->ddp_overlap < 0 && comm->size > 1 && nthr == 1 && !c->dp && !sharded) {
    const mt_comm *m = t->comm;
    if (ov)
      mt_print0("ddp: gradients all-reduced during the backward (-ddp_overlap auto: %s)\n",
                t->device >= 0 ? "on a GPU" : m->nnodes > 1 ? "several nodes" : "a core left free");
    else
      mt_print0("ddp: gradients all-reduced after the backward (-ddp_overlap auto: one node, "
                "no core free: %d ranks x 1 thread on %d core%s)\n", m->local_size, m->node_cores,
                m->node_cores == 1 ? "" : "s");
  }
  t->backend->comm_thread = c->ddp_comm_thread;
  t->backend->allreduce = mt_allreduce_use(c->ddp_allreduce, t->device >= 0,
                                           t->backend->overlap, c->ddp_comm_thread);
  t->backend->table = &t->model->params;
  t->backend->dtype = t->dtype;
  t->backend->reduce_dtype = c->ddp_reduce_dtype;
  /* the options refused such a run already (config_amp.c) */
  MT_CHECK(mt_backend_has_dtype(t->backend->ops, t->dtype), MT_ERR_OPTION,
           "option -precision fp64: backend %s has no double-precision operations", bname);
  /* under fp64 the buffers are double: setup gets none (mpitrain.h) */
  const int f64 = t->dtype == MT_FP64;
  int err = mt_backend_setup(t->backend, f64 ? NULL : t->params, f64 ? NULL : t->grads, n);
  MT_CALL(mt_agree(comm->world, err));
  MT_CALL(grads_to_window(t));
  if (c->sync_module_states) MT_CALL(mt_backend_sync(t->backend, t->params, n));
  MT_CALL(mt_trainer_sync_buffers(t));
  if (t->owner->setup) MT_CALL(t->owner->setup(t)); /* sharded: the model's shards */
  size_t a0 = mt_alloc_bytes();
  MT_CALL(mt_agree(comm->world, mt_best_setup(t)));
  t->mem.best = (double)(mt_alloc_bytes() - a0);

  a0 = mt_alloc_bytes();
  MT_CALL(mt_agree(comm->world, setup_optimizer(t)));
  t->mem.optim = (double)(mt_alloc_bytes() - a0);
  MT_CALL(mt_agree(comm->world, mt_amp_setup(t)));

  /* agreed, so a rank whose allocation fails does not leave the others
   * waiting in the next collective */
  a0 = mt_alloc_bytes();
  MT_CALL(mt_agree(comm->world, mt_compute_data_buffers(t, 0)));
  t->mem.data = (double)(mt_alloc_bytes() - a0);
  MT_CALL(mt_memory_check(t)); /* the forecast against what was allocated */
  MT_CALL(mt_eval_setup(t));
  /* the step's privacy policy, from the backend's spec */
  t->privacy = t->backend->spec.dp ? &mt_privacy_dpsgd : &mt_privacy_none;
  if (t->privacy->setup) MT_CALL(mt_agree(comm->world, t->privacy->setup(t)));
  MT_CALL(mt_gpu_setup(t));
  return 0;
}

void mt_trainer_destroy(mt_trainer **pt) {
  mt_trainer *t = *pt;
  if (!t) return;
  mt_guard_stop(&t->guard);
  mt_gpu_destroy(t);
  if (t->loop && t->loop->steps) fclose(t->loop->steps);
  mt_free(&t->loop);
  mt_eval_destroy(t);
  mt_compute_data_free(t);
  mt_dataset_close(&t->train);
  for (int i = 0; i < t->nval_open; i++) mt_dataset_close(&t->val[i]);
  mt_compute_destroy(t);
  mt_amp_destroy(t);
  if (t->privacy && t->privacy->destroy) t->privacy->destroy(t);
  mt_best_destroy(t);
  mt_model_destroy(&t->model);
  if (t->grads_in_window) t->grads = NULL; /* the backend's, freed with it */
  if (t->params_in_window) t->params = NULL;
  mt_backend_destroy(&t->backend);
  if (t->owner && t->owner->destroy) t->owner->destroy(t);
  mt_free(&t->params);
  mt_free(&t->grads);
  mt_optimizer_destroy(&t->optim);
  free(t->curve);
  mt_free(pt);
}

static void fmt_eta(char *buf, size_t n, double s) {
  long x = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
  snprintf(buf, n, "%ld:%02ld:%02ld", x / 3600, (x / 60) % 60, x % 60);
}

static int global_sum(const mt_trainer *t, double *v, int n) {
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, t->comm->world));
  return 0;
}

/* After each step all ranks agree, in one small all-reduce, on the step's
 * global loss (so every rank sums the epoch's loss in the same order, which
 * a checkpoint can carry exactly), on a stop signal seen by any rank, on
 * rank 0's clock for -checkpoint_every_minutes, and on where they are: a
 * 20-bit fingerprint f of (epoch, step, accumulation, configuration hash)
 * and f^2 are summed too, and all f are equal exactly when
 * size * sum(f^2) == sum(f)^2 (exact in doubles below 4096 ranks). */
#define FLAG_MINUTES 1024.0
static int step_agree(mt_trainer *t, double local_loss, double *global_loss, int *sig, int *timed) {
  const mt_config *c = t->cfg;
  const int64_t where[4] = {t->epoch, t->global_step, c->accum_steps, (int64_t)t->loop->cfg_hash};
  const double f = (double)(mt_hash_bytes(where, sizeof(where), 0) & 0xFFFFF);
  double v[4] = {local_loss, mt_trainer_signal() ? 1.0 : 0.0, f, f * f};
  if (t->comm->rank == 0 && c->checkpoint_every_minutes > 0 &&
      mt_now() - t->last_checkpoint >= 60.0 * c->checkpoint_every_minutes)
    v[1] += FLAG_MINUTES;
  if (t->comm->size > 1) MT_CALL(global_sum(t, v, 4));
  if (v[3] * t->comm->size != v[2] * v[2]) {
    /* only on a mismatch: find out who is where */
    int64_t all[4 * 4096];
    int n = t->comm->size > 4096 ? 4096 : t->comm->size;
    if (t->comm->size <= 4096)
      MT_MPI(MPI_Allgather(where, 4, MPI_INT64_T, all, 4, MPI_INT64_T, t->comm->world));
    char list[512] = "";
    for (int r = 0; r < n && strlen(list) + 64 < sizeof(list); r++)
      snprintf(list + strlen(list), sizeof(list) - strlen(list), "%srank %d: epoch %lld step %lld",
               r ? "; " : "", r, (long long)all[4 * r] + 1, (long long)all[4 * r + 1]);
    return MT_ERR(MT_ERR_STATE, "ranks disagree on where training is after global step %ld (%s)",
                  t->global_step, list);
  }
  *global_loss = v[0];
  *timed = v[1] >= FLAG_MINUTES;
  *sig = v[1] - (*timed ? FLAG_MINUTES : 0.0) > 0;
  return 0;
}

/* The error err (the message already set) with where training stopped
 * and the newest good checkpoint added; collective. */
static int stop_with_context(mt_trainer *t, int err) {
  char why[1024];
  snprintf(why, sizeof(why), "%s", mt_error_message());
  mt_error_clear();
  if (t->last_good[0])
    err = MT_ERR(err, "%s; stopped after global step %ld; the newest good checkpoint is %s "
                 "(-restart auto resumes from it)", why, t->global_step, t->last_good);
  else
    err = MT_ERR(err, "%s; stopped after global step %ld, before any checkpoint", why,
                 t->global_step);
  return mt_agree(t->comm->world, err);
}

/* A checkpoint under -checkpoint_write_error: a file that could not be
 * written (MT_ERR_WRITE, agreed, named with errno and the bytes needed;
 * the previous checkpoint intact) stops the run, or with "continue" is a
 * warning and the next checkpoint tries again. Non-finite parameters or
 * optimizer state are never written (ckpt_write.c): the run stops. */
int mt_trainer_write_failed(mt_trainer *t, int err) {
  if (err == MT_ERR_WRITE && t->cfg->checkpoint_write_continue) {
    if (t->comm->rank == 0)
      fprintf(stderr, "mpitrain: warning: %s; training goes on (-checkpoint_write_error "
              "continue): the next one tries again\n", mt_error_message());
    mt_error_clear();
    return 0;
  }
  return err;
}

static int save_checkpoint(mt_trainer *t, int epoch, int64_t step, double epoch_loss,
                           double elapsed) {
  int err = mt_trainer_write_failed(t, mt_trainer_checkpoint(t, epoch, step, epoch_loss, elapsed));
  return err ? stop_with_context(t, err) : 0;
}

/* The signal that stopped the run: the highest number any rank got (a
 * signal to one rank stops every rank). */
static int agreed_signal(const mt_trainer *t) {
  int sig = mt_trainer_signal();
  MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, t->comm->world);
  return sig;
}

/* Whether the end of epoch (0-based) writes a checkpoint for sure, so that
 * one for its last step would be the same state written twice. */
static int epoch_checkpoint_follows(const mt_config *c, int epoch) {
  return (c->checkpoint_every_epochs > 0 && (epoch + 1) % c->checkpoint_every_epochs == 0) ||
         (epoch + 1 == c->epochs && c->checkpoint_at_end);
}

/* -log_gemm_shapes: the run's second step is recorded (the first makes the
 * primitives and warms the caches; a restart counts from its own first) and
 * rank 0 writes the record; the other ranks record and drop theirs. Called
 * before (begin) and after each step. */
static int gemm_log_step(mt_trainer *t, int begin) {
  const mt_config *c = t->cfg;
  if (!c->log_gemm_shapes[0] || t->loop->run_steps != 1) return 0;
  if (begin) {
    mt_gemm_log_begin();
    return 0;
  }
  mt_gemm_log_end();
  int err = 0;
  if (t->comm->rank == 0) {
    char tmp[MT_PATH_MAX + 16], head[512];
    FILE *f = NULL;
    snprintf(head, sizeof(head),
             "mpitrain -log_gemm_shapes: the GEMMs of global step %ld (rank 0 of %d)\n"
             "model %s backend %s batch_size %d threads %d thread_split %s",
             t->global_step - 1, c->world_size, c->model, c->backend, c->batch_size, c->threads,
             mt_compute_nthr(t) > 1 ? "batch" : "gemm");
    err = mt_replace_open(c->log_gemm_shapes, tmp, sizeof(tmp), &f);
    if (!err && (err = mt_gemm_log_write(f, head)) != 0) {
      fclose(f);
      remove(tmp);
    } else if (!err) {
      err = mt_replace_commit(f, tmp, c->log_gemm_shapes);
    }
  }
  t->loop->gemm_logged = 1;
  return mt_agree(t->comm->world, err);
}

/* Runs steps [first, steps_per_epoch) of epoch (none when a restart
 * begins at the epoch's end); *stopped when a signal made it checkpoint and
 * stop. */
static int run_epoch(mt_trainer *t, int epoch, int64_t first, double *train_loss,
                     double *train_secs, int *stopped) {
  const mt_config *c = t->cfg;
  MT_CALL(t->privacy->plan_epoch(t, epoch, first));
  double t0 = mt_now(), tlog = t0, log_loss = 0, timed_from = 0;
  double epoch_loss = first > 0 ? t->start_epoch_loss : 0;
  long log_steps = 0, timed_steps = 0;
  *stopped = 0;
  for (int64_t s = first; s < t->steps_per_epoch; s++) {
    if (t->global_step == WARMUP_STEPS_UNTIMED || (s == first && t->global_step > WARMUP_STEPS_UNTIMED))
      timed_from = mt_now();
    if (timed_from > 0) timed_steps++;
    double lr = mt_lr_at(&t->sched, mt_amp_lr_step(t)), l = 0, g;
    int sig, timed;
    if (t->privacy->spent && t->privacy->spent(t)) break; /* -dp_target_epsilon reached */
    MT_CALL(gemm_log_step(t, 1));
    MT_CALL(mt_step(t, &l));
    MT_CALL(gemm_log_step(t, 0));
    t->loop->run_steps++;
    MT_CALL(step_agree(t, l, &g, &sig, &timed));
    /* every step, on every rank (g is the reduced loss, the same on all):
     * a step that made the loss non-finite stops the run before anything
     * is written from it; a step the fp16 loss scaler skipped changed
     * nothing and is counted as skipped (amp.c), its loss left out */
    if (!isfinite(g) && t->step_skipped) g = 0;
    if (!isfinite(g))
      MT_CALL(stop_with_context(
          t, MT_ERR(MT_ERR_NUMERIC, "training loss is %s at epoch %d, step %lld of %lld: lower "
                    "-lr or set -clip_grad_norm", isnan(g) ? "NaN" : g > 0 ? "inf" : "-inf",
                    epoch + 1, (long long)s + 1, (long long)t->steps_per_epoch)));
    epoch_loss += g;
    if (t->loop->steps) fprintf(t->loop->steps, "%ld,%.9g,%.9g\n", t->global_step - 1, g / c->batch_size, lr);
    log_loss += g;
    log_steps++;
    int every = c->checkpoint_every_steps > 0 && t->global_step % c->checkpoint_every_steps == 0;
    /* the epoch's end checkpoints this state (after its validation) */
    if (s + 1 == t->steps_per_epoch && epoch_checkpoint_follows(c, epoch)) every = timed = 0;
    if (sig || timed || every) {
      MT_CALL(save_checkpoint(t, epoch, s + 1, epoch_loss, t->elapsed_before + mt_now() - t->loop->run_start));
      if (sig || t->stop_now) {
        mt_print0("stopped by signal %d after global step %ld: restart with -restart auto\n",
                  agreed_signal(t), t->global_step);
        *stopped = 1;
        break;
      }
    }
    if (c->log_every > 0 && ((s + 1) % c->log_every == 0 || s + 1 == t->steps_per_epoch)) {
      double now = mt_now(), rate = (double)log_steps * c->batch_size / (now - tlog);
      double mean = log_loss / ((double)log_steps * c->batch_size);
      char eta[32];
      double left = (double)(t->steps_per_epoch - s - 1) +
                    (double)(c->epochs - epoch - 1) * (double)t->steps_per_epoch;
      fmt_eta(eta, sizeof(eta), left * (now - t0) / (double)(s + 1 - first));
      mt_print0("epoch %d/%d step %lld/%lld loss %.4f lr %.4g samples/s %.0f eta %s\n", epoch + 1,
                c->epochs, (long long)s + 1, (long long)t->steps_per_epoch, mean, lr, rate, eta);
      tlog = now;
      log_loss = 0;
      log_steps = 0;
    }
  }
  double end = mt_now();
  if (timed_from > 0) {
    t->loop->timed_seconds += end - timed_from;
    t->loop->timed_samples += timed_steps * c->batch_size;
  }
  *train_loss = epoch_loss / ((double)t->steps_per_epoch * c->batch_size);
  *train_secs = end - t0;
  return 0;
}

/* -epochs 0: the validation sets once, with the initial (or -init_from)
 * model; the test sets follow as after training. */
static int evaluate_only(mt_trainer *t) {
  const mt_config *c = t->cfg;
  MT_CALL(mt_trainer_params_whole(t));
  for (int i = 0; i < c->nval; i++) {
    double loss, acc;
    int64_t cnt;
    MT_CALL(mt_validate(t, i, -1, &loss, &acc, &cnt));
    t->last_val_loss[i] = loss;
    t->last_val_acc[i] = acc;
    mt_print0("evaluation val[%d] %s: loss %.4f accuracy %.4f (%lld samples)\n", i, c->data_val[i],
              loss, acc, (long long)cnt);
  }
  MT_CALL(mt_trainer_params_release(t));
  return 0;
}

/* Rank 0's picture of the run (io/plot.h), from the CSV files written by
 * the epoch's end; returns whether to draw again (0 after its warning). */
static int draw_curve(const mt_trainer *t) {
  const mt_config *c = t->cfg;
  char title[160];
  snprintf(title, sizeof(title), "mpitrain: model %s, backend %s, %d rank%s", c->model, c->backend,
           c->world_size, c->world_size > 1 ? "s" : "");
  mt_amp_flush(t); /* loss_scale.csv */
  /* the other ranks wait meanwhile: the hang guard must not see a hang */
  double timeout = c->plot_timeout;
  if (c->comm_timeout > 0 && timeout > c->comm_timeout / 2) timeout = c->comm_timeout / 2;
  const mt_plot_spec p = {c->output_dir, t->curve, t->ncurve, (char(*)[MT_PATH_MAX])c->data_val,
                          c->nval, title, c->dp, mt_amp_scaling(t),
                          (double)t->steps_per_epoch, timeout};
  return mt_plot_curve(&p);
}

int mt_trainer_run(mt_trainer *t) {
  const mt_config *c = t->cfg;
  int rank = t->comm->rank;
  int err = rank == 0 ? mt_mkdir_p(c->output_dir) : 0;
  MT_CALL(mt_agree(t->comm->world, err));
  if (c->log_step_losses && rank == 0) {
    char path[MT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/steps.csv", c->output_dir);
    t->loop->steps = fopen(path, "w");
    err = t->loop->steps ? 0 : MT_ERR(MT_ERR_FILE, "option -log_step_losses: cannot write %s", path);
    if (t->loop->steps) fprintf(t->loop->steps, "step,loss,lr\n");
  }
  MT_CALL(mt_agree(t->comm->world, err));
  /* the record holds float GEMMs on the CPU */
  MT_CALL(mt_agree(t->comm->world,
                   !c->log_gemm_shapes[0] || (c->dtype == MT_FP32 && !t->gpu) ? 0
                   : MT_ERR(MT_ERR_OPTION, "option -log_gemm_shapes: records the GEMMs of a CPU "
                            "run in fp32 or mixed precision (not -precision fp64, not -device cuda)")));
  MT_CALL(mt_trainer_restart(t));
  /* -device cuda: the host's initialised (or restarted) buffers go up */
  if (t->gpu) MT_CALL(mt_agree(t->comm->world, mt_gpu_upload(t, 1)));
  t->loop->cfg_hash = mt_hash_bytes(c, sizeof(*c), mt_option_hash());
  MT_CALL(mt_agree(t->comm->world, mt_guard_start(&t->guard, t->comm->world, c->comm_timeout)));
  double start = mt_now() - t->elapsed_before;
  t->loop->run_start = mt_now();
  t->last_checkpoint = mt_now();
  int done = t->start_epoch; /* epochs trained */
  int plot = c->plot && rank == 0; /* off after -plot 0 or a picture not drawn */
  double bytes0 = t->backend->comm_bytes;
  MT_CALL(mt_profile_init());
  if (c->epochs == 0) MT_CALL(evaluate_only(t));
  /* a run restarted after its early stop does not train on */
  int early = c->early_stop_patience > 0 && mt_best_bad_epochs(t) >= c->early_stop_patience;
  for (int epoch = t->start_epoch; epoch < c->epochs && !early; epoch++) {
    t->epoch = epoch;
    double train_loss = 0, secs = 1;
    int stopped = 0;
    int64_t first = epoch == t->start_epoch ? t->start_step : 0;
    MT_CALL(run_epoch(t, epoch, first, &train_loss, &secs, &stopped));
    if (stopped) {
      t->stopped = 1;
      return 0;
    }
    /* timings are rank 0's, so every rank records (and checkpoints) the same curve */
    double tm[2] = {secs, mt_now() - start};
    MT_MPI(MPI_Bcast(tm, 2, MPI_DOUBLE, 0, t->comm->world));
    secs = tm[0];
    /* the steps this run took of the epoch (a restart's first: from its
     * checkpoint on; none when that was the epoch's last step) */
    const int64_t ran = t->steps_per_epoch - first;
    double rate = ran > 0 ? (double)ran * c->batch_size / secs : NAN;
    if (ran > 0)
      mt_print0("epoch %d/%d done: train loss %.4f, %.1f s, %.0f samples/s\n", epoch + 1, c->epochs,
                train_loss, secs, rate);
    else
      mt_print0("epoch %d/%d done: train loss %.4f (its steps before the restart)\n", epoch + 1,
                c->epochs, train_loss);
    mt_profile_epoch(t, epoch, secs, t->backend->comm_bytes - bytes0);
    bytes0 = t->backend->comm_bytes;
    int nsets = c->nval ? c->nval : 0;
    MT_CALL(grow_curve(t));
    mt_curve_row base = {epoch + 1, t->global_step, train_loss,
                         mt_lr_at(&t->sched, mt_amp_lr_step(t) - 1), rate, tm[1], -1, NAN, NAN,
                         {0}};
    if (nsets == 0) { /* the model's own metrics after the epoch (none: NaN) */
      MT_CALL(mt_trainer_metrics(t, -1, base.metric));
      t->curve[t->ncurve++] = base;
    }
    MT_CALL(mt_trainer_params_whole(t)); /* sharded: evaluation and the best model */
    for (int i = 0; i < nsets; i++) {
      double loss, acc;
      int64_t cnt;
      MT_CALL(mt_validate(t, i, epoch, &loss, &acc, &cnt));
      t->last_val_loss[i] = loss;
      t->last_val_acc[i] = acc;
      mt_print0("epoch %d/%d val[%d] %s: loss %.4f accuracy %.4f (%lld samples)\n", epoch + 1,
                c->epochs, i, c->data_val[i], loss, acc, (long long)cnt);
      MT_CALL(grow_curve(t));
      mt_curve_row r = base;
      r.set = i;
      r.val_loss = loss;
      r.val_acc = acc;
      MT_CALL(mt_trainer_metrics(t, i, r.metric)); /* the model's own, after this pass */
      t->curve[t->ncurve++] = r;
    }
    MT_CALL(mt_eval_train(t, epoch));
    if (nsets > 0) MT_CALL(mt_best_update(t, epoch, t->last_val_loss[0], &early));
    MT_CALL(mt_trainer_params_release(t));
    if (t->privacy->spent && t->privacy->spent(t)) early = 1;
    done = epoch + 1;
    if (t->sched.kind == MT_LR_PLATEAU) {
      int reduced = 0;
      MT_CALL(mt_lr_plateau_step(&t->sched, mt_best_smooth_loss(t), &reduced));
      if (reduced)
        mt_print0("epoch %d/%d: validation loss plateaued, lr now %.4g\n", epoch + 1, c->epochs,
                  t->sched.plateau.lr);
    }
    err = rank == 0 ? mt_curve_write(c->output_dir, t->curve, t->ncurve,
                                     (char(*)[MT_PATH_MAX])c->data_val, c->nval,
                                     t->metric_names, t->nmetrics)
                    : 0;
    MT_CALL(mt_trainer_write_failed(t, mt_agree(t->comm->world, err)));
    if (t->privacy->epoch_end) MT_CALL(t->privacy->epoch_end(t, epoch));
    if (plot) plot = draw_curve(t); /* after dp.csv; a warning at worst, never an error */
    const int last = epoch + 1 == c->epochs || early;
    if (epoch_checkpoint_follows(c, epoch) || (early && c->checkpoint_at_end))
      MT_CALL(save_checkpoint(t, epoch + 1, 0, 0.0, mt_now() - start));
    if (t->stop_now && !last) { /* a signal during the epoch's end: that checkpoint holds it */
      mt_print0("stopped by signal %d after global step %ld: restart with -restart auto\n",
                agreed_signal(t), t->global_step);
      t->stopped = 1;
      return 0;
    }
  }
  MT_CALL(mt_agree(t->comm->world,
                   !c->log_gemm_shapes[0] || t->loop->gemm_logged ? 0
                   : MT_ERR(MT_ERR_OPTION, "option -log_gemm_shapes: the run took fewer than 2 "
                            "steps (its second is recorded)")));
  int restored = 0; /* the epoch whose model the test sets and last line see */
  if (c->restore_best) MT_CALL(mt_best_restore(t, &restored));
  MT_CALL(mt_trainer_params_whole(t));
  MT_CALL(mt_eval_test(t, restored ? restored : done));
  char path[MT_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/model_final.h5", c->output_dir);
  err = rank == 0 ? mt_h5_save_model(path, t->model, t->params) : 0;
  MT_CALL(mt_agree(t->comm->world, err));
  MT_CALL(mt_trainer_params_release(t));
  MT_CALL(mt_eval_report(t));
  MT_CALL(mt_memory_report(t));
  if (t->gpu) MT_CALL(mt_gpu_memory_report(t));
  mt_amp_report(t);
  double total = mt_now() - start;
  double rate = t->loop->timed_seconds > 0 ? (double)t->loop->timed_samples / t->loop->timed_seconds : 0;
  mt_print0("done: %d epochs, %ld steps, %.1f s; train %.0f samples/s on %d rank%s x %d thread%s",
            done, t->global_step, total, rate, c->world_size, c->world_size > 1 ? "s" : "",
            c->threads, c->threads > 1 ? "s" : "");
  if (restored) mt_print0("; the model of epoch %d (-restore_best)", restored);
  for (int i = 0; i < c->nval; i++)
    mt_print0("; val[%d] accuracy %.4f loss %.4f", i, t->last_val_acc[i], t->last_val_loss[i]);
  const mt_backend *b = t->backend;
  if (b->comm_bytes > 0 && b->comm_seconds > 0) {
    double p = c->world_size, train = 0, secs = b->comm_seconds;
    for (int i = 0; i < t->ncurve; i++)
      if (t->curve[i].set <= 0) train += (double)t->steps_per_epoch * c->batch_size / t->curve[i].samples_per_s;
    const double share = train > 0 ? 100.0 * secs / train : 0.0;
    if (t->owner->report && t->owner->report(t, share)) {
      /* the owner's line */
    } else if (b->early_buckets > 0) {
      /* overlapped: the time is what the rank spent in the calls and
       * waits, not the transfers' duration, so no bandwidth */
      mt_print0("\ngradient all-reduce (rank 0): %.2f s in calls and waits, %.0f%% of training, "
                "%.0f MB, %ld buckets started during the backward%s", secs, share,
                b->comm_bytes / 1e6, b->early_buckets,
                b->comm_thread ? " by the communication thread" : "");
      /* the thread's CPU against its wall time: a thread that polls while
       * it waits for the other ranks takes the core the rank computes on */
      if (b->comm_thread_busy > 0)
        mt_print0(" (its CPU %.2f s in %.2f s of rendezvous and all-reduce, %ld sleeps)",
                  b->comm_thread_cpu, b->comm_thread_busy, b->comm_thread_sleeps);
    } else {
      /* the bandwidth of the transfers: without the wait for the slowest
       * rank's backward (mt_backend_arrive) */
      double moving = secs - b->wait_seconds > 0 ? secs - b->wait_seconds : secs;
      mt_print0("\ngradient all-reduce (rank 0): %.2f s (%.2f s of it waiting for the slowest "
                "rank), %.0f%% of training, %.0f MB, bus bandwidth %.2f GB/s", secs,
                b->wait_seconds, share, b->comm_bytes / 1e6,
                2.0 * (p - 1) / p * b->comm_bytes / moving / 1e9);
    }
    if (b->comm_bytes_in_place > 0)
      mt_print0("; %.0f%% of it summed in place in the shared window (no copy in)",
                100.0 * b->comm_bytes_in_place / b->comm_bytes);
  }
  mt_print0("\nRESULT mpitrain train_samples_per_s=%.1f\n", rate);
  if (t->privacy->report) MT_CALL(t->privacy->report(t));
  return 0;
}
