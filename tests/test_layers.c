/* Unit tests of the CNN and GPT layers (src/nn/nn.h, second part):
 *  - every forward and backward against PyTorch references written by
 *    validation/gen_refs_layers.py (refs/l_*.txt), 1e-5 relative, on edge
 *    shapes (odd sizes, padding, stride 2, groups, dilation 2, T = 1, B = 1);
 *  - every backward against central finite differences of its forward
 *    (exact differences for layers linear in the input, 1e-5; Richardson-
 *    extrapolated ones for smooth non-linear layers, 1e-4);
 *  - backward ADDS (a second call gives twice the reference), NULL
 *    gradients, aliasing that the contracts allow, argument errors;
 *  - dropout: determinism by key, offsets, the kept fraction and scaling.
 * Prints one line per check; exits non-zero when any check fails. */
#include <math.h>
#include "core/core.h"
#include "nn/nn.h"
#include "testutil.h"

#include <omp.h>
#include <stdarg.h>

#define REF_TOL 1e-5
#define FD_LIN_TOL 1e-5 /* affine / piecewise linear: only rounding left */
#define FD_TOL 1e-4     /* smooth: Richardson-extrapolated differences   */

static float *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* got against the reference `name` (n values), then `twice` after a second
 * backward call when given. */
static void cmp(const tu_ref *r, const char *name, const float *got, int64_t n, double tol,
                const char *what) {
  if (tol == 0.0) { /* exact: against the float32 values the refs round to */
    float *t = tu_ref_floats(r, name, n);
    CHECK_CLOSE_F(got, t, (size_t)n, 0.0, "%s %s (exact)", what, name);
    free(t);
    return;
  }
  const tu_tensor *t = tu_ref_get(r, name, n);
  CHECK_CLOSE_REF(got, t, tol, "%s %s", what, name);
}

static void cmp2(const tu_ref *r, const char *name, const float *got, int64_t n, const char *what) {
  const tu_tensor *t = tu_ref_get(r, name, n);
  double *w = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) w[i] = 2 * t->v[i];
  CHECK_ERR(tu_rel_err_fd(got, w, (size_t)n), REF_TOL, "%s backward adds: %s", what, name);
  free(w);
}

static int cfg_int(const tu_ref *r, int i) { return (int)tu_ref_get(r, "cfg", -1)->v[i]; }

/* Loads refs/<file> and names its checks <what>: two formats of the same
 * arguments. */
static void open_ref(tu_ref *r, char *what, size_t wn, const char *what_fmt, const char *file_fmt,
                     ...) __attribute__((format(printf, 5, 6)));
static void open_ref(tu_ref *r, char *what, size_t wn, const char *what_fmt, const char *file_fmt,
                     ...) {
  char file[128];
  va_list ap, ap2;
  va_start(ap, file_fmt);
  va_copy(ap2, ap);
  vsnprintf(file, sizeof(file), file_fmt, ap);
  vsnprintf(what, wn, what_fmt, ap2);
  va_end(ap2);
  va_end(ap);
  tu_ref_load(r, file);
}

/* ------------------------------------------------------ finite differences */

typedef double (*loss_fn)(void *ctx);

/* Central differences of loss() in x[0..n-1]; the step is the difference of
 * the two rounded float inputs. rich: Richardson-extrapolated from h, h/2. */
static void fd_grad(double *g, float *x, int64_t n, float h, int rich, loss_fn loss, void *ctx) {
  for (int64_t i = 0; i < n; i++) {
    const float x0 = x[i];
    double est[2];
    for (int k = 0; k < 1 + rich; k++) {
      const float hk = k ? h / 2 : h, xp = x0 + hk, xm = x0 - hk;
      x[i] = xp;
      const double lp = loss(ctx);
      x[i] = xm;
      const double lm = loss(ctx);
      est[k] = (lp - lm) / ((double)xp - (double)xm);
    }
    x[i] = x0;
    g[i] = rich ? (4 * est[1] - est[0]) / 3 : est[0];
  }
}

/* grad against the differences of loss() in x; the rest names the check */
static void fd_check(const float *grad, float *x, int64_t n, float h, int rich, loss_fn loss,
                     void *ctx, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void fd_check(const float *grad, float *x, int64_t n, float h, int rich, loss_fn loss,
                     void *ctx, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  double *g = malloc((size_t)n * sizeof(double));
  fd_grad(g, x, n, h, rich, loss, ctx);
  CHECK_ERR(tu_rel_err_fd(grad, g, (size_t)n), rich ? FD_TOL : FD_LIN_TOL,
            "%s vs finite differences", what);
  free(g);
}

static double wsum(const float *out, const float *R, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)out[i] * R[i];
  return s;
}

static float *rnd(int64_t n, uint64_t *rng, float scale) {
  float *x = zeros(n);
  tu_fill(x, (size_t)n, rng, scale);
  return x;
}

/* ---------------------------------------------------------------- conv2d */

/* extra > 0: the convolution is made for extra more images than the call
 * has, which then runs in power-of-two pieces */
static void test_conv_ref(const char *tag, int extra) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "conv2d %s", "l_conv_%s.txt", tag);
  if (extra) snprintf(what + strlen(what), sizeof(what) - strlen(what), " (made for +%d)", extra);
  mt_conv2d_shape s = {cfg_int(&r, 0),
                       cfg_int(&r, 1),
                       cfg_int(&r, 2),
                       cfg_int(&r, 3),
                       cfg_int(&r, 4),
                       cfg_int(&r, 5),
                       cfg_int(&r, 6),
                       cfg_int(&r, 7),
                       cfg_int(&r, 8),
                       cfg_int(&r, 9),
                       cfg_int(&r, 10),
                       cfg_int(&r, 11),
                       cfg_int(&r, 12),
                       cfg_int(&r, 13),
                       0,
                       0,
                       0,
                       0,
                       0};
  const int bias = cfg_int(&r, 14), B = s.B;
  mt_conv2d c;
  s.B += extra;
  int rc = mt_conv2d_init(&c, &s, bias, NULL);
  s.B = B;
  CHECK(rc == 0, "%s init returns 0 (%s)", what, rc ? mt_error_message() : "");
  if (rc) {
    mt_error_clear();
    tu_ref_free(&r);
    return;
  }
  CHECK(c.s.OH == cfg_int(&r, 15) && c.s.OW == cfg_int(&r, 16), "%s output %dx%d", what, c.s.OH,
        c.s.OW);
  const int64_t ni = (int64_t)s.B * s.IC * s.H * s.W, no = (int64_t)s.B * s.OC * c.s.OH * c.s.OW;
  const int64_t nw = (int64_t)s.OC * (s.IC / s.groups) * s.KH * s.KW;
  float *inp = tu_ref_floats(&r, "inp", ni), *w = tu_ref_floats(&r, "w", nw);
  float *b = bias ? tu_ref_floats(&r, "b", s.OC) : NULL;
  float *dout = tu_ref_floats(&r, "dout", no);
  float *out = zeros(no), *dinp = zeros(ni), *dw = zeros(nw), *db = zeros(s.OC);
  CHECK(mt_conv2d_forward(out, inp, w, b, B, &c) == 0, "%s forward returns 0", what);
  cmp(&r, "out", out, no, REF_TOL, what);
  CHECK(mt_conv2d_forward(out, inp, w, b, B, &c) == 0, "%s forward again", what);
  cmp(&r, "out", out, no, REF_TOL, what);
  CHECK(mt_conv2d_backward(dinp, dw, bias ? db : NULL, dout, inp, w, B, &c) == 0,
        "%s backward returns 0", what);
  cmp(&r, "dinp", dinp, ni, REF_TOL, what);
  cmp(&r, "dw", dw, nw, REF_TOL, what);
  if (bias) cmp(&r, "db", db, s.OC, REF_TOL, what);
  mt_conv2d_backward(dinp, dw, bias ? db : NULL, dout, inp, w, B, &c);
  cmp2(&r, "dinp", dinp, ni, what);
  cmp2(&r, "dw", dw, nw, what);
  if (bias) cmp2(&r, "db", db, s.OC, what);
  /* one gradient at a time; db alone takes the path without oneDNN */
  memset(dinp, 0, (size_t)ni * sizeof(float));
  memset(dw, 0, (size_t)nw * sizeof(float));
  CHECK(mt_conv2d_backward(NULL, dw, NULL, dout, inp, w, B, &c) == 0, "%s dw alone", what);
  cmp(&r, "dw", dw, nw, REF_TOL, what);
  CHECK(mt_conv2d_backward(dinp, NULL, NULL, dout, inp, w, B, &c) == 0, "%s dinp alone", what);
  cmp(&r, "dinp", dinp, ni, REF_TOL, what);
  if (bias) {
    memset(db, 0, (size_t)s.OC * sizeof(float));
    CHECK(mt_conv2d_backward(NULL, NULL, db, dout, inp, w, B, &c) == 0, "%s db alone", what);
    cmp(&r, "db", db, s.OC, REF_TOL, what);
  }
  /* the bias must match how the convolution was made */
  CHECK(mt_conv2d_forward(out, inp, w, bias ? NULL : w, B, &c) == MT_ERR_ARG,
        "%s forward refuses a bias mismatch", what);
  mt_error_clear();
  CHECK(mt_conv2d_forward(out, inp, w, b, c.s.B + 1, &c) == MT_ERR_ARG &&
            mt_conv2d_forward(out, inp, w, b, 0, &c) == 0,
        "%s forward refuses a batch above %d, runs 0", what, c.s.B);
  mt_error_clear();
  mt_conv2d_free(&c);
  mt_conv2d_free(&c); /* twice is safe */
  free(inp), free(w), free(b), free(dout), free(out), free(dinp), free(dw), free(db);
  tu_ref_free(&r);
}

typedef struct {
  mt_conv2d *c;
  float *out, *inp, *w, *b, *R;
  int64_t no;
} conv_ctx;

static double conv_loss(void *p) {
  conv_ctx *x = p;
  mt_conv2d_forward(x->out, x->inp, x->w, x->b, x->c->s.B, x->c);
  return wsum(x->out, x->R, x->no);
}

static void test_conv_fd(mt_conv2d_shape s, uint64_t seed) {
  uint64_t rng = seed;
  mt_conv2d c;
  char what[128];
  snprintf(what, sizeof(what), "conv2d B=%d %d->%d %dx%d k%dx%d s%d p%d d%d g%d", s.B, s.IC, s.OC,
           s.H, s.W, s.KH, s.KW, s.stride_h, s.pad_h, s.dil_h, s.groups);
  if (mt_conv2d_init(&c, &s, 1, NULL)) {
    CHECK(0, "%s init: %s", what, mt_error_message());
    mt_error_clear();
    return;
  }
  const int64_t ni = (int64_t)s.B * s.IC * s.H * s.W, no = (int64_t)s.B * s.OC * c.s.OH * c.s.OW;
  const int64_t nw = (int64_t)s.OC * (s.IC / s.groups) * s.KH * s.KW;
  conv_ctx x = {
      &c, zeros(no), rnd(ni, &rng, 1), rnd(nw, &rng, 1), rnd(s.OC, &rng, 1), rnd(no, &rng, 1), no};
  float *dinp = zeros(ni), *dw = zeros(nw), *db = zeros(s.OC);
  mt_conv2d_backward(dinp, dw, db, x.R, x.inp, x.w, s.B, &c);
  fd_check(dinp, x.inp, ni, 0.25f, 0, conv_loss, &x, "%s: dinp", what);
  fd_check(dw, x.w, nw, 0.25f, 0, conv_loss, &x, "%s: dw", what);
  fd_check(db, x.b, s.OC, 0.25f, 0, conv_loss, &x, "%s: db", what);
  mt_conv2d_free(&c);
  free(x.out), free(x.inp), free(x.w), free(x.b), free(x.R), free(dinp), free(dw), free(db);
}

/* The trainer's per-thread models: two threads at once, each with its own
 * mt_conv2d (one made before the parallel region, one inside it), agree
 * with a call outside any region; attention too. */
static int thread_work(float *o, float *p, float *a, mt_conv2d *c, const mt_conv2d_shape *s,
                       const float *x, const float *w, const float *dy, const float *q,
                       const float *dq, int B, int T, int C, int NH) {
  mt_conv2d own;
  int e = c ? 0 : mt_conv2d_init(&own, s, 0, NULL);
  mt_conv2d *cv = c ? c : &own;
  const int64_t ni = (int64_t)s->B * s->IC * s->H * s->W, nw = (int64_t)s->OC * s->IC * 9;
  const int64_t no = (int64_t)s->B * s->OC * s->H * s->W, ao = (int64_t)B * T * C;
  if (!e) e = mt_conv2d_forward(o, x, w, NULL, s->B, cv);
  if (!e) e = mt_conv2d_backward(o + no, o + no + ni, NULL, dy, x, w, s->B, cv);
  if (!c) mt_conv2d_free(&own);
  if (!e) e = mt_attention_forward(o + no + ni + nw, p, a, q, B, T, C, NH, NULL);
  if (!e) e = mt_attention_backward(o + no + ni + nw + ao, p, dq, q, a, B, T, C, NH, NULL);
  return e;
}

static void test_in_threads(void) {
  uint64_t rng = 99;
  mt_conv2d_shape s = {3, 6, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
  const int B = 2, T = 6, C = 8, NH = 2;
  const int64_t ni = 3 * 6 * 36, no = 3 * 5 * 36, nw = 5 * 6 * 9, aa = (int64_t)B * NH * T * T;
  const int64_t ai = (int64_t)B * T * 3 * C, n = no + ni + nw + ai / 3 + ai;
  float *x = rnd(ni, &rng, 1), *w = rnd(nw, &rng, 1), *dy = rnd(no, &rng, 1);
  float *q = rnd(ai, &rng, 1), *dq = rnd(ai / 3, &rng, 1), *o[3], *p[3], *a[3];
  for (int i = 0; i < 3; i++) o[i] = zeros(n), p[i] = zeros(aa), a[i] = zeros(aa);
  mt_conv2d c0;
  int rc[3] = {mt_conv2d_init(&c0, &s, 0, NULL), -1, -1};
  if (!rc[0]) rc[0] = thread_work(o[0], p[0], a[0], &c0, &s, x, w, dy, q, dq, B, T, C, NH);
#pragma omp parallel num_threads(2)
  for (int t = 1; t <= 2; t++) /* each thread its share; a team of one does both */
    if (omp_get_num_threads() == 1 || t == omp_get_thread_num() + 1)
      rc[t] = thread_work(o[t], p[t], a[t], t == 1 ? &c0 : NULL, &s, x, w, dy, q, dq, B, T, C, NH);
  CHECK(!rc[0] && !rc[1] && !rc[2] && tu_rel_err_f(o[1], o[0], (size_t)n) <= 1e-6 &&
            tu_rel_err_f(o[2], o[0], (size_t)n) <= 1e-6,
        "conv2d and attention in two threads at once (per-thread models) = outside");
  mt_conv2d_free(&c0);
  free(x), free(w), free(dy), free(q), free(dq);
  for (int i = 0; i < 3; i++) free(o[i]), free(p[i]), free(a[i]);
}

static void test_conv_args(void) {
  mt_conv2d_shape bad[3] = {{1, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 3, 0, 0, 0, 0, 0},
                            {1, 2, 2, 2, 2, 5, 5, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0},
                            {1, 2, 5, 5, 2, 3, 3, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0}};
  const char *why[3] = {"groups not dividing IC", "kernel larger than input", "stride 0"};
  for (int i = 0; i < 3; i++) {
    mt_conv2d c;
    CHECK(mt_conv2d_init(&c, &bad[i], 0, NULL) == MT_ERR_ARG && c.impl == NULL,
          "conv2d init refuses %s", why[i]);
    mt_error_clear();
  }
}

/* --------------------------------------------------------------- pooling */

static void test_pool_ref(const char *tag) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "pool2d %s", "l_pool_%s.txt", tag);
  const int is_max = tag[0] == 'm';
  mt_pool2d_shape s = {cfg_int(&r, 0),
                       cfg_int(&r, 1),
                       cfg_int(&r, 2),
                       cfg_int(&r, 3),
                       cfg_int(&r, 4),
                       cfg_int(&r, 5),
                       cfg_int(&r, 6),
                       cfg_int(&r, 7),
                       cfg_int(&r, 8),
                       cfg_int(&r, 9),
                       cfg_int(&r, 10),
                       0,
                       0,
                       0,
                       0};
  CHECK(mt_pool2d_shape_init(&s) == 0 && s.OH == cfg_int(&r, 11) && s.OW == cfg_int(&r, 12),
        "%s output %dx%d", what, s.OH, s.OW);
  const int64_t ni = (int64_t)s.B * s.C * s.H * s.W, no = (int64_t)s.B * s.C * s.OH * s.OW;
  float *inp = tu_ref_floats(&r, "inp", ni), *dout = tu_ref_floats(&r, "dout", no);
  float *out = zeros(no), *dinp = zeros(ni);
  int32_t *am = calloc((size_t)no, sizeof(int32_t));
  if (is_max) {
    mt_maxpool2d_forward(out, am, inp, &s);
    cmp(&r, "out", out, no, 0.0, what); /* selects values: exact */
    const tu_tensor *ra = tu_ref_get(&r, "argmax", no);
    int same = 1;
    for (int64_t i = 0; i < no; i++) same &= am[i] == (int32_t)ra->v[i];
    CHECK(same, "%s argmax (first maximum on ties) equals PyTorch's indices", what);
    mt_maxpool2d_backward(dinp, dout, am, &s);
    cmp(&r, "dinp", dinp, ni, REF_TOL, what);
    mt_maxpool2d_backward(dinp, dout, am, &s);
  } else {
    mt_avgpool2d_forward(out, inp, &s);
    cmp(&r, "out", out, no, REF_TOL, what);
    mt_avgpool2d_backward(dinp, dout, &s);
    cmp(&r, "dinp", dinp, ni, REF_TOL, what);
    mt_avgpool2d_backward(dinp, dout, &s);
  }
  cmp2(&r, "dinp", dinp, ni, what);
  free(inp), free(dout), free(out), free(dinp), free(am);
  tu_ref_free(&r);
}

typedef struct {
  mt_pool2d_shape s;
  float *out, *inp, *R;
  int32_t *am;
  int is_max;
  int64_t no;
} pool_ctx;

static double pool_loss(void *p) {
  pool_ctx *x = p;
  if (x->is_max)
    mt_maxpool2d_forward(x->out, x->am, x->inp, &x->s);
  else
    mt_avgpool2d_forward(x->out, x->inp, &x->s);
  return wsum(x->out, x->R, x->no);
}

static void test_pool_fd(int is_max, int cip, uint64_t seed) {
  uint64_t rng = seed;
  pool_ctx x = {{2, 2, 5, 6, 3, 2, 2, 1, 1, 1, cip, 0, 0, 0, 0}, .is_max = is_max};
  mt_pool2d_shape_init(&x.s);
  const int64_t ni = (int64_t)x.s.B * x.s.C * x.s.H * x.s.W;
  x.no = (int64_t)x.s.B * x.s.C * x.s.OH * x.s.OW;
  x.out = zeros(x.no), x.R = rnd(x.no, &rng, 1), x.inp = zeros(ni);
  x.am = calloc((size_t)x.no, sizeof(int32_t));
  /* distinct inputs 0.1 apart (a shuffled ramp): with a step of 0.02 no
   * window changes its maximum, the loss is linear over the stencil; the
   * average is linear everywhere and takes a larger step (less rounding) */
  for (int64_t i = 0; i < ni; i++) x.inp[i] = 0.1f * (float)((i * 37) % ni) - 3.0f;
  float *dinp = zeros(ni);
  pool_loss(&x);
  if (is_max)
    mt_maxpool2d_backward(dinp, x.R, x.am, &x.s);
  else
    mt_avgpool2d_backward(dinp, x.R, &x.s);
  char what[96];
  snprintf(what, sizeof(what), "%s k3x2 s2x1 p1 (count_include_pad %d)",
           is_max ? "maxpool2d" : "avgpool2d", cip);
  fd_check(dinp, x.inp, ni, is_max ? 0.02f : 0.25f, 0, pool_loss, &x, "%s", what);
  free(x.out), free(x.R), free(x.inp), free(x.am), free(dinp);
}

static void test_gap_ref(int B, int C, int HW) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "global avgpool B=%d C=%d HW=%d", "l_gap_%d_%d_%d.txt", B, C,
           HW);
  const int64_t ni = (int64_t)B * C * HW, no = (int64_t)B * C;
  float *inp = tu_ref_floats(&r, "inp", ni), *dout = tu_ref_floats(&r, "dout", no);
  float *out = zeros(no), *dinp = zeros(ni);
  mt_global_avgpool_forward(out, inp, B, C, HW);
  cmp(&r, "out", out, no, REF_TOL, what);
  mt_global_avgpool_backward(dinp, dout, B, C, HW);
  cmp(&r, "dinp", dinp, ni, REF_TOL, what);
  mt_global_avgpool_backward(dinp, dout, B, C, HW);
  cmp2(&r, "dinp", dinp, ni, what);
  free(inp), free(dout), free(out), free(dinp);
  tu_ref_free(&r);
}

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

/* ------------------------------------------------- GELU, residual, dropout */

typedef struct {
  float *out, *inp, *R;
  int64_t n;
  mt_gelu_kind kind;
} gelu_ctx;

static double gelu_loss(void *p) {
  gelu_ctx *x = p;
  mt_gelu_forward(x->out, x->inp, x->n, x->kind);
  return wsum(x->out, x->R, x->n);
}

static void test_gelu(mt_gelu_kind kind) {
  char what[64];
  tu_ref r; /* PyTorch's names: approximate='tanh' or 'none' (erf) */
  open_ref(&r, what, sizeof(what), "gelu %s", "l_gelu_%s.txt",
           kind == MT_GELU_TANH ? "tanh" : "none");
  const int64_t n = tu_ref_get(&r, "inp", -1)->n;
  float *inp = tu_ref_floats(&r, "inp", n), *dout = tu_ref_floats(&r, "dout", n);
  float *out = zeros(n), *dinp = zeros(n);
  mt_gelu_forward(out, inp, n, kind);
  cmp(&r, "out", out, n, REF_TOL, what);
  mt_gelu_backward(dinp, dout, inp, n, kind);
  cmp(&r, "dinp", dinp, n, REF_TOL, what);
  mt_gelu_backward(dinp, dout, inp, n, kind);
  cmp2(&r, "dinp", dinp, n, what);
  /* finite differences on the first 40 inputs (tails excluded: flat) */
  gelu_ctx x = {out, inp + 3, dout, 40, kind};
  memset(dinp, 0, (size_t)n * sizeof(float));
  mt_gelu_backward(dinp, dout, inp + 3, 40, kind);
  fd_check(dinp, x.inp, 40, 0.05f, 1, gelu_loss, &x, "%s", what);
  free(inp), free(dout), free(out), free(dinp);
  tu_ref_free(&r);
}

static void test_residual(void) {
  tu_ref r;
  tu_ref_load(&r, "l_residual.txt");
  const int64_t n = 21;
  float *a = tu_ref_floats(&r, "a", n), *b = tu_ref_floats(&r, "b", n);
  float *dout = tu_ref_floats(&r, "dout", n), *out = zeros(n), *da = zeros(n), *db = zeros(n);
  mt_residual_forward(out, a, b, n);
  cmp(&r, "out", out, n, 0.0, "residual");
  mt_residual_backward(da, db, dout, n);
  cmp(&r, "da", da, n, 0.0, "residual");
  mt_residual_backward(da, NULL, dout, n);
  cmp2(&r, "da", da, n, "residual");
  cmp(&r, "db", db, n, 0.0, "residual (db untouched when NULL)");
  mt_residual_forward(a, a, b, n); /* in place */
  cmp(&r, "out", a, n, 0.0, "residual in place (out == a)");
  free(a), free(b), free(dout), free(out), free(da), free(db);
  tu_ref_free(&r);
}

static void test_dropout(void) {
  const int64_t n = 100000;
  const float p = 0.3f, scale = 1.0f / (1.0f - p);
  uint64_t rng = 77;
  float *inp = rnd(n, &rng, 1), *out = zeros(n), *out2 = zeros(n), *dinp = zeros(n);
  uint8_t *mask = calloc((size_t)n, 1), *mask2 = calloc((size_t)n, 1);
  const uint64_t key = mt_dropout_key(42, 7, 1, 3);
  mt_dropout_forward(out, mask, inp, p, key, 0, 1, n);
  int64_t kept = 0;
  int exact = 1;
  for (int64_t i = 0; i < n; i++) {
    kept += mask[i];
    exact &= mask[i] ? out[i] == inp[i] * scale : out[i] == 0.0f;
  }
  /* binomial: the kept fraction is within 5 standard deviations of 1 - p */
  const double frac = (double)kept / n, sd = sqrt(p * (1 - p) / n);
  CHECK(fabs(frac - (1 - p)) < 5 * sd, "dropout p=0.3 keeps %.4f of %lld", frac, (long long)n);
  CHECK(exact, "dropout scales kept values by 1/(1-p), zeroes the rest");
  mt_dropout_forward(out2, mask2, inp, p, key, 0, 1, n);
  CHECK(!memcmp(mask, mask2, (size_t)n), "dropout: same key, same mask (a resume reproduces it)");
  int64_t diff[3] = {0, 0, 0};
  const uint64_t other[3] = {mt_dropout_key(42, 8, 1, 3), mt_dropout_key(42, 7, 0, 3),
                             mt_dropout_key(42, 7, 1, 4)};
  for (int k = 0; k < 3; k++) {
    mt_dropout_forward(out2, mask2, inp, p, other[k], 0, 1, n);
    for (int64_t i = 0; i < n; i++) diff[k] += mask[i] != mask2[i];
  }
  /* independent masks differ in 2p(1-p) = 42% of the elements */
  CHECK(diff[0] > n / 3 && diff[1] > n / 3 && diff[2] > n / 3,
        "dropout: another step, rank or layer gives another mask (%lld %lld %lld differ)",
        (long long)diff[0], (long long)diff[1], (long long)diff[2]);
  mt_dropout_forward(out2, mask2, inp + 1000, p, key, 1000, 1, n - 1000);
  CHECK(!memcmp(mask + 1000, mask2, (size_t)(n - 1000)),
        "dropout: offset k draws the mask elements from k on");
  mt_dropout_backward(dinp, inp, mask, p, n);
  mt_dropout_backward(dinp, inp, mask, p, n);
  exact = 1;
  for (int64_t i = 0; i < n; i++) exact &= dinp[i] == 2 * out[i];
  CHECK(exact, "dropout backward = mask * scale * dout, and adds");
  mt_dropout_forward(out2, mask2, inp, p, key, 0, 0, n);
  exact = !memcmp(out2, inp, (size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) exact &= mask2[i] == 1;
  memset(dinp, 0, (size_t)n * sizeof(float));
  mt_dropout_backward(dinp, inp, NULL, p, n);
  exact &= !memcmp(dinp, inp, (size_t)n * sizeof(float));
  CHECK(exact, "dropout eval is the identity (forward, backward with mask NULL)");
  mt_dropout_forward(out2, mask2, inp, 1.0f, key, 0, 1, n);
  exact = 1;
  for (int64_t i = 0; i < n; i++) exact &= out2[i] == 0.0f && mask2[i] == 0;
  CHECK(exact, "dropout p=1 drops everything");
  memcpy(out2, inp, (size_t)n * sizeof(float));
  mt_dropout_forward(out2, mask2, out2, p, key, 0, 1, n);
  CHECK(!memcmp(out2, out, (size_t)n * sizeof(float)), "dropout in place (out == inp)");
  free(inp), free(out), free(out2), free(dinp), free(mask), free(mask2);
}

/* ------------------------------------------------------ embedding, attention */

typedef struct {
  float *out, *wte, *wpe, *R;
  int32_t *tok;
  int B, T, C, V;
} emb_ctx;

static double emb_loss(void *p) {
  emb_ctx *x = p;
  mt_embedding_forward(x->out, x->tok, x->wte, x->wpe, x->B, x->T, x->C, x->V);
  return wsum(x->out, x->R, (int64_t)x->B * x->T * x->C);
}

static void test_embedding(int B, int T, int C, int V) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "embedding B=%d T=%d C=%d V=%d", "l_embedding_%d_%d_%d_%d.txt",
           B, T, C, V);
  const int maxT = cfg_int(&r, 4);
  const int64_t no = (int64_t)B * T * C;
  const tu_tensor *rt = tu_ref_get(&r, "tokens", (int64_t)B * T);
  int32_t *tok = malloc((size_t)(B * T) * sizeof(int32_t));
  for (int i = 0; i < B * T; i++) tok[i] = (int32_t)rt->v[i];
  float *wte = tu_ref_floats(&r, "wte", (int64_t)V * C),
        *wpe = tu_ref_floats(&r, "wpe", (int64_t)maxT * C);
  float *dout = tu_ref_floats(&r, "dout", no), *out = zeros(no);
  float *dwte = zeros((int64_t)V * C), *dwpe = zeros((int64_t)maxT * C);
  CHECK(mt_embedding_forward(out, tok, wte, wpe, B, T, C, V) == 0, "%s forward returns 0", what);
  cmp(&r, "out", out, no, REF_TOL, what);
  mt_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
  cmp(&r, "dwte", dwte, (int64_t)V * C, REF_TOL, what);
  cmp(&r, "dwpe", dwpe, (int64_t)maxT * C, REF_TOL, what);
  mt_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
  cmp2(&r, "dwte", dwte, (int64_t)V * C, what);
  cmp2(&r, "dwpe", dwpe, (int64_t)maxT * C, what);
  emb_ctx x = {out, wte, wpe, dout, tok, B, T, C, V};
  memset(dwte, 0, (size_t)(V * C) * sizeof(float));
  memset(dwpe, 0, (size_t)(maxT * C) * sizeof(float));
  mt_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
  fd_check(dwte, wte, (int64_t)V * C, 0.25f, 0, emb_loss, &x, "%s: dwte", what);
  fd_check(dwpe, wpe, (int64_t)maxT * C, 0.25f, 0, emb_loss, &x, "%s: dwpe", what);
  tok[B * T - 1] = V;
  CHECK(mt_embedding_forward(out, tok, wte, wpe, B, T, C, V) == MT_ERR_DATA,
        "%s refuses token %d (outside the vocabulary)", what, V);
  mt_error_clear();
  free(tok), free(wte), free(wpe), free(dout), free(out), free(dwte), free(dwpe);
  tu_ref_free(&r);
}

typedef struct {
  float *out, *pre, *att, *inp, *R;
  int B, T, C, NH;
} att_ctx;

static double att_loss(void *p) {
  att_ctx *x = p;
  mt_attention_forward(x->out, x->pre, x->att, x->inp, x->B, x->T, x->C, x->NH, NULL);
  return wsum(x->out, x->R, (int64_t)x->B * x->T * x->C);
}

static void test_attention(int B, int T, int C, int NH) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "attention B=%d T=%d C=%d NH=%d", "l_attention_%d_%d_%d_%d.txt",
           B, T, C, NH);
  const int64_t ni = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, na = (int64_t)B * NH * T * T;
  float *inp = tu_ref_floats(&r, "inp", ni), *dout = tu_ref_floats(&r, "dout", no);
  float *out = zeros(no), *pre = zeros(na), *att = zeros(na), *dinp = zeros(ni);
  CHECK(mt_attention_forward(out, pre, att, inp, B, T, C, NH, NULL) == 0, "%s forward returns 0",
        what);
  cmp(&r, "out", out, no, REF_TOL, what);
  cmp(&r, "preatt", pre, na, REF_TOL, what);
  cmp(&r, "att", att, na, REF_TOL, what);
  /* the forward's preatt serves as the scratch */
  CHECK(mt_attention_backward(dinp, pre, dout, inp, att, B, T, C, NH, NULL) == 0,
        "%s backward returns 0", what);
  cmp(&r, "dinp", dinp, ni, REF_TOL, what);
  mt_attention_backward(dinp, pre, dout, inp, att, B, T, C, NH, NULL);
  cmp2(&r, "dinp", dinp, ni, what);
  att_ctx x = {out, pre, att, inp, dout, B, T, C, NH};
  memset(dinp, 0, (size_t)ni * sizeof(float));
  att_loss(&x);
  mt_attention_backward(dinp, pre, dout, inp, att, B, T, C, NH, NULL);
  fd_check(dinp, inp, ni, 0.05f, 1, att_loss, &x, "%s: dinp", what);
  CHECK(
      mt_attention_forward(out, pre, att, inp, B, T, C, NH + 1 + (C % (NH + 1) == 0), NULL) ==
          MT_ERR_ARG,
      "%s refuses C not divisible by NH", what);
  mt_error_clear();
  free(inp), free(dout), free(out), free(pre), free(att), free(dinp);
  tu_ref_free(&r);
}

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

/* The 2x2 stride-2 max-pool's branch-free path against the rule it keeps
 * (scan order, first maximum wins, a NaN always wins), on values with many
 * ties and some NaNs, odd sizes (the last row and column dropped). */
static void test_maxpool_2x2_rule(void) {
  mt_pool2d_shape s = {.B = 3, .C = 2, .H = 7, .W = 9, .KH = 2, .KW = 2, .stride_h = 2, .stride_w = 2};
  CHECK(mt_pool2d_shape_init(&s) == 0 && s.OH == 3 && s.OW == 4, "2x2 pool shape");
  float inp[3 * 2 * 7 * 9], out[3 * 2 * 3 * 4];
  int32_t am[3 * 2 * 3 * 4];
  uint64_t z = 12345;
  for (size_t i = 0; i < sizeof(inp) / sizeof(inp[0]); i++) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    int k = (int)(z >> 60); /* 0..15: few distinct values, so many ties */
    inp[i] = k == 15 ? NAN : k == 14 ? -INFINITY : (float)(k % 4);
  }
  mt_maxpool2d_forward(out, am, inp, &s);
  int bad = 0;
  for (int p = 0; p < 6; p++)
    for (int oh = 0; oh < 3; oh++)
      for (int ow = 0; ow < 4; ow++) {
        const float *x = inp + p * 63;
        float mx = -INFINITY;
        int best = 2 * oh * 9 + 2 * ow;
        for (int ih = 2 * oh; ih < 2 * oh + 2; ih++)
          for (int iw = 2 * ow; iw < 2 * ow + 2; iw++)
            if (x[ih * 9 + iw] > mx || isnan(x[ih * 9 + iw])) mx = x[ih * 9 + iw], best = ih * 9 + iw;
        int k = p * 12 + oh * 4 + ow;
        bad += am[k] != best || !(out[k] == mx || (isnan(out[k]) && isnan(mx)));
      }
  CHECK(bad == 0, "max-pool 2x2 fast path keeps the rule (ties, NaN, -inf): %d wrong", bad);
}

int main(void) {
  const char *conv[] = {"basic",     "stride2", "groups2", "dil2", "1x1_b1", "first",
                        "depthwise", "s2rem",   "k2s2odd", "ic17", "batch7"};
  for (size_t i = 0; i < sizeof(conv) / sizeof(conv[0]); i++) {
    test_conv_ref(conv[i], 0);
    test_conv_ref(conv[i], 3);
  }
  test_conv_fd((mt_conv2d_shape){2, 4, 5, 4, 6, 3, 3, 2, 2, 1, 1, 1, 1, 2, 0, 0, 0, 0, 0}, 1);
  test_conv_fd((mt_conv2d_shape){1, 6, 6, 5, 3, 3, 2, 1, 1, 2, 1, 2, 2, 1, 0, 0, 0, 0, 0}, 2);
  test_conv_fd((mt_conv2d_shape){2, 1, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, 3);
  test_conv_args();
  test_in_threads();

  const char *pool[] = {"max_k2s2",   "max_k3s2p1",       "max_ties", "max_rect",
                        "avg_k3s2p1", "avg_k3s2p1_nopad", "avg_k2s2", "avg_rect"};
  for (size_t i = 0; i < sizeof(pool) / sizeof(pool[0]); i++) test_pool_ref(pool[i]);
  test_maxpool_2x2_rule();
  test_pool_fd(1, 1, 4);
  test_pool_fd(0, 1, 5);
  test_pool_fd(0, 0, 6);
  test_gap_ref(2, 3, 35);
  test_gap_ref(1, 1, 1);

  test_layernorm_ref(6, 7, 1);
  test_layernorm_ref(1, 16, 1);
  test_layernorm_ref(3, 5, 0);
  test_norm_fd(0, 3, 6, 1, 0, 7);
  test_batchnorm_ref(4, 3, 15, 1);
  test_batchnorm_ref(1, 2, 6, 1);
  test_batchnorm_ref(3, 1, 9, 1);
  test_batchnorm_ref(4, 3, 15, 0);
  test_norm_fd(1, 2, 3, 4, 1, 8);
  test_norm_fd(1, 2, 2, 3, 0, 9);
  test_batchnorm_args();

  test_gelu(MT_GELU_TANH);
  test_gelu(MT_GELU_ERF);
  test_residual();
  test_dropout();

  test_embedding(2, 5, 6, 7);
  test_embedding(1, 1, 4, 3);
  test_attention(2, 5, 8, 2);
  test_attention(1, 1, 4, 1);
  test_attention(3, 7, 12, 3);
  test_attention(1, 9, 4, 4);

  const char *xent[] = {"6_5", "idx0", "none", "all", "1_3"};
  for (size_t i = 0; i < sizeof(xent) / sizeof(xent[0]); i++) test_xent_ignore(xent[i]);
  test_mse(4, 3);
  test_mse(1, 1);
  return tu_finish("test_layers");
}
