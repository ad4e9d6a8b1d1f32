/* DP-SGD building blocks: per-sample clipping, noise, Poisson membership. */
#include "optim/dpsgd.h"
#include "core/core.h"

#include <math.h>
#include <string.h>

/* The forward of b's rows [r0, r1), its sums added to st's and its
 * per-sample outputs (if asked for) at their rows. */
static int forward_rows(mt_model *m, const float *params, const mt_batch *b, int r0, int r1,
                        mt_batch_stats *st) {
  mt_batch rows = mt_batch_rows(b, r0, r1);
  mt_batch_stats part = {0};
  part.pred = st->pred ? st->pred + r0 : NULL;
  part.logits = st->logits ? st->logits + (int64_t)r0 * st->logits_len : NULL;
  part.logits_len = st->logits_len;
  MT_CALL(m->ops->forward(m, params, &rows, NULL, &part));
  st->loss_sum += part.loss_sum;
  st->correct += part.correct;
  return 0;
}

/* Row r's gradient norm: finite, or an error naming the sample; counted
 * in *nclipped (may be NULL) when above max_norm. */
static int check_norm(double norm, double max_norm, const mt_batch *b, int r, int64_t *nclipped) {
  MT_CHECK(isfinite(norm), MT_ERR_NUMERIC, "the gradient of sample %lld is not finite: lower -lr",
           (long long)(b->ids ? b->ids[r] : r));
  if (nclipped && norm > max_norm) (*nclipped)++;
  return 0;
}

int mt_dp_clip_accumulate(mt_model *m, const float *params, const mt_batch *b, double max_norm,
                          float *scratch, float *sum, mt_batch_stats *st, int64_t *nclipped) {
  const size_t n = m->params.total;
  MT_CHECK(max_norm > 0, MT_ERR_ARG, "mt_dp_clip_accumulate: max_norm %g must be > 0", max_norm);
  for (int r = 0; r < b->n; r++) {
    memset(scratch, 0, n * sizeof(float));
    MT_CALL(forward_rows(m, params, b, r, r + 1, st));
    MT_CALL(m->ops->backward(m, params, scratch, 1.0f, 1));
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (size_t i = 0; i < n; i++) ss += (double)scratch[i] * (double)scratch[i];
    const double norm = sqrt(ss);
    MT_CALL(check_norm(norm, max_norm, b, r, nclipped));
    double f = max_norm / (norm + MT_DP_NORM_EPS);
    if (f >= 1.0) {
#pragma omp simd
      for (size_t i = 0; i < n; i++) sum[i] += scratch[i];
    } else {
      const float ff = (float)f;
#pragma omp simd
      for (size_t i = 0; i < n; i++) sum[i] += ff * scratch[i];
    }
  }
  return 0;
}

int mt_dp_clip_batched(mt_model *m, const float *params, const mt_batch *b, double max_norm,
                       double *norms, float *sum, mt_batch_stats *st, int64_t *nclipped) {
  MT_CHECK(m->ops->backward_clipped, MT_ERR_ARG,
           "model %s has no batched per-sample clipping (backward_clipped)", m->ops->name);
  MT_CHECK(max_norm > 0, MT_ERR_ARG, "mt_dp_clip_batched: max_norm %g must be > 0", max_norm);
  const int P = m->max_batch > 0 ? m->max_batch : 1;
  for (int r0 = 0; r0 < b->n; r0 += P) { /* in pieces the model holds */
    const int r1 = b->n - r0 < P ? b->n : r0 + P;
    MT_CALL(forward_rows(m, params, b, r0, r1, st));
    MT_CALL(m->ops->backward_clipped(m, params, sum, max_norm, r1 - r0, norms));
    for (int i = 0; i < r1 - r0; i++) MT_CALL(check_norm(norms[i], max_norm, b, r0 + i, nclipped));
  }
  return 0;
}

static inline double unit53(uint64_t key, uint64_t c) {
  return (double)(mt_rand64(key, c) >> 11) * (1.0 / 9007199254740992.0);
}

void mt_dp_add_noise(float *g, size_t n, double std, uint64_t key, int threads) {
  if (std == 0 || n == 0) return;
  const int64_t pairs = (int64_t)((n + 1) / 2);
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : 1)
  for (int64_t j = 0; j < pairs; j++) {
    double u1 = unit53(key, 2 * (uint64_t)j), u2 = unit53(key, 2 * (uint64_t)j + 1);
    double r = std * sqrt(-2.0 * log(1.0 - u1)), a = 2.0 * M_PI * u2;
    size_t i = 2 * (size_t)j;
    g[i] += (float)(r * cos(a));
    if (i + 1 < n) g[i + 1] += (float)(r * sin(a));
  }
}

int mt_dp_poisson_member(uint64_t step_key, int64_t i, double q) {
  return unit53(step_key, (uint64_t)i) < q;
}

double mt_dp_default_delta(int64_t n) {
  double d = 1;
  while (d < (double)n) d *= 10;
  return 1.0 / d;
}
