/* test_layers, normalisation: layernorm and batchnorm2d (training and
 * eval) against references and finite differences; argument errors. */
#include "test_layers.h"

/* ---------------------------------------------------------- normalisation */

static void test_layernorm_ref(int N, int C, int affine) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "layernorm N=%d C=%d%s", "l_layernorm_%d_%d%s.txt", N, C,
           affine ? "" : "_noaffine");
  const int64_t n = (int64_t)N * C;
  const float eps = (float)tu_ref_scalar(&r, "eps");
  float *inp = tu_ref_floats(&r, "inp", n), *dout = tu_ref_floats(&r, "dout", n);
  float *w = affine ? tu_ref_floats(&r, "w", C) : NULL,
        *b = affine ? tu_ref_floats(&r, "b", C) : NULL;
  float *out = zeros(n), *mean = zeros(N), *rstd = zeros(N), *dinp = zeros(n);
  float *dw = zeros(C), *db = zeros(C);
  mt_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  cmp(&r, "out", out, n, REF_TOL, what);
  cmp(&r, "mean", mean, N, REF_TOL, what);
  cmp(&r, "rstd", rstd, N, REF_TOL, what);
  for (int k = 0; k < 2; k++)
    mt_layernorm_backward(dinp, affine ? dw : NULL, affine ? db : NULL, dout, inp, w, mean, rstd, N,
                          C);
  cmp2(&r, "dinp", dinp, n, what);
  if (affine) cmp2(&r, "dw", dw, C, what), cmp2(&r, "db", db, C, what);
  memset(dinp, 0, (size_t)n * sizeof(float));
  mt_layernorm_backward(dinp, NULL, NULL, dout, inp, w, mean, rstd, N, C);
  cmp(&r, "dinp", dinp, n, REF_TOL, what);
  if (affine) {
    memset(dw, 0, (size_t)C * sizeof(float));
    memset(db, 0, (size_t)C * sizeof(float));
    mt_layernorm_backward(NULL, dw, db, dout, inp, w, mean, rstd, N, C);
    cmp(&r, "dw", dw, C, REF_TOL, what);
    cmp(&r, "db", db, C, REF_TOL, what);
  }
  free(inp), free(dout), free(w), free(b), free(out), free(mean), free(rstd), free(dinp);
  free(dw), free(db);
  tu_ref_free(&r);
}

typedef struct {
  float *out, *mean, *rstd, *inp, *w, *b, *rm, *rv, *R;
  int N, C, HW, training, bn;
} norm_ctx;

static double norm_loss(void *p) {
  norm_ctx *x = p;
  if (x->bn)
    mt_batchnorm2d_forward(x->out, x->mean, x->rstd, x->rm, x->rv, x->inp, x->w, x->b, x->N, x->C,
                           x->HW, 1e-5f, 0.1f, x->training);
  else
    mt_layernorm_forward(x->out, x->mean, x->rstd, x->inp, x->w, x->b, x->N, x->C, 1e-5f);
  return wsum(x->out, x->R, (int64_t)x->N * x->C * x->HW);
}

/* LayerNorm (bn = 0, rows N of C) or BatchNorm2d (bn = 1, (N,C,HW)). */
static void test_norm_fd(int bn, int N, int C, int HW, int training, uint64_t seed) {
  uint64_t rng = seed;
  const int64_t n = (int64_t)N * C * HW, ns = bn ? C : N;
  norm_ctx x = {zeros(n),
                zeros(ns),
                zeros(ns),
                rnd(n, &rng, 2),
                rnd(C, &rng, 1),
                rnd(C, &rng, 1),
                rnd(C, &rng, 1),
                rnd(C, &rng, 1),
                rnd(n, &rng, 1),
                N,
                C,
                HW,
                training,
                bn};
  for (int i = 0; i < C; i++) x.rv[i] = 1.5f + x.rv[i];
  float *dinp = zeros(n), *dw = zeros(C), *db = zeros(C);
  norm_loss(&x);
  if (bn)
    mt_batchnorm2d_backward(dinp, dw, db, x.R, x.inp, x.w, x.mean, x.rstd, N, C, HW, training);
  else
    mt_layernorm_backward(dinp, dw, db, x.R, x.inp, x.w, x.mean, x.rstd, N, C);
  char what[128];
  snprintf(what, sizeof(what), "%s (%d,%d,%d)%s", bn ? "batchnorm2d" : "layernorm", N, C, HW,
           bn ? (training ? " training" : " eval") : "");
  const int rich = !bn || training; /* eval BatchNorm is affine */
  fd_check(dinp, x.inp, n, 0.05f, rich, norm_loss, &x, "%s: dinp", what);
  fd_check(dw, x.w, C, 0.05f, rich, norm_loss, &x, "%s: dweight", what);
  fd_check(db, x.b, C, 0.05f, rich, norm_loss, &x, "%s: dbias", what);
  free(x.out), free(x.mean), free(x.rstd), free(x.inp), free(x.w), free(x.b), free(x.rm);
  free(x.rv), free(x.R), free(dinp), free(dw), free(db);
}

static void test_batchnorm_ref(int B, int C, int HW, int training) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "batchnorm2d B=%d C=%d HW=%d %s", "l_batchnorm_%d_%d_%d_%s.txt",
           B, C, HW, training ? "train" : "eval");
  const int64_t n = (int64_t)B * C * HW;
  const tu_tensor *hp = tu_ref_get(&r, "hp", 2);
  float *inp = tu_ref_floats(&r, "inp", n), *dout = tu_ref_floats(&r, "dout", n);
  float *w = tu_ref_floats(&r, "w", C), *b = tu_ref_floats(&r, "b", C);
  float *rm = tu_ref_floats(&r, "running_mean0", C), *rv = tu_ref_floats(&r, "running_var0", C);
  float *out = zeros(n), *mean = zeros(C), *rstd = zeros(C), *dinp = zeros(n);
  float *dw = zeros(C), *db = zeros(C);
  CHECK(mt_batchnorm2d_forward(out, mean, rstd, rm, rv, inp, w, b, B, C, HW, (float)hp->v[0],
                               (float)hp->v[1], training) == 0,
        "%s forward returns 0", what);
  cmp(&r, "out", out, n, REF_TOL, what);
  cmp(&r, "mean", mean, C, REF_TOL, what);
  cmp(&r, "rstd", rstd, C, REF_TOL, what);
  cmp(&r, "running_mean", rm, C, REF_TOL, what);
  cmp(&r, "running_var", rv, C, REF_TOL, what);
  mt_batchnorm2d_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, C, HW, training);
  cmp(&r, "dinp", dinp, n, REF_TOL, what);
  cmp(&r, "dw", dw, C, REF_TOL, what);
  cmp(&r, "db", db, C, REF_TOL, what);
  mt_batchnorm2d_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, C, HW, training);
  cmp2(&r, "dinp", dinp, n, what);
  cmp2(&r, "dw", dw, C, what);
  cmp2(&r, "db", db, C, what);
  free(inp), free(dout), free(w), free(b), free(rm), free(rv), free(out), free(mean);
  free(rstd), free(dinp), free(dw), free(db);
  tu_ref_free(&r);
}

static void test_batchnorm_args(void) {
  float x[3] = {1, 2, 3}, o[3], m[3], s[3], rm[3] = {0}, rv[3] = {1, 1, 1};
  CHECK(
      mt_batchnorm2d_forward(o, m, s, rm, rv, x, NULL, NULL, 1, 3, 1, 1e-5f, 0.1f, 1) == MT_ERR_ARG,
      "batchnorm2d training refuses one value per channel (PyTorch too)");
  mt_error_clear();
  CHECK(mt_batchnorm2d_forward(o, m, s, rm, rv, x, NULL, NULL, 1, 3, 1, 1e-5f, 0.1f, 0) == 0,
        "batchnorm2d eval takes one value per channel");
}

/* in main's order (test_layers.c) */
void test_layers_norm(void) {
  test_layernorm_ref(6, 7, 1);
  test_layernorm_ref(1, 16, 1);
  test_layernorm_ref(3, 5, 0);
  test_norm_fd(0, 3, 6, 1, 0, 7);
  test_norm_fd(0, 5, 150, 1, 0, 10); /* three blocks of channels, the last partial */
  test_batchnorm_ref(4, 3, 15, 1);
  test_batchnorm_ref(1, 2, 6, 1);
  test_batchnorm_ref(3, 1, 9, 1);
  test_batchnorm_ref(4, 3, 15, 0);
  test_norm_fd(1, 2, 3, 4, 1, 8);
  test_norm_fd(1, 2, 2, 3, 0, 9);
  test_batchnorm_args();
}
