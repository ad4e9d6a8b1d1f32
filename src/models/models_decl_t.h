/* The models' helpers, declared for REAL = float (plain names) and double
 * (_f64) by models.h through core/real_t.h. */

/* The per-sample outputs st asks for (pred = argmax; logits into st->logits
 * for float, st->logits64 for double) from a classifier's logits (B, C);
 * model names the model in errors. */
int MT_T(mt_model_put_outputs)(const char *model, mt_batch_stats *st, const REAL *logits, int B,
                               int C);

/* Dropout of a batch's rows x (b->n, row_len), in place, only in a training
 * pass (b->train) with p > 0: row i's mask is drawn from the key
 * (b->key, layer, b->ids[i]) (see mt_batch), so it is the same for a sample
 * whatever rank, thread or micro-batch computes it; mask (b->n, row_len)
 * records it. Backward in place on the gradient d: d = d * mask / (1 - p)
 * (a no-op for p <= 0; call it only after a training forward). */
void MT_T(mt_model_dropout)(REAL *x, uint8_t *mask, REAL p, const mt_batch *b, int layer,
                            int64_t row_len);
void MT_T(mt_model_dropout_backward)(REAL *d, const uint8_t *mask, REAL p, int64_t n);

/* The per-sample logits st asks for, in the model's type: st->logits
 * (float) or st->logits64 (double); NULL when not asked for. */
static inline REAL *MT_T(mt_model_logits)(const mt_batch_stats *st) {
#if MT_F64
  return st->logits64;
#else
  return st->logits;
#endif
}

/* n float values of a batch (inputs x, regression targets) as the model's
 * type: x itself for float; for double widened into scratch (n values),
 * which is returned. */
const REAL *MT_T(mt_model_input)(REAL *scratch, const float *x, int64_t n);

/* Holds x (n values) in t when held says so (mt_model_holds_begin); the
 * double model holds nothing. */
static inline void MT_T(mt_model_hold)(int held, mt_nn_holds *t, const mt_nn_policy *pol,
                                       const REAL *x, int64_t n) {
#if MT_F64
  (void)held, (void)t, (void)pol, (void)x, (void)n;
#else
  if (held) mt_nn_hold(t, pol, x, (size_t)n);
#endif
}

/* For x's producer (mt_layernorm_forward_ex, mt_gelu_forward_ex): the bf16
 * copy of x to write in t when held says so and the policy takes it
 * (mt_nn_hold_out), then x itself is not written; NULL otherwise (the
 * double model's too): write x, then MT_T(mt_model_hold) it. */
static inline uint16_t *MT_T(mt_model_hold_out)(int held, mt_nn_holds *t,
                                                const mt_nn_policy *pol, const REAL *x,
                                                int64_t n) {
#if MT_F64
  (void)held, (void)t, (void)pol, (void)x, (void)n;
  return NULL;
#else
  return held ? mt_nn_hold_out(t, pol, x, (size_t)n) : NULL;
#endif
}
