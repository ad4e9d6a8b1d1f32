// 2-d convolution on the GPU (only built with CUDA): im2col / col2im
// kernels and cuBLAS's strided-batched GEMMs, any stride, padding,
// dilation and groups, forward and backward (data, weights, bias), for
// float and double (the template conv_t.cuh). No cuDNN: the columns cost
// memory (the context's column scratch) and bandwidth, but every sum has a
// fixed order and the code has no dependency beyond cuBLAS. The GEMMs are
// in the buffers' type: a low-precision context does not apply here.
#include "cuda/bits.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace {

constexpr int64_t kColBytes = (int64_t)64 << 20; // default column cap (one image at least)

// s must be a geometry checked by mt_conv2d_shape_init (OH, OW set) and
// 0 <= B <= s->B.
int conv_check(const mt_conv2d_shape *s, int B) {
  mt_conv2d_shape t = *s;
  MT_CUDA_TRY(mt_conv2d_shape_init(&t));
  MT_CUDA_ARG(t.OH == s->OH && t.OW == s->OW,
              "conv2d: output %dx%d does not match the geometry (%dx%d): call "
              "mt_conv2d_shape_init",
              s->OH, s->OW, t.OH, t.OW);
  MT_CUDA_ARG(B >= 0 && B <= s->B, "conv2d: batch %d outside [0, %d]", B, s->B);
  return 0;
}

// The sizes both directions use.
struct ConvDims {
  int G, OCg;                   // groups, output channels per group
  int64_t K, Kg, ohw;           // column rows (all groups, one group), positions
  int64_t in_img, out_img;      // values of one image of inp and of out
};

ConvDims conv_dims(const mt_conv2d_shape *s) {
  ConvDims d;
  d.G = s->groups;
  d.OCg = s->OC / s->groups;
  d.K = (int64_t)s->IC * s->KH * s->KW;
  d.Kg = d.K / d.G;
  d.ohw = (int64_t)s->OH * s->OW;
  d.in_img = (int64_t)s->IC * s->H * s->W;
  d.out_img = (int64_t)s->OC * d.ohw;
  return d;
}

} // namespace

#define MT_TEMPLATE "cuda/conv_t.cuh"
#include "core/real_t.h"
