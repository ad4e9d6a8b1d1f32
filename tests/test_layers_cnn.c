/* test_layers, the CNN layers: conv2d (references, finite differences,
 * argument errors, per-thread models at once) and pooling (max, average,
 * global average; the 2x2 max-pool's fast path). */
#include "test_layers.h"

#include <omp.h>

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

/* in main's order (test_layers.c) */
void test_layers_cnn(void) {
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
}
