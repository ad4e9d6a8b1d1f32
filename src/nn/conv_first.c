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
 * position. Each image's sums run over rows and columns in that order,
 * and the images' sums are added in order, in float as oneDNN's are. */
#include "nn/conv_first.h"
#include "mpitrain/mpitrain.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int conv_first_fits(const mt_conv2d_shape *s) {
  return s->groups == 1 && s->stride_h == 1 && s->stride_w == 1 && s->dil_h == 1 && s->dil_w == 1;
}

typedef float v8 __attribute__((vector_size(32)));                /* 8 lanes  */
typedef float v8u __attribute__((vector_size(32), aligned(4))); /* unaligned */

/* Taps (input channel, kh, kw) one pass keeps in registers: with AVX2's 16
 * vector registers, 9 accumulators, the bias's, the output gradient's
 * vector and a broadcast input. */
#define TAPS 9

/* One output channel block g of cb = 8 * nv lanes (nv a constant after
 * inlining). For each image the input planes are copied into xp, padded
 * with zeros (stride 1: every tap of every output position then lies in
 * it, no bounds inside the loops), and for each pass of TAPS taps every
 * output position's gradient vector is loaded once and multiplied by the
 * TAPS inputs it meets, into TAPS accumulators held in registers (GCC's
 * vector types keep them there, where its loop vectoriser had left them on
 * the stack). Each tap's sum runs over the image's rows and columns in
 * order, then is added to the tap's total (tot) image after image; the
 * bias's the same, in the first pass. A previous form looped over the taps
 * inside each row, four partial sums a tap loaded and stored around every
 * row: 4.2 ms of a CNN step against 1.7 now (128 images, 1 -> 32 channels,
 * 28 x 28, A2; bench/README.md, "The max-pool in row order"). */
static inline __attribute__((always_inline)) void block_bwd_w(
    float *dw, float *db, const float *dout, const float *inp, int B, const mt_conv2d_shape *s,
    int g, const int nv, float *xp, float *tot) {
  const int cb = 8 * nv, H = s->H, W = s->W, OH = s->OH, OW = s->OW, G = s->OC / cb;
  const int HP = H + 2 * s->pad_h, WP = W + 2 * s->pad_w; /* OH + KH - 1, OW + KW - 1 */
  const int64_t ohw = (int64_t)OH * OW;
  const int KK = s->KH * s->KW, taps = s->IC * KK;
  v8 btot[2] = {0};
  memset(tot, 0, sizeof(float) * (size_t)taps * (size_t)cb);
  memset(xp, 0, sizeof(float) * (size_t)s->IC * HP * WP);
  for (int n = 0; n < B; n++) {
    for (int ic = 0; ic < s->IC; ic++)
      for (int h = 0; h < H; h++)
        memcpy(xp + ((int64_t)ic * HP + h + s->pad_h) * WP + s->pad_w,
               inp + (((int64_t)n * s->IC + ic) * H + h) * W, sizeof(float) * (size_t)W);
    const float *d = dout + ((int64_t)n * G + g) * ohw * cb;
    for (int t0 = 0; t0 < taps; t0 += TAPS) {
      const int nt = taps - t0 < TAPS ? taps - t0 : TAPS, bias = db && t0 == 0;
      int64_t off[TAPS]; /* each tap's input, from the output position's */
      for (int t = 0; t < TAPS; t++) {
        const int k = t0 + (t < nt ? t : 0); /* past nt: a copy of the first, not kept */
        off[t] = ((int64_t)(k / KK) * HP + k % KK / s->KW) * WP + k % s->KW;
      }
      v8 acc[TAPS][2], bacc[2];
      for (int v = 0; v < nv; v++) {
        bacc[v] = (v8){0};
#pragma GCC unroll 16
        for (int t = 0; t < TAPS; t++) acc[t][v] = (v8){0};
      }
      for (int oh = 0; oh < OH; oh++) {
        const float *xr = xp + (int64_t)oh * WP, *dr = d + (int64_t)oh * OW * cb;
        for (int ow = 0; ow < OW; ow++) {
          v8 dv[2];
          for (int v = 0; v < nv; v++) dv[v] = *(const v8u *)(dr + (int64_t)ow * cb + 8 * v);
#pragma GCC unroll 16
          for (int t = 0; t < TAPS; t++) {
            const float xv = xr[off[t] + ow];
            for (int v = 0; v < nv; v++) acc[t][v] += xv * dv[v];
          }
          if (bias)
            for (int v = 0; v < nv; v++) bacc[v] += dv[v];
        }
      }
      for (int t = 0; t < nt; t++)
        for (int v = 0; v < nv; v++) *(v8u *)(tot + ((t0 + t) * nv + v) * 8) += acc[t][v];
      if (bias)
        for (int v = 0; v < nv; v++) btot[v] += bacc[v];
    }
  }
  for (int t = 0; t < taps; t++)
    for (int v = 0; v < nv; v++)
      for (int j = 0; j < 8; j++) /* dw is (OC,IC,KH,KW): tap t of each channel */
        dw[(int64_t)(g * cb + 8 * v + j) * taps + t] += tot[(t * nv + v) * 8 + j];
  if (db)
    for (int v = 0; v < nv; v++)
      for (int j = 0; j < 8; j++) db[g * cb + 8 * v + j] += btot[v][j];
}

int conv_first_bwd_w(float *dw, float *db, const float *dout, const float *inp, int B,
                     const mt_conv2d *c) {
  // inp is (B,IC,H,W); dout (B,OC,OH,OW) blocked; dw (OC,IC,KH,KW), db (OC) += ...
  const mt_conv2d_shape *s = &c->s;
  const int cb = c->dst_block, G = s->OC / cb;
  /* each thread's scratch: the taps' totals, then the padded input */
  const size_t tots = (size_t)s->IC * s->KH * s->KW * (size_t)cb;
  const size_t one = tots + (size_t)s->IC * (s->H + 2 * s->pad_h) * (s->W + 2 * s->pad_w);
  const int par = (int64_t)B * s->OH * s->OW * s->OC > 65536;
#ifdef _OPENMP
  const int nthr = par ? omp_get_max_threads() : 1;
#else
  const int nthr = 1;
#endif
  float *scratch = NULL;
  MT_CALL(mt_calloc(&scratch, (size_t)nthr * one, sizeof(float), "conv weight gradient scratch"));
  /* the channel blocks are independent: the threads of a region outside any
   * (one each inside one: OpenMP does not nest) */
#pragma omp parallel for schedule(static) if (par)
  for (int g = 0; g < G; g++) {
#ifdef _OPENMP
    float *mine = scratch + (size_t)omp_get_thread_num() * one;
#else
    float *mine = scratch;
#endif
    if (cb == 8)
      block_bwd_w(dw, db, dout, inp, B, s, g, 1, mine + tots, mine);
    else
      block_bwd_w(dw, db, dout, inp, B, s, g, 2, mine + tots, mine);
  }
  mt_free(&scratch);
  return 0;
}
