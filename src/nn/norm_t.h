/* LayerNorm and BatchNorm2d, a template for REAL = float and double (norm.c). */

/* ------------------------------------------------------------- LayerNorm */

/* a row's outputs o[0..n) from its inputs x, mean mf and 1/std s */
static inline void MT_T(ln_out)(REAL *o, const REAL *x, REAL mf, REAL s, const REAL *weight,
                                const REAL *bias, int n) {
  if (weight && bias) {
#pragma omp simd
    for (int i = 0; i < n; i++) o[i] = (x[i] - mf) * s * weight[i] + bias[i];
  } else {
    for (int i = 0; i < n; i++) {
      REAL y = (x[i] - mf) * s;
      if (weight) y *= weight[i];
      if (bias) y += bias[i];
      o[i] = y;
    }
  }
}

void MT_T(mt_layernorm_forward_ex)(REAL *out, uint16_t *out_bf16, REAL *mean, REAL *rstd,
                                   const REAL *inp, const REAL *weight, const REAL *bias, int N,
                                   int C, REAL eps) {
  // inp and out are (N,C); weight and bias are (C); mean and rstd are (N)
  /* sums in double, in vector lanes (omp simd): a row's order is fixed by
   * the code alone, never by the threads */
#pragma omp parallel for schedule(static) if ((int64_t)N * C > 32768)
  for (int n = 0; n < N; n++) {
    const REAL *x = inp + (int64_t)n * C;
    double m = 0.0, v = 0.0;
#pragma omp simd reduction(+ : m)
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; i++) {
      const double d = x[i] - m;
      v += d * d;
    }
    v /= C;
    const REAL s = (REAL)(1.0 / sqrt(v + eps)), mf = (REAL)m;
    if (out_bf16) { /* through a piece of the row in L1, then bf16 */
      REAL piece[MT_BF16_PIECE];
      for (int i0 = 0; i0 < C; i0 += MT_BF16_PIECE) {
        const int k = C - i0 < MT_BF16_PIECE ? C - i0 : MT_BF16_PIECE;
        MT_T(ln_out)(piece, x + i0, mf, s, weight ? weight + i0 : NULL, bias ? bias + i0 : NULL,
                     k);
        MT_T(mt_to_bf16)(out_bf16 + (int64_t)n * C + i0, piece, k);
      }
    } else {
      MT_T(ln_out)(out + (int64_t)n * C, x, mf, s, weight, bias, C);
    }
    mean[n] = mf;
    rstd[n] = s;
  }
}

void MT_T(mt_layernorm_forward)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                                const REAL *weight, const REAL *bias, int N, int C, REAL eps) {
  MT_T(mt_layernorm_forward_ex)(out, NULL, mean, rstd, inp, weight, bias, N, C, eps);
}

void MT_T(mt_layernorm_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                 const REAL *inp, const REAL *weight, const REAL *mean,
                                 const REAL *rstd, int N, int C) {
  // dout and inp are (N,C); mean and rstd are (N); weight, dweight, dbias are (C)
  const int big = (int64_t)N * C > 32768;
  if (dinp) {
#pragma omp parallel for schedule(static) if (big)
    for (int n = 0; n < N; n++) {
      const REAL *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
      REAL *dx = dinp + (int64_t)n * C;
      const REAL m = mean[n], s = rstd[n];
      /* dnorm = dout * weight; dx = s * (dnorm - mean(dnorm) - xhat mean(dnorm xhat)) */
      double sd = 0.0, sdx = 0.0;
#pragma omp simd reduction(+ : sd, sdx)
      for (int i = 0; i < C; i++) {
        const REAL dn = weight ? d[i] * weight[i] : d[i];
        sd += dn;
        sdx += (double)dn * ((x[i] - m) * s);
      }
      const REAL md = (REAL)(sd / C), mdx = (REAL)(sdx / C);
#pragma omp simd
      for (int i = 0; i < C; i++) {
        const REAL dn = weight ? d[i] * weight[i] : d[i];
        const REAL xh = (x[i] - m) * s;
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
      const REAL *x = inp + (int64_t)n * C, *d = dout + (int64_t)n * C;
      const REAL m = mean[n], s = rstd[n];
      /* each lane its own channel (-O2 left this loop scalar) */
#pragma omp simd
      for (int i = c0; i < c1; i++) {
        aw[i - c0] += (double)d[i] * ((x[i] - m) * s);
        ab[i - c0] += d[i];
      }
    }
    for (int i = c0; i < c1; i++) {
      if (dweight) dweight[i] += (REAL)aw[i - c0];
      if (dbias) dbias[i] += (REAL)ab[i - c0];
    }
  }
}

/* ----------------------------------------------------------- BatchNorm2d */

int MT_T(mt_batchnorm2d_forward)(REAL *out, REAL *mean, REAL *rstd, REAL *running_mean,
                                 REAL *running_var, const REAL *inp, const REAL *weight,
                                 const REAL *bias, int B, int C, int HW, REAL eps, REAL momentum,
                                 int training) {
  // inp and out are (B,C,HW); mean, rstd, running_mean/var, weight, bias are (C)
  const int64_t n = (int64_t)B * HW;
  MT_CHECK(!training || n > 1, MT_ERR_ARG,
           "batchnorm2d: training needs more than one value per channel (B=%d, HW=%d)", B, HW);
#pragma omp parallel for schedule(static) if (n * C > 32768)
  for (int c = 0; c < C; c++) {
    REAL mf, s;
    if (training) {
      double m = 0.0, v = 0.0;
      for (int b = 0; b < B; b++) {
        const REAL *x = inp + ((int64_t)b * C + c) * HW;
        for (int i = 0; i < HW; i++) m += x[i];
      }
      m /= (double)n;
      for (int b = 0; b < B; b++) {
        const REAL *x = inp + ((int64_t)b * C + c) * HW;
        for (int i = 0; i < HW; i++) {
          const double d = x[i] - m;
          v += d * d;
        }
      }
      s = (REAL)(1.0 / sqrt(v / (double)n + eps));
      mf = (REAL)m;
      running_mean[c] = ((REAL)1 - momentum) * running_mean[c] + momentum * mf;
      running_var[c] = ((REAL)1 - momentum) * running_var[c] + momentum * (REAL)(v / (double)(n - 1));
    } else {
      mf = running_mean[c];
      s = (REAL)1 / MT_SQRT(running_var[c] + eps);
    }
    mean[c] = mf;
    rstd[c] = s;
    const REAL g = weight ? weight[c] * s : s, sh = bias ? bias[c] : (REAL)0;
    for (int b = 0; b < B; b++) {
      const REAL *x = inp + ((int64_t)b * C + c) * HW;
      REAL *o = out + ((int64_t)b * C + c) * HW;
      for (int i = 0; i < HW; i++) o[i] = (x[i] - mf) * g + sh;
    }
  }
  return 0;
}

void MT_T(mt_batchnorm2d_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                   const REAL *inp, const REAL *weight, const REAL *mean,
                                   const REAL *rstd, int B, int C, int HW, int training) {
  // dout and inp are (B,C,HW); weight, mean, rstd, dweight, dbias are (C)
  const int64_t n = (int64_t)B * HW;
#pragma omp parallel for schedule(static) if (n * C > 32768)
  for (int c = 0; c < C; c++) {
    const REAL m = mean[c], s = rstd[c];
    double sd = 0.0, sdx = 0.0; /* sum dout, sum dout * xhat */
    for (int b = 0; b < B; b++) {
      const REAL *x = inp + ((int64_t)b * C + c) * HW;
      const REAL *d = dout + ((int64_t)b * C + c) * HW;
      for (int i = 0; i < HW; i++) {
        sd += d[i];
        sdx += (double)d[i] * ((x[i] - m) * s);
      }
    }
    if (dweight) dweight[c] += (REAL)sdx;
    if (dbias) dbias[c] += (REAL)sd;
    if (!dinp) continue;
    const REAL g = weight ? weight[c] * s : s;
    /* training: dx = g * (dout - mean(dout) - xhat * mean(dout xhat));
     * eval: the statistics are constants, dx = g * dout */
    const REAL md = training ? (REAL)(sd / (double)n) : (REAL)0;
    const REAL mdx = training ? (REAL)(sdx / (double)n) : (REAL)0;
    for (int b = 0; b < B; b++) {
      const REAL *x = inp + ((int64_t)b * C + c) * HW;
      const REAL *d = dout + ((int64_t)b * C + c) * HW;
      REAL *dx = dinp + ((int64_t)b * C + c) * HW;
      for (int i = 0; i < HW; i++) dx[i] += g * (d[i] - md - (x[i] - m) * s * mdx);
    }
  }
}
