// Pooling on the GPU, a template for REAL = float and double (pool.cu):
// inp, dinp (B,C,H,W); out, dout, argmax (B,C,OH,OW); the global pool's
// out (B,C). A forward runs one thread per output and scans its window in
// the CPU's order; a backward runs one thread per input element and
// gathers the outputs whose window holds it, in increasing output order,
// which is the order in which the CPU's scatter adds them: the same bits,
// and no atomics.

namespace {

// max over the window, padding as -inf, the first maximum, a NaN always
// wins (nn/pool_t.h; its 2x2 fast path follows the same rule)
__global__ void MT_T(maxpool_fwd_k)(REAL *out, int32_t *argmax, const REAL *inp,
                                    mt_pool2d_shape s, int64_t n) {
  const int64_t ohw = (int64_t)s.OH * s.OW, hw = (int64_t)s.H * s.W;
  MT_GRID_STRIDE(i, n) {
    const int64_t p = i / ohw;
    const int o = (int)(i - p * ohw), oh = o / s.OW, ow = o % s.OW;
    const REAL *x = inp + p * hw;
    const int h0 = max(oh * s.stride_h - s.pad_h, 0), h1 = min(oh * s.stride_h - s.pad_h + s.KH, s.H);
    const int w0 = max(ow * s.stride_w - s.pad_w, 0), w1 = min(ow * s.stride_w - s.pad_w + s.KW, s.W);
    int best = h0 * s.W + w0;
    REAL mx = (REAL)-INFINITY;
    for (int ih = h0; ih < h1; ih++)
      for (int iw = w0; iw < w1; iw++) {
        const REAL v = x[ih * s.W + iw];
        if (v > mx || isnan(v)) {
          mx = v;
          best = ih * s.W + iw;
        }
      }
    out[i] = mx;
    argmax[i] = best;
  }
}

// average over the window clipped to the input; the divisor is KH*KW with
// count_include_pad, else the number of real inputs
__device__ __forceinline__ void MT_T(avg_window)(const mt_pool2d_shape &s, int oh, int ow, int *h0,
                                                 int *h1, int *w0, int *w1, REAL *inv) {
  const int hs = oh * s.stride_h - s.pad_h, ws = ow * s.stride_w - s.pad_w;
  *h0 = max(hs, 0);
  *h1 = min(hs + s.KH, s.H);
  *w0 = max(ws, 0);
  *w1 = min(ws + s.KW, s.W);
  const int cnt = s.count_include_pad ? s.KH * s.KW : (*h1 - *h0) * (*w1 - *w0);
  *inv = (REAL)1 / (REAL)cnt;
}

__global__ void MT_T(avgpool_fwd_k)(REAL *out, const REAL *inp, mt_pool2d_shape s, int64_t n) {
  const int64_t ohw = (int64_t)s.OH * s.OW, hw = (int64_t)s.H * s.W;
  MT_GRID_STRIDE(i, n) {
    const int64_t p = i / ohw;
    const int o = (int)(i - p * ohw), oh = o / s.OW, ow = o % s.OW;
    const REAL *x = inp + p * hw;
    int h0, h1, w0, w1;
    REAL inv;
    MT_T(avg_window)(s, oh, ow, &h0, &h1, &w0, &w1, &inv);
    REAL acc = (REAL)0;
    for (int ih = h0; ih < h1; ih++)
      for (int iw = w0; iw < w1; iw++) acc += x[ih * s.W + iw];
    out[i] = acc * inv;
  }
}

// avg = 0: dinp += dout at the outputs whose argmax is this element;
// avg = 1: dinp += dout * inv of every output whose window holds it
__global__ void MT_T(pool_bwd_k)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                 mt_pool2d_shape s, int avg, int64_t n) {
  const int64_t ohw = (int64_t)s.OH * s.OW, hw = (int64_t)s.H * s.W;
  MT_GRID_STRIDE(i, n) {
    const int64_t p = i / hw;
    const int pos = (int)(i - p * hw), ih = pos / s.W, iw = pos % s.W;
    int oh0, oh1, ow0, ow1;
    mt_cu_pool_cover(ih, s.KH, s.stride_h, s.pad_h, s.OH, &oh0, &oh1);
    mt_cu_pool_cover(iw, s.KW, s.stride_w, s.pad_w, s.OW, &ow0, &ow1);
    const REAL *d = dout + p * ohw;
    REAL acc = dinp[i];
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        const int o = oh * s.OW + ow;
        if (avg) {
          int h0, h1, w0, w1;
          REAL inv;
          MT_T(avg_window)(s, oh, ow, &h0, &h1, &w0, &w1, &inv);
          acc += mtc::mul_rn(d[o], inv); // the CPU adds g = d * inv
        } else if (argmax[p * ohw + o] == pos) {
          acc += d[o];
        }
      }
    dinp[i] = acc;
  }
}

// out[p] = mean of plane p (HW values), summed in double, one block each
__global__ void MT_T(gap_fwd_k)(REAL *out, const REAL *inp, int HW) {
  const int64_t p = blockIdx.x;
  const REAL *x = inp + p * HW;
  double acc = 0.0;
  for (int i = threadIdx.x; i < HW; i += blockDim.x) acc += x[i];
  acc = mtc::block_sum(acc);
  if (threadIdx.x == 0) out[p] = (REAL)(acc / HW);
}

__global__ void MT_T(gap_bwd_k)(REAL *dinp, const REAL *dout, REAL inv, int HW, int64_t n) {
  MT_GRID_STRIDE(i, n) dinp[i] += mtc::mul_rn(dout[i / HW], inv); // g = dout * inv, then +=
}

} // namespace

int MT_T(mt_cuda_maxpool2d_forward)(REAL *out, int32_t *argmax, const REAL *inp,
                                    const mt_pool2d_shape *s, cudaStream_t st) {
  const int64_t n = (int64_t)s->B * s->C * s->OH * s->OW;
  if (n <= 0) return 0;
  MT_T(maxpool_fwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, st>>>(out, argmax, inp, *s, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_maxpool2d_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                     const mt_pool2d_shape *s, cudaStream_t st) {
  const int64_t n = (int64_t)s->B * s->C * s->H * s->W;
  if (n <= 0) return 0;
  MT_T(pool_bwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, st>>>(dinp, dout, argmax, *s, 0, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_avgpool2d_forward)(REAL *out, const REAL *inp, const mt_pool2d_shape *s,
                                    cudaStream_t st) {
  const int64_t n = (int64_t)s->B * s->C * s->OH * s->OW;
  if (n <= 0) return 0;
  MT_T(avgpool_fwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, st>>>(out, inp, *s, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_avgpool2d_backward)(REAL *dinp, const REAL *dout, const mt_pool2d_shape *s,
                                     cudaStream_t st) {
  const int64_t n = (int64_t)s->B * s->C * s->H * s->W;
  if (n <= 0) return 0;
  MT_T(pool_bwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, st>>>(dinp, dout, NULL, *s, 1, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_global_avgpool_forward)(REAL *out, const REAL *inp, int B, int C, int HW,
                                         cudaStream_t st) {
  MT_CUDA_ARG(B >= 0 && C >= 0 && HW >= 1, "sizes B=%d C=%d HW=%d", B, C, HW);
  const int64_t planes = (int64_t)B * C;
  if (planes == 0) return 0;
  MT_T(gap_fwd_k)<<<(unsigned)planes, mtc::row_threads(HW), 0, st>>>(out, inp, HW);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_global_avgpool_backward)(REAL *dinp, const REAL *dout, int B, int C, int HW,
                                          cudaStream_t st) {
  MT_CUDA_ARG(B >= 0 && C >= 0 && HW >= 1, "sizes B=%d C=%d HW=%d", B, C, HW);
  const int64_t n = (int64_t)B * C * HW;
  if (n == 0) return 0;
  MT_T(gap_bwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, st>>>(dinp, dout, (REAL)1 / (REAL)HW, HW,
                                                            n);
  return MT_CUDA_LAUNCHED();
}
