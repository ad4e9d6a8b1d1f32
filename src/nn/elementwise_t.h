/* Element-wise layers and the row-wise losses, a template for REAL = float
 * and double (elementwise.c). */

/* ------------------------------------------------------------------ GELU */

/* GELU's constants in the template's type (for float the values of the
 * f-suffixed literals the float-only code had) */
#define GELU_KAPPA ((REAL)0.044715)
#define GELU_BETA ((REAL)0.7978845608028654) /* sqrt(2/pi) */
#define INV_SQRT2 ((REAL)0.7071067811865476)
#define INV_SQRT_2PI ((REAL)0.3989422804014327)
/* The tanh form as x sigmoid(2u), u = beta (x + kappa x^3): 0.5 (1 + tanh u)
 * = 1 / (1 + e^-2u), one vectorisable exponential (MT_T(mt_vexp)) and no
 * cancellation at negative x. e^-2u is capped at e^80 (GELU is below 1e-33
 * in size there), so that the derivative's sigma^2 e^-2u stays finite. */
#define GELU_E(x) MT_T(mt_vexp)(MT_T(gelu_arg)(x))
static inline REAL MT_T(gelu_arg)(REAL x) {
  const REAL a = (REAL)-2 * GELU_BETA * (x + GELU_KAPPA * x * x * x);
  return a > (REAL)80 ? (REAL)80 : a;
}

void MT_T(mt_gelu_forward)(REAL *out, const REAL *inp, int64_t n, mt_gelu_kind kind) {
  if (kind == MT_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) {
      const REAL x = inp[i];
      out[i] = x / ((REAL)1 + GELU_E(x));
    }
  } else {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) {
      const REAL x = inp[i];
      out[i] = (REAL)0.5 * x * ((REAL)1 + MT_ERF(x * INV_SQRT2));
    }
  }
}

void MT_T(mt_gelu_forward_ex)(REAL *out, uint16_t *out_bf16, const REAL *inp, int64_t n,
                              mt_gelu_kind kind) {
  if (!out_bf16) {
    MT_T(mt_gelu_forward)(out, inp, n, kind);
    return;
  }
  /* pieces in L1, then bf16; each value computed as above */
#pragma omp parallel for schedule(static) if (n > EW_PAR)
  for (int64_t i0 = 0; i0 < n; i0 += MT_BF16_PIECE) {
    REAL piece[MT_BF16_PIECE];
    const int k = n - i0 < MT_BF16_PIECE ? (int)(n - i0) : MT_BF16_PIECE;
    const REAL *in = inp + i0;
    if (kind == MT_GELU_TANH) {
#pragma omp simd
      for (int i = 0; i < k; i++) piece[i] = in[i] / ((REAL)1 + GELU_E(in[i]));
    } else {
#pragma omp simd
      for (int i = 0; i < k; i++)
        piece[i] = (REAL)0.5 * in[i] * ((REAL)1 + MT_ERF(in[i] * INV_SQRT2));
    }
    MT_T(mt_to_bf16)(out_bf16 + i0, piece, k);
  }
}

/* gelu'(x), both forms */
static inline REAL MT_T(gelu_tanh_grad)(REAL x) {
  const REAL e = GELU_E(x), sg = (REAL)1 / ((REAL)1 + e);
  const REAL du = GELU_BETA * ((REAL)1 + (REAL)3 * GELU_KAPPA * x * x);
  /* (x sigma(2u))' = sigma + 2 x sigma (1 - sigma) u', 1 - sigma = e sigma */
  return sg + (REAL)2 * x * sg * sg * e * du;
}
static inline REAL MT_T(gelu_erf_grad)(REAL x) {
  const REAL cdf = (REAL)0.5 * ((REAL)1 + MT_ERF(x * INV_SQRT2));
  return cdf + x * INV_SQRT_2PI * MT_EXP((REAL)-0.5 * x * x);
}

void MT_T(mt_gelu_backward_ex)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                               mt_gelu_kind kind, unsigned flags) {
  /* one loop per form and mode, so that a set (=) never reads dinp */
  if (flags & MT_GELU_SET_DINP) {
    if (kind == MT_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
      for (int64_t i = 0; i < n; i++) dinp[i] = dout[i] * MT_T(gelu_tanh_grad)(inp[i]);
    } else {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
      for (int64_t i = 0; i < n; i++) dinp[i] = dout[i] * MT_T(gelu_erf_grad)(inp[i]);
    }
  } else if (kind == MT_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) dinp[i] += dout[i] * MT_T(gelu_tanh_grad)(inp[i]);
  } else {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) dinp[i] += dout[i] * MT_T(gelu_erf_grad)(inp[i]);
  }
}

void MT_T(mt_gelu_backward)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                            mt_gelu_kind kind) {
  MT_T(mt_gelu_backward_ex)(dinp, dout, inp, n, kind, 0);
}

/* -------------------------------------------------------------- residual */

void MT_T(mt_residual_forward)(REAL *out, const REAL *a, const REAL *b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void MT_T(mt_residual_backward)(REAL *da, REAL *db, const REAL *dout, int64_t n) {
  if (da) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) da[i] += dout[i];
  }
  if (db) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) db[i] += dout[i];
  }
}

/* --------------------------------------------------------------- dropout */

void MT_T(mt_dropout_forward)(REAL *out, uint8_t *mask, const REAL *inp, REAL p, uint64_t key,
                              uint64_t offset, int training, int64_t n) {
  if (!training || p <= (REAL)0) {
    if (out != inp) memmove(out, inp, (size_t)n * sizeof(REAL));
    if (mask) memset(mask, 1, (size_t)n);
    return;
  }
  if (p >= (REAL)1) { /* PyTorch: everything dropped, no division by zero */
    memset(out, 0, (size_t)n * sizeof(REAL));
    memset(mask, 0, (size_t)n);
    return;
  }
  const REAL scale = (REAL)1 / ((REAL)1 - p);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) {
    const uint8_t keep = mt_randu(key, offset + (uint64_t)i) >= p;
    mask[i] = keep;
    out[i] = keep ? inp[i] * scale : (REAL)0;
  }
}

void MT_T(mt_dropout_backward)(REAL *dinp, const REAL *dout, const uint8_t *mask, REAL p,
                               int64_t n) {
  if (!mask || p <= (REAL)0) {
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
    for (int64_t i = 0; i < n; i++) dinp[i] += dout[i];
    return;
  }
  if (p >= (REAL)1) return;
  const REAL scale = (REAL)1 / ((REAL)1 - p);
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
  for (int64_t i = 0; i < n; i++) dinp[i] += mask[i] ? dout[i] * scale : (REAL)0;
}

/* ---------------------------------------------------------------- losses */

int MT_T(mt_xent_ignore_forward)(REAL *probs, REAL *losses, double *loss_sum, int64_t *count,
                                 int64_t *correct, const REAL *logits, const int32_t *y,
                                 int ignore_index, int N, int C) {
  // logits and probs are (N,C); y and losses are (N)
  for (int i = 0; i < N; i++)
    MT_CHECK(y[i] == ignore_index || (y[i] >= 0 && y[i] < C), MT_ERR_DATA,
             "cross-entropy: label %d of row %d is outside [0,%d) and not the ignore index %d",
             (int)y[i], i, C, ignore_index);
  double sum = 0.0;
  int64_t cnt = 0, hits = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum, cnt, hits) if ((int64_t)N * C > 65536)
  for (int i = 0; i < N; i++) {
    const REAL *l = logits + (int64_t)i * C;
    REAL *p = probs + (int64_t)i * C;
    /* the largest logit and its first index, as a scalar `>` scan finds
     * them (NaNs skipped, or all NaN when l[0] is), in vector lanes */
    int arg = 0;
    REAL mx = l[0];
    if (mx == mx) {
#pragma omp simd reduction(max : mx)
      for (int j = 1; j < C; j++) mx = l[j] > mx ? l[j] : mx;
      while (l[arg] != mx) arg++;
    }
    const int counted = y[i] != ignore_index;
    const REAL ly = counted ? l[y[i]] : (REAL)0; /* read before p may overwrite l */
    double z = 0.0;
#pragma omp simd
    for (int j = 0; j < C; j++) p[j] = MT_T(mt_vexp)(l[j] - mx);
#pragma omp simd reduction(+ : z)
    for (int j = 0; j < C; j++) z += p[j];
    const REAL inv = (REAL)(1.0 / z);
#pragma omp simd
    for (int j = 0; j < C; j++) p[j] *= inv;
    const double loss = counted ? log(z) - (double)(ly - mx) : 0.0;
    if (losses) losses[i] = (REAL)loss;
    sum += loss;
    cnt += counted;
    hits += counted && arg == y[i];
  }
  *loss_sum = sum;
  *count = cnt;
  if (correct) *correct += hits;
  return 0;
}

void MT_T(mt_xent_ignore_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                   int ignore_index, REAL scale, int N, int C) {
  // probs and dlogits are (N,C); y is (N)
#pragma omp parallel for schedule(static) if ((int64_t)N * C > 65536)
  for (int i = 0; i < N; i++) {
    if (y[i] == ignore_index) continue;
    const REAL *p = probs + (int64_t)i * C;
    REAL *d = dlogits + (int64_t)i * C;
#pragma omp simd
    for (int j = 0; j < C; j++) d[j] += scale * p[j];
    d[y[i]] -= scale;
  }
}

double MT_T(mt_mse_forward)(REAL *losses, const REAL *pred, const REAL *target, int B, int K) {
  // pred and target are (B,K); losses is (B)
  double sum = 0.0;
  for (int i = 0; i < B; i++) {
    double s = 0.0;
    for (int k = 0; k < K; k++) {
      const double d = (double)pred[(int64_t)i * K + k] - target[(int64_t)i * K + k];
      s += d * d;
    }
    if (losses) losses[i] = (REAL)(s / K);
    sum += s;
  }
  return sum;
}

void MT_T(mt_mse_backward)(REAL *dpred, const REAL *pred, const REAL *target, REAL scale, int B,
                           int K) {
  const int64_t n = (int64_t)B * K;
  const REAL s2 = (REAL)2 * scale;
#pragma omp parallel for simd schedule(static) if (parallel : n > EW_PAR)
  for (int64_t i = 0; i < n; i++) dpred[i] += s2 * (pred[i] - target[i]);
}

#undef GELU_KAPPA
#undef GELU_BETA
#undef INV_SQRT2
#undef INV_SQRT_2PI
#undef GELU_E
