// LayerNorm and BatchNorm2d on the GPU, a template for REAL = float and
// double (norm.cu): nn/norm_t.h's expressions, its statistics and the
// reductions of its backward summed in double.
//  LayerNorm: inp, out, dout, dinp (N,C) row-major; mean, rstd (N);
//    weight, bias and their gradients (C). One block per row.
//  BatchNorm2d: inp, out, dout, dinp (B,C,HW); everything else (C). One
//    block per channel for its statistics and sums, then one thread per
//    element for the element-wise part.

namespace {

__global__ void MT_T(ln_fwd_k)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                               const REAL *weight, const REAL *bias, int C, REAL eps) {
  const int64_t n = blockIdx.x;
  const REAL *x = inp + n * C;
  REAL *o = out + n * C;
  double m = 0.0, v = 0.0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) m += x[i];
  m = mtc::block_sum(m) / C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const double d = x[i] - m;
    v += d * d;
  }
  v = mtc::block_sum(v) / C;
  const REAL s = (REAL)(1.0 / sqrt(v + eps)), mf = (REAL)m;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    REAL y = (x[i] - mf) * s;
    if (weight) y *= weight[i];
    if (bias) y += bias[i];
    o[i] = y;
  }
  if (threadIdx.x == 0) {
    mean[n] = mf;
    rstd[n] = s;
  }
}

// dinp += s (dn - mean(dn) - xhat mean(dn xhat)), dn = dout * weight
__global__ void MT_T(ln_bwd_k)(REAL *dinp, const REAL *dout, const REAL *inp, const REAL *weight,
                               const REAL *mean, const REAL *rstd, int C) {
  const int64_t n = blockIdx.x;
  const REAL *x = inp + n * C, *d = dout + n * C;
  REAL *dx = dinp + n * C;
  const REAL m = mean[n], s = rstd[n];
  double sd = 0.0, sdx = 0.0;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const REAL dn = weight ? d[i] * weight[i] : d[i];
    sd += dn;
    sdx += (double)dn * ((x[i] - m) * s);
  }
  sd = mtc::block_sum(sd);
  sdx = mtc::block_sum(sdx);
  const REAL md = (REAL)(sd / C), mdx = (REAL)(sdx / C);
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const REAL dn = weight ? d[i] * weight[i] : d[i];
    const REAL xh = (x[i] - m) * s;
    dx[i] += s * (dn - md - xh * mdx);
  }
}

// dweight's column-sum terms: dout * xhat, the product in double
struct MT_T(LnWeightLoad) {
  const REAL *dout, *inp, *mean, *rstd;
  int64_t C;
  __device__ double operator()(int64_t n, int64_t i) const {
    return (double)dout[n * C + i] * ((inp[n * C + i] - mean[n]) * rstd[n]);
  }
};

struct MT_T(LnBiasLoad) {
  const REAL *dout;
  int64_t C;
  __device__ double operator()(int64_t n, int64_t i) const { return (double)dout[n * C + i]; }
};

// Training statistics of channel c = blockIdx.x over its B*HW values:
// mean and rstd (biased variance), the running ones updated with the
// unbiased variance.
__global__ void MT_T(bn_stats_k)(REAL *mean, REAL *rstd, REAL *running_mean, REAL *running_var,
                                 const REAL *inp, int B, int C, int HW, REAL eps, REAL momentum) {
  const int c = blockIdx.x;
  const int64_t n = (int64_t)B * HW;
  double m = 0.0, v = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    m += inp[((j / HW) * C + c) * HW + j % HW];
  m = mtc::block_sum(m) / (double)n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const double d = inp[((j / HW) * C + c) * HW + j % HW] - m;
    v += d * d;
  }
  v = mtc::block_sum(v);
  if (threadIdx.x == 0) {
    const REAL s = (REAL)(1.0 / sqrt(v / (double)n + eps)), mf = (REAL)m;
    running_mean[c] = ((REAL)1 - momentum) * running_mean[c] + momentum * mf;
    running_var[c] =
        ((REAL)1 - momentum) * running_var[c] + momentum * (REAL)(v / (double)(n - 1));
    mean[c] = mf;
    rstd[c] = s;
  }
}

// eval: the running statistics
__global__ void MT_T(bn_eval_stats_k)(REAL *mean, REAL *rstd, const REAL *running_mean,
                                      const REAL *running_var, int C, REAL eps) {
  MT_GRID_STRIDE(c, C) {
    mean[c] = running_mean[c];
    rstd[c] = (REAL)1 / MT_SQRT(running_var[c] + eps);
  }
}

// out = (x - mean) g + shift, g = weight * rstd (or rstd), per channel
__global__ void MT_T(bn_norm_k)(REAL *out, const REAL *inp, const REAL *mean, const REAL *rstd,
                                const REAL *weight, const REAL *bias, int C, int HW, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const int c = (int)((i / HW) % C);
    const REAL g = weight ? weight[c] * rstd[c] : rstd[c], sh = bias ? bias[c] : (REAL)0;
    out[i] = (inp[i] - mean[c]) * g + sh;
  }
}

// Channel c's sums for the backward: dbias += sum dout, dweight += sum
// dout xhat; md, mdx (C) the means the input gradient needs in training
// (0 in eval, where the statistics are constants).
__global__ void MT_T(bn_bwd_sums_k)(REAL *dweight, REAL *dbias, REAL *md, REAL *mdx,
                                    const REAL *dout, const REAL *inp, const REAL *mean,
                                    const REAL *rstd, int B, int C, int HW, int training) {
  const int c = blockIdx.x;
  const int64_t n = (int64_t)B * HW;
  const REAL m = mean[c], s = rstd[c];
  double sd = 0.0, sdx = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const int64_t k = ((j / HW) * C + c) * HW + j % HW;
    sd += dout[k];
    sdx += (double)dout[k] * ((inp[k] - m) * s);
  }
  sd = mtc::block_sum(sd);
  sdx = mtc::block_sum(sdx);
  if (threadIdx.x == 0) {
    if (dweight) dweight[c] += (REAL)sdx;
    if (dbias) dbias[c] += (REAL)sd;
    md[c] = training ? (REAL)(sd / (double)n) : (REAL)0;
    mdx[c] = training ? (REAL)(sdx / (double)n) : (REAL)0;
  }
}

// dinp += g (dout - md - xhat mdx)
__global__ void MT_T(bn_bwd_dx_k)(REAL *dinp, const REAL *dout, const REAL *inp,
                                  const REAL *weight, const REAL *mean, const REAL *rstd,
                                  const REAL *md, const REAL *mdx, int C, int HW, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const int c = (int)((i / HW) % C);
    const REAL m = mean[c], s = rstd[c];
    const REAL g = weight ? weight[c] * s : s;
    dinp[i] += g * (dout[i] - md[c] - (inp[i] - m) * s * mdx[c]);
  }
}

} // namespace

int MT_T(mt_cuda_layernorm_forward)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                                    const REAL *weight, const REAL *bias, int N, int C, REAL eps,
                                    cudaStream_t s) {
  MT_CUDA_ARG(N >= 0 && C >= 1, "sizes N=%d C=%d", N, C);
  if (N == 0) return 0;
  MT_T(ln_fwd_k)<<<N, mtc::row_threads(C), 0, s>>>(out, mean, rstd, inp, weight, bias, C, eps);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_layernorm_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                     const REAL *inp, const REAL *weight, const REAL *mean,
                                     const REAL *rstd, int N, int C, mt_cuda_ctx *cx) {
  MT_CUDA_ARG(N >= 0 && C >= 1, "sizes N=%d C=%d", N, C);
  if (N == 0) return 0;
  if (dinp) {
    MT_T(ln_bwd_k)<<<N, mtc::row_threads(C), 0, cx->stream>>>(dinp, dout, inp, weight, mean, rstd,
                                                               C);
    MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  }
  if (!dweight && !dbias) return 0;
  double *part;
  MT_CUDA_TRY(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_REDUCE,
                              (size_t)(mtc::colsum_chunks(N) * C) * sizeof(double),
                              (void **)&part));
  if (dweight) {
    const MT_T(LnWeightLoad) load = {dout, inp, mean, rstd, C};
    MT_CUDA_RT(mtc::colsum(dweight, part, load, N, C, cx->stream));
  }
  if (dbias) {
    const MT_T(LnBiasLoad) load = {dout, C};
    MT_CUDA_RT(mtc::colsum(dbias, part, load, N, C, cx->stream));
  }
  return 0;
}

int MT_T(mt_cuda_batchnorm2d_forward)(REAL *out, REAL *mean, REAL *rstd, REAL *running_mean,
                                      REAL *running_var, const REAL *inp, const REAL *weight,
                                      const REAL *bias, int B, int C, int HW, REAL eps,
                                      REAL momentum, int training, mt_cuda_ctx *cx) {
  const int64_t n = (int64_t)B * HW;
  MT_CUDA_ARG(B >= 0 && C >= 1 && HW >= 1, "sizes B=%d C=%d HW=%d", B, C, HW);
  if (training && n <= 1)
    return mt_cuda_fail(__FILE__, __LINE__, __func__, MT_CUDA_ERR_ARG,
                        "batchnorm2d: training needs more than one value per channel (B=%d, "
                        "HW=%d)",
                        B, HW);
  if (training)
    MT_T(bn_stats_k)<<<C, 512, 0, cx->stream>>>(mean, rstd, running_mean, running_var, inp, B, C,
                                                HW, eps, momentum);
  else
    MT_T(bn_eval_stats_k)<<<mtc::grid_for(C), mtc::kBlock, 0, cx->stream>>>(
        mean, rstd, running_mean, running_var, C, eps);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  if (n == 0) return 0;
  MT_T(bn_norm_k)<<<mtc::grid_for(n * C), mtc::kBlock, 0, cx->stream>>>(out, inp, mean, rstd,
                                                                        weight, bias, C, HW,
                                                                        n * C);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_batchnorm2d_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                       const REAL *inp, const REAL *weight, const REAL *mean,
                                       const REAL *rstd, int B, int C, int HW, int training,
                                       mt_cuda_ctx *cx) {
  const int64_t n = (int64_t)B * HW;
  MT_CUDA_ARG(B >= 0 && C >= 1 && HW >= 1, "sizes B=%d C=%d HW=%d", B, C, HW);
  if (n == 0) return 0;
  REAL *md;
  MT_CUDA_TRY(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_REDUCE, 2 * (size_t)C * sizeof(REAL),
                              (void **)&md));
  MT_T(bn_bwd_sums_k)<<<C, 512, 0, cx->stream>>>(dweight, dbias, md, md + C, dout, inp, mean,
                                                 rstd, B, C, HW, training);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  if (!dinp) return 0;
  MT_T(bn_bwd_dx_k)<<<mtc::grid_for(n * C), mtc::kBlock, 0, cx->stream>>>(
      dinp, dout, inp, weight, mean, rstd, md, md + C, C, HW, n * C);
  return MT_CUDA_LAUNCHED();
}
