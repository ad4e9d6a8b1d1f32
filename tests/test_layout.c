/* The convolution's fused ReLU and blocked output layout, and the pools on
 * that layout, against the plain path (src/nn/nn.h: mt_conv2d_shape relu
 * dst_any and src_any, mt_conv2d.dst_block and src_block, mt_pool2d_shape
 * cblock and oblock,
 * mt_maxpool2d_relu_backward):
 *  - a convolution made with relu and dst_any, its output and gradient
 *    converted from its nChw{b}c, equals one made plain followed by
 *    mt_relu_forward / mt_relu_backward (1e-5: with few input channels the
 *    two may run different oneDNN kernels), whole batches and the
 *    power-of-two pieces of a smaller one, and the bias-only path;
 *  - that layout is chosen (b = 8 or 16) when OC allows it, and not when
 *    OC is no multiple of the vector's floats (8 with AVX2, 16 with
 *    AVX-512), nor without dst_any;
 *  - with src_any the input and its (added) gradient in the layout the
 *    convolution picked (src_block: blocked with 8 or 32 input channels,
 *    NCHW with 1 or 6) give the same results;
 *  - under bf16, emulated (no bf16 instructions) and native (oneDNN's bf16
 *    kernels, forced on any AVX-512 CPU), the first convolution's blocked
 *    output and fp32 weight gradient (conv_first.c), and the second's
 *    blocked input and input gradient, equal the fp32 convolution on
 *    bf16-rounded operands;
 *  - max and average pools on a blocked input, their output (argmax, output
 *    gradient) in NCHW or blocked (oblock: the next convolution's input),
 *    give the plain path's outputs, argmax and added input gradients
 *    exactly (2x2 fast paths and the general windows); the fused ReLU +
 *    max-pool backward equals mt_maxpool2d_backward then mt_relu_backward
 *    exactly; written whole (mt_maxpool2d_backward_ex, MT_POOL_SET_DINP) over
 *    NaN it equals the pass into zeros (even and odd H, W).
 * Prints one line per check; exits non-zero when any check fails. */
#include "core/core.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "nn/precision.h"
#include "testutil.h"

#include <dnnl.h>

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

/* Where element (n,c,i) of an (N,C,HW) tensor lies: NCHW (cb 0) or nChw{cb}c. */
static int64_t at(int n, int c, int64_t i, int C, int64_t HW, int cb) {
  return cb ? ((int64_t)n * C + c / cb * cb) * HW + i * cb + c % cb : ((int64_t)n * C + c) * HW + i;
}

/* (N,C,HW) plain <-> nChw{cb}c; cb = 0 copies. */
static void to_blocked(float *dst, const float *src, int N, int C, int64_t HW, int cb) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int64_t i = 0; i < HW; i++) dst[at(n, c, i, C, HW, cb)] = src[at(n, c, i, C, HW, 0)];
}

static void to_plain(float *dst, const float *src, int N, int C, int64_t HW, int cb) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int64_t i = 0; i < HW; i++) dst[at(n, c, i, C, HW, 0)] = src[at(n, c, i, C, HW, cb)];
}

/* The fused, blocked convolution against the plain one plus the ReLU
 * layer, for calls of n images (made for s.B). */
static void test_conv(mt_conv2d_shape s, int n, int want_blocked, int want_src, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof(what), "conv %d->%d %dx%d k%d B=%d call %d%s", s.IC, s.OC, s.H, s.W, s.KH,
           s.B, n, want_src >= 0 ? " src_any" : "");
  /* oneDNN blocks channels by its vector's floats: 8 with AVX2, 16 with
   * AVX-512, where a count no multiple of 16 (8 channels) stays NCHW */
  const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(),
                 v512 = (unsigned)dnnl_cpu_isa_avx512_core;
  const int vec = (isa & v512) == v512 ? 16 : 8;
  if (s.OC % vec) want_blocked = 0;
  if (want_src == 1 && s.IC % vec) want_src = 0;
  mt_conv2d c0, c1;
  mt_conv2d_shape s1 = s;
  s1.relu = s1.dst_any = 1;
  s1.src_any = want_src >= 0;
  int rc = mt_conv2d_init(&c0, &s, 1, NULL);
  if (!rc) rc = mt_conv2d_init(&c1, &s1, 1, NULL);
  CHECK(rc == 0, "%s: made (%s)", what, rc ? mt_error_message() : "");
  if (rc) return;
  const int cb = c1.dst_block, sb = c1.src_block;
  CHECK(c0.dst_block == 0 && c0.src_block == 0, "%s: plain without dst_any, src_any", what);
  CHECK(want_blocked ? (cb == 8 || cb == 16) && s.OC % cb == 0 : cb == 0,
        "%s: dst_block %d (%s)", what, cb, want_blocked ? "nChw8c or nChw16c" : "NCHW");
  /* want_src: 1 blocked, 0 NCHW (e.g. few input channels), -1 not asked */
  CHECK(want_src == 1 ? (sb == 8 || sb == 16) && s.IC % sb == 0 : sb == 0, "%s: src_block %d (%s)",
        what, sb, want_src == 1 ? "nChw8c or nChw16c" : "NCHW");
  const int64_t hw = (int64_t)c0.s.OH * c0.s.OW, ni = (int64_t)n * s.IC * s.H * s.W;
  const int64_t ihw = (int64_t)s.H * s.W;
  const int64_t no = (int64_t)n * s.OC * hw, nw = (int64_t)s.OC * s.IC * s.KH * s.KW;
  uint64_t rng = seed;
  float *x = rnd(ni, &rng), *w = rnd(nw, &rng), *b = rnd(s.OC, &rng), *g = rnd(no, &rng);
  float *y0 = zeros(no), *y1 = zeros(no), *t = zeros(no), *gb = zeros(no);
  float *dx0 = zeros(ni), *dx1 = zeros(ni), *dw0 = zeros(nw), *dw1 = zeros(nw);
  float *db0 = zeros(s.OC), *db1 = zeros(s.OC), *db2 = zeros(s.OC);
  float *xb = zeros(ni), *tx = zeros(ni);
  to_blocked(xb, x, n, s.IC, ihw, sb); /* the fused path's input in its layout */
  for (int64_t i = 0; i < ni; i++) dx0[i] = dx1[i] = 0.25f; /* the backward adds */
  for (int64_t i = 0; i < nw; i++) dw0[i] = dw1[i] = 0.125f;
  for (int i = 0; i < s.OC; i++) db0[i] = db1[i] = db2[i] = 0.5f;
  rc = mt_conv2d_forward(y0, x, w, b, n, &c0);
  mt_relu_forward(y0, y0, no);
  if (!rc) rc = mt_conv2d_forward(y1, xb, w, b, n, &c1);
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
  if (!rc) rc = mt_conv2d_backward(dx1, dw1, db1, gb, xb, w, n, &c1);
  if (!rc) rc = mt_conv2d_backward(NULL, NULL, db2, gb, xb, w, n, &c1); /* no oneDNN */
  CHECK(rc == 0, "%s: backwards run", what);
  to_plain(tx, dx1, n, s.IC, ihw, sb);
  CHECK_CLOSE_F(tx, dx0, (size_t)ni, TOL, "%s: dinp (added, in its layout) from the blocked gradient",
                what);
  CHECK_CLOSE_F(dw1, dw0, (size_t)nw, TOL, "%s: dw from the blocked gradient", what);
  CHECK_CLOSE_F(db1, db0, (size_t)s.OC, TOL, "%s: db from the blocked gradient", what);
  CHECK_CLOSE_F(db2, db0, (size_t)s.OC, TOL, "%s: db alone from the blocked gradient", what);
  mt_conv2d_free(&c0);
  mt_conv2d_free(&c1);
  free(x), free(w), free(b), free(g), free(y0), free(y1), free(t), free(gb);
  free(dx0), free(dx1), free(dw0), free(dw1), free(db0), free(db1), free(db2), free(xb), free(tx);
}

/* bf16, emulated (fp32 kernels on rounded values, as a CPU without bf16
 * instructions runs it) or native (oneDNN's bf16 kernels, forced where
 * oneDNN has them at all: AVX-512; skipped elsewhere): a convolution with
 * few input channels (the CNN's first) keeps its blocked output, whose
 * weight gradient conv_first_bwd_w computes in fp32 on the rounded
 * operands; one asked for src_any (the CNN's second) takes its input
 * blocked and gives its input gradient in that layout. Each equals the
 * plain fp32 convolution on the bf16-rounded input, weights and output
 * gradient. */
static void test_conv_bf16(mt_conv2d_shape s, int native, uint64_t seed) {
  char what[160];
  snprintf(what, sizeof(what), "bf16 %s conv %d->%d %dx%d k%d B=%d",
           native ? "native" : "emulated", s.IC, s.OC, s.H, s.W, s.KH, s.B);
  const mt_nn_policy pol = mt_nn_policy_make(MT_PREC_BF16, 0);
  mt_conv2d c0, c1;
  mt_conv2d_shape s1 = s;
  s1.relu = s1.dst_any = 1;
  s1.src_any = s.IC > 4; /* few channels: the data's NCHW images */
  /* the choice is made with the convolution */
  if (native && !mt_gemm_bf16_force_native()) {
    printf("skip %s: oneDNN has no bf16 kernels on this CPU\n", what);
    return;
  }
  if (!native) mt_gemm_bf16_emulate(1);
  int rc = mt_conv2d_init(&c0, &s, 1, NULL);
  if (!rc) rc = mt_conv2d_init(&c1, &s1, 1, &pol);
  mt_gemm_bf16_emulate(0);
  CHECK(rc == 0, "%s: made (%s)", what, rc ? mt_error_message() : "");
  if (rc) return;
  const int cb = c1.dst_block, sb = c1.src_block, n = s.B, data = s1.src_any;
  CHECK(cb == 8 || cb == 16, "%s: blocked output (%d)", what, cb);
  CHECK(data ? sb == 8 || sb == 16 : sb == 0, "%s: input %s (%d)", what,
        data ? "blocked" : "NCHW", sb);
  const int64_t hw = (int64_t)c0.s.OH * c0.s.OW, ihw = (int64_t)s.H * s.W;
  const int64_t ni = (int64_t)n * s.IC * ihw, no = (int64_t)n * s.OC * hw;
  const int64_t nw = (int64_t)s.OC * s.IC * s.KH * s.KW;
  uint64_t rng = seed;
  float *x = rnd(ni, &rng), *w = rnd(nw, &rng), *b = rnd(s.OC, &rng), *g = rnd(no, &rng);
  float *xr = zeros(ni), *wr = zeros(nw), *y0 = zeros(no), *y1 = zeros(no), *t = zeros(no);
  float *gb = zeros(no), *dw0 = zeros(nw), *dw1 = zeros(nw), *db0 = zeros(s.OC), *db1 = zeros(s.OC);
  float *xb = zeros(ni), *dx0 = zeros(ni), *dx1 = zeros(ni), *tx = zeros(ni);
  memcpy(xr, x, (size_t)ni * sizeof(float));
  memcpy(wr, w, (size_t)nw * sizeof(float));
  mt_round_to(MT_PREC_BF16, xr, (size_t)ni);
  mt_round_to(MT_PREC_BF16, wr, (size_t)nw);
  to_blocked(xb, x, n, s.IC, ihw, sb);
  rc = mt_conv2d_forward(y0, xr, wr, b, n, &c0);
  mt_relu_forward(y0, y0, no);
  if (!rc) rc = mt_conv2d_forward(y1, xb, w, b, n, &c1);
  to_plain(t, y1, n, s.OC, hw, cb);
  CHECK(rc == 0, "%s: forwards run", what);
  CHECK_CLOSE_F(t, y0, (size_t)no, TOL, "%s: output = fp32's on rounded operands", what);
  mt_relu_backward(g, g, y0, no);
  to_blocked(gb, g, n, s.OC, hw, cb);
  mt_round_to(MT_PREC_BF16, g, (size_t)no);
  rc = mt_conv2d_backward(data ? dx0 : NULL, dw0, db0, g, xr, wr, n, &c0);
  if (!rc) rc = mt_conv2d_backward(data ? dx1 : NULL, dw1, db1, gb, xb, w, n, &c1);
  CHECK(rc == 0, "%s: backwards run", what);
  CHECK_CLOSE_F(dw1, dw0, (size_t)nw, TOL, "%s: dw = fp32's on rounded operands", what);
  CHECK_CLOSE_F(db1, db0, (size_t)s.OC, TOL, "%s: db = fp32's on rounded operands", what);
  if (data) {
    to_plain(tx, dx1, n, s.IC, ihw, sb);
    CHECK_CLOSE_F(tx, dx0, (size_t)ni, TOL, "%s: dinp (in its layout) = fp32's on rounded operands",
                  what);
  }
  mt_conv2d_free(&c0);
  mt_conv2d_free(&c1);
  free(x), free(w), free(b), free(g), free(xr), free(wr), free(y0), free(y1), free(t), free(gb);
  free(dw0), free(dw1), free(db0), free(db1), free(xb), free(dx0), free(dx1), free(tx);
}

/* Pools on nChw{cb}c or NCHW (cb 0), their output in nChw{ob}c or NCHW
 * (ob 0), against NCHW to NCHW: exact. relu: negative inputs, as a ReLU's output never has, are
 * clamped first for the fused backward. */
static void test_pool(mt_pool2d_shape s, int is_max, int cb, int ob, uint64_t seed) {
  char what[160], lin[16] = "NCHW", lout[16] = "NCHW";
  if (cb) snprintf(lin, sizeof(lin), "nChw%dc", cb);
  if (ob) snprintf(lout, sizeof(lout), "nChw%dc", ob);
  snprintf(what, sizeof(what), "%s-pool C=%d %dx%d k%d s%d p%d on %s to %s",
           is_max ? "max" : "avg", s.C, s.H, s.W, s.KH, s.stride_h, s.pad_h, lin, lout);
  mt_pool2d_shape sb = s;
  sb.cblock = cb;
  sb.oblock = ob;
  CHECK(mt_pool2d_shape_init(&s) == 0 && mt_pool2d_shape_init(&sb) == 0, "%s: shape", what);
  const int64_t hw = (int64_t)s.H * s.W, ni = (int64_t)s.B * s.C * hw;
  const int64_t ohw = (int64_t)s.OH * s.OW, no = (int64_t)s.B * s.C * ohw;
  uint64_t rng = seed;
  float *x = rnd(ni, &rng), *g = rnd(no, &rng), *xb = zeros(ni), *t = zeros(ni);
  float *y0 = zeros(no), *y1 = zeros(no), *dx0 = zeros(ni), *dx1 = zeros(ni);
  float *gb = zeros(no), *yb = zeros(no), *ty = zeros(no);
  int32_t *a0 = calloc((size_t)no, sizeof(int32_t)), *a1 = calloc((size_t)no, sizeof(int32_t));
  if (is_max) mt_relu_forward(x, x, ni / 2); /* half a ReLU's output, half with negatives */
  to_blocked(xb, x, s.B, s.C, hw, cb);
  to_blocked(gb, g, s.B, s.C, ohw, ob); /* the output gradient in the output's layout */
  for (int64_t i = 0; i < ni; i++) dx0[i] = dx1[i] = 0.5f; /* the backward adds */
  if (is_max) {
    mt_maxpool2d_forward(y0, a0, x, &s);
    mt_maxpool2d_forward(y1, a1, xb, &sb);
    int same = 1;
    for (int n = 0; n < s.B; n++)
      for (int c = 0; c < s.C; c++)
        for (int64_t i = 0; i < ohw; i++)
          same &= a0[at(n, c, i, s.C, ohw, 0)] == a1[at(n, c, i, s.C, ohw, ob)];
    CHECK(same, "%s: argmax = NCHW's", what);
    mt_maxpool2d_backward(dx0, g, a0, &s);
    mt_maxpool2d_backward(dx1, gb, a1, &sb);
  } else {
    mt_avgpool2d_forward(y0, x, &s);
    mt_avgpool2d_forward(y1, xb, &sb);
    mt_avgpool2d_backward(dx0, g, &s);
    mt_avgpool2d_backward(dx1, gb, &sb);
  }
  to_plain(ty, y1, s.B, s.C, ohw, ob);
  CHECK_CLOSE_F(ty, y0, (size_t)no, 0.0, "%s: output = NCHW's", what);
  to_plain(t, dx1, s.B, s.C, hw, cb);
  CHECK_CLOSE_F(t, dx0, (size_t)ni, 0.0, "%s: dinp (added) = NCHW's", what);
  if (is_max) { /* ReLU then max-pool, backward in one pass, both layouts */
    memset(dx0, 0, (size_t)ni * sizeof(float));
    mt_maxpool2d_backward(dx0, g, a0, &s);
    mt_relu_forward(x, x, ni);
    mt_relu_backward(dx0, dx0, x, ni);
    mt_relu_forward(y0, y0, no); /* the pool's output after the ReLU */
    to_blocked(yb, y0, s.B, s.C, ohw, ob);
    memset(dx1, 0, (size_t)ni * sizeof(float));
    mt_maxpool2d_relu_backward(dx1, gb, a1, yb, &sb);
    to_plain(t, dx1, s.B, s.C, hw, cb);
    CHECK_CLOSE_F(t, dx0, (size_t)ni, 0.0, "%s: fused ReLU backward = pool then ReLU", what);
    memset(dx1, 0, (size_t)ni * sizeof(float));
    mt_maxpool2d_relu_backward(dx1, g, a0, y0, &s);
    CHECK_CLOSE_F(dx1, dx0, (size_t)ni, 0.0, "%s: fused ReLU backward, NCHW", what);
    /* MT_POOL_SET_DINP over NaN (an element left unwritten, or read, shows):
     * the same as into zeros, with the ReLU and without, both layouts */
    for (int relu = 0; relu < 2; relu++) {
      memset(dx0, 0, (size_t)ni * sizeof(float));
      if (relu)
        mt_maxpool2d_relu_backward(dx0, g, a0, y0, &s);
      else
        mt_maxpool2d_backward(dx0, g, a0, &s);
      for (int64_t i = 0; i < ni; i++) dx1[i] = NAN;
      mt_maxpool2d_backward_ex(dx1, gb, a1, relu ? yb : NULL, &sb, MT_POOL_SET_DINP);
      to_plain(t, dx1, s.B, s.C, hw, cb);
      CHECK_CLOSE_F(t, dx0, (size_t)ni, 0.0, "%s: %sbackward written whole over NaN = into zeros",
                    what, relu ? "fused ReLU " : "");
      for (int64_t i = 0; i < ni; i++) dx1[i] = NAN;
      mt_maxpool2d_backward_ex(dx1, g, a0, relu ? y0 : NULL, &s, MT_POOL_SET_DINP);
      CHECK_CLOSE_F(dx1, dx0, (size_t)ni, 0.0, "%s: %sbackward written whole over NaN, NCHW", what,
                    relu ? "fused ReLU " : "");
    }
  }
  free(x), free(g), free(xb), free(t), free(y0), free(y1), free(dx0), free(dx1), free(a0),
      free(a1), free(gb), free(yb), free(ty);
}

int main(void) {
  /* B, IC, H, W, OC, KH, KW, stride, pad, dilation, groups (as the CNN);
   * dst blocked?, src: 1 blocked, 0 NCHW, -1 not asked */
  const mt_conv2d_shape c8 = {5, 8, 9, 7, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
  test_conv(c8, 5, 1, -1, 1);
  test_conv(c8, 3, 1, -1, 2);
  test_conv(c8, 5, 1, 1, 11);
  test_conv(c8, 3, 1, 1, 12);
  test_conv((mt_conv2d_shape){4, 32, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, 4, 1, 1,
            13); /* the CNN's second convolution */
  test_conv((mt_conv2d_shape){4, 1, 12, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, 4, 1, 0,
            3); /* one input channel: its input stays NCHW */
  test_conv((mt_conv2d_shape){4, 1, 12, 10, 32, 5, 5, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0}, 3, 1, -1,
            4);
  /* conv_first.c's weight gradient with more taps than one pass holds (32):
   * 3 input channels x 5x5 = 75, and 7x7 = 49 */
  test_conv((mt_conv2d_shape){3, 3, 10, 9, 16, 5, 5, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0}, 3, 1, 0,
            21);
  test_conv((mt_conv2d_shape){2, 1, 11, 12, 8, 7, 7, 1, 1, 3, 3, 1, 1, 1, 0, 0, 0, 0, 0}, 2, 1, -1,
            22);
  test_conv((mt_conv2d_shape){3, 6, 8, 8, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, 3, 0, 0,
            5); /* 6 channels in, 12 out: no multiple of 8 */
  /* the CNN's first convolution, 3 channels in with 5x5 taps, and the
   * CNN's second, under bf16 emulated and native */
  for (int native = 0; native < 2; native++) {
    test_conv_bf16((mt_conv2d_shape){4, 1, 12, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
                   native, 23);
    test_conv_bf16((mt_conv2d_shape){3, 3, 10, 9, 16, 5, 5, 1, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0},
                   native, 24);
    test_conv_bf16((mt_conv2d_shape){4, 32, 7, 7, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
                   native, 25);
  }
  /* B, C, H, W, KH, KW, stride, pad; input block, output block */
  const mt_pool2d_shape p2 = {3, 16, 8, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0};
  const mt_pool2d_shape p2odd = {2, 16, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0};
  const mt_pool2d_shape p3 = {2, 16, 7, 9, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0};
  test_pool(p2, 1, 8, 0, 6);
  test_pool(p2odd, 1, 16, 0, 7);
  test_pool(p3, 1, 8, 0, 8);
  test_pool((mt_pool2d_shape){2, 16, 7, 9, 3, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0}, 0, 8, 0, 9);
  test_pool((mt_pool2d_shape){2, 8, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 0, 8, 0, 10);
  /* the output in the next convolution's layout: the 2x2 kernels
   * (blocked to the same block, NCHW to any block) and the general loops
   * (other pairs) */
  test_pool(p2, 1, 8, 8, 14);
  test_pool(p2odd, 1, 16, 16, 15);
  test_pool(p2odd, 1, 8, 16, 16);
  test_pool(p2, 1, 0, 8, 17);
  test_pool(p2odd, 1, 0, 16, 21);
  test_pool(p3, 1, 8, 8, 18);
  test_pool((mt_pool2d_shape){2, 16, 7, 9, 3, 3, 2, 2, 1, 1, 1, 0, 0, 0, 0}, 0, 8, 8, 19);
  test_pool((mt_pool2d_shape){2, 16, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 16, 20);
  /* the 2x2 kernels' runs of windows (POOL_RUN * 16 / cb a pass: 32 at
   * nChw16c, 64 at nChw8c): rows of 35 and 70 windows, a run and a part;
   * the NCHW output's runs transposed through the kernels' scratch (ob 0);
   * and a block of 32 channels (the forward's general loop, the backward's
   * 2x2 kernel with a blocked output, its general loop with an NCHW one) */
  test_pool((mt_pool2d_shape){2, 16, 4, 70, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 1, 16, 16, 26);
  test_pool((mt_pool2d_shape){1, 16, 6, 141, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 1, 8, 0, 27);
  test_pool((mt_pool2d_shape){2, 32, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 1, 32, 32, 28);
  test_pool((mt_pool2d_shape){2, 16, 4, 70, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 1, 16, 0, 29);
  test_pool((mt_pool2d_shape){2, 32, 6, 6, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0}, 1, 32, 0, 30);
  mt_pool2d_shape bad = {1, 12, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0, 0, 8, 0};
  CHECK(mt_pool2d_shape_init(&bad) == MT_ERR_ARG, "pool refuses a block (8) not dividing C (12)");
  mt_error_clear();
  bad.cblock = 4;
  bad.oblock = 8;
  CHECK(mt_pool2d_shape_init(&bad) == MT_ERR_ARG,
        "pool refuses an output block (8) not dividing C (12)");
  mt_error_clear();
  return tu_finish("test_layout");
}
