/* Unit tests of the double-precision layers (-precision fp64, the _f64
 * functions of src/nn/nn.h):
 *  - every forward and backward against PyTorch float64 references written
 *    by validation/gen_refs_fp64.py (refs/f64_layers.txt), 1e-12 relative;
 *  - every backward against central finite differences of its forward,
 *    1e-10 relative: Richardson-extrapolated differences with steps 1e-3
 *    and 5e-4 (truncation of order h^4, rounding of order 1e-16 / h; the
 *    errors seen are below 1e-11), on inputs away from the kinks of relu
 *    (0.05 or more) and max-pooling (windows' values 0.1 apart);
 *  - mt_gemm_f64 against a naive triple loop (all transposes, padded
 *    leading dimensions, beta 0 and 1), backward ADDS, the float and double
 *    convolutions refusing each other's calls, dropout's mask equal to the
 *    float one for the same key.
 * Prints one line per check; exits non-zero when any check fails. */
#define MT_NN_GENERIC
#include "core/core.h"
#include "nn/nn.h"
#include "testutil.h"

#include <math.h>
#include <stdarg.h>

#define REF_TOL 1e-12
#define FD_TOL 1e-10
#define FD_H 1e-3

static tu_ref R; /* refs/f64_layers.txt */

static double *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

/* A copy of reference tensor CASE.NAME of n values (n < 0: any). */
static double *ref(const char *tag, const char *name, int64_t n) {
  char full[64];
  snprintf(full, sizeof(full), "%s.%s", tag, name);
  const tu_tensor *t = tu_ref_get(&R, full, n);
  double *x = zeros(t->n);
  memcpy(x, t->v, (size_t)t->n * sizeof(double));
  return x;
}

static int cfg(const char *tag, int i) {
  char full[64];
  snprintf(full, sizeof(full), "%s.cfg", tag);
  return (int)tu_ref_get(&R, full, -1)->v[i];
}

/* got against CASE.NAME (times k: a backward called k times adds k times) */
static void cmp(const char *tag, const char *name, const double *got, int64_t n, double k) {
  double *want = ref(tag, name, n);
  for (int64_t i = 0; i < n; i++) want[i] *= k;
  CHECK_CLOSE_D(got, want, (size_t)n, REF_TOL, "%s %s%s vs PyTorch float64", tag, name,
                k == 1 ? "" : " (backward called twice adds twice)");
  free(want);
}

/* -------------------------------------------------- finite differences */

typedef double (*loss_fn)(void *ctx);

/* Central differences of loss() in x[0..n), Richardson-extrapolated from
 * the steps h and h/2: (4 D(h/2) - D(h)) / 3. */
static void fd_grad(double *g, double *x, int64_t n, loss_fn loss, void *ctx) {
  for (int64_t i = 0; i < n; i++) {
    const double x0 = x[i];
    double est[2];
    for (int k = 0; k < 2; k++) {
      const double h = k ? FD_H / 2 : FD_H;
      x[i] = x0 + h;
      const double lp = loss(ctx);
      x[i] = x0 - h;
      const double lm = loss(ctx);
      est[k] = (lp - lm) / (2 * h);
    }
    x[i] = x0;
    g[i] = (4 * est[1] - est[0]) / 3;
  }
}

static void fd_check(const double *grad, double *x, int64_t n, loss_fn loss, void *ctx,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void fd_check(const double *grad, double *x, int64_t n, loss_fn loss, void *ctx,
                     const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  double *g = zeros(n);
  fd_grad(g, x, n, loss, ctx);
  CHECK_ERR(tu_rel_err_d(grad, g, (size_t)n), FD_TOL, "%s vs finite differences", what);
  free(g);
}

static double wsum(const double *out, const double *w, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += out[i] * w[i];
  return s;
}

/* A layer with one output: out = f(inputs), the loss sum(out * dout). */
typedef struct {
  void (*fwd)(void *ctx);
  void *ctx;
  double *out, *dout;
  int64_t n;
} lin_loss;

static double layer_loss(void *p) {
  lin_loss *l = p;
  l->fwd(l->ctx);
  return wsum(l->out, l->dout, l->n);
}

/* ------------------------------------------------------------------ gemm */

static void test_gemm(void) {
  const char ops[4][2] = {{'N', 'N'}, {'N', 'T'}, {'T', 'N'}, {'T', 'T'}};
  uint64_t rng = 11;
  for (int o = 0; o < 4; o++)
    for (int pad = 0; pad <= 2; pad += 2) {
      const char ta = ops[o][0], tb = ops[o][1];
      const int64_t M = 5, N = 7, K = 3;
      const int64_t lda = (ta == 'N' ? K : M) + pad, ldb = (tb == 'N' ? N : K) + pad, ldc = N + pad;
      const int64_t na = (ta == 'N' ? M : K) * lda, nb = (tb == 'N' ? K : N) * ldb, nc = M * ldc;
      double *A = zeros(na), *B = zeros(nb), *C = zeros(nc), *C0 = zeros(nc), *want = zeros(nc);
      for (int64_t i = 0; i < na; i++) A[i] = tu_uniform(&rng);
      for (int64_t i = 0; i < nb; i++) B[i] = tu_uniform(&rng);
      for (int64_t i = 0; i < nc; i++) C0[i] = C[i] = tu_uniform(&rng);
      const double alpha = 0.75, beta = pad ? 1.0 : 0.0;
      memcpy(want, C0, (size_t)nc * sizeof(double));
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t k = 0; k < K; k++)
            s += (ta == 'N' ? A[i * lda + k] : A[k * lda + i]) *
                 (tb == 'N' ? B[k * ldb + j] : B[j * ldb + k]);
          want[i * ldc + j] = alpha * s + beta * C0[i * ldc + j];
        }
      int rc = mt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
      CHECK(rc == 0, "mt_gemm_f64 %c%c pad %d returns 0", ta, tb, pad);
      CHECK_CLOSE_D(C, want, (size_t)nc, 1e-14, "mt_gemm_f64 %c%c pad %d (beta %g) vs naive", ta,
                    tb, pad, beta);
      free(A), free(B), free(C), free(C0), free(want);
    }
  double a = 1, b = 1, c = 0;
  CHECK(mt_gemm('X', 'N', 1, 1, 1, 1.0, &a, 1, &b, 1, 0.0, &c, 1, NULL) == MT_ERR_ARG,
        "mt_gemm_f64 refuses an op other than N and T");
  mt_error_clear();
}

/* ---------------------------------------------------------------- linear */

typedef struct {
  double *out, *inp, *w, *b;
  int B, IC, OC;
} lin_ctx;

static void lin_fwd(void *p) {
  lin_ctx *x = p;
  mt_linear_forward(x->out, x->inp, x->w, x->b, x->B, x->IC, x->OC, NULL);
}

static void test_linear(void) {
  const int B = 3, IC = 5, OC = 4;
  lin_ctx x = {zeros(B * OC), ref("lin", "inp", B * IC), ref("lin", "w", OC * IC),
               ref("lin", "b", OC), B, IC, OC};
  double *dout = ref("lin", "dout", B * OC), *dinp = zeros(B * IC), *dw = zeros(OC * IC),
         *db = zeros(OC);
  CHECK(mt_linear_forward(x.out, x.inp, x.w, x.b, B, IC, OC, NULL) == 0,
        "linear forward returns 0");
  cmp("lin", "out", x.out, B * OC, 1);
  for (int k = 1; k <= 2; k++) {
    mt_linear_backward(dinp, dw, db, dout, x.inp, x.w, B, IC, OC, NULL);
    cmp("lin", "dinp", dinp, B * IC, k);
    cmp("lin", "dw", dw, OC * IC, k);
    cmp("lin", "db", db, OC, k);
  }
  memset(dinp, 0, (size_t)(B * IC) * sizeof(double));
  memset(dw, 0, (size_t)(OC * IC) * sizeof(double));
  memset(db, 0, (size_t)OC * sizeof(double));
  mt_linear_backward(dinp, dw, db, dout, x.inp, x.w, B, IC, OC, NULL);
  lin_loss l = {lin_fwd, &x, x.out, dout, B * OC};
  fd_check(dinp, x.inp, B * IC, layer_loss, &l, "linear dinp");
  fd_check(dw, x.w, OC * IC, layer_loss, &l, "linear dw");
  fd_check(db, x.b, OC, layer_loss, &l, "linear db");
  free(x.out), free(x.inp), free(x.w), free(x.b), free(dout), free(dinp), free(dw), free(db);
}

/* ------------------------------------------------------- relu, residual */

typedef struct {
  double *out, *a, *b;
  int64_t n;
} ew_ctx;

static void relu_fwd(void *p) {
  ew_ctx *x = p;
  mt_relu_forward(x->out, x->a, x->n);
}

static void res_fwd(void *p) {
  ew_ctx *x = p;
  mt_residual_forward(x->out, x->a, x->b, x->n);
}

static void test_relu_residual(void) {
  const int64_t n = 13, m = 12;
  ew_ctx x = {zeros(n), ref("relu", "inp", n), NULL, n};
  double *dout = ref("relu", "dout", n), *dinp = zeros(n);
  mt_relu_forward(x.out, x.a, n);
  cmp("relu", "out", x.out, n, 1);
  for (int k = 1; k <= 2; k++) {
    mt_relu_backward(dinp, dout, x.out, n);
    cmp("relu", "dinp", dinp, n, k);
  }
  memset(dinp, 0, (size_t)n * sizeof(double));
  mt_relu_backward(dinp, dout, x.out, n);
  lin_loss l = {relu_fwd, &x, x.out, dout, n};
  fd_check(dinp, x.a, n, layer_loss, &l, "relu dinp (inputs 0.05 or more from 0)");
  free(x.out), free(x.a), free(dout), free(dinp);

  ew_ctx r = {zeros(m), ref("res", "a", m), ref("res", "b", m), m};
  double *d = ref("res", "dout", m), *da = zeros(m), *db = zeros(m);
  mt_residual_forward(r.out, r.a, r.b, m);
  cmp("res", "out", r.out, m, 1);
  mt_residual_backward(da, db, d, m);
  cmp("res", "da", da, m, 1);
  cmp("res", "db", db, m, 1);
  lin_loss lr = {res_fwd, &r, r.out, d, m};
  fd_check(da, r.a, m, layer_loss, &lr, "residual da");
  free(r.out), free(r.a), free(r.b), free(d), free(da), free(db);
}

/* ---------------------------------------------------------------- losses */

typedef struct {
  double *probs, *logits, scale;
  int32_t *y;
  int B, C, ignore;
} xent_ctx;

static double sx_loss(void *p) {
  xent_ctx *x = p;
  return x->scale * mt_softmax_xent_forward(x->probs, NULL, NULL, x->logits, x->y, x->B, x->C);
}

static double xi_loss(void *p) {
  xent_ctx *x = p;
  double sum = 0;
  int64_t cnt = 0;
  mt_xent_ignore_forward(x->probs, NULL, &sum, &cnt, NULL, x->logits, x->y, x->ignore, x->B, x->C);
  return x->scale * sum;
}

static int32_t *labels(const char *tag, int n) {
  double *v = ref(tag, "y", n);
  int32_t *y = calloc((size_t)n, sizeof(int32_t));
  for (int i = 0; i < n; i++) y[i] = (int32_t)v[i];
  free(v);
  return y;
}

static void test_losses(void) {
  /* softmax cross-entropy, mean over the batch */
  const int B = 4, C = 5;
  xent_ctx x = {zeros(B * C), ref("sx", "logits", B * C), 1.0 / B, labels("sx", B), B, C, -1};
  double *losses = zeros(B), *dl = zeros(B * C), sum_ref = tu_ref_scalar(&R, "sx.loss_sum");
  int64_t correct = 0;
  const double sum = mt_softmax_xent_forward(x.probs, losses, &correct, x.logits, x.y, B, C);
  CHECK(fabs(sum - sum_ref) <= REF_TOL * fabs(sum_ref), "softmax xent loss sum %.17g (PyTorch %.17g)",
        sum, sum_ref);
  cmp("sx", "probs", x.probs, B * C, 1);
  cmp("sx", "losses", losses, B, 1);
  mt_softmax_xent_backward(dl, x.probs, x.y, x.scale, B, C);
  cmp("sx", "dlogits", dl, B * C, 1);
  fd_check(dl, x.logits, B * C, sx_loss, &x, "softmax xent dlogits");
  free(x.probs), free(x.logits), free(x.y), free(losses), free(dl);

  /* cross-entropy with ignored rows, mean over the counted ones */
  const int N = 6;
  xent_ctx z = {zeros(N * C), ref("xi", "logits", N * C), 0, labels("xi", N), N, C, -1};
  double *zl = zeros(N), *zd = zeros(N * C), zs = 0;
  int64_t cnt = 0;
  CHECK(mt_xent_ignore_forward(z.probs, zl, &zs, &cnt, NULL, z.logits, z.y, -1, N, C) == 0 &&
            cnt == 4,
        "xent with ignore: 4 of 6 rows counted");
  const double zref = tu_ref_scalar(&R, "xi.loss_sum");
  CHECK(fabs(zs - zref) <= REF_TOL * fabs(zref), "xent with ignore loss sum %.17g (PyTorch %.17g)",
        zs, zref);
  cmp("xi", "losses", zl, N, 1);
  z.scale = 1.0 / (double)cnt;
  mt_xent_ignore_backward(zd, z.probs, z.y, -1, z.scale, N, C);
  cmp("xi", "dlogits", zd, N * C, 1);
  fd_check(zd, z.logits, N * C, xi_loss, &z, "xent with ignore dlogits");
  free(z.probs), free(z.logits), free(z.y), free(zl), free(zd);
}

typedef struct {
  double *pred, *target;
  int B, K;
} mse_ctx;

static double mse_loss(void *p) {
  mse_ctx *x = p;
  return mt_mse_forward(NULL, x->pred, x->target, x->B, x->K) / (x->B * x->K);
}

static void test_mse(void) {
  const int B = 3, K = 4;
  mse_ctx x = {ref("mse", "pred", B * K), ref("mse", "target", B * K), B, K};
  double *dp = zeros(B * K);
  const double s = mt_mse_forward(NULL, x.pred, x.target, B, K), sref = tu_ref_scalar(&R, "mse.loss_sum");
  CHECK(fabs(s - sref) <= REF_TOL * sref, "mse loss sum %.17g (PyTorch %.17g)", s, sref);
  mt_mse_backward(dp, x.pred, x.target, 1.0 / (B * K), B, K);
  cmp("mse", "dpred", dp, B * K, 1);
  fd_check(dp, x.pred, B * K, mse_loss, &x, "mse dpred");
  free(x.pred), free(x.target), free(dp);
}

/* ---------------------------------------------------------------- conv2d */

typedef struct {
  mt_conv2d *c;
  double *out, *inp, *w, *b;
} conv_ctx;

static void conv_fwd(void *p) {
  conv_ctx *x = p;
  mt_conv2d_forward(x->out, x->inp, x->w, x->b, x->c->s.B, x->c);
}

static void test_conv(const char *tag) {
  mt_conv2d_shape s = {cfg(tag, 0), cfg(tag, 1), cfg(tag, 2), cfg(tag, 3), cfg(tag, 4),
                       cfg(tag, 5), cfg(tag, 6), cfg(tag, 7), cfg(tag, 8), cfg(tag, 9),
                       cfg(tag, 10), cfg(tag, 11), cfg(tag, 12), cfg(tag, 13), 0, 0, 0, 0, 0};
  const int bias = cfg(tag, 14);
  mt_conv2d c;
  CHECK(mt_conv2d_init_f64(&c, &s, bias, NULL) == 0 && c.s.OH == cfg(tag, 15) &&
            c.s.OW == cfg(tag, 16),
        "conv2d %s: shape %dx%d", tag, c.s.OH, c.s.OW);
  const int64_t ni = (int64_t)s.B * s.IC * s.H * s.W, no = (int64_t)s.B * s.OC * c.s.OH * c.s.OW;
  const int64_t nw = (int64_t)s.OC * (s.IC / s.groups) * s.KH * s.KW;
  conv_ctx x = {&c, zeros(no), ref(tag, "inp", ni), ref(tag, "w", nw),
                bias ? ref(tag, "b", s.OC) : NULL};
  double *dout = ref(tag, "dout", no), *dinp = zeros(ni), *dw = zeros(nw), *db = zeros(s.OC);
  CHECK(mt_conv2d_forward(x.out, x.inp, x.w, x.b, s.B, &c) == 0, "conv2d %s forward returns 0",
        tag);
  cmp(tag, "out", x.out, no, 1);
  for (int k = 1; k <= 2; k++) {
    CHECK(mt_conv2d_backward(dinp, dw, bias ? db : NULL, dout, x.inp, x.w, s.B, &c) == 0,
          "conv2d %s backward returns 0", tag);
    cmp(tag, "dinp", dinp, ni, k);
    cmp(tag, "dw", dw, nw, k);
    if (bias) cmp(tag, "db", db, s.OC, k);
  }
  memset(dinp, 0, (size_t)ni * sizeof(double));
  memset(dw, 0, (size_t)nw * sizeof(double));
  memset(db, 0, (size_t)s.OC * sizeof(double));
  mt_conv2d_backward(dinp, dw, bias ? db : NULL, dout, x.inp, x.w, s.B, &c);
  lin_loss l = {conv_fwd, &x, x.out, dout, no};
  fd_check(dinp, x.inp, ni, layer_loss, &l, "conv2d %s dinp", tag);
  fd_check(dw, x.w, nw, layer_loss, &l, "conv2d %s dw", tag);
  if (bias) fd_check(db, x.b, s.OC, layer_loss, &l, "conv2d %s db", tag);
  /* a smaller batch: the first image's share of the outputs */
  if (s.B > 1) {
    double *o1 = zeros(no);
    conv_fwd(&x); /* the differences left other parameters' outputs */
    mt_conv2d_forward(o1, x.inp, x.w, x.b, 1, &c);
    CHECK_CLOSE_D(o1, x.out, (size_t)(no / s.B), 0.0, "conv2d %s: a batch of 1 = its row of %d",
                  tag, s.B);
    free(o1);
  }
  CHECK(mt_conv2d_forward(x.out, x.inp, x.w, x.b, s.B + 1, &c) == MT_ERR_ARG,
        "conv2d %s: a batch above %d is refused", tag, s.B);
  mt_error_clear();
  /* the float calls refuse a double convolution, and the other way round */
  float f = 0;
  CHECK(mt_conv2d_forward(&f, &f, &f, bias ? &f : NULL, 1, &c) == MT_ERR_ARG,
        "conv2d %s: the float forward refuses a convolution made for double", tag);
  mt_error_clear();
  mt_conv2d_free(&c);
  mt_conv2d cf;
  if (mt_conv2d_init(&cf, &s, bias, NULL) == 0) {
    CHECK(mt_conv2d_forward(x.out, x.inp, x.w, x.b, s.B, &cf) == MT_ERR_ARG,
          "conv2d %s: the double forward refuses a convolution made for float", tag);
    mt_error_clear();
    mt_conv2d_free(&cf);
  }
  free(x.out), free(x.inp), free(x.w), free(x.b), free(dout), free(dinp), free(dw), free(db);
}

/* --------------------------------------------------------------- pooling */

typedef struct {
  mt_pool2d_shape s;
  double *out, *inp;
  int32_t *am;
  int is_max;
} pool_ctx;

static void pool_fwd(void *p) {
  pool_ctx *x = p;
  if (x->is_max)
    mt_maxpool2d_forward(x->out, x->am, x->inp, &x->s);
  else
    mt_avgpool2d_forward(x->out, x->inp, &x->s);
}

static void test_pool(const char *tag) {
  pool_ctx x = {{cfg(tag, 0), cfg(tag, 1), cfg(tag, 2), cfg(tag, 3), cfg(tag, 4), cfg(tag, 5),
                 cfg(tag, 6), cfg(tag, 7), cfg(tag, 8), cfg(tag, 9), cfg(tag, 10), 0, 0, 0, 0},
                .is_max = tag[0] == 'm'};
  CHECK(mt_pool2d_shape_init(&x.s) == 0 && x.s.OH == cfg(tag, 11) && x.s.OW == cfg(tag, 12),
        "pool %s: shape %dx%d", tag, x.s.OH, x.s.OW);
  const int64_t ni = (int64_t)x.s.B * x.s.C * x.s.H * x.s.W;
  const int64_t no = (int64_t)x.s.B * x.s.C * x.s.OH * x.s.OW;
  x.out = zeros(no), x.inp = ref(tag, "inp", ni), x.am = calloc((size_t)no, sizeof(int32_t));
  double *dout = ref(tag, "dout", no), *dinp = zeros(ni);
  pool_fwd(&x);
  cmp(tag, "out", x.out, no, 1);
  for (int k = 1; k <= 2; k++) {
    if (x.is_max)
      mt_maxpool2d_backward(dinp, dout, x.am, &x.s);
    else
      mt_avgpool2d_backward(dinp, dout, &x.s);
    cmp(tag, "dinp", dinp, ni, k);
  }
  memset(dinp, 0, (size_t)ni * sizeof(double));
  if (x.is_max)
    mt_maxpool2d_backward(dinp, dout, x.am, &x.s);
  else
    mt_avgpool2d_backward(dinp, dout, &x.s);
  lin_loss l = {pool_fwd, &x, x.out, dout, no};
  fd_check(dinp, x.inp, ni, layer_loss, &l, "pool %s dinp (inputs 0.1 apart)", tag);
  free(x.out), free(x.inp), free(x.am), free(dout), free(dinp);
}

typedef struct {
  double *out, *inp;
} gap_ctx;

static void gap_fwd(void *p) {
  gap_ctx *x = p;
  mt_global_avgpool_forward(x->out, x->inp, 2, 3, 20);
}

static void test_gap(void) {
  gap_ctx x = {zeros(6), ref("gap", "inp", 120)};
  double *dout = ref("gap", "dout", 6), *dinp = zeros(120);
  gap_fwd(&x);
  cmp("gap", "out", x.out, 6, 1);
  mt_global_avgpool_backward(dinp, dout, 2, 3, 20);
  cmp("gap", "dinp", dinp, 120, 1);
  lin_loss l = {gap_fwd, &x, x.out, dout, 6};
  fd_check(dinp, x.inp, 120, layer_loss, &l, "global avgpool dinp");
  free(x.out), free(x.inp), free(dout), free(dinp);
}

/* --------------------------------------------------------- normalisation */

typedef struct {
  double *out, *mean, *rstd, *inp, *w, *b, *rm, *rv;
  int N, C, HW, bn, training;
} norm_ctx;

static void norm_fwd(void *p) {
  norm_ctx *x = p;
  if (x->bn) /* the running statistics are left alone: copies each call */
    mt_batchnorm2d_forward(x->out, x->mean, x->rstd, x->rm, x->rv, x->inp, x->w, x->b, x->N, x->C,
                           x->HW, 1e-5, 0.1, x->training);
  else
    mt_layernorm_forward(x->out, x->mean, x->rstd, x->inp, x->w, x->b, x->N, x->C, 1e-5);
}

static void test_layernorm(const char *tag, int affine) {
  const int N = 4, C = 6, n = N * C;
  norm_ctx x = {zeros(n), zeros(N), zeros(N), ref(tag, "inp", n), affine ? ref(tag, "w", C) : NULL,
                affine ? ref(tag, "b", C) : NULL, NULL, NULL, N, C, 1, 0, 0};
  double *dout = ref(tag, "dout", n), *dinp = zeros(n), *dw = zeros(C), *db = zeros(C);
  norm_fwd(&x);
  cmp(tag, "out", x.out, n, 1);
  for (int k = 1; k <= 2; k++) {
    mt_layernorm_backward(dinp, affine ? dw : NULL, affine ? db : NULL, dout, x.inp, x.w, x.mean,
                          x.rstd, N, C);
    cmp(tag, "dinp", dinp, n, k);
    if (affine) cmp(tag, "dw", dw, C, k), cmp(tag, "db", db, C, k);
  }
  memset(dinp, 0, (size_t)n * sizeof(double));
  memset(dw, 0, (size_t)C * sizeof(double));
  memset(db, 0, (size_t)C * sizeof(double));
  mt_layernorm_backward(dinp, affine ? dw : NULL, affine ? db : NULL, dout, x.inp, x.w, x.mean,
                        x.rstd, N, C);
  lin_loss l = {norm_fwd, &x, x.out, dout, n};
  fd_check(dinp, x.inp, n, layer_loss, &l, "layernorm %s dinp", tag);
  if (affine) {
    fd_check(dw, x.w, C, layer_loss, &l, "layernorm %s dweight", tag);
    fd_check(db, x.b, C, layer_loss, &l, "layernorm %s dbias", tag);
  }
  free(x.out), free(x.mean), free(x.rstd), free(x.inp), free(x.w), free(x.b), free(dout);
  free(dinp), free(dw), free(db);
}

static void test_batchnorm(const char *tag, int training) {
  const int B = 3, C = 2, HW = 12, n = B * C * HW;
  norm_ctx x = {zeros(n), zeros(C), zeros(C), ref(tag, "inp", n), ref(tag, "w", C),
                ref(tag, "b", C), ref(tag, "rm0", C), ref(tag, "rv0", C), B, C, HW, 1, training};
  double *dout = ref(tag, "dout", n), *dinp = zeros(n), *dw = zeros(C), *db = zeros(C);
  CHECK(mt_batchnorm2d_forward(x.out, x.mean, x.rstd, x.rm, x.rv, x.inp, x.w, x.b, B, C, HW, 1e-5,
                               0.1, training) == 0,
        "batchnorm %s forward returns 0", tag);
  cmp(tag, "out", x.out, n, 1);
  cmp(tag, "rm", x.rm, C, 1);
  cmp(tag, "rv", x.rv, C, 1);
  mt_batchnorm2d_backward(dinp, dw, db, dout, x.inp, x.w, x.mean, x.rstd, B, C, HW, training);
  cmp(tag, "dinp", dinp, n, 1);
  cmp(tag, "dw", dw, C, 1);
  cmp(tag, "db", db, C, 1);
  /* the differences: training normalises with the batch's statistics (the
   * running ones, updated by every call, do not enter the output); eval
   * with the running ones, which it leaves as they are */
  lin_loss l = {norm_fwd, &x, x.out, dout, n};
  fd_check(dinp, x.inp, n, layer_loss, &l, "batchnorm %s dinp", tag);
  fd_check(dw, x.w, C, layer_loss, &l, "batchnorm %s dweight", tag);
  fd_check(db, x.b, C, layer_loss, &l, "batchnorm %s dbias", tag);
  free(x.out), free(x.mean), free(x.rstd), free(x.inp), free(x.w), free(x.b), free(dout);
  free(dinp), free(dw), free(db), free(x.rm), free(x.rv);
}

/* -------------------------------------------- embedding, attention, GELU */

typedef struct {
  double *out, *wte, *wpe;
  int32_t tok[6];
} emb_ctx;

static void emb_fwd(void *p) {
  emb_ctx *x = p;
  mt_embedding_forward(x->out, x->tok, x->wte, x->wpe, 2, 3, 4, 5);
}

static void test_embedding(void) {
  emb_ctx x = {zeros(24), ref("emb", "wte", 20), ref("emb", "wpe", 16), {0}};
  double *t = ref("emb", "tokens", 6), *dout = ref("emb", "dout", 24), *dwte = zeros(20),
         *dwpe = zeros(16);
  for (int i = 0; i < 6; i++) x.tok[i] = (int32_t)t[i];
  CHECK(mt_embedding_forward(x.out, x.tok, x.wte, x.wpe, 2, 3, 4, 5) == 0,
        "embedding forward returns 0");
  cmp("emb", "out", x.out, 24, 1);
  mt_embedding_backward(dwte, dwpe, dout, x.tok, 2, 3, 4);
  cmp("emb", "dwte", dwte, 20, 1);
  cmp("emb", "dwpe", dwpe, 16, 1);
  lin_loss l = {emb_fwd, &x, x.out, dout, 24};
  fd_check(dwte, x.wte, 20, layer_loss, &l, "embedding dwte (a token twice)");
  fd_check(dwpe, x.wpe, 16, layer_loss, &l, "embedding dwpe");
  free(x.out), free(x.wte), free(x.wpe), free(t), free(dout), free(dwte), free(dwpe);
}

typedef struct {
  double *out, *pre, *att, *inp;
} att_ctx;

enum { AB = 2, AT = 5, AC = 8, ANH = 2 };

static void att_fwd(void *p) {
  att_ctx *x = p;
  mt_attention_forward(x->out, x->pre, x->att, x->inp, AB, AT, AC, ANH, NULL);
}

static void test_attention(void) {
  const int64_t ni = AB * AT * 3 * AC, no = AB * AT * AC, na = AB * ANH * AT * AT;
  att_ctx x = {zeros(no), zeros(na), zeros(na), ref("att", "inp", ni)};
  double *dout = ref("att", "dout", no), *dinp = zeros(ni);
  CHECK(mt_attention_forward(x.out, x.pre, x.att, x.inp, AB, AT, AC, ANH, NULL) == 0,
        "attention forward returns 0");
  cmp("att", "out", x.out, no, 1);
  cmp("att", "att", x.att, na, 1);
  for (int k = 1; k <= 2; k++) {
    CHECK(mt_attention_backward(dinp, x.pre, dout, x.inp, x.att, AB, AT, AC, ANH, NULL) == 0,
          "attention backward returns 0");
    cmp("att", "dinp", dinp, ni, k);
  }
  memset(dinp, 0, (size_t)ni * sizeof(double));
  mt_attention_backward(dinp, x.pre, dout, x.inp, x.att, AB, AT, AC, ANH, NULL);
  lin_loss l = {att_fwd, &x, x.out, dout, no};
  fd_check(dinp, x.inp, ni, layer_loss, &l, "attention dinp");
  free(x.out), free(x.pre), free(x.att), free(x.inp), free(dout), free(dinp);
}

typedef struct {
  double *out, *inp;
  mt_gelu_kind kind;
} gelu_ctx;

static void gelu_fwd(void *p) {
  gelu_ctx *x = p;
  mt_gelu_forward(x->out, x->inp, 17, x->kind);
}

static void test_gelu(const char *tag, mt_gelu_kind kind) {
  gelu_ctx x = {zeros(17), ref(tag, "inp", 17), kind};
  double *dout = ref(tag, "dout", 17), *dinp = zeros(17);
  gelu_fwd(&x);
  cmp(tag, "out", x.out, 17, 1);
  mt_gelu_backward(dinp, dout, x.inp, 17, kind);
  cmp(tag, "dinp", dinp, 17, 1);
  lin_loss l = {gelu_fwd, &x, x.out, dout, 17};
  fd_check(dinp, x.inp, 17, layer_loss, &l, "gelu %s dinp", tag);
  free(x.out), free(x.inp), free(dout), free(dinp);
}

/* ---------------------------------------------------------------- dropout */

typedef struct {
  double *out, *inp;
  uint8_t *mask;
  uint64_t key;
  int64_t n;
} drop_ctx;

static void drop_fwd(void *p) {
  drop_ctx *x = p;
  mt_dropout_forward(x->out, x->mask, x->inp, 0.3, x->key, 0, 1, x->n);
}

static void test_dropout(void) {
  const int64_t n = 4000;
  uint64_t rng = 5;
  drop_ctx x = {zeros(n), zeros(n), calloc((size_t)n, 1), mt_dropout_key(42, 3, 0, 1), n};
  for (int64_t i = 0; i < n; i++) x.inp[i] = tu_uniform(&rng);
  float *fin = calloc((size_t)n, sizeof(float)), *fout = calloc((size_t)n, sizeof(float));
  uint8_t *fmask = calloc((size_t)n, 1);
  for (int64_t i = 0; i < n; i++) fin[i] = (float)x.inp[i];
  drop_fwd(&x);
  mt_dropout_forward(fout, fmask, fin, 0.3f, x.key, 0, 1, n);
  int same = !memcmp(x.mask, fmask, (size_t)n), exact = 1;
  for (int64_t i = 0; i < n; i++) exact &= x.out[i] == (x.mask[i] ? x.inp[i] * (1.0 / 0.7) : 0.0);
  CHECK(same, "dropout: the double mask is the float one for the same key");
  CHECK(exact, "dropout: kept values scaled by 1/(1-p) in double, the rest 0");
  double *dout = zeros(n), *dinp = zeros(n);
  for (int64_t i = 0; i < n; i++) dout[i] = tu_uniform(&rng);
  mt_dropout_backward(dinp, dout, x.mask, 0.3, n);
  lin_loss l = {drop_fwd, &x, x.out, dout, n};
  fd_check(dinp, x.inp, n, layer_loss, &l, "dropout dinp (the mask drawn again from its key)");
  free(x.out), free(x.inp), free(x.mask), free(fin), free(fout), free(fmask), free(dout), free(dinp);
}

int main(void) {
  tu_ref_load(&R, "f64_layers.txt");
  test_gemm();
  test_linear();
  test_relu_residual();
  test_losses();
  test_mse();
  test_conv("cva");
  test_conv("cvb");
  test_conv("cvc");
  test_pool("mp2");
  test_pool("mp3");
  test_pool("ap");
  test_pool("apn");
  test_gap();
  test_layernorm("ln", 1);
  test_layernorm("ln0", 0);
  test_batchnorm("bnt", 1);
  test_batchnorm("bne", 0);
  test_embedding();
  test_attention();
  test_gelu("gelut", MT_GELU_TANH);
  test_gelu("gelue", MT_GELU_ERF);
  test_dropout();
  tu_ref_free(&R);
  return tu_finish("test_fp64");
}
