/* The weight gradient of a first-layer convolution (few input channels,
 * e.g. the CNN's 1->32 3x3 on 28x28) straight from the blocked output
 * gradient.
 *
 * Why not oneDNN's: its blocked backward-weights kernel (jit:avx2, oneDNN
 * 2.6) pads the input channels up to the block, so with one input channel
 * it does 8 times the work (and first reorders the input into that padded
 * layout): ~13 ms per step of 128 images here, the largest kernel of the
 * CNN's step; its plain kernel (gemm) wants an NCHW output gradient, i.e. a
 * reorder of 12.8 MB, and with a blocked one it falls to a reference loop.
 * Here each output channel block is one vector (8 lanes with AVX2): for
 * every input channel and kernel tap, dw[block][tap] += x[shifted] * dout
 * over the images and positions, one broadcast and one vector FMA per
 * position, the accumulator in a register. The sums run over images, rows,
 * columns in that order, in float as oneDNN's do. */
#include "nn/conv_first.h"

#include <string.h>

int conv_first_fits(const mt_conv2d_shape *s) {
  return s->groups == 1 && s->stride_h == 1 && s->stride_w == 1 && s->dil_h == 1 && s->dil_w == 1;
}

/* One output channel block g of cb lanes (cb a constant after inlining). */
static inline __attribute__((always_inline)) void block_bwd_w(float *dw, float *db,
                                                              const float *dout, const float *inp,
                                                              int B, const mt_conv2d_shape *s,
                                                              int g, const int cb) {
  const int H = s->H, W = s->W, OH = s->OH, OW = s->OW, G = s->OC / cb;
  const int64_t ohw = (int64_t)OH * OW;
  for (int ic = 0; ic < s->IC; ic++)
    for (int kh = 0; kh < s->KH; kh++)
      for (int kw = 0; kw < s->KW; kw++) {
        const int dh = kh - s->pad_h, dwc = kw - s->pad_w; /* input = output + (dh, dwc) */
        const int oh0 = dh < 0 ? -dh : 0, oh1 = H - dh < OH ? H - dh : OH;
        const int ow0 = dwc < 0 ? -dwc : 0, ow1 = W - dwc < OW ? W - dwc : OW;
        float acc[16] = {0};
        for (int n = 0; n < B; n++) {
          const float *x = inp + ((int64_t)n * s->IC + ic) * H * W;
          const float *d = dout + ((int64_t)n * G + g) * ohw * cb;
          for (int oh = oh0; oh < oh1; oh++) {
            const float *xr = x + (int64_t)(oh + dh) * W + dwc;
            const float *dr = d + (int64_t)oh * OW * cb;
            for (int ow = ow0; ow < ow1; ow++) {
              const float xv = xr[ow];
#pragma omp simd
              for (int j = 0; j < cb; j++) acc[j] += xv * dr[(int64_t)ow * cb + j];
            }
          }
        }
        for (int j = 0; j < cb; j++) /* dw is (OC,IC,KH,KW) */
          dw[(((int64_t)(g * cb + j) * s->IC + ic) * s->KH + kh) * s->KW + kw] += acc[j];
      }
  if (!db) return;
  float acc[16] = {0};
  for (int n = 0; n < B; n++) {
    const float *d = dout + ((int64_t)n * G + g) * ohw * cb;
    for (int64_t i = 0; i < ohw; i++)
#pragma omp simd
      for (int j = 0; j < cb; j++) acc[j] += d[i * cb + j];
  }
  for (int j = 0; j < cb; j++) db[g * cb + j] += acc[j];
}

void conv_first_bwd_w(float *dw, float *db, const float *dout, const float *inp, int B,
                      const mt_conv2d *c) {
  // inp is (B,IC,H,W); dout (B,OC,OH,OW) blocked; dw (OC,IC,KH,KW), db (OC) += ...
  const mt_conv2d_shape *s = &c->s;
  const int cb = c->dst_block, G = s->OC / cb;
  /* the channel blocks are independent: the threads of a region outside any
   * (one each inside one: OpenMP does not nest) */
#pragma omp parallel for schedule(static) if ((int64_t)B * s->OH * s->OW * s->OC > 65536)
  for (int g = 0; g < G; g++) {
    if (cb == 8)
      block_bwd_w(dw, db, dout, inp, B, s, g, 8);
    else
      block_bwd_w(dw, db, dout, inp, B, s, g, 16);
  }
}
