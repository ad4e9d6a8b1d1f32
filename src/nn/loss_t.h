/* Softmax cross-entropy, a template for REAL = float and double (loss.c). */

double MT_T(mt_softmax_xent_forward)(REAL *probs, REAL *losses, int64_t *correct,
                                     const REAL *logits, const int32_t *y, int B, int C) {
  // logits, probs are (B,C); y is (B); losses is (B)
  double sum = 0.0;
  int64_t hits = 0;
  for (int i = 0; i < B; i++) {
    const REAL *l = logits + (size_t)i * C;
    REAL *p = probs + (size_t)i * C;
    int arg = 0;
    REAL mx = l[0];
    for (int j = 1; j < C; j++)
      if (l[j] > mx) {
        mx = l[j];
        arg = j;
      }
    double z = 0.0;
    for (int j = 0; j < C; j++) z += exp((double)(l[j] - mx));
    REAL inv = (REAL)(1.0 / z);
    for (int j = 0; j < C; j++) p[j] = MT_EXP(l[j] - mx) * inv;
    double loss = log(z) - (double)(l[y[i]] - mx);
    if (losses) losses[i] = (REAL)loss;
    sum += loss;
    hits += arg == y[i];
  }
  if (correct) *correct += hits;
  return sum;
}

void MT_T(mt_softmax_xent_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                    REAL scale, int B, int C) {
  for (int i = 0; i < B; i++) {
    const REAL *p = probs + (size_t)i * C;
    REAL *d = dlogits + (size_t)i * C;
    for (int j = 0; j < C; j++) d[j] += scale * p[j];
    d[y[i]] -= scale;
  }
}
