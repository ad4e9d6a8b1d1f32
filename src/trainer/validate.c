/* Evaluation passes: the validation sets after every epoch, the training set
 * (with -outputs train), the test sets once after training. Each rank
 * evaluates a contiguous block of the set, so every sample is counted
 * exactly once; no padding is needed because a batch may be short. The
 * per-sample outputs come out of the same forward as the metrics and are
 * written collectively, each rank its rows (src/io/outputs.h). */
#include "io/outputs.h"
#include "trainer/trainer.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#include <unistd.h>

/* The state only this file reads and writes (t->eval). */
struct mt_eval {
  mt_dataset test[MT_MAX_VAL]; /* -data_test                                */
  int ntest_open;
  mt_loader *test_loader[MT_MAX_VAL], *train_loader; /* -outputs train's pass */
  int64_t samples; /* this rank's evaluated samples and their seconds       */
  double seconds;
};

/* This rank's per-sample outputs of one pass, as columns; loss, logits
 * and probs in the run's type (-precision: float or double). */
typedef struct {
  int64_t rows;
  int64_t *index;
  int32_t *label, *pred;
  void *loss, *logits, *probs;
  int logits_len, want_probs;
  mt_dtype dtype;
} outs;

static void outs_free(outs *o) {
  mt_free(&o->index);
  mt_free(&o->label);
  mt_free(&o->pred);
  mt_free(&o->loss);
  mt_free(&o->logits);
  mt_free(&o->probs);
}

static int outs_alloc(const mt_trainer *t, outs *o, int64_t rows, int logits_len, int probs) {
  size_t n = (size_t)(rows > 0 ? rows : 1);
  o->rows = rows;
  o->logits_len = logits_len;
  o->want_probs = probs && logits_len > 0;
  o->dtype = t->dtype;
  MT_CALL(mt_calloc(&o->index, n, sizeof(int64_t), "outputs: sample indices"));
  MT_CALL(mt_calloc(&o->label, n, sizeof(int32_t), "outputs: labels"));
  MT_CALL(mt_calloc(&o->pred, n, sizeof(int32_t), "outputs: predictions"));
  MT_CALL(mt_calloc(&o->loss, n, t->esz, "outputs: losses"));
  if (logits_len > 0) MT_CALL(mt_calloc(&o->logits, n * (size_t)logits_len, t->esz, "outputs: logits"));
  if (o->want_probs)
    MT_CALL(mt_calloc(&o->probs, n * (size_t)logits_len, t->esz, "outputs: probabilities"));
  return 0;
}

/* The softmax of each row of o's logits into o's probs, row by row (the
 * same for a row wherever it was computed). */
static void outs_softmax(outs *o) {
  const int C = o->logits_len;
  for (int64_t i = 0; o->want_probs && i < o->rows; i++) {
    double mx = -INFINITY, sum = 0;
    for (int k = 0; k < C; k++) {
      size_t j = (size_t)(i * C + k);
      double z = o->dtype == MT_FP64 ? ((double *)o->logits)[j] : ((float *)o->logits)[j];
      mx = z > mx ? z : mx;
    }
    for (int k = 0; k < C; k++) {
      size_t j = (size_t)(i * C + k);
      double z = o->dtype == MT_FP64 ? ((double *)o->logits)[j] : ((float *)o->logits)[j];
      sum += exp(z - mx);
    }
    for (int k = 0; k < C; k++) {
      size_t j = (size_t)(i * C + k);
      double z = o->dtype == MT_FP64 ? ((double *)o->logits)[j] : ((float *)o->logits)[j];
      double p = exp(z - mx) / sum;
      if (o->dtype == MT_FP64) ((double *)o->probs)[j] = p;
      else ((float *)o->probs)[j] = (float)p;
    }
  }
}

typedef struct {
  double loss, acc;
  int64_t count;
} result;

/* This rank's batches of d: its block of whole pieces (trainer.h:
 * rank r the r-th share of the pieces, every sample once over all ranks),
 * in batches of mt_eval_rows(-val_batch_size, P), at most limit of them (0:
 * all); *rows evaluated, from sample *start. */
static int plan(mt_trainer *t, mt_dataset *d, mt_loader *L, int limit, int64_t *start,
                int64_t *rows, int64_t *nbatches) {
  const mt_config *c = t->cfg;
  const int P = mt_eval_piece(t);
  int64_t n;
  mt_sampler_val_pieces(d->n, P, t->comm->rank, t->comm->size, start, &n);
  const int vb = mt_eval_rows(c->val_batch_size, P);
  int64_t nb = (n + vb - 1) / vb;
  if (limit > 0 && nb > limit) nb = limit;
  *rows = nb * vb < n ? nb * vb : n;
  *nbatches = nb;
  int64_t *idx = NULL;
  int *counts = NULL;
  int err = mt_calloc(&idx, (size_t)(*rows > 0 ? *rows : 1), sizeof(int64_t), "evaluation plan");
  if (!err) err = mt_calloc(&counts, (size_t)(nb > 0 ? nb : 1), sizeof(int), "evaluation plan");
  for (int64_t i = 0; !err && i < *rows; i++) idx[i] = *start + i;
  for (int64_t b = 0; !err && b < nb; b++)
    counts[b] = (int)((b + 1) * vb <= *rows ? vb : *rows - b * vb);
  if (!err) err = mt_loader_start(L, idx, counts, (int)nb);
  mt_free(&idx);
  mt_free(&counts);
  return err;
}

/* Forward over this rank's block of d (at most limit batches, 0: all)
 * through loader L, the metrics summed over all ranks into *res; o (NULL:
 * none wanted) receives this rank's per-sample outputs (freed by the
 * caller), with the logits' softmax (how & EV_PROBS) and a regression's
 * outputs (how & EV_VALUES). Collective, agreed.
 *
 * The loss is the exact sum of the per-sample losses (core.h, mt_xsum),
 * rounded once, over the count, and the hits are integers: the results do
 * not depend on the ranks, threads or batches that computed the samples,
 * only on each sample's loss, which is always computed in the same piece
 * (trainer.h, mt_eval_piece) by one-threaded GEMMs, so it has the same
 * bits wherever it is computed (on the CPU; tests/test_modes.sh at 1, 2
 * and 3 ranks). */
enum { EV_PROBS = 1, EV_VALUES = 2 };
static int pass(mt_trainer *t, mt_dataset *d, mt_loader *L, int limit, outs *o, int how,
                result *res) {
  const double t0 = mt_now();
  mt_ev_begin(MT_EV_VALID);
  int64_t start = 0, rows = 0, nb = 0, off = 0, hits = 0;
  /* the threads' models, or with one model for the rank (-thread_split
   * gemm) their evaluation models (compute.c), a piece each */
  const int nthr = t->gpu ? 1 : mt_compute_eval_begin(t);
  const int piece = t->gpu ? t->max_batch : mt_eval_piece(t) * nthr;
  /* one thread in all (-threads 1): the model's GEMMs on one thread,
   * whose sums do not depend on the thread count */
  const int gemm_threads = !t->gpu && nthr == 1 ? omp_get_max_threads() : 0;
  /* a sample of token data counts its T predicted tokens' hits */
  const int per = d->spec.tokens ? t->window : 1;
  void *scratch = NULL; /* the per-sample losses when no outputs are kept */
  mt_xsum sum;
  mt_xsum_zero(&sum);
  int err = plan(t, d, L, limit, &start, &rows, &nb);
  if (!err && o) /* logits of class data; a regression's outputs when asked for */
    err = outs_alloc(t, o, rows,
                     d->spec.ntargets ? (how & EV_VALUES ? d->spec.ntargets : 0)
                     : t->cfg->outputs_logits || (how & EV_PROBS) ? d->spec.nclasses : 0,
                     how & EV_PROBS);
  if (!err && !o) err = mt_calloc(&scratch, (size_t)piece, t->esz, "evaluation losses");
  mt_batch_stats st = {0};
  if (gemm_threads > 1) omp_set_num_threads(1);
  for (int64_t b = 0; !err && b < nb; b++) {
    mt_batch bt;
    mt_guard_mark(t->guard, t->epoch, t->global_step, MT_PHASE_VALIDATE);
    err = mt_loader_next(L, &bt);
    if (err) break;
    if (o) { /* this batch's rows of the outputs */
      if (off + bt.n > o->rows) {
        err = MT_ERR(MT_ERR_STATE, "evaluation: batch past the %lld planned rows", (long long)o->rows);
        break;
      }
      for (int i = 0; i < bt.n; i++) {
        o->index[off + i] = start + off + i;
        o->label[off + i] = bt.labels ? bt.labels[i] : -1;
      }
    }
    /* on the CPU one piece (trainer.h) a thread, each thread its own;
     * on a GPU one forward of the device twin takes t->max_batch samples
     * (-micro_batch_size; a GPT's activations for 500 samples took 3 GB) */
    for (int r0 = 0; !err && r0 < bt.n; r0 += piece) {
      const int r1 = bt.n - r0 < piece ? bt.n : r0 + piece;
      mt_batch sub = mt_batch_rows(&bt, r0, r1);
      t->thread_rows = nthr > 1 ? mt_eval_piece(t) : 0;
      void *losses = scratch;
      if (o) {
        void *lg = o->logits ? mt_flat_at(t, o->logits, (size_t)((off + r0) * o->logits_len)) : NULL;
        st.pred = o->pred + off + r0;
        st.logits = t->dtype == MT_FP64 ? NULL : lg;
        st.logits64 = t->dtype == MT_FP64 ? lg : NULL;
        st.logits_len = o->logits_len;
        losses = mt_flat_at(t, o->loss, (size_t)(off + r0));
      }
      const double before = st.correct;
      err = mt_compute(t, &sub, 0.0, 0, losses, &st);
      t->thread_rows = 0;
      /* the piece's hits: an integer (token data: a sum of hits / T) */
      hits += llround((st.correct - before) * per);
      for (int i = 0; !err && i < r1 - r0; i++)
        mt_xsum_add(&sum, t->dtype == MT_FP64 ? ((double *)losses)[i] : ((float *)losses)[i]);
    }
    off += bt.n;
  }
  if (gemm_threads > 1) omp_set_num_threads(gemm_threads);
  mt_free(&scratch);
  if (!err && o) outs_softmax(o);
  MT_CALL(mt_agree(t->comm->world, err));
  int64_t v[2] = {hits, rows};
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_SUM, t->comm->world));
  MT_CALL(mt_xsum_allreduce(&sum, t->comm->world));
  res->loss = v[1] > 0 ? mt_xsum_value(&sum) / (double)v[1] : 0;
  /* regression: no accuracy */
  res->acc = d->spec.ntargets ? NAN : v[1] > 0 ? (double)v[0] / ((double)v[1] * per) : 0;
  res->count = v[1];
  t->eval->samples += rows;
  t->eval->seconds += mt_now() - t0;
  mt_ev_end(MT_EV_VALID);
  return 0;
}

/* Writes o as path; unlabelled: without /label and /loss (how: pass's).
 * Collective. */
static int write_path(mt_trainer *t, const outs *o, const char *path, const char *set, int index,
                      const mt_dataset *d, int epoch, int unlabelled, int how) {
  const mt_outputs_rows r = {.rows = o->rows, .index = o->index, .label = o->label,
                             .pred = o->pred, .loss = o->loss, .logits = o->logits,
                             .logits_len = o->logits_len, .dtype = o->dtype,
                             .unlabelled = unlabelled, .with_probs = o->want_probs,
                             .values = (how & EV_VALUES) && d->spec.ntargets, .probs = o->probs};
  mt_outputs_meta m = {set, index, d->path, d->n, epoch, t->global_step, t->cfg->model};
  MT_CALL(mt_outputs_write(t->comm->world, path, &m, &r));
  return 0;
}

/* Writes o as OUTPUT_DIR/outputs/NAME.h5. Collective. */
static int write_outs(mt_trainer *t, const outs *o, const char *name, const char *set, int index,
                      const mt_dataset *d, int epoch) {
  const mt_config *c = t->cfg;
  char path[MT_PATH_MAX];
  int len = snprintf(path, sizeof(path), "%s/outputs/%s.h5", c->output_dir, name);
  int err = len > 0 && (size_t)len < sizeof(path)
                ? 0 : MT_ERR(MT_ERR_OPTION, "option -output_dir: too long for %s/outputs/%s.h5",
                             c->output_dir, name);
  MT_CALL(mt_agree(t->comm->world, err));
  return write_path(t, o, path, set, index, d, epoch, 0, 0);
}

int mt_eval_pass(mt_trainer *t, mt_dataset *d, mt_loader *L, const mt_eval_write *w,
                 double *loss, double *acc, int64_t *count) {
  outs o;
  memset(&o, 0, sizeof(o));
  result r;
  const int how = (w && w->probs ? EV_PROBS : 0) | (w && w->values ? EV_VALUES : 0);
  int err = pass(t, d, L, 0, w ? &o : NULL, how, &r);
  if (!err && w) err = write_path(t, &o, w->path, w->set, w->index, d, 0, w->unlabelled, how);
  outs_free(&o);
  MT_CALL(err);
  *loss = r.loss;
  *acc = r.acc;
  *count = r.count;
  return 0;
}

int mt_eval_setup(mt_trainer *t) {
  MT_CALL(mt_calloc(&t->eval, 1, sizeof(*t->eval), "evaluation state"));
  const mt_config *c = t->cfg;
  MPI_Comm w = t->comm->world;
  int err = 0;
  if (c->outputs_logits && t->train.spec.tokens)
    err = MT_ERR(MT_ERR_OPTION, "option -outputs_logits: not offered for token data (%s)",
                 c->data_train[0] ? c->data_train : c->model_file);
  MT_CALL(mt_agree(w, err));
  for (int i = 0; i < c->ntest; i++) {
    MT_CALL(mt_dataset_open(&t->eval->test[i], c->data_test[i], w, &t->train.spec, t->window,
                            c->data_check));
    t->eval->ntest_open = i + 1;
    MT_CALL(mt_agree(w, mt_loader_create(&t->eval->test_loader[i], &t->eval->test[i],
                                         mt_eval_rows(c->val_batch_size, mt_eval_piece(t)), c->prefetch)));
  }
  if (c->outputs & MT_OUTPUTS_TRAIN)
    MT_CALL(mt_agree(w, mt_loader_create(&t->eval->train_loader, &t->train,
                                         mt_eval_rows(c->val_batch_size, mt_eval_piece(t)), c->prefetch)));
  return 0;
}

void mt_eval_destroy(mt_trainer *t) {
  if (!t->eval) return;
  for (int i = 0; i < MT_MAX_VAL; i++) mt_loader_destroy(&t->eval->test_loader[i]);
  mt_loader_destroy(&t->eval->train_loader);
  for (int i = 0; i < t->eval->ntest_open; i++) mt_dataset_close(&t->eval->test[i]);
  mt_free(&t->eval);
}

int mt_validate(mt_trainer *t, int set, int epoch, double *loss, double *acc, int64_t *count) {
  const int want = t->cfg->outputs & MT_OUTPUTS_VAL; /* epoch -1 (-epochs 0): "epoch0" */
  outs o;
  memset(&o, 0, sizeof(o));
  result r;
  int err = pass(t, &t->val[set], t->val_loader[set], t->cfg->max_val_steps, want ? &o : NULL, 0, &r);
  if (!err && want) {
    char name[64];
    snprintf(name, sizeof(name), "val%d-epoch%d", set, epoch + 1);
    err = write_outs(t, &o, name, "val", set, &t->val[set], epoch + 1);
  }
  outs_free(&o);
  MT_CALL(err);
  *loss = r.loss;
  *acc = r.acc;
  *count = r.count;
  return 0;
}

int mt_eval_train(mt_trainer *t, int epoch) {
  const mt_config *c = t->cfg;
  if (!(c->outputs & MT_OUTPUTS_TRAIN)) return 0;
  outs o;
  memset(&o, 0, sizeof(o));
  result r;
  int err = pass(t, &t->train, t->eval->train_loader, c->max_val_steps, &o, 0, &r);
  if (!err) {
    mt_print0("epoch %d/%d train (evaluation pass) %s: loss %.4f accuracy %.4f (%lld samples)\n",
              epoch + 1, c->epochs, c->data_train, r.loss, r.acc, (long long)r.count);
    char name[64];
    snprintf(name, sizeof(name), "train-epoch%d", epoch + 1);
    err = write_outs(t, &o, name, "train", -1, &t->train, epoch + 1);
  }
  outs_free(&o);
  MT_CALL(err);
  return 0;
}

int mt_eval_test(mt_trainer *t, int epochs_done) {
  const mt_config *c = t->cfg;
  if (c->ntest == 0) return 0;
  const int want = (c->outputs & MT_OUTPUTS_TEST) != 0;
  mt_test_row rows[MT_MAX_VAL];
  for (int i = 0; i < c->ntest; i++) {
    outs o;
    memset(&o, 0, sizeof(o));
    result r;
    int err = pass(t, &t->eval->test[i], t->eval->test_loader[i], 0, want ? &o : NULL, 0, &r);
    if (!err) {
      mt_print0("test[%d] %s: loss %.4f accuracy %.4f (%lld samples)\n", i, c->data_test[i],
                r.loss, r.acc, (long long)r.count);
      rows[i] = (mt_test_row){i, c->data_test[i], epochs_done, t->global_step, r.loss, r.acc,
                              r.count};
    }
    if (!err && want) {
      char name[64];
      snprintf(name, sizeof(name), "test%d", i);
      err = write_outs(t, &o, name, "test", i, &t->eval->test[i], epochs_done);
    }
    outs_free(&o);
    MT_CALL(err);
  }
  int err = t->comm->rank == 0 ? mt_test_csv_write(c->output_dir, rows, c->ntest) : 0;
  MT_CALL(mt_agree(t->comm->world, err));
  return 0;
}

int mt_eval_report(mt_trainer *t) {
  const int size = t->comm->size, n = 3;
  char host[MT_VALUE_STR_MAX] = "";
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "?");
  mt_value mine[3] = {mt_value_str(host), mt_value_i64(t->eval->samples),
                      mt_value_f64(t->eval->seconds)};
  mt_value *all = NULL;
  int err = mt_calloc(&all, (size_t)size * n, sizeof(mt_value), "per-rank values");
  MT_CALL(mt_agree(t->comm->world, err));
  err = mt_allgather_values(t->comm->world, mine, n, all);
  int64_t lo = 0, hi = 0, sum = 0;
  for (int r = 0; !err && r < size; r++) {
    int64_t k = all[r * n + 1].i;
    lo = r == 0 || k < lo ? k : lo;
    hi = r == 0 || k > hi ? k : hi;
    sum += k;
  }
  if (!err && sum > 0) {
    mt_print0("evaluated samples per rank: %lld to %lld, %lld in all\n", (long long)lo,
              (long long)hi, (long long)sum);
    for (int r = 0; r < size && r < 16; r++)
      mt_print0("  rank %d (%s): %lld samples in %.2f s\n", r, all[r * n].s,
                (long long)all[r * n + 1].i, all[r * n + 2].f);
    if (size > 16) mt_print0("  ... and %d more ranks\n", size - 16);
  }
  mt_free(&all);
  MT_CALL(err);
  return 0;
}
