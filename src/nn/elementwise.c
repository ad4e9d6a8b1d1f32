/* Element-wise layers (GELU, residual add, dropout) and the row-wise losses
 * of the GPT and regression models (cross-entropy with an ignore label,
 * mean-squared error). */
#include "core/core.h"
#include "nn/fastmath.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>
#include <string.h>

#define EW_PAR 262144 /* elements below which a loop stays serial */

/* ------------------------------------------------------------------ GELU */

#define GELU_KAPPA 0.044715f
#define GELU_BETA 0.7978845608028654f /* sqrt(2/pi) */
#define INV_SQRT2 0.7071067811865476f
#define INV_SQRT_2PI 0.3989422804014327f

void mt_gelu_forward(float *out, const float *inp, int64_t n, mt_gelu_kind kind) {
  if (kind == MT_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + mt_tanhf(GELU_BETA * (x + GELU_KAPPA * x * x * x)));
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + erff(x * INV_SQRT2));
    }
  }
}

void mt_gelu_backward(float *dinp, const float *dout, const float *inp, int64_t n,
                      mt_gelu_kind kind) {
  if (kind == MT_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) {
      const float x = inp[i];
      const float th = mt_tanhf(GELU_BETA * (x + GELU_KAPPA * x * x * x));
      const float dinner = GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * x * x);
      dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dinner);
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) {
      const float x = inp[i];
      const float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
      const float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
      dinp[i] += dout[i] * (cdf + x * pdf);
    }
  }
}

/* -------------------------------------------------------------- residual */

void mt_residual_forward(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void mt_residual_backward(float *da, float *db, const float *dout, int64_t n) {
  if (da) {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) da[i] += dout[i];
  }
  if (db) {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) db[i] += dout[i];
  }
}

/* --------------------------------------------------------------- dropout */

/* Purposes of mt_key in use: 1 sampler, 2 parameter init, 3 dropout. */
#define MT_PURPOSE_DROPOUT 3

uint64_t mt_dropout_key(uint64_t seed, uint64_t step, int rank, int layer) {
  const uint64_t k = mt_key(seed, MT_PURPOSE_DROPOUT, step);
  return mt_key(k, (uint64_t)(uint32_t)layer + 1, (uint64_t)(uint32_t)rank);
}

void mt_dropout_forward(float *out, uint8_t *mask, const float *inp, float p, uint64_t key,
                        uint64_t offset, int training, int64_t n) {
  if (!training || p <= 0.0f) {
    if (out != inp) memmove(out, inp, (size_t)n * sizeof(float));
    if (mask) memset(mask, 1, (size_t)n);
    return;
  }
  if (p >= 1.0f) { /* PyTorch: everything dropped, no division by zero */
    memset(out, 0, (size_t)n * sizeof(float));
    memset(mask, 0, (size_t)n);
    return;
  }
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; i++) {
    const uint8_t keep = mt_randu(key, offset + (uint64_t)i) >= p;
    mask[i] = keep;
    out[i] = keep ? inp[i] * scale : 0.0f;
  }
}

void mt_dropout_backward(float *dinp, const float *dout, const uint8_t *mask, float p, int64_t n) {
  if (!mask || p <= 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
    for (int64_t i = 0; i < n; i++) dinp[i] += dout[i];
    return;
  }
  if (p >= 1.0f) return;
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
  for (int64_t i = 0; i < n; i++) dinp[i] += mask[i] ? dout[i] * scale : 0.0f;
}

/* ---------------------------------------------------------------- losses */

int mt_xent_ignore_forward(float *probs, float *losses, double *loss_sum, int64_t *count,
                           int64_t *correct, const float *logits, const int32_t *y,
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
    const float *l = logits + (int64_t)i * C;
    float *p = probs + (int64_t)i * C;
    int arg = 0;
    float mx = l[0];
    for (int j = 1; j < C; j++)
      if (l[j] > mx) {
        mx = l[j];
        arg = j;
      }
    const int counted = y[i] != ignore_index;
    const float ly = counted ? l[y[i]] : 0.0f; /* read before p may overwrite l */
    double z = 0.0;
    for (int j = 0; j < C; j++) {
      p[j] = expf(l[j] - mx);
      z += p[j];
    }
    const float inv = (float)(1.0 / z);
    for (int j = 0; j < C; j++) p[j] *= inv;
    const double loss = counted ? log(z) - (double)(ly - mx) : 0.0;
    if (losses) losses[i] = (float)loss;
    sum += loss;
    cnt += counted;
    hits += counted && arg == y[i];
  }
  *loss_sum = sum;
  *count = cnt;
  if (correct) *correct += hits;
  return 0;
}

void mt_xent_ignore_backward(float *dlogits, const float *probs, const int32_t *y, int ignore_index,
                             float scale, int N, int C) {
  // probs and dlogits are (N,C); y is (N)
#pragma omp parallel for schedule(static) if ((int64_t)N * C > 65536)
  for (int i = 0; i < N; i++) {
    if (y[i] == ignore_index) continue;
    const float *p = probs + (int64_t)i * C;
    float *d = dlogits + (int64_t)i * C;
    for (int j = 0; j < C; j++) d[j] += scale * p[j];
    d[y[i]] -= scale;
  }
}

double mt_mse_forward(float *losses, const float *pred, const float *target, int B, int K) {
  // pred and target are (B,K); losses is (B)
  double sum = 0.0;
  for (int i = 0; i < B; i++) {
    double s = 0.0;
    for (int k = 0; k < K; k++) {
      const double d = (double)pred[(int64_t)i * K + k] - target[(int64_t)i * K + k];
      s += d * d;
    }
    if (losses) losses[i] = (float)(s / K);
    sum += s;
  }
  return sum;
}

void mt_mse_backward(float *dpred, const float *pred, const float *target, float scale, int B,
                     int K) {
  const int64_t n = (int64_t)B * K;
  const float s2 = 2.0f * scale;
#pragma omp parallel for simd schedule(static) if (n > EW_PAR)
  for (int64_t i = 0; i < n; i++) dpred[i] += s2 * (pred[i] - target[i]);
}
