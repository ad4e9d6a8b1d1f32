/* The convolution's fused ReLU and blocked output layout, and the pools on
 * that layout, against the plain path (src/nn/nn.h: mt_conv2d_shape relu
 * and dst_any, mt_conv2d.dst_block, mt_pool2d_shape cblock,
 * mt_maxpool2d_relu_backward):
 *  - a convolution made with relu and dst_any, its output and gradient
 *    converted from its nChw{b}c, equals one made plain followed by
 *    mt_relu_forward / mt_relu_backward (1e-5: with few input channels the
 *    two may run different oneDNN kernels), whole batches and the
 *    power-of-two pieces of a smaller one, and the bias-only path;
 *  - that layout is chosen (b = 8 or 16) when OC allows it, and not when
 *    OC is no multiple of 8, nor without dst_any;
 *  - max and average pools on a blocked input give the plain path's
 *    outputs, argmax and input gradients exactly (2x2 fast path and the
 *    general windows); the fused ReLU + max-pool backward equals
 *    mt_maxpool2d_backward then mt_relu_backward exactly.
 * Prints one line per check; exits non-zero when any check fails. */
#include "core/core.h"
#include "nn/nn.h"
#include "testutil.h"

#define TOL 1e-5

static float *rnd(int64_t n, uint64_t *rng) {
  float *x = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    *rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((double)(*rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  return x;
}

static float *zeros(int64_t n) { return calloc((size_t)n, sizeof(float)); }

/* (N,C,HW) plain <-> nChw{cb}c; cb = 0 copies. */
static void to_blocked(float *dst, const float *src, int N, int C, int64_t HW, int cb) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int64_t i = 0; i < HW; i++) {
        const int64_t p = ((int64_t)n * C + c) * HW + i;
        dst[cb ? ((int64_t)n * C + c / cb * cb) * HW + i * cb + c % cb : p] = src[p];
      }
}

static void to_plain(float *dst, const float *src, int N, int C, int64_t HW, int cb) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int64_t i = 0; i < HW; i++) {
        const int64_t p = ((int64_t)n * C + c) * HW + i;
        dst[p] = src[cb ? ((int64_t)n * C + c / cb * cb) * HW + i * cb + c % cb : p];
      }
}

/* The fused, blocked convolution against the plain one plus the ReLU
 * layer, for calls of n images (made for s.B). */
static void test_conv(mt_conv2d_shape s, int n, int want_blocked, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof(what), "conv %d->%d %dx%d k%d B=%d call %d", s.IC, s.OC, s.H, s.W, s.KH,
           s.B, n);
  mt_conv2d c0, c1;
  mt_conv2d_shape s1 = s;
  s1.relu = s1.dst_any = 1;
  int rc = mt_conv2d_init(&c0, &s, 1, NULL);
  if (!rc) rc = mt_conv2d_init(&c1, &s1, 1, NULL);
  CHECK(rc == 0, "%s: made (%s)", what, rc ? mt_error_message() : "");
  if (rc) return;
  const int cb = c1.dst_block;
  CHECK(c0.dst_block == 0, "%s: plain without dst_any", what);
  CHECK(want_blocked ? (cb == 8 || cb == 16) && s.OC % cb == 0 : cb == 0,
        "%s: dst_block %d (%s)", what, cb, want_blocked ? "nChw8c or nChw16c" : "NCHW");
  const int64_t hw = (int64_t)c0.s.OH * c0.s.OW, ni = (int64_t)n * s.IC * s.H * s.W;
  const int64_t no = (int64_t)n * s.OC * hw, nw = (int64_t)s.OC * s.IC * s.KH * s.KW;
  uint64_t rng = seed;
  float *x = rnd(ni, &rng), *w = rnd(nw, &rng), *b = rnd(s.OC, &rng), *g = rnd(no, &rng);
  float *y0 = zeros(no), *y1 = zeros(no), *t = zeros(no), *gb = zeros(no);
  float *dx0 = zeros(ni), *dx1 = zeros(ni), *dw0 = zeros(nw), *dw1 = zeros(nw);
  float *db0 = zeros(s.OC), *db1 = zeros(s.OC), *db2 = zeros(s.OC);
  rc = mt_conv2d_forward(y0, x, w, b, n, &c0);
  mt_relu_forward(y0, y0, no);
  if (!rc) rc = mt_conv2d_forward(y1, x, w, b, n, &c1);
  to_plain(t, y1, n, s.OC, hw, cb);
  CHECK(rc == 0, "%s: forwards run", what);
  CHECK_CLOSE_F(t, y0, (size_t)no, TOL, "%s: ReLU(conv) fused and in its layout = plain", what);
  int neg = 0;
  for (int64_t i = 0; i < no; i++) neg |= t[i] < 0;
  CHECK(!neg, "%s: no negative output", what);
  /* backward: the plain path's gradient through the ReLU, the fused
   * path's given in its layout (the pool's mt_maxpool2d_relu_backward) */
  mt_relu_backward(g, g, y0, no);
  to_blocked(gb, g, n, s.OC, hw, cb);
  rc = mt_conv2d_backward(dx0, dw0, db0, g, x, w, n, &c0);
  if (!rc) rc = mt_conv2d_backward(dx1, dw1, db1, gb, x, w, n, &c1);
  if (!rc) rc = mt_conv2d_backward(NULL, NULL, db2, gb, x, w, n, &c1); /* no oneDNN */
  CHECK(rc == 0, "%s: backwards run", what);
  CHECK_CLOSE_F(dx1, dx0, (size_t)ni, TOL, "%s: dinp from the blocked gradient", what);
  CHECK_CLOSE_F(dw1, dw0, (size_t)nw, TOL, "%s: dw from the blocked gradient", what);
  CHECK_CLOSE_F(db1, db0, (size_t)s.OC, TOL, "%s: db from the blocked gradient", what);
  CHECK_CLOSE_F(db2, db0, (size_t)s.OC, TOL, "%s: db alone from the blocked gradient", what);
  mt_conv2d_free(&c0);
  mt_conv2d_free(&c1);
  free(x), free(w), free(b), free(g), free(y0), free(y1), free(t), free(gb);
  free(dx0), free(dx1), free(dw0), free(dw1), free(db0), free(db1), free(db2);
}

/* Pools on nChw{cb}c against NCHW: exact. relu: negative inputs, as a
 * ReLU's output never has, are clamped first for the fused backward. */
static void test_pool(mt_pool2d_shape s, int is_max, int cb, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof(what), "%s-pool C=%d %dx%d k%d s%d p%d on nChw%dc", is_max ? "max" : "avg",
           s.C, s.H, s.W, s.KH, s.stride_h, s.pad_h, cb);
  mt_pool2d_shape sb = s;
  sb.cblock = cb;
  CHECK(mt_pool2d_shape_init(&s) == 0 && mt_pool2d_shape_init(&sb) == 0, "%s: shape", what);
  const int64_t hw = (int64_t)s.H * s.W, ni = (int64_t)s.B * s.C * hw;
  const int64_t no = (int64_t)s.B * s.C * s.OH * s.OW;
  uint64_t rng = seed;
  float *x = rnd(ni, &rng), *g = rnd(no, &rng), *xb = zeros(ni), *t = zeros(ni);
  float *y0 = zeros(no), *y1 = zeros(no), *dx0 = zeros(ni), *dx1 = zeros(ni);
  int32_t *a0 = calloc((size_t)no, sizeof(int32_t)), *a1 = calloc((size_t)no, sizeof(int32_t));
  if (is_max) mt_relu_forward(x, x, ni / 2); /* half a ReLU's output, half with negatives */
  to_blocked(xb, x, s.B, s.C, hw, cb);
  if (is_max) {
    mt_maxpool2d_forward(y0, a0, x, &s);
    mt_maxpool2d_forward(y1, a1, xb, &sb);
    int same = 1;
    for (int64_t i = 0; i < no; i++) same &= a0[i] == a1[i];
    CHECK(same, "%s: argmax = NCHW's", what);
    mt_maxpool2d_backward(dx0, g, a0, &s);
    mt_maxpool2d_backward(dx1, g, a1, &sb);
  } else {
    mt_avgpool2d_forward(y0, x, &s);
    mt_avgpool2d_forward(y1, xb, &sb);
    mt_avgpool2d_backward(dx0, g, &s);
    mt_avgpool2d_backward(dx1, g, &sb);
  }
  CHECK_CLOSE_F(y1, y0, (size_t)no, 0.0, "%s: output (NCHW) = NCHW's", what);
  to_plain(t, dx1, s.B, s.C, hw, cb);
  CHECK_CLOSE_F(t, dx0, (size_t)ni, 0.0, "%s: dinp = NCHW's", what);
  if (is_max) { /* ReLU then max-pool, backward in one pass, both layouts */
    memset(dx0, 0, (size_t)ni * sizeof(float));
    mt_maxpool2d_backward(dx0, g, a0, &s);
    mt_relu_forward(x, x, ni);
    mt_relu_backward(dx0, dx0, x, ni);
    mt_relu_forward(y0, y0, no); /* the pool's output after the ReLU */
    memset(dx1, 0, (size_t)ni * sizeof(float));
    mt_maxpool2d_relu_backward(dx1, g, a1, y0, &sb);
    to_plain(t, dx1, s.B, s.C, hw, cb);
    CHECK_CLOSE_F(t, dx0, (size_t)ni, 0.0, "%s: fused ReLU backward = pool then ReLU", what);
    memset(dx1, 0, (size_t)ni * sizeof(float));
    mt_maxpool2d_relu_backward(dx1, g, a0, y0, &s);
    CHECK_CLOSE_F(dx1, dx0, (size_t)ni, 0.0, "%s: fused ReLU backward, NCHW", what);
  }
  free(x), free(g), free(xb), free(t), free(y0), free(y1), free(dx0), free(dx1), free(a0),
      free(a1);
}

int main(void) {
  /* B, IC, H, W, OC, KH, KW, stride, pad, dilation, groups (as the CNN) */
  test_conv((mt_conv2d_shape){5, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, 5, 1, 1);
  test_conv((mt_conv2d_shape){5, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, 3, 1, 2);
  test_conv((mt_conv2d_shape){4, 1, 12, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, 4, 1, 3);
  test_conv((mt_conv2d_shape){4, 1, 12, 10, 32, 5, 5, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0}, 3, 1, 4);
  test_conv((mt_conv2d_shape){3, 6, 8, 8, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}, 3, 0, 5);
  /* B, C, H, W, KH, KW, stride, pad */
  test_pool((mt_pool2d_shape){3, 16, 8, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0}, 1, 8, 6);
  test_pool((mt_pool2d_shape){2, 16, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0}, 1, 16, 7);
  test_pool((mt_pool2d_shape){2, 16, 7, 9, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0}, 1, 8, 8);
  test_pool((mt_pool2d_shape){2, 16, 7, 9, 3, 3, 2, 2, 1, 1, 1, 0, 0, 0}, 0, 8, 9);
  test_pool((mt_pool2d_shape){2, 8, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0}, 0, 8, 10);
  mt_pool2d_shape bad = {1, 12, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0, 0, 8};
  CHECK(mt_pool2d_shape_init(&bad) == MT_ERR_ARG, "pool refuses a block (8) not dividing C (12)");
  mt_error_clear();
  return tu_finish("test_layout");
}
