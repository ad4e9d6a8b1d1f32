/* The trainer's checkpoints: what goes into one (parameters, optimizer
 * state, loop position, schedule, learning curve), when one is written
 * (steps, epochs, minutes, the end, a signal), and restarting from one,
 * mid-epoch, on any number of ranks. The file format is src/io/checkpoint.h.
 *
 * A restart with the same rank count, backend and threads repeats the
 * uninterrupted run bit for bit: the data order is a function of (seed,
 * epoch, step), the schedule of the step, and everything else is restored. */
#include "io/checkpoint.h"
#include "trainer/trainer.h"
#include "trainer/amp.h"
#include "trainer/own.h"
#include "trainer/step.h"
#include "gpu/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ----------------------------------------------------------------- signals */

/* SIGUSR1 and SIGTERM are never delivered to a computing thread: oneDNN's JIT
 * GEMM kernels use the stack pointer as a general register pointing into the
 * heap, so a signal frame pushed while one runs corrupts the heap (seen as
 * "corrupted size vs. prev_size" in a later free). mt_main blocks both
 * signals before MPI and every other thread start (threads inherit the mask),
 * and one thread takes them with sigwait() and sets the flag. */
static volatile sig_atomic_t stop_signal_;
static int signals_started_;

static sigset_t stop_set(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  return set;
}

static void *signal_thread(void *arg) {
  (void)arg;
  sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) == 0) stop_signal_ = sig;
  }
  return NULL;
}

void mt_trainer_signals_block(void) {
  sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}

void mt_trainer_signals_install(void) {
  if (signals_started_) return;
  mt_trainer_signals_block();
  pthread_t th;
  if (pthread_create(&th, NULL, signal_thread, NULL) == 0) {
    pthread_detach(th);
    signals_started_ = 1;
  }
}

int mt_trainer_signal(void) { return (int)stop_signal_; }

/* --------------------------------------------------------------- tensors */

/* The flat buffers of this run: parameters, optimizer state and (with
 * -restore_best) the best parameters; at most TENSOR_BUFS. Sharded (own.h),
 * each rank writes and reads its shard of them. Their type is the run's
 * (-precision): float32 or float64 tensors in the file. */
#define TENSOR_BUFS 6
static int tensors(mt_trainer *t, mt_ckpt_buf *bufs, mt_ckpt_tensors *ts) {
  int n = 0;
  mt_owned o;
  mt_trainer_owned(t, &o);
  bufs[n++] = (mt_ckpt_buf){"params", o.params};
  const char *names[3];
  void *data[3];
  const int k = mt_optimizer_state(t->optim, names, data, 3);
  for (int i = 0; i < k; i++) bufs[n++] = (mt_ckpt_buf){names[i], data[i]};
  if (mt_best_params(t)) bufs[n++] = (mt_ckpt_buf){"best_params", mt_best_params(t)};
  *ts = (mt_ckpt_tensors){&t->model->params, bufs, n,
                          t->owner->sharded ? mt_ckpt_shard(o.lo, o.lo + o.n)
                                            : mt_ckpt_replicated(),
                          t->dtype};
  return 0;
}

/* The learning curve as columns. */
#define CURVE_I64(X) X(epoch) X(set)
#define CURVE_F64(X) X(train_loss) X(lr) X(samples_per_s) X(seconds) X(val_loss) X(val_acc)

static int put_curve(const mt_trainer *t, mt_ckpt_state *st) {
  int n = t->ncurve;
  int64_t *iv = NULL;
  double *fv = NULL;
  int err = mt_calloc(&iv, (size_t)(n ? n : 1), sizeof(int64_t), "curve column");
  if (!err) err = mt_calloc(&fv, (size_t)(n ? n : 1), sizeof(double), "curve column");
#define PUT_I(f)                                                                            \
  for (int i = 0; !err && i < n; i++) iv[i] = t->curve[i].f;                                \
  if (!err) err = mt_ckpt_state_set_i64s(st, "curve." #f, iv, (size_t)n);
#define PUT_F(f)                                                                            \
  for (int i = 0; !err && i < n; i++) fv[i] = t->curve[i].f;                                \
  if (!err) err = mt_ckpt_state_set_f64s(st, "curve." #f, fv, (size_t)n);
  CURVE_I64(PUT_I)
  CURVE_F64(PUT_F)
  for (int i = 0; !err && i < n; i++) iv[i] = t->curve[i].step;
  if (!err) err = mt_ckpt_state_set_i64s(st, "curve.step", iv, (size_t)n);
  /* a user model's metrics (only then: a built-in's checkpoint is unchanged):
   * their names in order, and a column each */
  char names[MT_METRICS_MAX * MT_METRIC_NAME_MAX] = "", key[MT_NAME_MAX];
  for (int k = 0; !err && k < t->nmetrics; k++) {
    size_t len = strlen(names);
    snprintf(names + len, sizeof(names) - len, "%s%s", k ? "," : "", t->metric_names[k]);
    for (int i = 0; i < n; i++) fv[i] = t->curve[i].metric[k];
    snprintf(key, sizeof(key), "curve.metric.%s", t->metric_names[k]);
    err = mt_ckpt_state_set_f64s(st, key, fv, (size_t)n);
  }
  if (!err && t->nmetrics) err = mt_ckpt_state_set_str(st, "curve.metric_names", names);
  mt_free(&iv);
  mt_free(&fv);
  return err;
}

/* The metrics' columns of a curve (none in a checkpoint of a model
 * without them: NaN); the names come back, so the run's later reports must
 * keep them (metrics.c). */
static int get_metrics(mt_trainer *t, const mt_ckpt_state *st, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < MT_METRICS_MAX; k++) t->curve[i].metric[k] = NAN;
  t->nmetrics = 0;
  if (!mt_ckpt_state_find(st, "curve.metric_names")) return 0;
  const char *names;
  MT_CALL(mt_ckpt_state_get_str(st, "curve.metric_names", &names));
  for (const char *p = names; *p;) {
    size_t len = strcspn(p, ",");
    MT_CHECK(t->nmetrics < MT_METRICS_MAX && len > 0 && len < MT_METRIC_NAME_MAX, MT_ERR_DATA,
             "checkpoint: curve.metric_names '%s' is not a list of metric names", names);
    const int k = t->nmetrics++;
    snprintf(t->metric_names[k], MT_METRIC_NAME_MAX, "%.*s", (int)len, p);
    char key[MT_NAME_MAX];
    snprintf(key, sizeof(key), "curve.metric.%s", t->metric_names[k]);
    const double *fv;
    size_t m;
    MT_CALL(mt_ckpt_state_get_f64s(st, key, &fv, &m));
    MT_CHECK(m == n, MT_ERR_DATA, "checkpoint: %s has %zu rows, not %zu", key, m, n);
    for (size_t i = 0; i < n; i++) t->curve[i].metric[k] = fv[i];
    p += len + (p[len] == ',');
  }
  return 0;
}

static int get_curve(mt_trainer *t, const mt_ckpt_state *st) {
  const int64_t *iv;
  const double *fv;
  size_t n;
  MT_CALL(mt_ckpt_state_get_i64s(st, "curve.step", &iv, &n));
  t->ncurve = 0;
  while (t->capcurve < (int)n) {
    int cap = t->capcurve ? 2 * t->capcurve : 64;
    mt_curve_row *r = realloc(t->curve, (size_t)cap * sizeof(*r));
    MT_CHECK(r, MT_ERR_MEM, "cannot grow the learning curve");
    t->curve = r;
    t->capcurve = cap;
  }
  for (size_t i = 0; i < n; i++) t->curve[i].step = iv[i];
  size_t m;
#define GET_I(f)                                                                            \
  MT_CALL(mt_ckpt_state_get_i64s(st, "curve." #f, &iv, &m));                                \
  MT_CHECK(m == n, MT_ERR_DATA, "checkpoint: curve." #f " has %zu rows, not %zu", m, n);   \
  for (size_t i = 0; i < n; i++) t->curve[i].f = (int)iv[i];
#define GET_F(f)                                                                            \
  MT_CALL(mt_ckpt_state_get_f64s(st, "curve." #f, &fv, &m));                                \
  MT_CHECK(m == n, MT_ERR_DATA, "checkpoint: curve." #f " has %zu rows, not %zu", m, n);   \
  for (size_t i = 0; i < n; i++) t->curve[i].f = fv[i];
  CURVE_I64(GET_I)
  CURVE_F64(GET_F)
  t->ncurve = (int)n;
  return get_metrics(t, st, n);
}

/* ----------------------------------------------------------------- save */

/* n values of the run's type as a double array entry (exact either way). */
static int put_values(const mt_trainer *t, mt_ckpt_state *st, const char *key, const void *v,
                      size_t n) {
  if (t->dtype == MT_FP64) return mt_ckpt_state_set_f64s(st, key, v, n);
  const float *f = v;
  double *d = NULL;
  MT_CALL(mt_calloc(&d, n ? n : 1, sizeof(double), "checkpoint state"));
  for (size_t i = 0; i < n; i++) d[i] = f[i];
  int err = mt_ckpt_state_set_f64s(st, key, d, n);
  mt_free(&d);
  return err;
}

static int get_values(const mt_trainer *t, const mt_ckpt_state *st, const char *key, void *v,
                      size_t n) {
  const double *d;
  size_t m;
  MT_CALL(mt_ckpt_state_get_f64s(st, key, &d, &m));
  MT_CHECK(m == n, MT_ERR_DATA, "checkpoint: %s has %zu values, the model has %zu", key, m, n);
  if (t->dtype == MT_FP64 && n) /* n == 0: a model without buffers, v NULL */
    memcpy(v, d, n * sizeof(double));
  else
    for (size_t i = 0; i < n; i++) ((float *)v)[i] = (float)d[i];
  return 0;
}

static const char *precision_name(mt_dtype dt) { return dt == MT_FP64 ? "fp64" : "fp32"; }

static int fill_state(const mt_trainer *t, int epoch, int64_t step, double epoch_loss,
                      double elapsed, mt_ckpt_state *st) {
  const mt_config *c = t->cfg;
  MT_CALL(mt_ckpt_state_set_str(st, "model", c->model));
  MT_CALL(mt_ckpt_state_set_str(st, "precision", precision_name(t->dtype)));
  MT_CALL(mt_ckpt_state_set_i64(st, "epoch", epoch));
  MT_CALL(mt_ckpt_state_set_i64(st, "step_in_epoch", step));
  MT_CALL(mt_ckpt_state_set_i64(st, "global_step", t->global_step));
  MT_CALL(mt_ckpt_state_set_i64(st, "micro_step", 0));
  MT_CALL(mt_ckpt_state_set_i64(st, "batch_size", c->batch_size));
  MT_CALL(mt_ckpt_state_set_i64(st, "seed", (int64_t)c->seed));
  MT_CALL(mt_ckpt_state_set_i64(st, "steps_per_epoch", t->steps_per_epoch));
  MT_CALL(mt_ckpt_state_set_f64(st, "epoch_loss_partial", epoch_loss));
  MT_CALL(mt_ckpt_state_set_f64(st, "elapsed_seconds", elapsed));
  MT_CALL(mt_ckpt_state_set_str(st, "optimizer", c->optimizer));
  /* the optimizer's steps (AdamW's bias correction): the schedule's count,
   * which the restart restores from global_step and the loss scaler */
  MT_CALL(mt_ckpt_state_set_i64(st, "adam_step", mt_amp_lr_step(t)));
  double lr[MT_LR_STATE_N];
  mt_lr_state_pack(&t->sched, lr);
  MT_CALL(mt_ckpt_state_set_f64s(st, "lr_schedule_state", lr, MT_LR_STATE_N));
  MT_CALL(mt_ckpt_state_set_f64s(st, "last_val_loss", t->last_val_loss, MT_MAX_VAL));
  MT_CALL(mt_ckpt_state_set_f64s(st, "last_val_acc", t->last_val_acc, MT_MAX_VAL));
  MT_CALL(put_curve(t, st));
  double best[MT_BEST_STATE_N];
  mt_best_pack(t, best);
  MT_CALL(mt_ckpt_state_set_f64s(st, "best_state", best, MT_BEST_STATE_N));
  /* model buffers (running statistics), small: as state (float -> double
   * is exact) */
  const size_t nb = t->model->buffers.total;
  MT_CALL(put_values(t, st, "model_buffers", mt_trainer_model_buf(t), nb));
  if (mt_best_buf(t)) MT_CALL(put_values(t, st, "best_buffers", mt_best_buf(t), nb));
  MT_CALL(mt_amp_state_put(t, st)); /* the loss scaler */
  if (t->privacy->put_state) MT_CALL(t->privacy->put_state(t, st)); /* its accountant */
  return 0;
}

/* Whether any rank has a stop signal, agreed right after a checkpoint: that
 * checkpoint holds the step, so the run stops without a second write (a
 * signal seen only at the next step would cost one more step and write). */
static int agree_stop(mt_trainer *t) {
  int s = mt_trainer_signal() != 0;
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_INT, MPI_MAX, t->comm->world));
  t->stop_now = s;
  return 0;
}

/* Tests only (tests/test_signals.sh): MT_TEST_SIGNAL_IN_CHECKPOINT=STEP has
 * rank 0 send itself SIGUSR1 as it writes the checkpoint of that global
 * step, the moment a test cannot reliably hit from outside. */
static void test_signal(const mt_trainer *t) {
  const char *v = getenv("MT_TEST_SIGNAL_IN_CHECKPOINT");
  if (!v || !*v || t->comm->rank != 0 || atol(v) != t->global_step) return;
  kill(getpid(), SIGUSR1);
  for (int i = 0; i < 2000 && !mt_trainer_signal(); i++) { /* the signal thread takes it */
    const struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
}

int mt_trainer_checkpoint(mt_trainer *t, int epoch, int64_t step, double epoch_loss,
                          double elapsed) {
  mt_ckpt_state st = {0};
  mt_ckpt_buf bufs[TENSOR_BUFS];
  mt_ckpt_tensors ts;
  const mt_config *c = t->cfg;
  /* -device cuda: the host buffers are the file's view */
  if (t->gpu) MT_CALL(mt_agree(t->comm->world, mt_gpu_download(t, 1)));
  /* the resolved configuration, as printed at start-up */
  char *opts = NULL;
  size_t optlen = 0;
  FILE *mf = open_memstream(&opts, &optlen);
  MT_CHECK(mf, MT_ERR_MEM, "cannot format the options for the checkpoint");
  mt_config_print(c, mf);
  fclose(mf);
  /* rank 0's text: threads per rank may differ between nodes */
  int len = (int)optlen + 1;
  MT_MPI(MPI_Bcast(&len, 1, MPI_INT, 0, t->comm->world));
  char *o = realloc(opts, (size_t)len);
  if (!o) free(opts);
  MT_CHECK(o, MT_ERR_MEM, "cannot format the options for the checkpoint");
  opts = o;
  MT_MPI(MPI_Bcast(opts, len, MPI_CHAR, 0, t->comm->world));
  opts[len - 1] = '\0';
  mt_ckpt_meta meta = {c->backend, opts, t->run_id, t->model};
  MT_MPI(MPI_Bcast(&elapsed, 1, MPI_DOUBLE, 0, t->comm->world)); /* rank 0's clock */
  int err = fill_state(t, epoch, step, epoch_loss, elapsed, &st);
  if (!err) err = tensors(t, bufs, &ts);
  char path[MT_PATH_MAX + 64] = "";
  double t0 = mt_now();
  mt_guard_mark(t->guard, t->epoch, t->global_step, MT_PHASE_CHECKPOINT);
  mt_ev_begin(MT_EV_CKPT);
  test_signal(t);
  if (!err)
    err = mt_ckpt_save(t->comm->world, c->checkpoint_dir, t->global_step, c->checkpoint_keep,
                       &ts, &meta, &st, path, sizeof(path));
  mt_ev_end(MT_EV_CKPT);
  mt_ckpt_state_free(&st);
  free(opts);
  MT_CALL(err);
  if (step == 0) /* at an epoch's end: `epoch` epochs are done */
    mt_print0("checkpoint %s: after epoch %d, global step %ld (%.2f s)\n", path, epoch,
              t->global_step, mt_now() - t0);
  else
    mt_print0("checkpoint %s: epoch %d, step %lld of %lld, global step %ld (%.2f s)\n", path,
              epoch + 1, (long long)step, (long long)t->steps_per_epoch, t->global_step,
              mt_now() - t0);
  mt_signal_grace_check(t, mt_now() - t0);
  t->last_checkpoint = mt_now();
  snprintf(t->last_good, sizeof(t->last_good), "%s", path);
  return agree_stop(t);
}

/* --------------------------------------------------------------- restart */

/* A new run identity: 64 random bits on rank 0 (getrandom, else
 * /dev/urandom), broadcast, as 16 hex digits in t->run_id. */
static int new_run_id(mt_trainer *t) {
  uint64_t v = 0;
  int err = 0;
  if (t->comm->rank == 0 && getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
      err = MT_ERR(MT_ERR_FILE, "cannot read /dev/urandom for the run id: %s", strerror(errno));
    if (fd >= 0) close(fd);
  }
  MT_CALL(mt_agree(t->comm->world, err));
  MT_MPI(MPI_Bcast(&v, 1, MPI_UINT64_T, 0, t->comm->world));
  snprintf(t->run_id, sizeof(t->run_id), "%016llx", (unsigned long long)v);
  return 0;
}

/* Whether the run writes checkpoints by its options (a signal's one aside). */
static int writes_checkpoints(const mt_config *c) {
  return c->checkpoint_every_steps > 0 || c->checkpoint_every_epochs > 0 ||
         c->checkpoint_every_minutes > 0 || c->checkpoint_at_end;
}

static int restore(mt_trainer *t, const char *path) {
  const mt_config *c = t->cfg;
  mt_ckpt_info info = {0};
  mt_ckpt_state st = {0};
  double t0 = mt_now();
  /* header and state first: they decide which buffers to read */
  MT_CALL(mt_ckpt_read(t->comm->world, path, NULL, &info, &st));
  int64_t v, batch, seed, steps;
  const char *s;
  int err = mt_ckpt_state_get_str(&st, "model", &s);
  if (!err && strcmp(s, c->model))
    err = MT_ERR(MT_ERR_DATA, "checkpoint %s: written for -model %s, this run is -model %s", path, s, c->model);
  if (!err) err = mt_ckpt_state_get_i64(&st, "batch_size", &batch);
  if (!err && batch != c->batch_size)
    err = MT_ERR(MT_ERR_OPTION,
                 "checkpoint %s: written with -batch_size %lld, this run has %d (the position in "
                 "the epoch would mean other samples)", path, (long long)batch, c->batch_size);
  if (!err) err = mt_ckpt_state_get_i64(&st, "seed", &seed);
  if (!err && (uint64_t)seed != c->seed)
    err = MT_ERR(MT_ERR_OPTION, "checkpoint %s: written with -seed %lld, this run has %llu", path,
                 (long long)seed, (unsigned long long)c->seed);
  if (!err) err = mt_ckpt_state_get_i64(&st, "steps_per_epoch", &steps);
  if (!err && steps != t->steps_per_epoch)
    err = MT_ERR(MT_ERR_OPTION,
                 "checkpoint %s: written with %lld steps per epoch, this run has %lld (another "
                 "data set or -max_train_steps_per_epoch)", path, (long long)steps,
                 (long long)t->steps_per_epoch);
  /* the element type: refused across precisions (README: a restart is
   * exact; -init_from converts a model file deliberately). A checkpoint
   * without the entry is older than -precision: fp32. */
  const char *prec = "fp32";
  if (!err && mt_ckpt_state_find(&st, "precision")) err = mt_ckpt_state_get_str(&st, "precision", &prec);
  if (!err && strcmp(prec, precision_name(t->dtype)))
    err = MT_ERR(MT_ERR_OPTION,
                 "checkpoint %s: written with -precision %s, this run has -precision %s; restart "
                 "with -precision %s, or start from a model file (OUTPUT_DIR/model_final.h5) with "
                 "-init_from, which converts", path, prec, precision_name(t->dtype), prec);
  if (!err) err = mt_ckpt_state_get_str(&st, "optimizer", &s);
  if (!err && strcmp(s, c->optimizer))
    err = MT_ERR(MT_ERR_OPTION, "checkpoint %s: written with -optimizer %s, this run has %s", path,
                 s, c->optimizer);
  mt_ckpt_buf bufs[TENSOR_BUFS];
  mt_ckpt_tensors ts;
  if (!err) err = tensors(t, bufs, &ts);
  if (!err) err = mt_ckpt_read(t->comm->world, path, &ts, NULL, NULL);
  /* the position is in attributes, which no checksum covers: a damaged one
   * must not index outside the epoch (tests/fuzz: step_in_epoch INT_MIN).
   * step_in_epoch == steps_per_epoch: the epoch's steps are done, its end
   * (validation, curve row, epoch checkpoint) is not (a signal or
   * -checkpoint_every_steps at its last step): the restart runs that end. */
  int64_t step = 0;
  if (!err) err = mt_ckpt_state_get_i64(&st, "epoch", &v);
  if (!err) err = mt_ckpt_state_get_i64(&st, "step_in_epoch", &step);
  if (!err && (v < 0 || v > INT_MAX || step < 0 || step > t->steps_per_epoch))
    err = MT_ERR(MT_ERR_DATA, "checkpoint %s: trainer state epoch %lld, step_in_epoch %lld is not a "
                 "position of this run's epochs of %lld steps (the file is damaged)", path,
                 (long long)v, (long long)step, (long long)t->steps_per_epoch);
  if (!err) t->start_epoch = (int)v, t->start_step = step;
  if (!err) err = mt_ckpt_state_get_i64(&st, "global_step", &v);
  if (!err && v < 0)
    err = MT_ERR(MT_ERR_DATA, "checkpoint %s: trainer state global_step %lld is negative (the file "
                 "is damaged)", path, (long long)v);
  if (!err) t->global_step = (long)v;
  if (!err) err = mt_ckpt_state_get_f64(&st, "epoch_loss_partial", &t->start_epoch_loss);
  if (!err) err = mt_ckpt_state_get_f64(&st, "elapsed_seconds", &t->elapsed_before);
  const double *d;
  size_t n;
  if (!err) err = mt_ckpt_state_get_f64s(&st, "lr_schedule_state", &d, &n);
  if (!err && n == MT_LR_STATE_N) err = mt_lr_state_unpack(&t->sched, d);
  if (!err) err = mt_ckpt_state_get_f64s(&st, "last_val_loss", &d, &n);
  for (size_t i = 0; !err && i < n && i < MT_MAX_VAL; i++) t->last_val_loss[i] = d[i];
  if (!err) err = mt_ckpt_state_get_f64s(&st, "last_val_acc", &d, &n);
  for (size_t i = 0; !err && i < n && i < MT_MAX_VAL; i++) t->last_val_acc[i] = d[i];
  if (!err) err = get_curve(t, &st);
  if (!err) err = mt_ckpt_state_get_f64s(&st, "best_state", &d, &n);
  if (!err && n == MT_BEST_STATE_N) mt_best_unpack(t, d);
  const size_t nb = t->model->buffers.total;
  if (!err) err = get_values(t, &st, "model_buffers", mt_trainer_model_buf(t), nb);
  if (!err && mt_best_buf(t)) err = get_values(t, &st, "best_buffers", mt_best_buf(t), nb);
  if (!err) err = mt_amp_state_get(t, &st);
  if (!err && t->privacy->get_state) err = t->privacy->get_state(t, &st, path);
  if (!err) snprintf(t->last_good, sizeof(t->last_good), "%s", path);
  /* the same run goes on: its checkpoints stay its own for pruning ("":
   * a file older than run ids, mt_trainer_restart makes a new one) */
  if (!err) snprintf(t->run_id, sizeof(t->run_id), "%s", info.run_id);
  if (!err)
    mt_print0("restart from %s (written by %d rank%s, backend %s): epoch %d, step %lld, global "
              "step %ld; read in %.2f s, ready %.2f s after launch\n", path, info.world_size,
              info.world_size == 1 ? "" : "s", info.backend, t->start_epoch + 1,
              (long long)t->start_step, t->global_step, mt_now() - t0, mt_since_launch());
  mt_ckpt_info_free(&info);
  mt_ckpt_state_free(&st);
  return err;
}

int mt_trainer_restart(mt_trainer *t) {
  const mt_config *c = t->cfg;
  const int fresh = !strcmp(c->restart, "none");
  /* before training, not at the first checkpoint hours later: a folder that
   * cannot be written, or one holding an earlier run's checkpoints that a
   * fresh run would mix with its own */
  if (writes_checkpoints(c))
    MT_CALL(mt_ckpt_dir_prepare(t->comm->world, c->checkpoint_dir, fresh,
                                c->checkpoint_overwrite));
  if (fresh) return new_run_id(t);
  char path[MT_PATH_MAX + 64];
  if (!strcmp(c->restart, "auto")) {
    int64_t *steps = NULL;
    int n = 0;
    MT_CALL(mt_ckpt_list(t->comm->world, c->checkpoint_dir, &steps, &n));
    mt_free(&steps);
    if (n == 0) {
      mt_print0("restart auto: no checkpoint in %s, starting from the beginning\n",
                c->checkpoint_dir);
      return new_run_id(t);
    }
    /* the newest that verifies; damaged ones are named on stderr */
    MT_CALL(mt_ckpt_find_latest(t->comm->world, c->checkpoint_dir, MT_CKPT_CHECK_DATA, path,
                                sizeof(path), NULL));
  } else {
    snprintf(path, sizeof(path), "%s", c->restart);
  }
  t->run_id[0] = '\0';
  int err = restore(t, path);
  MT_CALL(mt_agree(t->comm->world, err));
  /* zero1: each rank read its slice of the node's shared parameters */
  if (t->owner->params_done) MT_CALL(t->owner->params_done(t));
  /* a checkpoint without a run_id: this run gets a new identity, and the
   * older checkpoints count as another run's (never pruned) */
  if (!t->run_id[0]) {
    MT_CALL(new_run_id(t));
    mt_print0("restart: %s has no run id (an older mpitrain's); this run is %s, and the older "
              "checkpoints in %s are never pruned\n", path, t->run_id, c->checkpoint_dir);
  }
  return 0;
}
