/* 2-d convolution in double (-precision fp64): direct loops, no oneDNN
 * (its convolutions are float, bf16 and int8 only) and no im2col buffer,
 * so nothing is allocated and a convolution is just its checked shape.
 *
 * Every output element, input gradient element and weight gradient element
 * is summed in one fixed order (input channels, then kernel rows and
 * columns, then batch and positions for the weights), so the result does
 * not depend on the thread count. The work is split into planes that no
 * two threads share: forward over (image, output channel), the input
 * gradient over (image, input channel), the weight gradient over output
 * channels. Inside the trainer's per-thread models the loops run on the
 * calling thread (OpenMP does not nest). */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <string.h>

#define CV64_PAR 16384 /* output elements below which a call stays serial */

int mt_conv2d_init_f64(mt_conv2d *c, const mt_conv2d_shape *s, int has_bias,
                       const mt_nn_policy *pol) {
  (void)pol; /* double computes in double */
  memset(c, 0, sizeof(*c));
  mt_conv2d_shape sh = *s;
  MT_CALL(mt_conv2d_shape_init(&sh));
  c->s = sh;
  c->has_bias = has_bias ? 1 : 0;
  return 0;
}

/* The output columns ow whose input column ow * stride + off lies in
 * [0, W): [*lo, *hi) (empty when *lo >= *hi). off is the kernel column's
 * offset kw * dilation - padding. */
static void cols(int OW, int W, int stride, int off, int *lo, int *hi) {
  *lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  *hi = W - 1 - off < 0 ? 0 : (W - 1 - off) / stride + 1;
  if (*hi > OW) *hi = OW;
}

static int check(const mt_conv2d *c, int B, const char *what) {
  MT_CHECK(c && !c->impl && c->s.OH >= 1, MT_ERR_ARG,
           "conv2d %s: not made by mt_conv2d_init_f64", what);
  MT_CHECK(B >= 0 && B <= c->s.B, MT_ERR_ARG, "conv2d %s: batch %d outside [0, %d]", what, B,
           c->s.B);
  return 0;
}

int mt_conv2d_forward_f64(double *out, const double *inp, const double *w, const double *b,
                          int B, mt_conv2d *c) {
  // inp is (B,IC,H,W); w is (OC,IC/groups,KH,KW); b is (OC); out is (B,OC,OH,OW)
  MT_CALL(check(c, B, "forward"));
  MT_CHECK(!b == !c->has_bias, MT_ERR_ARG, "conv2d: bias given %s, made %s", b ? "yes" : "no",
           c->has_bias ? "with one" : "without");
  const mt_conv2d_shape *s = &c->s;
  const int ICg = s->IC / s->groups, OCg = s->OC / s->groups;
  const int64_t hw = (int64_t)s->H * s->W, ohw = (int64_t)s->OH * s->OW;
  const int64_t planes = (int64_t)B * s->OC;
#pragma omp parallel for schedule(static) if (planes * ohw > CV64_PAR)
  for (int64_t p = 0; p < planes; p++) {
    const int bi = (int)(p / s->OC), oc = (int)(p % s->OC), g = oc / OCg;
    double *o = out + p * ohw;
    const double b0 = b ? b[oc] : 0.0;
    for (int64_t i = 0; i < ohw; i++) o[i] = b0;
    for (int icg = 0; icg < ICg; icg++) {
      const double *x = inp + ((int64_t)bi * s->IC + (int64_t)g * ICg + icg) * hw;
      const double *wk = w + ((int64_t)oc * ICg + icg) * s->KH * s->KW;
      for (int kh = 0; kh < s->KH; kh++)
        for (int kw = 0; kw < s->KW; kw++) {
          const double wv = wk[kh * s->KW + kw];
          const int off = kw * s->dil_w - s->pad_w;
          int lo, hi;
          cols(s->OW, s->W, s->stride_w, off, &lo, &hi);
          for (int oh = 0; oh < s->OH; oh++) {
            const int ih = oh * s->stride_h - s->pad_h + kh * s->dil_h;
            if (ih < 0 || ih >= s->H) continue;
            const double *xr = x + (int64_t)ih * s->W;
            double *orow = o + (int64_t)oh * s->OW;
            for (int ow = lo; ow < hi; ow++) orow[ow] += wv * xr[(int64_t)ow * s->stride_w + off];
          }
        }
    }
    if (s->relu) /* the fused ReLU of s->relu; the output stays NCHW (dst_block 0) */
      for (int64_t i = 0; i < ohw; i++) o[i] = o[i] < 0.0 ? 0.0 : o[i];
  }
  return 0;
}

int mt_conv2d_backward_f64(double *dinp, double *dw, double *db, const double *dout,
                           const double *inp, const double *w, int B, mt_conv2d *c) {
  // dout is (B,OC,OH,OW); inp and dinp are (B,IC,H,W); w and dw (OC,IC/groups,KH,KW); db (OC)
  MT_CALL(check(c, B, "backward"));
  MT_CHECK(!db || c->has_bias, MT_ERR_ARG, "conv2d: a bias gradient asked of one made without");
  const mt_conv2d_shape *s = &c->s;
  const int ICg = s->IC / s->groups, OCg = s->OC / s->groups, KK = s->KH * s->KW;
  const int64_t hw = (int64_t)s->H * s->W, ohw = (int64_t)s->OH * s->OW;
  const int big = (int64_t)B * s->OC * ohw > CV64_PAR;
  if (dinp) {
    const int64_t planes = (int64_t)B * s->IC;
#pragma omp parallel for schedule(static) if (big)
    for (int64_t p = 0; p < planes; p++) {
      const int bi = (int)(p / s->IC), ic = (int)(p % s->IC), g = ic / ICg, icg = ic % ICg;
      double *dx = dinp + p * hw;
      for (int ocg = 0; ocg < OCg; ocg++) {
        const int oc = g * OCg + ocg;
        const double *d = dout + ((int64_t)bi * s->OC + oc) * ohw;
        const double *wk = w + ((int64_t)oc * ICg + icg) * KK;
        for (int kh = 0; kh < s->KH; kh++)
          for (int kw = 0; kw < s->KW; kw++) {
            const double wv = wk[kh * s->KW + kw];
            const int off = kw * s->dil_w - s->pad_w;
            int lo, hi;
            cols(s->OW, s->W, s->stride_w, off, &lo, &hi);
            for (int oh = 0; oh < s->OH; oh++) {
              const int ih = oh * s->stride_h - s->pad_h + kh * s->dil_h;
              if (ih < 0 || ih >= s->H) continue;
              double *xr = dx + (int64_t)ih * s->W;
              const double *drow = d + (int64_t)oh * s->OW;
              for (int ow = lo; ow < hi; ow++) xr[(int64_t)ow * s->stride_w + off] += wv * drow[ow];
            }
          }
      }
    }
  }
  if (!dw && !db) return 0;
#pragma omp parallel for schedule(static) if (big)
  for (int oc = 0; oc < s->OC; oc++) {
    const int g = oc / OCg;
    if (db) {
      double acc = 0.0;
      for (int bi = 0; bi < B; bi++) {
        const double *d = dout + ((int64_t)bi * s->OC + oc) * ohw;
        for (int64_t i = 0; i < ohw; i++) acc += d[i];
      }
      db[oc] += acc;
    }
    for (int icg = 0; dw && icg < ICg; icg++)
      for (int kh = 0; kh < s->KH; kh++)
        for (int kw = 0; kw < s->KW; kw++) {
          const int off = kw * s->dil_w - s->pad_w;
          int lo, hi;
          cols(s->OW, s->W, s->stride_w, off, &lo, &hi);
          double acc = 0.0;
          for (int bi = 0; bi < B; bi++) {
            const double *d = dout + ((int64_t)bi * s->OC + oc) * ohw;
            const double *x = inp + ((int64_t)bi * s->IC + (int64_t)g * ICg + icg) * hw;
            for (int oh = 0; oh < s->OH; oh++) {
              const int ih = oh * s->stride_h - s->pad_h + kh * s->dil_h;
              if (ih < 0 || ih >= s->H) continue;
              const double *xr = x + (int64_t)ih * s->W;
              const double *drow = d + (int64_t)oh * s->OW;
              for (int ow = lo; ow < hi; ow++) acc += drow[ow] * xr[(int64_t)ow * s->stride_w + off];
            }
          }
          dw[((int64_t)oc * ICg + icg) * KK + kh * s->KW + kw] += acc;
        }
  }
  return 0;
}
