/* test_layers, the losses: softmax cross-entropy with an ignore index and
 * the mean squared error, against references and finite differences. */
#include "test_layers.h"

/* ------------------------------------------------------------------ losses */

typedef struct {
  float *probs, *logits, scale;
  int32_t *y;
  int ignore, N, C;
} xent_ctx;

static double xent_loss(void *p) {
  xent_ctx *x = p;
  double sum = 0;
  int64_t cnt = 0;
  mt_xent_ignore_forward(x->probs, NULL, &sum, &cnt, NULL, x->logits, x->y, x->ignore, x->N, x->C);
  return x->scale * sum;
}

static void test_xent_ignore(const char *tag) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "xent ignore %s", "l_xent_ignore_%s.txt", tag);
  const int N = cfg_int(&r, 0), C = cfg_int(&r, 1), ign = cfg_int(&r, 2);
  const int64_t n = (int64_t)N * C, count_ref = cfg_int(&r, 3), correct_ref = cfg_int(&r, 4);
  const float scale = (float)tu_ref_scalar(&r, "scale");
  const tu_tensor *ry = tu_ref_get(&r, "y", N);
  int32_t *y = calloc((size_t)ry->n, sizeof(int32_t));
  for (int i = 0; i < N; i++) y[i] = (int32_t)ry->v[i];
  float *logits = tu_ref_floats(&r, "logits", n), *probs = zeros(n), *losses = zeros(N);
  float *dl = zeros(n);
  double sum = -1;
  int64_t cnt = -1, correct = 5;
  CHECK(mt_xent_ignore_forward(probs, losses, &sum, &cnt, &correct, logits, y, ign, N, C) == 0,
        "%s forward returns 0", what);
  const double sref = tu_ref_scalar(&r, "loss_sum");
  CHECK(fabs(sum - sref) <= REF_TOL * fmax(fabs(sref), 1e-30) || (sref == 0 && sum == 0),
        "%s loss sum %.9g (PyTorch %.9g)", what, sum, sref);
  CHECK(cnt == count_ref && correct == 5 + correct_ref, "%s counts %lld targets, %lld hits", what,
        (long long)cnt, (long long)(correct - 5));
  if (cnt > 0) {
    const double mref = tu_ref_scalar(&r, "loss_mean");
    CHECK(fabs(sum / cnt - mref) <= REF_TOL * fabs(mref), "%s sum/count = reduction 'mean'", what);
  }
  cmp(&r, "probs", probs, n, REF_TOL, what);
  cmp(&r, "losses", losses, N, REF_TOL, what);
  mt_xent_ignore_backward(dl, probs, y, ign, scale, N, C);
  cmp(&r, "dlogits", dl, n, REF_TOL, what);
  mt_xent_ignore_backward(dl, probs, y, ign, scale, N, C);
  if (cnt > 0)
    cmp2(&r, "dlogits", dl, n, what);
  else {
    int zero = 1;
    for (int64_t i = 0; i < n; i++) zero &= dl[i] == 0.0f;
    CHECK(zero, "%s: every row ignored, no gradient at all", what);
  }
  xent_ctx x = {probs, logits, scale, y, ign, N, C};
  memset(dl, 0, (size_t)n * sizeof(float));
  mt_xent_ignore_backward(dl, probs, y, ign, scale, N, C);
  if (cnt > 0) fd_check(dl, logits, n, 0.05f, 1, xent_loss, &x, "%s", what);
  /* probs may overwrite logits */
  float *inplace = tu_ref_floats(&r, "logits", n);
  mt_xent_ignore_forward(inplace, NULL, &sum, &cnt, NULL, inplace, y, ign, N, C);
  cmp(&r, "probs", inplace, n, REF_TOL, "xent ignore in place (probs == logits)");
  y[0] = C;
  CHECK(mt_xent_ignore_forward(probs, NULL, &sum, &cnt, NULL, logits, y, ign, N, C) == MT_ERR_DATA,
        "%s refuses label %d", what, C);
  mt_error_clear();
  free(y), free(logits), free(probs), free(losses), free(dl), free(inplace);
  tu_ref_free(&r);
}

/* The hits count a row whose label is the first index of its largest logit,
 * as a scalar `>` scan finds it: ties go to the first, NaNs are skipped, and
 * a NaN in column 0 leaves the answer at 0. Rows wider than a vector too. */
static void test_xent_hits(void) {
  enum { C = 37 };
  static const struct {
    int hi, tie, nan, label, hit;
  } rows[] = {
      {33, -1, -1, 33, 1}, {33, -1, -1, 32, 0}, {20, 35, -1, 20, 1}, {20, 35, -1, 35, 0},
      {3, 1, -1, 1, 1},    {0, 36, -1, 0, 1},   {17, -1, 5, 17, 1},  {17, -1, 30, 17, 1},
      {17, -1, 0, 0, 1},   {17, -1, 0, 17, 0},  {36, -1, -1, 36, 1}, {16, 16, -1, 16, 1},
  };
  const int N = (int)(sizeof(rows) / sizeof(rows[0]));
  float *logits = zeros((int64_t)N * C), *probs = zeros((int64_t)N * C);
  int32_t y[sizeof(rows) / sizeof(rows[0])];
  for (int i = 0; i < N; i++) {
    float *l = logits + (int64_t)i * C;
    for (int j = 0; j < C; j++) l[j] = (float)((j * 7 + i) % 11) * 0.25f - 2.0f;
    l[rows[i].hi] = 4.0f;
    if (rows[i].tie >= 0) l[rows[i].tie] = 4.0f;
    if (rows[i].nan >= 0) l[rows[i].nan] = NAN;
    y[i] = rows[i].label;
  }
  for (int i = 0; i < N; i++) { /* row by row: each answer, not only the total */
    double sum = 0;
    int64_t cnt = 0, correct = 0;
    CHECK(mt_xent_ignore_forward(probs, NULL, &sum, &cnt, &correct, logits + (int64_t)i * C, y + i,
                                 -100, 1, C) == 0 &&
              cnt == 1 && correct == rows[i].hit,
          "xent hits, row %d (largest at %d, tie %d, NaN %d, label %d): %s", i, rows[i].hi,
          rows[i].tie, rows[i].nan, rows[i].label, rows[i].hit ? "a hit" : "no hit");
  }
  free(logits), free(probs);
}

typedef struct {
  float *pred, *target;
  int B, K;
} mse_ctx;

static double mse_loss(void *p) {
  mse_ctx *x = p;
  return mt_mse_forward(NULL, x->pred, x->target, x->B, x->K) / ((double)x->B * x->K);
}

static void test_mse(int B, int K) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "mse B=%d K=%d", "l_mse_%d_%d.txt", B, K);
  const int64_t n = (int64_t)B * K;
  float *pred = tu_ref_floats(&r, "pred", n), *target = tu_ref_floats(&r, "target", n);
  float *losses = zeros(B), *dp = zeros(n);
  const double sum = mt_mse_forward(losses, pred, target, B, K);
  const double sref = tu_ref_scalar(&r, "loss_sum"), mref = tu_ref_scalar(&r, "loss_mean");
  CHECK(fabs(sum - sref) <= 1e-12 * sref && fabs(sum / n - mref) <= 1e-12 * mref,
        "%s sum %.9g and mean %.9g", what, sum, sum / n);
  cmp(&r, "losses", losses, B, REF_TOL, what);
  mt_mse_backward(dp, pred, target, 1.0f / (float)n, B, K);
  cmp(&r, "dpred", dp, n, REF_TOL, what);
  mt_mse_backward(dp, pred, target, 1.0f / (float)n, B, K);
  cmp2(&r, "dpred", dp, n, what);
  memset(dp, 0, (size_t)n * sizeof(float));
  mt_mse_backward(dp, pred, target, 1.0f / (float)n, B, K);
  mse_ctx x = {pred, target, B, K};
  fd_check(dp, pred, n, 0.25f, 0, mse_loss, &x, "%s", what);
  free(pred), free(target), free(losses), free(dp);
  tu_ref_free(&r);
}

/* in main's order (test_layers.c) */
void test_layers_loss(void) {
  const char *xent[] = {"6_5", "idx0", "none", "all", "1_3"};
  for (size_t i = 0; i < sizeof(xent) / sizeof(xent[0]); i++) test_xent_ignore(xent[i]);
  test_xent_hits();
  test_mse(4, 3);
  test_mse(1, 1);
}
