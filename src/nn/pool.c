/* 2-d max and average pooling (floor mode, PyTorch's semantics) and global
 * average pooling, NCHW. Each (b,c) plane is independent: the planes are
 * the unit of parallel work, so backward scatters never race. */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>

int mt_pool2d_shape_init(mt_pool2d_shape *s) {
  MT_CHECK(s->B >= 1 && s->C >= 1 && s->H >= 1 && s->W >= 1 && s->KH >= 1 && s->KW >= 1, MT_ERR_ARG,
           "pool2d: sizes must be >= 1 (B=%d C=%d H=%d W=%d K=%dx%d)", s->B, s->C, s->H, s->W,
           s->KH, s->KW);
  MT_CHECK(s->stride_h >= 1 && s->stride_w >= 1, MT_ERR_ARG, "pool2d: stride must be >= 1");
  MT_CHECK(s->pad_h >= 0 && s->pad_w >= 0 && 2 * s->pad_h <= s->KH && 2 * s->pad_w <= s->KW,
           MT_ERR_ARG, "pool2d: padding %dx%d must be in [0, kernel/2] (kernel %dx%d)", s->pad_h,
           s->pad_w, s->KH, s->KW);
  MT_CHECK(s->H + 2 * s->pad_h >= s->KH && s->W + 2 * s->pad_w >= s->KW, MT_ERR_ARG,
           "pool2d: kernel %dx%d larger than the padded input", s->KH, s->KW);
  s->OH = (s->H + 2 * s->pad_h - s->KH) / s->stride_h + 1;
  s->OW = (s->W + 2 * s->pad_w - s->KW) / s->stride_w + 1;
  return 0;
}

static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int imin(int a, int b) { return a < b ? a : b; }

/* 2x2 windows, stride 2, no padding (the CNN's pool): the general rule
 * below (scan order, the first maximum wins, a NaN always wins) written with
 * selects instead of branches, so it vectorises over a row; the branchy loop
 * mispredicted on real activations and took a third of a CNN step. */
static void maxpool_2x2(float *out, int32_t *argmax, const float *inp, const mt_pool2d_shape *s) {
  const int64_t planes = (int64_t)s->B * s->C, hw = (int64_t)s->H * s->W;
  const int64_t ohw = (int64_t)s->OH * s->OW;
  const int W = s->W, OW = s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    const float *x = inp + p * hw;
    float *o = out + p * ohw;
    int32_t *am = argmax + p * ohw;
    for (int oh = 0; oh < s->OH; oh++) {
      const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
      const int32_t base = 2 * oh * W;
#pragma omp simd
      for (int ow = 0; ow < OW; ow++) {
        const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        const int32_t ia = base + 2 * ow;
        float m = a;
        int32_t i = ia;
        int t = (b > m) | (b != b);
        m = t ? b : m, i = t ? ia + 1 : i;
        t = (c > m) | (c != c);
        m = t ? c : m, i = t ? ia + W : i;
        t = (d > m) | (d != d);
        m = t ? d : m, i = t ? ia + W + 1 : i;
        o[oh * OW + ow] = m;
        am[oh * OW + ow] = i;
      }
    }
  }
}

void mt_maxpool2d_forward(float *out, int32_t *argmax, const float *inp, const mt_pool2d_shape *s) {
  // inp is (B,C,H,W); out and argmax are (B,C,OH,OW)
  if (s->KH == 2 && s->KW == 2 && s->stride_h == 2 && s->stride_w == 2 && s->pad_h == 0 &&
      s->pad_w == 0) {
    maxpool_2x2(out, argmax, inp, s);
    return;
  }
  const int64_t planes = (int64_t)s->B * s->C, hw = (int64_t)s->H * s->W;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    const float *x = inp + p * hw;
    float *o = out + p * ohw;
    int32_t *am = argmax + p * ohw;
    for (int oh = 0; oh < s->OH; oh++) {
      const int h0 = imax(oh * s->stride_h - s->pad_h, 0);
      const int h1 = imin(oh * s->stride_h - s->pad_h + s->KH, s->H);
      for (int ow = 0; ow < s->OW; ow++) {
        const int w0 = imax(ow * s->stride_w - s->pad_w, 0);
        const int w1 = imin(ow * s->stride_w - s->pad_w + s->KW, s->W);
        int best = h0 * s->W + w0; /* pad <= kernel/2: never an empty window */
        float mx = -INFINITY;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) {
            const float v = x[ih * s->W + iw];
            if (v > mx || isnan(v)) {
              mx = v;
              best = ih * s->W + iw;
            }
          }
        o[oh * s->OW + ow] = mx;
        am[oh * s->OW + ow] = best;
      }
    }
  }
}

void mt_maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax,
                           const mt_pool2d_shape *s) {
  // dout and argmax are (B,C,OH,OW); dinp is (B,C,H,W)
  const int64_t planes = (int64_t)s->B * s->C, hw = (int64_t)s->H * s->W;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    float *dx = dinp + p * hw;
    const float *d = dout + p * ohw;
    const int32_t *am = argmax + p * ohw;
    for (int64_t i = 0; i < ohw; i++) dx[am[i]] += d[i];
  }
}

/* Window [h0,h1) x [w0,w1) clipped to the input and its divisor. */
static inline void avg_window(const mt_pool2d_shape *s, int oh, int ow, int *h0, int *h1, int *w0,
                              int *w1, float *inv) {
  const int hs = oh * s->stride_h - s->pad_h, ws = ow * s->stride_w - s->pad_w;
  *h0 = imax(hs, 0);
  *h1 = imin(hs + s->KH, s->H);
  *w0 = imax(ws, 0);
  *w1 = imin(ws + s->KW, s->W);
  /* floor mode: the window always lies inside the padded input, so with
   * count_include_pad the divisor is the whole kernel */
  const int n = s->count_include_pad ? s->KH * s->KW : (*h1 - *h0) * (*w1 - *w0);
  *inv = 1.0f / (float)n;
}

void mt_avgpool2d_forward(float *out, const float *inp, const mt_pool2d_shape *s) {
  // inp is (B,C,H,W); out is (B,C,OH,OW)
  const int64_t planes = (int64_t)s->B * s->C, hw = (int64_t)s->H * s->W;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    const float *x = inp + p * hw;
    float *o = out + p * ohw;
    for (int oh = 0; oh < s->OH; oh++)
      for (int ow = 0; ow < s->OW; ow++) {
        int h0, h1, w0, w1;
        float inv;
        avg_window(s, oh, ow, &h0, &h1, &w0, &w1, &inv);
        float acc = 0.0f;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) acc += x[ih * s->W + iw];
        o[oh * s->OW + ow] = acc * inv;
      }
  }
}

void mt_avgpool2d_backward(float *dinp, const float *dout, const mt_pool2d_shape *s) {
  // dout is (B,C,OH,OW); dinp is (B,C,H,W)
  const int64_t planes = (int64_t)s->B * s->C, hw = (int64_t)s->H * s->W;
  const int64_t ohw = (int64_t)s->OH * s->OW;
#pragma omp parallel for schedule(static) if (planes * ohw > 32768)
  for (int64_t p = 0; p < planes; p++) {
    float *dx = dinp + p * hw;
    const float *d = dout + p * ohw;
    for (int oh = 0; oh < s->OH; oh++)
      for (int ow = 0; ow < s->OW; ow++) {
        int h0, h1, w0, w1;
        float inv;
        avg_window(s, oh, ow, &h0, &h1, &w0, &w1, &inv);
        const float g = d[oh * s->OW + ow] * inv;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) dx[ih * s->W + iw] += g;
      }
  }
}

void mt_global_avgpool_forward(float *out, const float *inp, int B, int C, int HW) {
  // inp is (B,C,HW); out is (B,C)
  const int64_t planes = (int64_t)B * C;
#pragma omp parallel for schedule(static) if (planes * HW > 65536)
  for (int64_t p = 0; p < planes; p++) {
    const float *x = inp + p * HW;
    double acc = 0.0;
    for (int i = 0; i < HW; i++) acc += x[i];
    out[p] = (float)(acc / HW);
  }
}

void mt_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int HW) {
  // dout is (B,C); dinp is (B,C,HW)
  const int64_t planes = (int64_t)B * C;
  const float inv = 1.0f / (float)HW;
#pragma omp parallel for schedule(static) if (planes * HW > 65536)
  for (int64_t p = 0; p < planes; p++) {
    float *dx = dinp + p * HW;
    const float g = dout[p] * inv;
    for (int i = 0; i < HW; i++) dx[i] += g;
  }
}
