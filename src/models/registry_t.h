/* The models' helpers (models_decl_t.h), a template for REAL = float and
 * double (registry.c). */

int MT_T(mt_model_put_outputs)(const char *model, mt_batch_stats *st, const REAL *logits, int B,
                               int C) {
  REAL *out = MT_T(mt_model_logits)(st);
  if (out) {
    MT_CHECK(st->logits_len == C, MT_ERR_ARG,
             "model %s: logits rows of %d asked for, it has %d classes", model, st->logits_len, C);
    memcpy(out, logits, (size_t)B * C * sizeof(REAL));
  }
  for (int i = 0; st->pred && i < B; i++) {
    const REAL *l = logits + (size_t)i * C;
    int arg = 0;
    for (int j = 1; j < C; j++)
      if (l[j] > l[arg]) arg = j;
    st->pred[i] = arg;
  }
  return 0;
}

void MT_T(mt_model_dropout)(REAL *x, uint8_t *mask, REAL p, const mt_batch *b, int layer,
                            int64_t row_len) {
  if (!b->train || p <= (REAL)0) return;
  for (int i = 0; i < b->n; i++) {
    uint64_t id = b->ids ? (uint64_t)b->ids[i] : (uint64_t)i;
    uint64_t key = mt_key(b->key, (uint64_t)layer + 1, id);
    REAL *r = x + (int64_t)i * row_len;
    MT_T(mt_dropout_forward)(r, mask + (int64_t)i * row_len, r, p, key, 0, 1, row_len);
  }
}

void MT_T(mt_model_dropout_backward)(REAL *d, const uint8_t *mask, REAL p, int64_t n) {
  if (p <= (REAL)0) return;
  const REAL scale = p < (REAL)1 ? (REAL)1 / ((REAL)1 - p) : (REAL)0;
#pragma omp simd
  for (int64_t i = 0; i < n; i++) d[i] = mask[i] ? d[i] * scale : (REAL)0;
}

const REAL *MT_T(mt_model_input)(REAL *scratch, const float *x, int64_t n) {
#if MT_F64
  for (int64_t i = 0; i < n; i++) scratch[i] = x[i];
  return scratch;
#else
  (void)scratch, (void)n;
  return x;
#endif
}
