/* 2-d max and average pooling (floor mode, PyTorch's semantics) and global
 * average pooling, for float and double (the template pool_t.h). The 2-d
 * pools read NCHW or a convolution's blocked nChw{b}c (cblock) and write
 * NCHW or nChw{b}c (oblock: the next convolution's input layout).
 * Each (b,c) plane is independent: the planes are the unit of parallel
 * work, so backward scatters never race. */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>
#include <string.h>

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
  MT_CHECK(s->cblock >= 0 && (s->cblock == 0 || s->C % s->cblock == 0), MT_ERR_ARG,
           "pool2d: channel block %d must be 0 or divide C=%d", s->cblock, s->C);
  MT_CHECK(s->oblock >= 0 && (s->oblock == 0 || s->C % s->oblock == 0), MT_ERR_ARG,
           "pool2d: output channel block %d must be 0 or divide C=%d", s->oblock, s->C);
  s->OH = (s->H + 2 * s->pad_h - s->KH) / s->stride_h + 1;
  s->OW = (s->W + 2 * s->pad_w - s->KW) / s->stride_w + 1;
  return 0;
}

static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int imin(int a, int b) { return a < b ? a : b; }

/* Where plane p = n*C + c of a tensor with planes of hw elements starts,
 * and the distance *st between its neighbouring elements: 1 in NCHW (cb
 * 0), cb in nChw{cb}c. */
static inline int64_t plane_in(int64_t p, int C, int64_t hw, int cb, int64_t *st) {
  if (!cb) {
    *st = 1;
    return p * hw;
  }
  *st = cb;
  const int64_t c = p % C, n = p / C;
  return (n * C + c / cb * cb) * hw + c % cb;
}

/* The same for the input (cblock) and for the output (oblock). */
static inline int64_t plane_at(const mt_pool2d_shape *s, int64_t p, int64_t *st) {
  return plane_in(p, s->C, (int64_t)s->H * s->W, s->cblock, st);
}

static inline int64_t oplane_at(const mt_pool2d_shape *s, int64_t p, int64_t *st) {
  return plane_in(p, s->C, (int64_t)s->OH * s->OW, s->oblock, st);
}

#define MT_TEMPLATE "nn/pool_t.h"
#include "core/real_t.h"
