/* DP-SGD: the privacy policy of the training step (step.h), for the
 * backends' -dp suffix (sp-dp, ddp-dp).
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
#include "trainer/step.h"
#include "backends/backends.h"
#include "optim/accountant.h"
#include "optim/dpsgd.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define CONV MT_ACC_IMPROVED

struct mt_dp {
  double q, sigma, C, delta, target;
  int poisson, phys;
  mt_loader *loader;
  int64_t *plan; /* this rank's members of the epoch's steps, step by step */
  size_t cap_plan;
  int *counts; /* chunk sizes */
  size_t cap_counts;
  int *nchunks; /* chunks of each step of the epoch */
  int64_t next; /* the step of the epoch the next step (mt_step) takes */
  float *scratch[MT_MAX_THREADS];
  int batched;                    /* mt_dp_clip_batched (the model's norms)  */
  double *norms[MT_MAX_THREADS];  /* its per-sample norms                    */
  mt_accountant acc;
  double orders[MT_ACC_NORDERS], rdp_step[MT_ACC_NORDERS], rdp_total[MT_ACC_NORDERS];
  int64_t clipped, samples; /* this rank's, since the last epoch report */
  int spent_said;
};

static int grow(void *pp, size_t *cap, size_t need, size_t elem, const char *what) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? 2 * *cap : 4096;
  while (nc < need) nc *= 2;
  void *p = NULL;
  MT_CALL(mt_calloc(&p, nc, elem, what));
  if (*cap) memcpy(p, *(void **)pp, *cap * elem);
  mt_free(pp);
  *(void **)pp = p;
  *cap = nc;
  return 0;
}

/* Turns the recorded error into one that names opt. */
static int rename_error(const char *opt) {
  char msg[1024];
  snprintf(msg, sizeof(msg), "%s", mt_error_message());
  mt_error_clear();
  return MT_ERR(MT_ERR_OPTION, "option %s: %s", opt, msg);
}

static int dp_setup(mt_trainer *t) {
  const mt_config *c = t->cfg;
  struct mt_dp *d;
  MT_CALL(mt_calloc(&d, 1, sizeof(*d), "DP-SGD state"));
  t->dp = d;
  const int64_t N = t->train.n;
  d->q = (double)c->batch_size / (double)N;
  d->C = c->dp_max_grad_norm;
  d->delta = c->dp_delta > 0 ? c->dp_delta : mt_dp_default_delta(N);
  d->target = c->dp_target_epsilon;
  d->poisson = !strcmp(c->dp_sampling, "poisson");
  d->phys = c->dp_max_physical_batch > 0 ? c->dp_max_physical_batch : c->micro_batch_size;
  mt_acc_default_orders(d->orders);
  if (c->dp_noise_multiplier >= 0) {
    d->sigma = c->dp_noise_multiplier;
  } else {
    int64_t steps = t->steps_per_epoch * (int64_t)c->epochs;
    if (mt_acc_noise_multiplier(d->target, d->delta, d->q, steps, d->orders, MT_ACC_NORDERS, CONV,
                                MT_ACC_EPS_TOL, &d->sigma))
      return rename_error("-dp_target_epsilon");
  }
  MT_CALL(mt_acc_rdp_sgm(d->q, d->sigma, 1, d->orders, MT_ACC_NORDERS, d->rdp_step));
  MT_CALL(mt_loader_create(&d->loader, &t->train, d->phys, c->prefetch));
  MT_CALL(mt_calloc(&d->nchunks, (size_t)t->steps_per_epoch, sizeof(int), "DP-SGD plan"));
  d->batched = t->model->ops->backward_clipped && strcmp(c->dp_grad_sample, "exact");
  const int T = mt_compute_nthr(t);
  for (int i = 0; i < T; i++) {
    const mt_model *m = T > 1 ? mt_compute_model(t, i) : t->model;
    if (d->batched)
      MT_CALL(mt_calloc(&d->norms[i], (size_t)m->max_batch, sizeof(double), "per-sample norms"));
    else
      MT_CALL(mt_calloc(&d->scratch[i], m->params.total, sizeof(float), "per-sample gradient"));
  }
  mt_print0("DP-SGD: %s sampling, rate q %.6g (expected batch %d of %lld), noise multiplier "
            "%.6g%s, max grad norm %g, delta %g%s; %s, chunks of %d per rank\n",
            d->poisson ? "Poisson" : "shuffled", d->q, c->batch_size, (long long)N, d->sigma,
            c->dp_noise_multiplier >= 0 ? "" : " (solved for the target)", d->C, d->delta,
            c->dp_delta > 0 ? "" : " (1/N rounded down)",
            d->batched ? "per-sample norms found by the model, clipped in batched passes "
                         "(ghost clipping)"
                       : "per-sample gradients exact, one forward+backward per sample",
            d->phys);
  if (d->target > 0)
    mt_print0("DP-SGD: privacy budget epsilon %g at delta %g over %d epochs of %lld steps\n",
              d->target, d->delta, c->epochs, (long long)t->steps_per_epoch);
  if (d->sigma == 0) mt_print0("DP-SGD: noise multiplier 0: no privacy (epsilon is infinite)\n");
  return 0;
}

static void dp_destroy(mt_trainer *t) {
  struct mt_dp *d = t->dp;
  if (!d) return;
  mt_loader_destroy(&d->loader);
  mt_free(&d->plan);
  mt_free(&d->counts);
  mt_free(&d->nchunks);
  for (int i = 0; i < MT_MAX_THREADS; i++) mt_free(&d->scratch[i]), mt_free(&d->norms[i]);
  mt_acc_free(&d->acc);
  mt_free(&t->dp);
}

static int dp_plan_epoch(mt_trainer *t, int epoch, int64_t first) {
  const mt_config *c = t->cfg;
  struct mt_dp *d = t->dp;
  const int W = t->comm->size, rank = t->comm->rank, P = d->phys;
  const int64_t N = t->train.n, S = t->steps_per_epoch;
  size_t np = 0, nb = 0;
  if (!d->poisson) mt_sampler_permutation(c->seed, epoch, N, t->perm);
  for (int64_t s = first; s < S; s++) {
    size_t start = np;
    if (d->poisson) {
      uint64_t key = mt_dp_step_key(c->seed, epoch, s);
      int64_t j = 0;
      for (int64_t i = 0; i < N; i++) {
        if (!mt_dp_poisson_member(key, i, d->q)) continue;
        if (j++ % W != rank) continue;
        if (np == d->cap_plan) MT_CALL(grow(&d->plan, &d->cap_plan, np + 1, sizeof(int64_t), "DP-SGD plan"));
        d->plan[np++] = i;
      }
    } else {
      MT_CALL(grow(&d->plan, &d->cap_plan, np + (size_t)c->batch_size, sizeof(int64_t), "DP-SGD plan"));
      for (int64_t j = rank; j < c->batch_size; j += W) d->plan[np++] = t->perm[s * c->batch_size + j];
    }
    int k = (int)(np - start), chunks = (k + P - 1) / P;
    d->nchunks[s] = chunks;
    MT_CALL(grow(&d->counts, &d->cap_counts, nb + (size_t)chunks, sizeof(int), "DP-SGD plan"));
    for (int ch = 0; ch < chunks; ch++) d->counts[nb++] = k - ch * P < P ? k - ch * P : P;
  }
  d->next = first;
  MT_CALL(mt_loader_start(d->loader, d->plan, d->counts, (int)nb));
  return 0;
}

/* Thread i's clipped per-sample gradients of b's rows into sum. */
static int clip_rows(struct mt_dp *d, mt_model *m, const float *params, const mt_batch *b, int i,
                     float *sum, mt_batch_stats *st, int64_t *clipped) {
  if (d->batched) return mt_dp_clip_batched(m, params, b, d->C, d->norms[i], sum, st, clipped);
  return mt_dp_clip_accumulate(m, params, b, d->C, d->scratch[i], sum, st, clipped);
}

/* Clipped per-sample gradients of b's rows, split over the rank's threads
 * (thread i: its model and gradient buffer, compute.c's). */
static int clip_chunk(mt_trainer *t, const mt_batch *b, mt_batch_stats *st) {
  struct mt_dp *d = t->dp;
  const int T = mt_compute_nthr(t), rows = b->n;
  d->samples += rows;
  if (T == 1)
    return clip_rows(d, t->model, t->params, b, 0, t->grads, st, &d->clipped);
  mt_batch_stats part[MT_MAX_THREADS];
  int64_t clipped[MT_MAX_THREADS];
  int err[MT_MAX_THREADS];
  char msg[1024] = "";
#pragma omp parallel num_threads(T)
  {
    omp_set_num_threads(1);
    int i = omp_get_thread_num();
    int r0 = (int)((int64_t)rows * i / T), r1 = (int)((int64_t)rows * (i + 1) / T);
    part[i] = (mt_batch_stats){0};
    clipped[i] = 0;
    err[i] = 0;
    if (r1 > r0) {
      mt_batch sub = mt_batch_rows(b, r0, r1);
      err[i] = clip_rows(d, mt_compute_model(t, i), t->params, &sub, i, mt_compute_grads(t, i), &part[i],
                         &clipped[i]);
      if (err[i]) {
#pragma omp critical(mt_dp_err)
        if (!msg[0]) snprintf(msg, sizeof(msg), "%s", mt_error_message());
        mt_error_clear();
      }
    }
  }
  for (int i = 0; i < T; i++) {
    if (err[i]) return MT_ERR(err[i], "thread %d: %s", i, msg);
    st->loss_sum += part[i].loss_sum;
    st->correct += part[i].correct;
    d->clipped += clipped[i];
  }
  return 0;
}

/* The step's parts (step.c runs them in order). */
static int dp_micro_steps(mt_trainer *t, int *k) {
  struct mt_dp *d = t->dp;
  MT_CHECK(d->next < t->steps_per_epoch, MT_ERR_STATE, "DP-SGD: step %lld is not planned",
           (long long)d->next);
  *k = d->nchunks[d->next++];
  return 0;
}

static int dp_next(mt_trainer *t, mt_batch *b) { return mt_loader_next(t->dp->loader, b); }

static int dp_micro(mt_trainer *t, const mt_batch *b, double scale, mt_batch_stats *st) {
  (void)scale; /* the clipped sum is divided by the batch after the reduction */
  return clip_chunk(t, b, st);
}

/* the noise of the global batch, once: on rank 0 before the sum */
static int dp_noise(mt_trainer *t) {
  const mt_config *c = t->cfg;
  const struct mt_dp *d = t->dp;
  if (t->comm->rank == 0)
    mt_dp_add_noise(t->grads, t->model->params.total, d->sigma * d->C,
                    mt_key(c->seed, MT_PURPOSE_DP_NOISE, (uint64_t)t->global_step),
                    mt_compute_nthr(t) > 1 ? mt_compute_nthr(t) : (c->threads > 0 ? c->threads : 1));
  return 0;
}

/* the mean over the expected batch: q N = B for Poisson, B for shuffle */
static int dp_mean(mt_trainer *t) {
  const float inv = 1.0f / (float)t->cfg->batch_size;
  const size_t n = t->model->params.total;
  float *g = t->grads;
#pragma omp simd
  for (size_t i = 0; i < n; i++) g[i] *= inv;
  return 0;
}

static int dp_account(mt_trainer *t) {
  struct mt_dp *d = t->dp;
  MT_CALL(mt_acc_step(&d->acc, d->q, d->sigma, 1));
  for (int k = 0; k < MT_ACC_NORDERS; k++) d->rdp_total[k] += d->rdp_step[k];
  return 0;
}

static int dp_spent(mt_trainer *t) {
  struct mt_dp *d = t->dp;
  if (d->target <= 0) return 0;
  double r[MT_ACC_NORDERS], eps = INFINITY;
  for (int k = 0; k < MT_ACC_NORDERS; k++) r[k] = d->rdp_total[k] + d->rdp_step[k];
  if (mt_acc_rdp_to_eps(d->orders, r, MT_ACC_NORDERS, d->delta, CONV, &eps, NULL)) {
    mt_error_clear();
    eps = INFINITY;
  }
  if (eps <= d->target) return 0;
  if (!d->spent_said) {
    double now = 0;
    if (mt_acc_epsilon(&d->acc, d->orders, MT_ACC_NORDERS, d->delta, CONV, &now, NULL))
      mt_error_clear();
    mt_print0("DP-SGD: privacy budget spent: epsilon %.4f after %lld steps, one more step would "
              "reach %.4f > -dp_target_epsilon %g; training stops\n", now,
              (long long)mt_acc_total_steps(&d->acc), eps, d->target);
    d->spent_said = 1;
  }
  return 1;
}

/* epsilon after the first k steps of the history. */
static int eps_after(const mt_accountant *a, const double *orders, double delta, int64_t k,
                     double *eps) {
  mt_accountant h = {0};
  int err = 0;
  for (int i = 0; i < a->n && k > 0 && !err; i++) {
    int64_t s = a->seg[i].steps < k ? a->seg[i].steps : k;
    err = mt_acc_step(&h, a->seg[i].q, a->seg[i].sigma, s);
    k -= s;
  }
  if (!err) err = mt_acc_epsilon(&h, orders, MT_ACC_NORDERS, delta, CONV, eps, NULL);
  mt_acc_free(&h);
  return err;
}

static int write_csv(const mt_trainer *t) {
  const struct mt_dp *d = t->dp;
  char path[MT_PATH_MAX + 32], tmp[MT_PATH_MAX + 40];
  snprintf(path, sizeof(path), "%s/dp.csv", t->cfg->output_dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  MT_CHECK(f, MT_ERR_FILE, "cannot write %s: %s", tmp, strerror(errno));
  fprintf(f, "epoch,step,epsilon,delta,noise_multiplier,sample_rate,max_grad_norm\n");
  int err = 0;
  for (int i = 0; i < t->ncurve && !err; i++) {
    if (t->curve[i].set > 0) continue; /* one row per epoch */
    double eps = 0;
    err = eps_after(&d->acc, d->orders, d->delta, t->curve[i].step, &eps);
    if (!err)
      fprintf(f, "%d,%ld,%.9g,%.9g,%.9g,%.9g,%.9g\n", t->curve[i].epoch, t->curve[i].step, eps,
              d->delta, d->sigma, d->q, d->C);
  }
  if (ferror(f)) err = err ? err : MT_ERR(MT_ERR_FILE, "writing %s failed", tmp);
  if (fclose(f) && !err) err = MT_ERR(MT_ERR_FILE, "writing %s failed", tmp);
  if (!err && rename(tmp, path))
    err = MT_ERR(MT_ERR_FILE, "cannot rename %s: %s", tmp, strerror(errno));
  return err;
}

static int dp_epoch_end(mt_trainer *t, int epoch) {
  struct mt_dp *d = t->dp;
  double eps = 0, order = 0, v[2] = {(double)d->clipped, (double)d->samples};
  MT_CALL(mt_acc_epsilon(&d->acc, d->orders, MT_ACC_NORDERS, d->delta, CONV, &eps, &order));
  if (t->comm->size > 1) MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_SUM, t->comm->world));
  mt_print0("epoch %d/%d privacy: epsilon %.4f at delta %g (RDP order %g) after %lld noisy steps; "
            "%.1f%% of %.0f per-sample gradients clipped\n", epoch + 1, t->cfg->epochs, eps,
            d->delta, order, (long long)mt_acc_total_steps(&d->acc),
            v[1] > 0 ? 100.0 * v[0] / v[1] : 0.0, v[1]);
  d->clipped = d->samples = 0;
  int err = t->comm->rank == 0 ? write_csv(t) : 0;
  MT_CALL(mt_agree(t->comm->world, err));
  return 0;
}

static int dp_report(mt_trainer *t) {
  struct mt_dp *d = t->dp;
  double eps = 0;
  MT_CALL(mt_acc_epsilon(&d->acc, d->orders, MT_ACC_NORDERS, d->delta, CONV, &eps, NULL));
  mt_print0("DP-SGD: (epsilon %.4f, delta %g) after %lld steps at sample rate %.6g, noise "
            "multiplier %.6g, max grad norm %g (RDP accountant)\n", eps, d->delta,
            (long long)mt_acc_total_steps(&d->acc), d->q, d->sigma, d->C);
  mt_print0("RESULT dp epsilon=%.6f delta=%g steps=%lld\n", eps, d->delta,
            (long long)mt_acc_total_steps(&d->acc));
  return 0;
}

static int dp_put_state(const mt_trainer *t, mt_ckpt_state *st) {
  const struct mt_dp *d = t->dp;
  size_t len = mt_acc_pack_len(&d->acc);
  double *v = NULL;
  MT_CALL(mt_calloc(&v, len, sizeof(double), "privacy accountant state"));
  int err = mt_acc_pack(&d->acc, v, len);
  if (!err) err = mt_ckpt_state_set_f64s(st, "dp_accountant", v, len);
  mt_free(&v);
  return err;
}

static int dp_get_state(mt_trainer *t, const mt_ckpt_state *st, const char *path) {
  struct mt_dp *d = t->dp;
  const double *v;
  size_t len;
  if (mt_ckpt_state_get_f64s(st, "dp_accountant", &v, &len)) {
    mt_error_clear();
    return MT_ERR(MT_ERR_DATA,
                  "checkpoint %s: no privacy accountant (written without DP-SGD): a -backend %s "
                  "run cannot continue it with a privacy guarantee", path, t->cfg->backend);
  }
  MT_CALL(mt_acc_unpack(&d->acc, v, len));
  MT_CALL(mt_acc_rdp(&d->acc, d->orders, MT_ACC_NORDERS, d->rdp_total));
  return 0;
}

const mt_privacy_ops mt_privacy_dpsgd = {.name = "DP-SGD",
                                         .setup = dp_setup,
                                         .destroy = dp_destroy,
                                         .plan_epoch = dp_plan_epoch,
                                         .micro_steps = dp_micro_steps,
                                         .next_batch = dp_next,
                                         .micro = dp_micro,
                                         .before_reduce = dp_noise,
                                         .after_reduce = dp_mean,
                                         .after_step = dp_account,
                                         .spent = dp_spent,
                                         .epoch_end = dp_epoch_end,
                                         .report = dp_report,
                                         .put_state = dp_put_state,
                                         .get_state = dp_get_state};
