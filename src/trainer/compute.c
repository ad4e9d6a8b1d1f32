/* A rank's compute, split over its threads. With -thread_split batch each
 * thread runs the model (single-threaded GEMMs) on its share of the rows,
 * into its own gradient buffer; the buffers are summed before the gradient
 * reduction. With -thread_split gemm one model runs all rows and oneDNN
 * threads each GEMM. -thread_split auto (the default) picks by what the
 * batch split costs against what it gains (split_pays below). */
#include "trainer/trainer.h"
#include "backends/backends.h"
#include "models/models.h"
#include "trainer/own.h"
#include "gpu/gpu.h"
#include "trainer/step.h" /* mt_privacy_none */
#include "backends/fsdp.h" /* MT_FSDP_NO_SHARD: -fsdp_sharding_strategy */

#include "nn/nn.h"

#include <omp.h>
#include <string.h>

/* The rank's threads: only this file reads and writes them (t->threads);
 * dp.c reaches them through mt_compute_model and mt_compute_grads. */
struct mt_threads {
  int n;                           /* threads with a model of their own    */
  mt_model *model[MT_MAX_THREADS]; /* model[0] == t->model                  */
  void *grads[MT_MAX_THREADS];     /* [0] unused: thread 0 writes t->grads,
                                      which may move (into ddp's window) */
  /* one model for the rank (-thread_split gemm): evaluation's models, one
   * a thread, each for one piece (mt_compute_eval_models) */
  int neval;
  mt_model *eval[MT_MAX_THREADS];
  int overlap_err; /* an error of the backend's unit_ready in a backward  */
};

int mt_compute_create(mt_trainer *t) {
  return mt_calloc(&t->threads, 1, sizeof(*t->threads), "thread state");
}

int mt_compute_nthr(const mt_trainer *t) { return t->threads->n; }
mt_model *mt_compute_model(const mt_trainer *t, int i) { return t->threads->model[i]; }
void *mt_compute_grads(const mt_trainer *t, int i) { return i ? t->threads->grads[i] : t->grads; }

int mt_compute_sets_grads(const mt_trainer *t) {
  return t->model->ops->sets_grads && !t->gpu && t->privacy == &mt_privacy_none;
}

/* A backward into grads (B rows) that writes them when the step's first
 * backward has not run yet (t->grads_unwritten); with no rows there is
 * nothing to write them with: zeros then. */
static int backward_into(const mt_trainer *t, mt_model *m, void *grads, double scale, int B) {
  if (t->grads_unwritten && B == 0) memset(grads, 0, t->model->params.total * t->esz);
  m->grads_set = t->grads_unwritten && B > 0;
  int err = mt_trainer_backward(t, m, grads, scale, B);
  m->grads_set = 0;
  return err;
}

/* -thread_split auto: whether a training step's work pays for the batch
 * split's gradient copies. Those cost memory passes in proportion to the
 * parameters (each thread writes its copy, the sum reads them all and
 * writes one); what the split gains, one-thread GEMMs on fewer rows
 * instead of threaded ones, is in proportion to the step's FLOPs. Below
 * MT_SPLIT_FLOPS_PER_BYTE FLOPs per byte of gradients one model on all
 * threads won: on the Xeon VM of 2026-11-28 (bench/README.md, "Two cores
 * on X1") the MLP 784-1024-1024-10 (164 FLOPs a byte at batch 128, 328
 * at 256) ran 1.25x and 1.09x faster with -thread_split gemm at 2
 * threads; the CNN (1,897) ran 1.05x faster split by the batch, the
 * GPT (3,137) the same either way. Not for DP-SGD, whose per-sample
 * gradients the threads share by rows, nor for evaluation-only modes
 * (nothing is summed): the batch split there. Returns the figure in *fpb
 * (0, and nothing printed, outside training or when the model does not say
 * its FLOPs). */
#define MT_SPLIT_FLOPS_PER_BYTE 1000.0
static int split_pays(const mt_trainer *t, double *fpb) {
  const mt_config *c = t->cfg;
  const mt_model_ops *o = t->model->ops;
  *fpb = 0;
  if (!o->flops_per_sample || !t->model->params.total || strcmp(c->mode, "train")) return 1;
  const double rows = (double)c->micro_batch_size * (c->accum_steps > 0 ? c->accum_steps : 1);
  *fpb = o->flops_per_sample(t->model) * rows / ((double)t->model->params.total * t->esz);
  return c->dp || *fpb >= MT_SPLIT_FLOPS_PER_BYTE;
}

int mt_compute_make_model(mt_trainer *t, int batch, int quiet, int *nthr_out, int *split_out) {
  const mt_config *c = t->cfg;
  /* the model takes the hyper-parameters its options op read
   * (mt_model_read_options, with the configuration) */
  /* activations for one training micro-batch; evaluation goes in pieces of
   * this size (validate.c). On a GPU the device twin holds them (gpu.c):
   * the CPU model keeps its table, spec and buffers with activations for
   * one sample and no per-thread copies (a GPT-2 small at batch 8 made
   * 88 GB of host activations that nothing read, and zeroing them took a
   * minute) */
  t->max_batch = c->micro_batch_size;
  const int on_gpu = t->device >= 0;
  int max_batch = batch > 0 ? batch : on_gpu ? 1 : t->max_batch;
  /* With the batch split over threads every model runs on one thread, and
   * oneDNN primitives fix their thread count when they are made. */
  const int autosplit = !strcmp(c->thread_split, "auto");
  int split = strcmp(c->thread_split, "gemm") && c->threads > 1 && !on_gpu;
  if (split && c->fsdp && c->fsdp_strategy != MT_FSDP_NO_SHARD) {
    if (!quiet)
      mt_print0("fsdp gathers each unit once for the rank's batch: -thread_split gemm (one "
                "model, all threads)\n");
    split = 0;
  }
  if (split) omp_set_num_threads(1);
  /* split: this model is thread 0's, which takes its share of a batch as
   * every thread does (compute.c, dp.c), not the whole */
  int nthr = !split ? 1 : c->threads < MT_MAX_THREADS ? c->threads : MT_MAX_THREADS;
  /* every model takes an evaluation piece (trainer.h) too */
  const int least = on_gpu ? 1 : mt_eval_piece(t);
  int per = (max_batch + nthr - 1) / nthr;
  int err = mt_model_create_policy(c->model, &t->train.spec, per > least ? per : least, t->dtype,
                                   &t->policy, &t->model);
  double fpb = 0;
  const int pays = !err && split && autosplit ? split_pays(t, &fpb) : 1;
  if (!err && split && (t->model->buffers.n || !pays)) {
    /* batch statistics are those of the rank's whole batch, or auto found
     * that the split does not pay: one model for all rows */
    if (!quiet && t->model->buffers.n)
      mt_print0("model %s keeps running statistics: -thread_split gemm (one model, all "
                "threads)\n", c->model);
    else if (!quiet)
      mt_print0("-thread_split auto: gemm (one model, all threads): a step does %.0f FLOPs a "
                "byte of gradients, too few to pay for each thread's copy of them\n", fpb);
    mt_model_destroy(&t->model);
    mt_alloc_plan_restart(); /* the memory forecast's dry run counts the next one alone */
    omp_set_num_threads(c->threads);
    split = 0;
    nthr = 1;
    err = mt_model_create_policy(c->model, &t->train.spec, max_batch > least ? max_batch : least,
                                 t->dtype, &t->policy, &t->model);
  }
  if (!err && split && autosplit && !quiet && fpb > 0)
    mt_print0("-thread_split auto: batch (each thread its rows): a step does %.0f FLOPs a byte "
              "of gradients\n", fpb);
  *nthr_out = nthr;
  *split_out = split;
  return err;
}

int mt_compute_data_buffers(mt_trainer *t, int dry) {
  const mt_config *c = t->cfg;
  /* a dry run (memory.c) holds none of them: it gives the plan's sizes */
  MT_CALL(mt_calloc(&t->perm, (size_t)t->train.n, sizeof(int64_t), "permutation"));
  const double per_rank = (double)t->steps_per_epoch * c->accum_steps;
  MT_CHECK(per_rank * c->micro_batch_size < 0x1p53, MT_ERR_OPTION,
           "option -micro_batch_size: %g steps x %d samples overflow the batch plan", per_rank,
           c->micro_batch_size);
  MT_CALL(mt_calloc(&t->plan, (size_t)per_rank * (size_t)c->micro_batch_size, sizeof(int64_t),
                    "plan"));
  MT_CALL(mt_calloc(&t->plan_counts, (size_t)per_rank, sizeof(int), "plan"));
  /* the dry run makes no reader thread (prefetch 0), which allocates nothing */
  const int prefetch = dry ? 0 : c->prefetch;
  /* a small /x in memory (mt_dataset_hold): at most 256 MiB and 1/16 of the
   * rank's memory; counted with the data (the dry run plans it) */
  double hold = mt_memory_rank_limit(t) / 16;
  if (hold > 256.0 * (1 << 20)) hold = 256.0 * (1 << 20);
  MT_CALL(mt_dataset_hold(&t->train, hold));
  for (int i = 0; i < c->nval; i++) MT_CALL(mt_dataset_hold(&t->val[i], hold));
  MT_CALL(mt_loader_create(&t->train_loader, &t->train, c->micro_batch_size, prefetch));
  for (int i = 0; i < c->nval; i++)
    MT_CALL(mt_loader_create(&t->val_loader[i], &t->val[i],
                             mt_eval_rows(c->val_batch_size, mt_eval_piece(t)), prefetch));
  return 0;
}

void mt_compute_data_free(mt_trainer *t) {
  /* the reader threads stop before the rows they read from go */
  mt_loader_destroy(&t->train_loader);
  for (int i = 0; i < MT_MAX_VAL; i++) mt_loader_destroy(&t->val_loader[i]);
  mt_dataset_unhold(&t->train);
  for (int i = 0; i < MT_MAX_VAL; i++) mt_dataset_unhold(&t->val[i]);
  mt_free(&t->perm);
  mt_free(&t->plan);
  mt_free(&t->plan_counts);
}

int mt_compute_eval_models(const mt_trainer *t, int nthr) {
  const int n = t->cfg->threads < MT_MAX_THREADS ? t->cfg->threads : MT_MAX_THREADS;
  return nthr == 1 && t->device < 0 && n > 1 ? n : 0;
}

int mt_compute_models(const mt_trainer *t, mt_model **out) {
  const struct mt_threads *th = t->threads;
  int n = 0;
  for (int i = 0; i < th->n; i++) out[n++] = th->model[i];
  for (int i = 0; i < th->neval; i++) out[n++] = th->eval[i];
  return n;
}

int mt_compute_eval_begin(mt_trainer *t) {
  struct mt_threads *th = t->threads;
  const mt_model *m = t->model;
  /* training updates the running statistics; evaluation reads them */
  for (int i = 0; i < th->neval && m->buffers.total; i++)
    memcpy(t->dtype == MT_FP64 ? (void *)th->eval[i]->buf64 : (void *)th->eval[i]->buf,
           mt_trainer_model_buf(t), m->buffers.total * t->esz);
  return th->neval > 1 ? th->neval : th->n;
}

int mt_compute_setup(mt_trainer *t, int max_batch, int nthr) {
  const mt_config *c = t->cfg;
  struct mt_threads *th = t->threads;
  th->n = nthr;
  th->model[0] = t->model;
  int per = (max_batch + th->n - 1) / th->n;
  if (t->device < 0 && per < mt_eval_piece(t)) per = mt_eval_piece(t); /* an evaluation piece */
  size_t n = t->model->params.total;
  for (int i = 1; i < th->n; i++) {
    /* the rank's policy: one weight cache serves every thread's model */
    MT_CALL(mt_model_create_policy(c->model, &t->train.spec, per, t->dtype, &t->policy,
                                   &th->model[i]));
    MT_CALL(mt_calloc(&th->grads[i], n, t->esz, "per-thread gradients"));
  }
  /* one model for all threads: an evaluation (forward only, batch norm on
   * its running statistics: the samples are independent) still gives each
   * thread a piece, on a model of its own made, as the batch split's are,
   * with one OpenMP thread (oneDNN primitives keep the count they were
   * made with): the same bits as -thread_split batch, on every core */
  const int ne = mt_compute_eval_models(t, th->n);
  const int saved = omp_get_max_threads();
  if (ne) omp_set_num_threads(1);
  int err = 0;
  for (int i = 0; !err && i < ne; i++)
    err = mt_model_create_policy(c->model, &t->train.spec, mt_eval_piece(t), t->dtype, &t->policy,
                                 &th->eval[i]);
  if (ne) omp_set_num_threads(saved);
  th->neval = err ? 0 : ne;
  return err;
}

void mt_compute_destroy(mt_trainer *t) {
  if (!t->threads) return;
  for (int i = 1; i < MT_MAX_THREADS; i++) {
    mt_model_destroy(&t->threads->model[i]);
    mt_free(&t->threads->grads[i]);
  }
  for (int i = 0; i < MT_MAX_THREADS; i++) mt_model_destroy(&t->threads->eval[i]);
  mt_free(&t->threads);
}

/* The model's finished units go to the owner (own.h: the sharded one
 * reduces each unit's gradient in every backward) or else to the backend
 * (overlap, see ddp.c). */
static void unit_done(void *ctx, int unit) {
  mt_trainer *t = ctx;
  if (t->threads->overlap_err) return;
  t->threads->overlap_err = t->owner->unit_done ? t->owner->unit_done(t, unit)
                                       : mt_backend_unit_ready(t->backend, t->grads, unit);
}

/* The model is about to read a unit's parameters (an owner that gathers). */
static int unit_use(void *ctx, int unit, int pass) {
  mt_trainer *t = ctx;
  return t->owner->unit_use(t, unit, pass);
}

/* Seconds spent in communication calls so far (the sharded owner's
 * gathers and reductions, ddp's overlapped all-reduce). */
static double comm_seconds(const mt_trainer *t) { return t->owner->comm_seconds(t); }

/* The model's flops of rows samples, forward (backward 0) or backward
 * (the rest of flops_per_sample), for the events open now (-log_view). */
static void log_flops(const mt_trainer *t, int backward, int rows) {
  const mt_model_ops *o = t->model->ops;
  if (!o->forward_flops_per_sample || (backward && !o->flops_per_sample)) return;
  const double f = o->forward_flops_per_sample(t->model);
  mt_ev_flops(rows * (backward ? o->flops_per_sample(t->model) - f : f));
}

int mt_compute(mt_trainer *t, const mt_batch *b, double scale, int backward, void *losses,
               mt_batch_stats *st) {
  struct mt_threads *th = t->threads;
  /* an evaluation's pieces with one model for the rank: its threads'
   * evaluation models (mt_compute_setup) */
  const int ev = !backward && t->thread_rows > 0 && th->n == 1 && th->neval > 1;
  const int T = ev ? th->neval : th->n, rows = b->n;
  mt_model *const *models = ev ? th->eval : th->model;
  if (t->gpu) { /* -device cuda: training steps run mt_gpu_step_micro */
    MT_CHECK(!backward, MT_ERR_STATE, "-device cuda: a CPU backward asked for");
    MT_CALL(mt_gpu_eval(t, b, losses, st));
    log_flops(t, 0, rows);
    return 0;
  }
  /* evaluation passes differ in length between ranks: no gathers in them */
  MT_CHECK(backward || t->owner->pinned(t), MT_ERR_STATE,
           "%s parameters: an evaluation pass without the whole model "
           "(mt_trainer_params_whole)", t->owner->name);
  if (T == 1) {
    mt_model *m = t->model;
    if (backward) mt_ev_begin(MT_EV_FORWARD);
    m->unit_use = t->owner->unit_use ? unit_use : NULL;
    m->unit_ctx = t;
    double c0 = comm_seconds(t);
    MT_CALL(mt_trainer_forward(t, m, b, losses, st));
    log_flops(t, 0, rows);
    if (backward) {
      mt_ev_end(MT_EV_FORWARD);
      /* communication inside the passes is exposed: the pass waited for it */
      mt_ev_move(MT_EV_FORWARD, MT_EV_COMM, comm_seconds(t) - c0);
      c0 = comm_seconds(t);
      mt_ev_begin(MT_EV_BACKWARD);
      /* the step's last backward on one thread: units reported as done */
      int hook = t->owner->unit_done || (t->last_micro && mt_backend_can_overlap(t->backend));
      m->unit_done = hook ? unit_done : NULL;
      m->unit_ctx = t;
      t->threads->overlap_err = 0;
      int err = backward_into(t, m, t->grads, scale, rows);
      t->grads_unwritten = 0;
      m->unit_done = NULL;
      MT_CALL(err);
      MT_CALL(t->threads->overlap_err);
      log_flops(t, 1, rows);
      mt_ev_end(MT_EV_BACKWARD);
      mt_ev_move(MT_EV_BACKWARD, MT_EV_COMM, comm_seconds(t) - c0);
    }
    return 0;
  }
  if (backward) mt_ev_begin(MT_EV_FORWARD);
  mt_batch_stats part[MT_MAX_THREADS];
  int err[MT_MAX_THREADS];
  char msg[1024] = "";
  /* the forward of every thread's rows, then (a second team, so that the
   * events and their flops stay on this thread) their backward */
#pragma omp parallel num_threads(T)
  {
    omp_set_num_threads(1); /* this thread's own nested work: one thread */
    int i = omp_get_thread_num();
    int r0 = (int)((int64_t)rows * i / T), r1 = (int)((int64_t)rows * (i + 1) / T);
    if (t->thread_rows > 0) { /* an evaluation's pieces, one a thread */
      const int64_t a = (int64_t)t->thread_rows * i, b = a + t->thread_rows;
      r0 = (int)(a < rows ? a : rows);
      r1 = (int)(b < rows ? b : rows);
    }
    mt_model *m = models[i];
    /* this thread's rows of the per-sample outputs, if asked for */
    part[i] = (mt_batch_stats){0};
    part[i].pred = st->pred ? st->pred + r0 : NULL;
    part[i].logits = st->logits ? st->logits + (int64_t)r0 * st->logits_len : NULL;
    part[i].logits64 = st->logits64 ? st->logits64 + (int64_t)r0 * st->logits_len : NULL;
    part[i].logits_len = st->logits_len;
    err[i] = 0;
    if (r1 > r0) {
      mt_batch sub = mt_batch_rows(b, r0, r1);
      err[i] = mt_trainer_forward(t, m, &sub, losses ? mt_flat_at(t, losses, (size_t)r0) : NULL,
                                  &part[i]);
      if (err[i]) {
#pragma omp critical(mt_compute_err)
        if (!msg[0]) snprintf(msg, sizeof(msg), "%s", mt_error_message());
        mt_error_clear();
      }
    }
  }
  log_flops(t, 0, rows);
  if (backward) mt_ev_end(MT_EV_FORWARD);
  int failed = 0;
  for (int i = 0; i < T; i++) failed |= err[i];
  if (backward && !failed) {
    mt_ev_begin(MT_EV_BACKWARD);
#pragma omp parallel num_threads(T)
    {
      omp_set_num_threads(1);
      int i = omp_get_thread_num();
      int r0 = (int)((int64_t)rows * i / T), r1 = (int)((int64_t)rows * (i + 1) / T);
      if (r1 == r0 && t->grads_unwritten) /* no rows to write them with */
        memset(mt_compute_grads(t, i), 0, t->model->params.total * t->esz);
      if (r1 > r0) {
        err[i] = backward_into(t, t->threads->model[i], mt_compute_grads(t, i), scale, r1 - r0);
        if (err[i]) {
#pragma omp critical(mt_compute_err)
          if (!msg[0]) snprintf(msg, sizeof(msg), "%s", mt_error_message());
          mt_error_clear();
        }
      }
    }
    t->grads_unwritten = 0;
    log_flops(t, 1, rows);
    mt_ev_end(MT_EV_BACKWARD);
  }
  for (int i = 0; i < T; i++) {
    if (err[i]) return MT_ERR(err[i], "thread %d: %s", i, msg);
    st->loss_sum += part[i].loss_sum;
    st->correct += part[i].correct;
  }
  return 0;
}

void mt_compute_sum_grads(mt_trainer *t) {
  const int T = t->threads->n;
  if (T == 1) return;
  const size_t n = t->model->params.total;
  /* h is zeroed for the next step's backwards to add to, unless they write */
  const int zero = !t->grads_set_mode;
  if (t->dtype == MT_FP64) { /* the same sums in double: g += h, h = 0 */
#pragma omp parallel for schedule(static) num_threads(T)
    for (size_t b = 0; b < n; b += 4096) {
      size_t e = b + 4096 < n ? b + 4096 : n;
      double *g = (double *)t->grads + b;
      for (int k = 1; k < T; k++) {
        double *h = (double *)t->threads->grads[k] + b;
        mt_residual_forward_f64(g, g, h, (int64_t)(e - b));
        if (zero) memset(h, 0, (e - b) * sizeof(double));
      }
    }
    return;
  }
  float *g = t->grads;
#pragma omp parallel for schedule(static) num_threads(T)
  for (size_t b = 0; b < n; b += 4096) {
    size_t e = b + 4096 < n ? b + 4096 : n;
    for (int k = 1; k < T; k++) {
      float *h = t->threads->grads[k];
      if (zero) {
#pragma omp simd
        for (size_t i = b; i < e; i++) {
          g[i] += h[i];
          h[i] = 0.0f;
        }
      } else {
#pragma omp simd
        for (size_t i = b; i < e; i++) g[i] += h[i];
      }
    }
  }
}
