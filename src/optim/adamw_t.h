/* torch.optim.AdamW on a flat buffer, one loop per tensor; a template for
 * REAL = float and double (adamw.c). */

void MT_T(mt_adamw_state_free)(MT_T(mt_adamw_state) *s) {
  if (!s) return;
  mt_free(&s->exp_avg);
  mt_free(&s->exp_avg_sq);
  mt_free(&s->max_exp_avg_sq);
  s->n = 0;
  s->step = 0;
}

int MT_T(mt_adamw_state_init)(MT_T(mt_adamw_state) *s, size_t n, int amsgrad) {
  s->exp_avg = s->exp_avg_sq = s->max_exp_avg_sq = NULL;
  s->n = 0;
  s->step = 0;
  MT_CHECK(n > 0, MT_ERR_ARG, "AdamW state for an empty parameter buffer");
  int rc = mt_calloc(&s->exp_avg, n, sizeof(REAL), "AdamW exp_avg");
  if (!rc) rc = mt_calloc(&s->exp_avg_sq, n, sizeof(REAL), "AdamW exp_avg_sq");
  if (!rc && amsgrad) rc = mt_calloc(&s->max_exp_avg_sq, n, sizeof(REAL), "AdamW max_exp_avg_sq");
  if (rc) {
    MT_T(mt_adamw_state_free)(s);
    MT_CALL(rc);
  }
  s->n = n;
  return 0;
}

/* The scalars of one step, formed in double as PyTorch does in Python and
 * rounded to the buffers' type once, as its kernels do with a Python
 * scalar. */
typedef struct {
  REAL beta1, beta2, one_minus_beta1, one_minus_beta2;
  REAL step_size; /* lr / (1 - beta1^k)                                    */
  REAL bc2_sqrt;  /* sqrt(1 - beta2^k)                                     */
  REAL eps;
} MT_T(adamw_coef);

/* One tensor of n elements. decay = 1 - lr * wd (1 when not decayed). */
static void MT_T(adamw_tensor)(REAL *restrict p, const REAL *restrict g, REAL *restrict m,
                               REAL *restrict v, size_t n, REAL decay, const MT_T(adamw_coef) *c) {
  const REAL b1 = c->beta1, b2 = c->beta2, a1 = c->one_minus_beta1, a2 = c->one_minus_beta2;
  const REAL step_size = c->step_size, bc2 = c->bc2_sqrt, eps = c->eps;
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
  for (size_t i = 0; i < n; i++) {
    const REAL gi = g[i];
    const REAL mi = b1 * m[i] + a1 * gi;
    const REAL vi = b2 * v[i] + a2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * (mi / (MT_SQRT(vi) / bc2 + eps));
  }
}

/* The same with amsgrad's running maximum of v. */
static void MT_T(adamw_tensor_amsgrad)(REAL *restrict p, const REAL *restrict g, REAL *restrict m,
                                       REAL *restrict v, REAL *restrict vmax, size_t n, REAL decay,
                                       const MT_T(adamw_coef) *c) {
  const REAL b1 = c->beta1, b2 = c->beta2, a1 = c->one_minus_beta1, a2 = c->one_minus_beta2;
  const REAL step_size = c->step_size, bc2 = c->bc2_sqrt, eps = c->eps;
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
  for (size_t i = 0; i < n; i++) {
    const REAL gi = g[i];
    const REAL mi = b1 * m[i] + a1 * gi;
    const REAL vi = b2 * v[i] + a2 * gi * gi;
    const REAL mx = vmax[i] > vi ? vmax[i] : vi;
    m[i] = mi;
    v[i] = vi;
    vmax[i] = mx;
    p[i] = p[i] * decay - step_size * (mi / (MT_SQRT(mx) / bc2 + eps));
  }
}

int MT_T(mt_adamw_step)(const mt_param_table *t, REAL *params, const REAL *grads,
                        MT_T(mt_adamw_state) *s, const mt_adamw_hparams *h, int all_decay,
                        double lr) {
  MT_CALL(mt_adamw_check(h));
  MT_CHECK(s->exp_avg && s->exp_avg_sq, MT_ERR_ARG, "AdamW state not initialised");
  MT_CHECK(!h->amsgrad || s->max_exp_avg_sq, MT_ERR_ARG,
           "AdamW with amsgrad needs a state made with amsgrad");
  MT_CHECK(s->n >= t->total, MT_ERR_ARG, "AdamW state of %zu values for %zu parameters", s->n,
           t->total);
  MT_CHECK(isfinite(lr) && lr >= 0.0, MT_ERR_ARG, "AdamW learning rate %g", lr);

  const long k = ++s->step;
  const double bc1 = 1.0 - pow(h->beta1, (double)k);
  const double bc2 = 1.0 - pow(h->beta2, (double)k);
  const MT_T(adamw_coef) c = {.beta1 = (REAL)h->beta1,
                              .beta2 = (REAL)h->beta2,
                              .one_minus_beta1 = (REAL)(1.0 - h->beta1),
                              .one_minus_beta2 = (REAL)(1.0 - h->beta2),
                              .step_size = (REAL)(lr / bc1),
                              .bc2_sqrt = (REAL)sqrt(bc2),
                              .eps = (REAL)h->eps};
  const REAL decay_on = (REAL)(1.0 - lr * h->weight_decay);
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    const size_t o = q->offset;
    const REAL decay = (all_decay || q->decay) ? decay_on : (REAL)1;
    if (h->amsgrad)
      MT_T(adamw_tensor_amsgrad)(params + o, grads + o, s->exp_avg + o, s->exp_avg_sq + o,
                                 s->max_exp_avg_sq + o, q->numel, decay, &c);
    else
      MT_T(adamw_tensor)(params + o, grads + o, s->exp_avg + o, s->exp_avg_sq + o, q->numel, decay,
                         &c);
  }
  return 0;
}
