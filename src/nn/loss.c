/* Softmax cross-entropy. */
#include "nn/nn.h"

#include <math.h>

double mt_softmax_xent_forward(float *probs, float *losses, int64_t *correct,
                               const float *logits, const int32_t *y, int B, int C) {
  // logits, probs are (B,C); y is (B); losses is (B)
  double sum = 0.0;
  int64_t hits = 0;
  for (int i = 0; i < B; i++) {
    const float *l = logits + (size_t)i * C;
    float *p = probs + (size_t)i * C;
    int arg = 0;
    float mx = l[0];
    for (int j = 1; j < C; j++)
      if (l[j] > mx) {
        mx = l[j];
        arg = j;
      }
    double z = 0.0;
    for (int j = 0; j < C; j++) z += exp((double)(l[j] - mx));
    float inv = (float)(1.0 / z);
    for (int j = 0; j < C; j++) p[j] = expf(l[j] - mx) * inv;
    double loss = log(z) - (double)(l[y[i]] - mx);
    if (losses) losses[i] = (float)loss;
    sum += loss;
    hits += arg == y[i];
  }
  if (correct) *correct += hits;
  return sum;
}

void mt_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *y, float scale,
                              int B, int C) {
  for (int i = 0; i < B; i++) {
    const float *p = probs + (size_t)i * C;
    float *d = dlogits + (size_t)i * C;
    for (int j = 0; j < C; j++) d[j] += scale * p[j];
    d[y[i]] -= scale;
  }
}
