/* DP-SGD building blocks (src/optim/dpsgd.h):
 *  - the batched clipping of a model that finds its per-sample norms (the
 *    mlp: classes, dropout, float targets; the cnn, with dropout and with
 *    activations in nChw8c (8 and 16 channels); in
 *    pieces) gives the per-sample path's sum, norms and count;
 *  - the sum of per-sample gradients clipped at a huge norm equals the
 *    gradient of the whole batch (mlp, cnn without batch norm, gpt, and
 *    mlp/gpt with dropout: masks are drawn per sample id), each per-sample
 *    gradient equals a one-sample batch's, and with a small norm every
 *    clipped contribution has norm min(||g_i||, C);
 *  - the noise has mean 0 and the asked standard deviation, and depends on
 *    (key, index) only;
 *  - Poisson membership has rate q; the default delta. */
#include "core/core.h"
#include "models/models.h"
#include "model_hparams.h"
#include "optim/dpsgd.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define B 7

static double norm2(const float *g, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
  return sqrt(s);
}

/* b's data: x uniform, labels / tokens drawn from the seed. */
static void fill_batch(mt_batch *b, const mt_data_spec *sp, float *x, int32_t *y, int32_t *tok,
                       int64_t *ids) {
  memset(b, 0, sizeof(*b));
  b->n = B;
  for (int i = 0; i < B; i++) ids[i] = 100 + 3 * i;
  b->ids = ids;
  b->train = 1;
  b->key = mt_key(9, 11, 3);
  if (sp->tokens) {
    b->tokens_len = sp->sample_numel + 1;
    for (int64_t i = 0; i < B * b->tokens_len; i++) tok[i] = (int32_t)(mt_rand64(7, (uint64_t)i) % (uint64_t)sp->nclasses);
    b->tokens = tok;
  } else {
    b->x_len = sp->sample_numel;
    for (int64_t i = 0; i < B * b->x_len; i++) x[i] = 2.0f * mt_randu(5, (uint64_t)i) - 1.0f;
    for (int i = 0; i < B; i++) y[i] = (int32_t)(mt_rand64(6, (uint64_t)i) % (uint64_t)sp->nclasses);
    b->x = x;
    b->labels = y;
  }
}

static void check_model(const char *what, const char *name, const mt_model_hparams *hp,
                        const mt_data_spec *sp) {
  mt_model *m = NULL;
  if (mt_model_create_hp(name, hp, sp, B, MT_FP32, &m)) {
    CHECK(0, "%s: create: %s", what, mt_error_message());
    mt_error_clear();
    return;
  }
  size_t n = m->params.total;
  float *p = calloc(n, sizeof(float)), *full = calloc(n, sizeof(float));
  float *sum = calloc(n, sizeof(float)), *scr = calloc(n, sizeof(float));
  float *one = calloc(n, sizeof(float)), *clip = calloc(n, sizeof(float));
  float *x = calloc((size_t)(B * sp->sample_numel), sizeof(float));
  int32_t y[B], *tok = calloc((size_t)(B * (sp->sample_numel + 1)), sizeof(int32_t));
  int64_t ids[B];
  m->ops->init(m, p, 1);
  mt_batch b;
  fill_batch(&b, sp, x, y, tok, ids);
  mt_batch_stats st = {0}, st2 = {0};
  int err = m->ops->forward(m, p, &b, NULL, &st);
  if (!err) err = m->ops->backward(m, p, full, 1.0f, B);
  if (!err) err = mt_dp_clip_accumulate(m, p, &b, 1e30, scr, sum, &st2, NULL);
  CHECK(!err, "%s: forward/backward ran (%s)", what, err ? mt_error_message() : "");
  CHECK_CLOSE_F(sum, full, n, 1e-5, "%s: sum of per-sample gradients (C huge) == batch gradient",
                what);
  CHECK(fabs(st.loss_sum - st2.loss_sum) <= 1e-5 * fabs(st.loss_sum),
        "%s: per-sample losses sum to the batch loss (%g vs %g)", what, st2.loss_sum, st.loss_sum);
  /* one sample alone, via a batch of 1 of the ordinary path */
  mt_batch s3 = mt_batch_rows(&b, 3, 4);
  mt_batch_stats st3 = {0};
  memset(one, 0, n * sizeof(float));
  memset(sum, 0, n * sizeof(float));
  err = m->ops->forward(m, p, &s3, NULL, &st3);
  if (!err) err = m->ops->backward(m, p, one, 1.0f, 1);
  if (!err) err = mt_dp_clip_accumulate(m, p, &s3, 1e30, scr, sum, &st3, NULL);
  CHECK(!err && tu_rel_err_f(sum, one, n) == 0.0, "%s: a sample's gradient == a one-sample batch's",
        what);
  /* small C: the clipped contribution of that sample has norm C */
  double g3 = norm2(one, n), C = 0.25 * g3;
  memset(clip, 0, n * sizeof(float));
  int64_t nclipped = 0;
  err = mt_dp_clip_accumulate(m, p, &s3, C, scr, clip, &st3, &nclipped);
  CHECK(!err && fabs(norm2(clip, n) - C * g3 / (g3 + 1e-6)) <= 1e-5 * C && nclipped == 1,
        "%s: clipped to C (norm %g, C %g)", what, norm2(clip, n), C);
  memset(clip, 0, n * sizeof(float));
  err = mt_dp_clip_accumulate(m, p, &s3, 4 * g3, scr, clip, &st3, &nclipped);
  CHECK(!err && tu_rel_err_f(clip, one, n) == 0.0 && nclipped == 1, "%s: below C untouched", what);
  mt_error_clear();
  free(p), free(full), free(sum), free(scr), free(one), free(clip), free(x), free(tok);
  mt_model_destroy(&m);
}

/* mt_dp_clip_batched (the mlp's norms from its layers, one batched
 * backward) against mt_dp_clip_accumulate (one backward per sample): the
 * same clipped sum, norms and count, at a C that clips some samples and
 * not others, also when the model holds fewer samples than the batch
 * (pieces of 3) and for float targets. */
static void check_batched(const char *what, const char *name, const mt_model_hparams *hp,
                          const mt_data_spec *sp) {
  mt_model *m = NULL, *m3 = NULL;
  if (mt_model_create_hp(name, hp, sp, B, MT_FP32, &m) ||
      mt_model_create_hp(name, hp, sp, 3, MT_FP32, &m3)) {
    CHECK(0, "%s: create: %s", what, mt_error_message());
    mt_error_clear();
    mt_model_destroy(&m);
    return;
  }
  size_t n = m->params.total;
  float *p = calloc(n, sizeof(float)), *exact = calloc(n, sizeof(float));
  float *fast = calloc(n, sizeof(float)), *scr = calloc(n, sizeof(float));
  float *x = calloc((size_t)(B * sp->sample_numel), sizeof(float));
  float *tg = calloc((size_t)B * (sp->ntargets > 0 ? sp->ntargets : 1), sizeof(float));
  int32_t y[B];
  int64_t ids[B];
  double norms[B], each[B];
  m->ops->init(m, p, 1);
  mt_batch b;
  mt_data_spec cls = *sp;
  if (sp->ntargets > 0) cls.nclasses = 2; /* fill_batch draws labels, unused */
  fill_batch(&b, &cls, x, y, NULL, ids);
  if (sp->ntargets > 0) {
    for (int64_t i = 0; i < (int64_t)B * sp->ntargets; i++) tg[i] = mt_randu(8, (uint64_t)i);
    b.targets = tg;
    b.targets_len = sp->ntargets;
    b.labels = NULL;
  }
  /* each sample's norm alone, and a C between the smallest and the largest */
  double lo = INFINITY, hi = 0;
  int err = 0;
  for (int r = 0; r < B && !err; r++) {
    mt_batch one = mt_batch_rows(&b, r, r + 1);
    mt_batch_stats s1 = {0};
    memset(scr, 0, n * sizeof(float));
    err = m->ops->forward(m, p, &one, NULL, &s1);
    if (!err) err = m->ops->backward(m, p, scr, 1.0f, 1);
    each[r] = norm2(scr, n);
    lo = each[r] < lo ? each[r] : lo;
    hi = each[r] > hi ? each[r] : hi;
  }
  const double C = 0.5 * (lo + hi);
  mt_batch_stats se = {0}, sf = {0}, s3 = {0};
  int64_t ce = 0, cf = 0, c3 = 0;
  if (!err) err = mt_dp_clip_accumulate(m, p, &b, C, scr, exact, &se, &ce);
  if (!err) err = mt_dp_clip_batched(m, p, &b, C, norms, fast, &sf, &cf);
  CHECK(!err, "%s: ran (%s)", what, err ? mt_error_message() : "");
  mt_error_clear();
  double dn = 0;
  for (int r = 0; r < B; r++) dn = fmax(dn, fabs(norms[r] - each[r]) / each[r]);
  CHECK(dn <= 1e-5, "%s: per-sample norms from the layers == the gradients' (rel. %.2g)", what,
        dn);
  CHECK(ce > 0 && ce < B && cf == ce, "%s: %lld of %d clipped either way (%lld)", what,
        (long long)ce, B, (long long)cf);
  CHECK_CLOSE_F(fast, exact, n, 1e-5, "%s: batched clipped sum == per-sample one", what);
  CHECK(fabs(sf.loss_sum - se.loss_sum) <= 1e-5 * fabs(se.loss_sum) && sf.correct == se.correct,
        "%s: the same losses (%g vs %g)", what, sf.loss_sum, se.loss_sum);
  /* the model of 3 samples takes the batch in pieces */
  memset(fast, 0, n * sizeof(float));
  err = mt_dp_clip_batched(m3, p, &b, C, norms, fast, &s3, &c3);
  CHECK(!err && c3 == ce, "%s: in pieces of 3 (%s)", what, err ? mt_error_message() : "ok");
  mt_error_clear();
  CHECK_CLOSE_F(fast, exact, n, 1e-5, "%s: in pieces of 3, the same sum", what);
  free(p), free(exact), free(fast), free(scr), free(x), free(tg);
  mt_model_destroy(&m);
  mt_model_destroy(&m3);
}

static void test_batched(void) {
  int hid[2] = {16, 8};
  mt_data_spec flat = {.ndim = 1, .shape = {20}, .sample_numel = 20, .nclasses = 4};
  mt_model_hparams hp = mlp_hp(hid, 2, 0);
  check_batched("mlp batched", "mlp", &hp, &flat);
  hp = mlp_hp(hid, 2, 0.3);
  check_batched("mlp dropout 0.3 batched", "mlp", &hp, &flat);
  mt_data_spec reg = {.ndim = 1, .shape = {20}, .sample_numel = 20, .ntargets = 3};
  hp = mlp_hp(hid, 1, 0);
  check_batched("mlp regression batched", "mlp", &hp, &reg);
  int ch[2] = {3, 4};
  mt_data_spec img = {.ndim = 3, .shape = {2, 8, 8}, .sample_numel = 128, .nclasses = 3};
  hp = cnn_hp(ch, 2, 3, 10, 0, 0);
  check_batched("cnn batched", "cnn", &hp, &img);
  hp = cnn_hp(ch, 2, 3, 10, 0, 0.25);
  check_batched("cnn dropout 0.25 batched", "cnn", &hp, &img);
  /* channels in blocks of 8: activations in nChw8c between the layers (on
   * AVX2 / AVX-512), so the per-sample passes take image slices of those */
  int ch8[2] = {8, 16};
  hp = cnn_hp(ch8, 2, 3, 10, 0, 0);
  check_batched("cnn 8,16 channels batched", "cnn", &hp, &img);
  /* models without the op are refused by name */
  mt_data_spec tok = {.ndim = 1, .shape = {6}, .sample_numel = 6, .nclasses = 11, .tokens = 1};
  hp = gpt_hp(1, 2, 8, 6, 1, 0);
  mt_model *m = NULL;
  float g[1];
  double nm[1];
  mt_batch_stats st = {0};
  mt_batch none = {0};
  int err = mt_model_create_hp("gpt", &hp, &tok, 1, MT_FP32, &m);
  if (!err) err = mt_dp_clip_batched(m, g, &none, 1.0, nm, g, &st, NULL);
  CHECK(err == MT_ERR_ARG && strstr(mt_error_message(), "model gpt"),
        "a model without backward_clipped is refused, naming it (%s)", mt_error_message());
  mt_error_clear();
  mt_model_destroy(&m);
}

static void test_models(void) {
  int hid[2] = {16, 8}, ch[2] = {3, 4};
  mt_data_spec flat = {.ndim = 1, .shape = {20}, .sample_numel = 20, .nclasses = 4};
  mt_model_hparams hp = mlp_hp(hid, 2, 0);
  check_model("mlp", "mlp", &hp, &flat);
  hp = mlp_hp(hid, 2, 0.3);
  check_model("mlp dropout 0.3", "mlp", &hp, &flat);
  mt_data_spec img = {.ndim = 3, .shape = {1, 8, 8}, .sample_numel = 64, .nclasses = 3};
  hp = cnn_hp(ch, 2, 3, 10, 0, 0);
  check_model("cnn", "cnn", &hp, &img);
  mt_data_spec tok = {.ndim = 1, .shape = {6}, .sample_numel = 6, .nclasses = 11, .tokens = 1};
  hp = gpt_hp(1, 2, 8, 6, 1, 0);
  check_model("gpt", "gpt", &hp, &tok);
  hp = gpt_hp(2, 2, 8, 6, 1, 0.2);
  check_model("gpt dropout 0.2", "gpt", &hp, &tok);
}

static void test_noise(void) {
  const size_t n = 400001;
  float *g = calloc(n, sizeof(float)), *h = calloc(n, sizeof(float));
  const double std = 2.5;
  mt_dp_add_noise(g, n, std, 77, 1);
  double s = 0, s2 = 0, s4 = 0;
  for (size_t i = 0; i < n; i++) s += g[i];
  double mean = s / n;
  for (size_t i = 0; i < n; i++) {
    double d = g[i] - mean;
    s2 += d * d;
    s4 += d * d * d * d;
  }
  double sd = sqrt(s2 / (n - 1)), kurt = (s4 / n) / ((s2 / n) * (s2 / n));
  CHECK(fabs(mean) < 5 * std / sqrt((double)n), "noise mean %.5f ~ 0", mean);
  CHECK(fabs(sd / std - 1) < 0.01, "noise std %.5f within 1%% of %g", sd, std);
  CHECK(fabs(kurt - 3) < 0.05, "noise kurtosis %.4f ~ 3 (Gaussian)", kurt);
  /* a function of (key, index): 3 threads, and a prefix, give the same bits */
  mt_dp_add_noise(h, n, std, 77, 3);
  CHECK(!memcmp(g, h, n * sizeof(float)), "noise independent of the thread count");
  memset(h, 0, n * sizeof(float));
  mt_dp_add_noise(h, 1001, std, 77, 1);
  CHECK(!memcmp(g, h, 1001 * sizeof(float)), "noise of element i independent of n");
  mt_dp_add_noise(h, 1001, std, 78, 1);
  CHECK(memcmp(g, h, 1001 * sizeof(float)), "another key, other noise");
  memset(h, 0, n * sizeof(float));
  mt_dp_add_noise(h, n, 0, 77, 1);
  CHECK(norm2(h, n) == 0, "std 0 adds nothing");
  free(g), free(h);
}

static void test_poisson(void) {
  const int64_t N = 200000;
  const double q = 0.01;
  int64_t k = 0, both = 0;
  uint64_t k1 = mt_dp_step_key(3, 0, 0), k2 = mt_dp_step_key(3, 0, 1);
  for (int64_t i = 0; i < N; i++) {
    int a = mt_dp_poisson_member(k1, i, q), b = mt_dp_poisson_member(k2, i, q);
    k += a;
    both += a && b;
  }
  double sd = sqrt(N * q * (1 - q));
  CHECK(fabs(k - N * q) < 5 * sd, "Poisson step has %lld members, expected %.0f +- %.0f",
        (long long)k, N * q, sd);
  CHECK(fabs(both - N * q * q) < 5 * sqrt(N * q * q) + 1, "two steps independent (%lld in both)",
        (long long)both);
  CHECK(mt_dp_step_key(3, 1, 0) != k1 && mt_dp_step_key(4, 0, 0) != k1, "keys differ by epoch and seed");
  CHECK(mt_dp_default_delta(60000) == 1e-5 && mt_dp_default_delta(1000) == 1e-3 &&
            mt_dp_default_delta(50000) == 1e-5 && mt_dp_default_delta(100001) == 1e-6,
        "default delta: 1/N rounded down to a power of ten");
}

int main(void) {
  test_models();
  test_batched();
  test_noise();
  test_poisson();
  return tu_finish("test_dp");
}
