/* LayerNorm over the last dimension and BatchNorm2d (training and eval).
 * Statistics and the reductions of the backward are summed in double: a
 * BatchNorm channel of a 128-image batch of 28x28 maps sums 10^5 values. */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>

/* ------------------------------------------------------------- LayerNorm */

void mt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps) {
  // inp and out are (N,C); weight and bias are (C); mean and rstd are (N)
#pragma omp parallel for schedule(static) if ((int64_t)N * C > 32768)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (int64_t)n * C;
    float *o = out + (int64_t)n * C;
    double m = 0.0, v = 0.0;
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;
    for (int i = 0; i < C; i++) {
      const double d = x[i] - m;
      v += d * d;
    }
    v /= C;
    const float s = (float)(1.0 / sqrt(v + eps)), mf = (float)m;
    for (int i = 0; i < C; i++) {
      float y = (x[i] - mf) * s;
      if (weight) y *= weight[i];
      if (bias) y += bias[i];
      o[i] = y;
    }
    mean[n] = mf;
    rstd[n] = s;
  }
}

void mt_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int N, int C) {
  // dout and inp are (N,C); mean and rstd are (N); weight, dweight, dbias are (C)
  const int big = (int64_t)N * C > 32768;
  if (dinp) {
#pragma omp parallel for schedule(static) if (big)
    for (int n = 0; n < N; n++) {
      const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
      float *dx = dinp + (int64_t)n * C;
      const float m = mean[n], s = rstd[n];
      /* dnorm = dout * weight; dx = s * (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) */
      double sd = 0.0, sdx = 0.0;
      for (int i = 0; i < C; i++) {
        const float dn = weight ? d[i] * weight[i] : d[i];
        sd += dn;
        sdx += (double)dn * ((x[i] - m) * s);
      }
      const float md = (float)(sd / C), mdx = (float)(sdx / C);
      for (int i = 0; i < C; i++) {
        const float dn = weight ? d[i] * weight[i] : d[i];
        const float xh = (x[i] - m) * s;
        dx[i] += s * (dn - md - xh * mdx);
      }
    }
  }
  if (!dweight && !dbias) return;
  /* column blocks: each thread owns a range of channels, rows read in order */
  enum { CB = 64 };
#pragma omp parallel for schedule(static) if (big)
  for (int c0 = 0; c0 < C; c0 += CB) {
    const int c1 = c0 + CB < C ? c0 + CB : C;
    double aw[CB] = {0}, ab[CB] = {0};
    for (int n = 0; n < N; n++) {
      const float *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
      const float m = mean[n], s = rstd[n];
      for (int i = c0; i < c1; i++) {
        aw[i - c0] += (double)d[i] * ((x[i] - m) * s);
        ab[i - c0] += d[i];
      }
    }
    for (int i = c0; i < c1; i++) {
      if (dweight) dweight[i] += (float)aw[i - c0];
      if (dbias) dbias[i] += (float)ab[i - c0];
    }
  }
}

/* ----------------------------------------------------------- BatchNorm2d */

int mt_batchnorm2d_forward(float *out, float *mean, float *rstd, float *running_mean,
                           float *running_var, const float *inp, const float *weight,
                           const float *bias, int B, int C, int HW, float eps, float momentum,
                           int training) {
  // inp and out are (B,C,HW); mean, rstd, running_mean/var, weight, bias are (C)
  const int64_t n = (int64_t)B * HW;
  MT_CHECK(!training || n > 1, MT_ERR_ARG,
           "batchnorm2d: training needs more than one value per channel (B=%d, HW=%d)", B, HW);
#pragma omp parallel for schedule(static) if (n * C > 32768)
  for (int c = 0; c < C; c++) {
    float mf, s;
    if (training) {
      double m = 0.0, v = 0.0;
      for (int b = 0; b < B; b++) {
        const float *x = inp + ((int64_t)b * C + c) * HW;
        for (int i = 0; i < HW; i++) m += x[i];
      }
      m /= (double)n;
      for (int b = 0; b < B; b++) {
        const float *x = inp + ((int64_t)b * C + c) * HW;
        for (int i = 0; i < HW; i++) {
          const double d = x[i] - m;
          v += d * d;
        }
      }
      s = (float)(1.0 / sqrt(v / (double)n + eps));
      mf = (float)m;
      running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mf;
      running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (float)(v / (double)(n - 1));
    } else {
      mf = running_mean[c];
      s = 1.0f / sqrtf(running_var[c] + eps);
    }
    mean[c] = mf;
    rstd[c] = s;
    const float g = weight ? weight[c] * s : s, sh = bias ? bias[c] : 0.0f;
    for (int b = 0; b < B; b++) {
      const float *x = inp + ((int64_t)b * C + c) * HW;
      float *o = out + ((int64_t)b * C + c) * HW;
      for (int i = 0; i < HW; i++) o[i] = (x[i] - mf) * g + sh;
    }
  }
  return 0;
}

void mt_batchnorm2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int B, int C, int HW, int training) {
  // dout and inp are (B,C,HW); weight, mean, rstd, dweight, dbias are (C)
  const int64_t n = (int64_t)B * HW;
#pragma omp parallel for schedule(static) if (n * C > 32768)
  for (int c = 0; c < C; c++) {
    const float m = mean[c], s = rstd[c];
    double sd = 0.0, sdx = 0.0; /* sum dout, sum dout * xhat */
    for (int b = 0; b < B; b++) {
      const float *x = inp + ((int64_t)b * C + c) * HW;
      const float *d = dout + ((int64_t)b * C + c) * HW;
      for (int i = 0; i < HW; i++) {
        sd += d[i];
        sdx += (double)d[i] * ((x[i] - m) * s);
      }
    }
    if (dweight) dweight[c] += (float)sdx;
    if (dbias) dbias[c] += (float)sd;
    if (!dinp) continue;
    const float g = weight ? weight[c] * s : s;
    /* training: dx = g * (dout - mean(dout) - xhat * mean(dout xhat));
     * eval: the statistics are constants, dx = g * dout */
    const float md = training ? (float)(sd / (double)n) : 0.0f;
    const float mdx = training ? (float)(sdx / (double)n) : 0.0f;
    for (int b = 0; b < B; b++) {
      const float *x = inp + ((int64_t)b * C + c) * HW;
      const float *d = dout + ((int64_t)b * C + c) * HW;
      float *dx = dinp + ((int64_t)b * C + c) * HW;
      for (int i = 0; i < HW; i++) dx[i] += g * (d[i] - md - (x[i] - m) * s * mdx);
    }
  }
}
