/* The trainer: epochs, micro-batches with accumulation, clipping, the
 * optimizer and its schedule, validation over several sets, the learning
 * curve and progress lines. */
#ifndef MT_TRAINER_H
#define MT_TRAINER_H

#include "comm/comm.h"
#include "comm/guard.h"
#include "config/mt_config.h"
#include "core/core.h"
#include "data/data.h"
#include "io/io.h"
#include "nn/lowp.h"
#include "optim/optim.h"

#define MT_MAX_THREADS 256

/* Evaluation passes run every model forward on one piece of the data set:
 * samples [k P, (k + 1) P) of it (the last one shorter), P =
 * mt_eval_piece, each piece by one thread with one-threaded GEMMs. A GEMM's
 * row depends on the rows computed with it (oneDNN picks kernels and
 * splits by M and by threads: measured), so this is what makes a sample's
 * loss, and the exact sums of them, the same at any number of ranks and
 * threads and any -val_batch_size; ranks take whole pieces and batches are
 * whole pieces (mt_eval_rows). P is 64 samples (GEMMs of 64 rows: 16 made
 * the evaluation of a 784-1024-1024-10 mlp 2.2x slower than the training
 * micro-batch's 64 per thread), for token data 64 / T windows (at least 1):
 * the same for a model and its data wherever it runs. 64 rows of floats
 * are 64-byte multiples: a piece's inputs start equally aligned wherever it
 * is in a batch. */
#define MT_EVAL_PIECE_ROWS 64
static inline int mt_eval_piece_of(const mt_data_spec *spec, int window) {
  const int p = spec->tokens && window > 0 ? MT_EVAL_PIECE_ROWS / window : MT_EVAL_PIECE_ROWS;
  return p > 1 ? p : 1;
}
/* The rows of an evaluation batch: -val_batch_size rounded down to whole
 * pieces of P, at least one; the evaluation loaders take that many. */
static inline int mt_eval_rows(int val_batch_size, int P) {
  return val_batch_size < P ? P : val_batch_size - val_batch_size % P;
}

typedef struct {
  double params, grads, optim; /* the owned part's buffers, its optimizer's state */
  double gathered, unit_grads; /* the sharded owner's gathered units           */
  double acts;  /* the rank's models (activations) and the threads' gradients */
  double data;  /* the loaders' batches, the permutation and the batch plan   */
  double best;  /* -restore_best's copy of the owned part                     */
  double device; /* -device cuda: the device's buffers (of its memory)        */
} mt_memory_parts;

typedef struct {
  const mt_config *cfg;
  const mt_comm *comm;
  mt_dataset train;
  mt_dataset val[MT_MAX_VAL];
  int nval_open;
  int window; /* a token data set's window T, the model's (mt_model_window) */
  mt_model *model;
  /* the layers' compute-precision policy (nn/lowp.h) of the run's models:
   * -amp's, set before they are made (mt_amp_policy), which hold a pointer
   * to it; its weight cache is filled for each step's compute (amp.c) */
  mt_nn_policy policy;
  mt_backend *backend;
  /* -precision: the element type of every flat buffer of the run (params,
   * grads, the threads' grads, the optimizer state, the best-model copy, the
   * model buffers) and its size; state.c holds the operations that depend
   * on it */
  mt_dtype dtype;
  size_t esz;
  struct mt_threads *threads; /* the rank's threads' models (compute.c)   */
  void *params, *grads;
  /* the step's gradients (t->grads and the threads' own) are written by
   * its first backward instead of zeroed before it (mt_compute_sets_grads);
   * grads_unwritten: that backward has not run yet */
  int grads_set_mode, grads_unwritten;
  int grads_in_window; /* grads is ddp's shared window's (trainer.c), freed
                          with the backend                               */
  int params_in_window; /* params is the node's shared copy in the window
                           (zero1, own_zero.c), freed with the backend    */
  struct mt_zero *zero; /* zero1's slice (own_zero.c)                      */
  mt_loader *train_loader;
  mt_loader *val_loader[MT_MAX_VAL];
  int64_t *perm, *plan;
  int *plan_counts;
  mt_lr_schedule sched;
  mt_optimizer *optim; /* -optimizer, over the owned part (mt_owned)       */
  mt_curve_row *curve;
  int ncurve, capcurve;
  /* the model's own metrics (its metrics op; metrics.c): their names, fixed
   * by the first report (or a restarted curve), columns metric.NAME */
  char metric_names[MT_METRICS_MAX][MT_METRIC_NAME_MAX];
  int nmetrics;
  long global_step;
  int64_t steps_per_epoch;
  double last_val_loss[MT_MAX_VAL], last_val_acc[MT_MAX_VAL];
  /* where the run starts (set by a restart) and checkpoint bookkeeping */
  int start_epoch;
  int64_t start_step;
  double start_epoch_loss, elapsed_before, last_checkpoint;
  int stopped; /* a signal made the run checkpoint and stop               */
  int step_skipped; /* the last step was skipped (fp16 loss scaling)     */
  char last_good[MT_PATH_MAX + 64]; /* the newest checkpoint written or
                                       restarted from, "" when none       */
  /* the run's identity in its checkpoints (16 hex digits): new at a fresh
   * start, the checkpoint's at a restart; keep-K prunes only its files */
  char run_id[32];
  int stop_now; /* a signal seen by the end of the last checkpoint: that
                   checkpoint holds this step, stop without another      */
  struct mt_eval *eval; /* test sets, evaluation loaders, tallies (validate.c) */
  struct mt_best *best; /* smoothed loss, best model, early stop (best.c) */
  struct mt_amp *amp; /* mixed precision (trainer/amp.h), NULL for fp32  */
  const struct mt_privacy_ops *privacy; /* the step's policy (step.h)     */
  struct mt_dp *dp; /* DP-SGD state (dp.c), NULL unless -backend *-dp     */
  mt_guard *guard;    /* hang guard (-comm_timeout), NULL when off          */
  struct mt_loop *loop; /* the epoch loop's own state (trainer.c)          */
  int epoch;          /* the epoch running (0-based), for the guard's marks */
  int last_micro;     /* the micro-step running is the step's last one      */
  mt_memory_parts mem, mem_plan; /* allocated, and forecast (memory.c)    */
  const struct mt_owner_ops *owner; /* who holds what (own.h)          */
  struct mt_fsdp *fsdp; /* the sharded owner's shards (own.c): params and
                           grads are then its views, and the optimizer
                           owns only this rank's shard                     */
  struct mt_gpu *gpu; /* -device cuda (gpu/gpu.h): the device buffers,
                         NULL on the CPU                                   */
  int device;         /* the rank's CUDA device, -1 for the CPU            */
  int max_batch;      /* samples one forward takes: -micro_batch_size      */
  int thread_rows;    /* > 0: mt_compute gives thread i rows [i n, (i + 1) n)
                         (an evaluation's pieces), not an even share       */
} mt_trainer;

/* Memory per rank (memory.c), collective:
 *  forecast: before any large allocation (after the data sets are open and
 *    the device and owner chosen), the sizes from a dry run of the model's,
 *    the optimizer's and the loaders' setups (core.h's plan mode) and the
 *    owner's shard and units, checked against -memory_limit_mb (default:
 *    the node's memory or its cgroup's limit over the node's ranks) and
 *    with -device cuda the device's memory; refused with MT_ERR_OPTION,
 *    agreed, naming the figures and where the limit came from;
 *  check: after the allocations, what they took (the allocator's counter)
 *    beside the forecast, on one line (tests/test_memory.sh compares);
 *  report: after training, the measured figures and ZeRO's bound. */
int mt_memory_forecast(mt_trainer *t);
int mt_memory_check(mt_trainer *t);
/* The limit of a rank's host memory in bytes, as the forecast takes it. */
double mt_memory_rank_limit(const mt_trainer *t);
int mt_memory_report(mt_trainer *t);
/* (compute.c) The rank's model (t->model) for one training micro-batch of batch
 * samples (0: the run's, -micro_batch_size on the CPU and 1 on a GPU) per
 * thread of the batch split: *nthr models in all (compute.c makes the
 * others), *split when the batch is split over threads (the OpenMP threads
 * are then set to 1: the caller restores them). quiet: no lines printed
 * (the forecast's dry run). */
int mt_compute_make_model(mt_trainer *t, int batch, int quiet, int *nthr, int *split);
/* The permutation, the batch plan and the loaders (train and validation);
 * dry: the forecast's dry run (no reader threads). Freed by
 * mt_compute_data_free. */
int mt_compute_data_buffers(mt_trainer *t, int dry);
void mt_compute_data_free(mt_trainer *t);

/* What this rank's optimizer steps and its checkpoints hold: the whole
 * layout, or when sharded (own.h) the shard [lo, lo + n) with its table
 * (offsets from lo). */
typedef struct {
  const mt_param_table *table;
  void *params, *grads; /* of t->dtype */
  size_t lo, n;
} mt_owned;
void mt_trainer_owned(const mt_trainer *t, mt_owned *o);
/* The gradient the step's clipping and loss scaler work on: the owned
 * part's, or the whole when the owner keeps it whole (own.h, zero1). */
void mt_trainer_step_grads(const mt_trainer *t, void **g, size_t *n);
/* The evaluation piece of t's data (trainer.h, mt_eval_piece_of). */
static inline int mt_eval_piece(const mt_trainer *t) {
  return mt_eval_piece_of(&t->train.spec, t->window);
}
/* The whole model in t->params (and on a GPU, gathered there) for an
 * evaluation or a save, and its release (no-ops when replicated on the
 * CPU). Collective. */
int mt_trainer_params_whole(mt_trainer *t);
int mt_trainer_params_release(mt_trainer *t);
/* fsdp: the ranks of a sharding group (hybrid_shard: -fsdp_node_size, or
 * the node's ranks when every node runs as many; else 0: all). Collective. */
int mt_trainer_fsdp_node_size(const mt_trainer *t, int *node);

/* Model buffers (batch norm's running statistics): rank 0's win, as in
 * PyTorch DDP with broadcast_buffers=True; a no-op without buffers or on
 * one rank. Collective. */
int mt_trainer_sync_buffers(mt_trainer *t);

/* Opens the data (collectively validated), creates model, backend and
 * optimizer state, and initialises the parameters from the seed. */
int mt_trainer_create(mt_trainer **t, const mt_config *cfg, const mt_comm *comm);
int mt_trainer_run(mt_trainer *t);
void mt_trainer_destroy(mt_trainer **t);

/* Threads of a rank (compute.c): set up nthr threads' models (thread 0's
 * is t->model; trainer.c decides nthr) for batches of max_batch, and their
 * gradient buffers;
 * forward (and backward with the gradient of scale * sum of losses) of the
 * b->n samples, sums added to *st, per-sample losses (may be NULL) and the
 * outputs st points to (pred, logits: rows of the whole batch, each thread
 * filling its own); sum of the per-thread gradients into grads (leaving the
 * others zero). */
int mt_compute_create(mt_trainer *t); /* the threads' state, empty         */
int mt_compute_setup(mt_trainer *t, int max_batch, int nthr);
/* Whether a step's first backward may write the gradients instead of adding
 * to zeroed ones: a model that can (mt_model_ops.sets_grads), on the CPU,
 * without DP-SGD (whose backwards add per-sample parts). */
int mt_compute_sets_grads(const mt_trainer *t);
/* Evaluation with one model for the rank (nthr 1: -thread_split gemm) on
 * the CPU: each of its -threads threads gets an evaluation model of one
 * piece (mt_eval_piece) reading t->params, which mt_compute_setup makes;
 * mt_compute_eval_models says how many (0: none). mt_compute_eval_begin,
 * before each evaluation pass, copies t->model's buffers (running
 * statistics) into them and returns the threads an evaluation's pieces
 * go to: mt_compute then gives thread i rows [i n, (i + 1) n), n =
 * t->thread_rows, on its own model. */
int mt_compute_eval_models(const mt_trainer *t, int nthr);
int mt_compute_eval_begin(mt_trainer *t);
/* Every model of the rank that runs forwards: the threads' (t->model
 * first), then the evaluation models, into out (room for 2
 * MT_MAX_THREADS); returns how many (a model's metrics op sums their
 * counts). */
int mt_compute_models(const mt_trainer *t, mt_model **out);
void mt_compute_destroy(mt_trainer *t);
/* The threads with a model of their own (1 unless -thread_split batch),
 * thread i's model (0: t->model) and gradient buffer (0: t->grads, where
 * it lies now). */
int mt_compute_nthr(const mt_trainer *t);
mt_model *mt_compute_model(const mt_trainer *t, int i);
void *mt_compute_grads(const mt_trainer *t, int i);
int mt_compute(mt_trainer *t, const mt_batch *b, double scale, int backward, void *losses,
               mt_batch_stats *st);
void mt_compute_sum_grads(mt_trainer *t);

/* -precision (state.c): everything of the trainer that depends on the
 * element type of its flat buffers (float, or double under fp64), so the
 * rest of the trainer does not branch on it.
 *  mt_flat_at: element i of a buffer of t's type; mt_flat_mpi: its MPI type;
 *  mt_trainer_model_buf: the model buffers in t's type (m->buf, m->buf64);
 *  mt_trainer_forward/backward: the model's ops of t's type (losses and
 *    grads in t's type, st->logits or st->logits64; scale rounded to float
 *    for fp32);
 *  mt_trainer_clip: clipping by value (max_value > 0) and then by global
 *    norm (max_norm > 0) of n gradients, the norm given (>= 0: the sharded owner's) or
 *    computed (< 0). */
void *mt_flat_at(const mt_trainer *t, void *buf, size_t i);
MPI_Datatype mt_flat_mpi(const mt_trainer *t);
void *mt_trainer_model_buf(const mt_trainer *t);
int mt_trainer_forward(const mt_trainer *t, mt_model *m, const mt_batch *b, void *losses,
                       mt_batch_stats *st);
int mt_trainer_backward(const mt_trainer *t, mt_model *m, void *grads, double scale, int B);
int mt_trainer_clip(const mt_trainer *t, void *g, size_t n, double max_value, double max_norm,
                    double norm);

/* Checkpoints (resume.c): SIGUSR1 and SIGTERM handlers that set a flag, the
 * signal seen (0 if none); a checkpoint of the position (epoch, step in
 * epoch) with the epoch's global loss so far; a restart per -restart,
 * which first checks -checkpoint_dir (writable; a fresh run refused where
 * an earlier run left checkpoints, unless -checkpoint_overwrite) and sets
 * the run's identity (new, or the checkpoint's). */
void mt_trainer_signals_block(void); /* this thread and those it starts   */
void mt_trainer_signals_install(void);
int mt_trainer_signal(void);
/* The seconds from SIGTERM to SIGKILL that the launcher leaves (-signal_grace,
 * else Slurm's KillWait, else mpirun's odls_base_sigkill_timeout; 0 when
 * unknown) and in from what they are. Runs scontrol under Slurm. */
double mt_signal_grace(const mt_config *c, char *from, size_t n);
/* On rank 0, after the run's first checkpoint, which took seconds: a
 * warning when the launcher's grace is shorter, else a line saying both. */
void mt_signal_grace_check(const mt_trainer *t, double seconds);
int mt_trainer_checkpoint(mt_trainer *t, int epoch, int64_t step, double epoch_loss,
                          double elapsed);
int mt_trainer_restart(mt_trainer *t);

/* Best model and early stop (best.c). After each epoch's validation,
 * mt_best_update folds the first set's loss into the smoothed loss
 * (-val_smoothing), and when it improved on the best by more than
 * -early_stop_min_delta, records it, writes OUTPUT_DIR/model_best.h5 and
 * (with -restore_best) keeps a copy of the model; *stop is set once
 * -early_stop_patience epochs passed without improvement. Collective.
 * mt_best_restore puts the kept copy back (with -restore_best), sets
 * *epoch to its 1-based epoch (0: nothing restored) and the last validation
 * results to that epoch's.
 * Checkpoints carry the state: mt_best_pack / mt_best_unpack of
 * MT_BEST_STATE_N doubles. */
#define MT_BEST_STATE_N 4
/* An output written during training failed with err (agreed): with
 * -checkpoint_write_error continue and a file that could not be written
 * (MT_ERR_WRITE) a warning on rank 0 and 0; otherwise err. */
int mt_trainer_write_failed(mt_trainer *t, int err);
int mt_best_setup(mt_trainer *t);
void mt_best_destroy(mt_trainer *t);
int mt_best_update(mt_trainer *t, int epoch, double val_loss, int *stop);
int mt_best_restore(mt_trainer *t, int *epoch);
void mt_best_pack(const mt_trainer *t, double *v);
void mt_best_unpack(mt_trainer *t, const double *v);
/* What the epoch loop and checkpoints read of it: the smoothed validation
 * loss (NAN before the first), the epochs without improvement, and with
 * -restore_best the kept copy (the owned part) and its buffers (else NULL). */
double mt_best_smooth_loss(const mt_trainer *t);
int mt_best_bad_epochs(const mt_trainer *t);
void *mt_best_params(const mt_trainer *t);
void *mt_best_buf(const mt_trainer *t);

/* Profiling (profile.c): PETSc logging events for -log_view and rank 0's
 * per-epoch shares of the epoch's time, GFLOP/s against -peak_gflops per
 * core, tokens/s for token data, and bytes all-reduced. Events are begun
 * and ended on the main thread only (the batch split over threads runs
 * the threads' forwards, then their backwards). */
typedef enum {
  MT_EV_DATA, MT_EV_FORWARD, MT_EV_BACKWARD, MT_EV_COMM, MT_EV_OPTIM, MT_EV_CKPT, MT_EV_VALID,
  MT_EV_COUNT
} mt_event;
int mt_profile_init(void);
void mt_ev_begin(mt_event e);
void mt_ev_end(mt_event e);
/* mt_ev_flops: flops done inside the events open now, for -log_view
 * (PetscLogFlops); on the main thread only. */
void mt_ev_flops(double flops);
/* Moves secs of this epoch's tally from one phase to another (the
 * communication waits inside the forward and backward passes are counted
 * as exposed communication); PETSc's events keep them nested. */
void mt_ev_move(mt_event from, mt_event to, double secs);
void mt_profile_epoch(const mt_trainer *t, int epoch, double secs, double bytes);

/* Evaluation (validate.c). Each pass is forward only: rank r evaluates the
 * contiguous block r of the set in batches of -val_batch_size (validation
 * and training-set passes: at most -max_val_steps_per_epoch of them; test
 * sets: all), every sample counted once over all ranks, and writes
 * the per-sample outputs that -outputs asks for collectively into one file,
 * OUTPUT_DIR/outputs/<set><i>-epoch<e>.h5 (src/io/outputs.h). All are
 * collective and agree on errors.
 *
 * mt_eval_setup: opens the test sets (-data_test, checked like validation
 * sets) and the loaders of the test and training-set passes; called once by
 * mt_trainer_create. mt_eval_destroy frees them. */
int mt_eval_setup(mt_trainer *t);
void mt_eval_destroy(mt_trainer *t);
/* Loss, accuracy and sample count of validation set `set` after the 0-based
 * epoch `epoch`; its outputs written when -outputs has val. */
int mt_validate(mt_trainer *t, int set, int epoch, double *loss, double *acc, int64_t *count);
/* With -outputs train: the evaluation pass over the training set after
 * epoch `epoch`, printed and written (a no-op otherwise). */
int mt_eval_train(mt_trainer *t, int epoch);
/* The test sets, once, with the final parameters: printed, written to
 * OUTPUT_DIR/test.csv, outputs when -outputs has test (a no-op without
 * -data_test). */
int mt_eval_test(mt_trainer *t, int epochs_done);
/* For the modes (mode_evaluate.c, mode_predict.c): one pass over all of
 * d through loader L (made for d with -val_batch_size), its loss, accuracy
 * (NaN for regression) and sample count, exact at any rank count (the
 * per-sample losses summed with mt_xsum); with w (NULL: none) the
 * per-sample outputs written collectively to w->path, each sample once in
 * data-set order. Collective, agreed. */
typedef struct {
  const char *path;
  const char *set; /* the file's set attribute ("val", "predict")        */
  int index;       /* its set_index                                      */
  int probs;       /* /probs: the logits' softmax (class data)           */
  int values;      /* /values: a regression's predicted targets          */
  int unlabelled;  /* no /label and /loss (a file without /y)            */
} mt_eval_write;
int mt_eval_pass(mt_trainer *t, mt_dataset *d, mt_loader *L, const mt_eval_write *w,
                 double *loss, double *acc, int64_t *count);
/* (metrics.c) The model's own metrics after validation set `set` (-1:
 * after an epoch without validation sets) into row[0, MT_METRICS_MAX) in
 * the order of t->metric_names (NaN where none; all NaN for a model
 * without a metrics op). Collective; checks the names and that every rank
 * has the same values. */
int mt_trainer_metrics(mt_trainer *t, int set, double *row);

/* Rank 0 prints each rank's evaluated samples and evaluation time (gathered
 * with mt_allgather_values). */
int mt_eval_report(mt_trainer *t);

#endif
