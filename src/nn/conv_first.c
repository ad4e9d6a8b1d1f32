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
 * position. The sums run over images, rows,
 * columns in that order (four partial sums over the columns), in float as
 * oneDNN's do. */
#include "nn/conv_first.h"

#include <string.h>

int conv_first_fits(const mt_conv2d_shape *s) {
  return s->groups == 1 && s->stride_h == 1 && s->stride_w == 1 && s->dil_h == 1 && s->dil_w == 1;
}

typedef float v8 __attribute__((vector_size(32)));                /* 8 lanes  */
typedef float v8u __attribute__((vector_size(32), aligned(4))); /* unaligned */

/* Taps (input channel, kh, kw) whose accumulators one pass keeps. */
#define TAPS 32

/* One output channel block g of cb = 8 * nv lanes (nv a constant after
 * inlining). GCC's vector types keep the accumulators in registers, which
 * its loop vectoriser had left on the stack (a load and a store per FMA).
 * The rows of the output gradient are the outer loop and the taps the
 * inner one, so a row (OW x cb floats) is read from memory once for up to
 * TAPS taps, not once per tap (with one input channel and 3x3, 9 reads of
 * the whole gradient block had made the kernel memory-bound); each tap's
 * sums still run over the same terms in the same order. */
static inline __attribute__((always_inline)) void block_bwd_w(float *dw, float *db,
                                                              const float *dout, const float *inp,
                                                              int B, const mt_conv2d_shape *s,
                                                              int g, const int nv) {
  const int cb = 8 * nv, H = s->H, W = s->W, OH = s->OH, OW = s->OW, G = s->OC / cb;
  const int64_t ohw = (int64_t)OH * OW;
  const int KK = s->KH * s->KW, taps = s->IC * KK;
  /* four partial sums per tap (columns mod 4): one would wait on each add */
  v8 acc[TAPS][4][2];
  int tdh[TAPS], tdw[TAPS], tic[TAPS]; /* each tap's shift and input channel */
  for (int t0 = 0; t0 < taps; t0 += TAPS) {
    const int nt = taps - t0 < TAPS ? taps - t0 : TAPS;
    memset(acc, 0, sizeof(acc));
    for (int t = 0; t < nt; t++) {
      tic[t] = (t0 + t) / KK;
      tdh[t] = (t0 + t) % KK / s->KW - s->pad_h; /* input = output + (dh, dw) */
      tdw[t] = (t0 + t) % s->KW - s->pad_w;
    }
    for (int n = 0; n < B; n++) {
      const float *d = dout + ((int64_t)n * G + g) * ohw * cb;
      for (int oh = 0; oh < OH; oh++) {
        const float *dr = d + (int64_t)oh * OW * cb;
        for (int t = 0; t < nt; t++) {
          const int ic = tic[t], dh = tdh[t], dwc = tdw[t];
          if (oh + dh < 0 || oh + dh >= H) continue;
          const int ow0 = dwc < 0 ? -dwc : 0, ow1 = W - dwc < OW ? W - dwc : OW;
          const float *xr = inp + (((int64_t)n * s->IC + ic) * H + oh + dh) * W + dwc;
          v8 a0[2], a1[2], a2[2], a3[2];
          for (int v = 0; v < nv; v++)
            a0[v] = acc[t][0][v], a1[v] = acc[t][1][v], a2[v] = acc[t][2][v], a3[v] = acc[t][3][v];
          int ow = ow0;
          for (; ow + 4 <= ow1; ow += 4)
            for (int v = 0; v < nv; v++) {
              const float *q = dr + (int64_t)ow * cb + 8 * v;
              a0[v] += xr[ow] * *(const v8u *)q;
              a1[v] += xr[ow + 1] * *(const v8u *)(q + cb);
              a2[v] += xr[ow + 2] * *(const v8u *)(q + 2 * cb);
              a3[v] += xr[ow + 3] * *(const v8u *)(q + 3 * cb);
            }
          for (; ow < ow1; ow++)
            for (int v = 0; v < nv; v++)
              a0[v] += xr[ow] * *(const v8u *)(dr + (int64_t)ow * cb + 8 * v);
          for (int v = 0; v < nv; v++)
            acc[t][0][v] = a0[v], acc[t][1][v] = a1[v], acc[t][2][v] = a2[v], acc[t][3][v] = a3[v];
        }
      }
    }
    for (int t = 0; t < nt; t++)
      for (int v = 0; v < nv; v++) {
        const v8 sum = (acc[t][0][v] + acc[t][1][v]) + (acc[t][2][v] + acc[t][3][v]);
        for (int j = 0; j < 8; j++) /* dw is (OC,IC,KH,KW): tap t0+t of each channel */
          dw[((int64_t)(g * cb + 8 * v + j) * s->IC * KK) + t0 + t] += sum[j];
      }
  }
  if (!db) return;
  v8 bsum[2] = {0};
  for (int n = 0; n < B; n++) {
    const float *d = dout + ((int64_t)n * G + g) * ohw * cb;
    for (int64_t i = 0; i < ohw; i++)
      for (int v = 0; v < nv; v++) bsum[v] += *(const v8u *)(d + i * cb + 8 * v);
  }
  for (int v = 0; v < nv; v++)
    for (int j = 0; j < 8; j++) db[g * cb + 8 * v + j] += bsum[v][j];
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
      block_bwd_w(dw, db, dout, inp, B, s, g, 1);
    else
      block_bwd_w(dw, db, dout, inp, B, s, g, 2);
  }
}
