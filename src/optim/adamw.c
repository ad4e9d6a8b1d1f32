/* torch.optim.AdamW on a flat buffer, one loop per tensor. */
#include "optim/optim.h"

#include <math.h>

mt_adamw_hparams mt_adamw_defaults(void) {
  return (mt_adamw_hparams){.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2,
                            .amsgrad = 0};
}

int mt_adamw_check(const mt_adamw_hparams *h) {
  MT_CHECK(h->beta1 >= 0.0 && h->beta1 < 1.0, MT_ERR_OPTION,
           "-adam_beta1 %g: must be in [0, 1)", h->beta1);
  MT_CHECK(h->beta2 >= 0.0 && h->beta2 < 1.0, MT_ERR_OPTION,
           "-adam_beta2 %g: must be in [0, 1)", h->beta2);
  MT_CHECK(h->eps >= 0.0 && isfinite(h->eps), MT_ERR_OPTION, "-adam_eps %g: must be >= 0",
           h->eps);
  MT_CHECK(h->weight_decay >= 0.0 && isfinite(h->weight_decay), MT_ERR_OPTION,
           "-weight_decay %g: must be >= 0", h->weight_decay);
  return 0;
}

void mt_adamw_state_free(mt_adamw_state *s) {
  if (!s) return;
  mt_free(&s->exp_avg);
  mt_free(&s->exp_avg_sq);
  mt_free(&s->max_exp_avg_sq);
  s->n = 0;
  s->step = 0;
}

int mt_adamw_state_init(mt_adamw_state *s, size_t n, int amsgrad) {
  s->exp_avg = s->exp_avg_sq = s->max_exp_avg_sq = NULL;
  s->n = 0;
  s->step = 0;
  MT_CHECK(n > 0, MT_ERR_ARG, "AdamW state for an empty parameter buffer");
  int rc = mt_calloc(&s->exp_avg, n, sizeof(float), "AdamW exp_avg");
  if (!rc) rc = mt_calloc(&s->exp_avg_sq, n, sizeof(float), "AdamW exp_avg_sq");
  if (!rc && amsgrad) rc = mt_calloc(&s->max_exp_avg_sq, n, sizeof(float), "AdamW max_exp_avg_sq");
  if (rc) {
    mt_adamw_state_free(s);
    MT_CALL(rc);
  }
  s->n = n;
  return 0;
}

/* The scalars of one step, formed in double as PyTorch does in Python and
 * rounded to float once, as its kernels do with a Python scalar. */
typedef struct {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size; /* lr / (1 - beta1^k)                                   */
  float bc2_sqrt;  /* sqrt(1 - beta2^k)                                    */
  float eps;
} adamw_coef;

/* One tensor of n elements. decay = 1 - lr * wd (1 when not decayed). */
static void adamw_tensor(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, size_t n, float decay, const adamw_coef *c) {
  const float b1 = c->beta1, b2 = c->beta2, a1 = c->one_minus_beta1, a2 = c->one_minus_beta2;
  const float step_size = c->step_size, bc2 = c->bc2_sqrt, eps = c->eps;
#pragma omp parallel for simd schedule(static) if (n > 262144)
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i];
    const float mi = b1 * m[i] + a1 * gi;
    const float vi = b2 * v[i] + a2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * (mi / (sqrtf(vi) / bc2 + eps));
  }
}

/* The same with amsgrad's running maximum of v. */
static void adamw_tensor_amsgrad(float *restrict p, const float *restrict g, float *restrict m,
                                 float *restrict v, float *restrict vmax, size_t n, float decay,
                                 const adamw_coef *c) {
  const float b1 = c->beta1, b2 = c->beta2, a1 = c->one_minus_beta1, a2 = c->one_minus_beta2;
  const float step_size = c->step_size, bc2 = c->bc2_sqrt, eps = c->eps;
#pragma omp parallel for simd schedule(static) if (n > 262144)
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i];
    const float mi = b1 * m[i] + a1 * gi;
    const float vi = b2 * v[i] + a2 * gi * gi;
    const float mx = vmax[i] > vi ? vmax[i] : vi;
    m[i] = mi;
    v[i] = vi;
    vmax[i] = mx;
    p[i] = p[i] * decay - step_size * (mi / (sqrtf(mx) / bc2 + eps));
  }
}

int mt_adamw_step(const mt_param_table *t, float *params, const float *grads, mt_adamw_state *s,
                  const mt_adamw_hparams *h, int all_decay, double lr) {
  MT_CALL(mt_adamw_check(h));
  MT_CHECK(s->exp_avg && s->exp_avg_sq, MT_ERR_ARG, "AdamW state not initialised");
  MT_CHECK(!h->amsgrad || s->max_exp_avg_sq, MT_ERR_ARG,
           "AdamW with amsgrad needs a state made with amsgrad");
  MT_CHECK(s->n >= t->total, MT_ERR_ARG, "AdamW state of %zu floats for %zu parameters", s->n,
           t->total);
  MT_CHECK(isfinite(lr) && lr >= 0.0, MT_ERR_ARG, "AdamW learning rate %g", lr);

  const long k = ++s->step;
  const double bc1 = 1.0 - pow(h->beta1, (double)k);
  const double bc2 = 1.0 - pow(h->beta2, (double)k);
  const adamw_coef c = {.beta1 = (float)h->beta1,
                        .beta2 = (float)h->beta2,
                        .one_minus_beta1 = (float)(1.0 - h->beta1),
                        .one_minus_beta2 = (float)(1.0 - h->beta2),
                        .step_size = (float)(lr / bc1),
                        .bc2_sqrt = (float)sqrt(bc2),
                        .eps = (float)h->eps};
  const float decay_on = (float)(1.0 - lr * h->weight_decay);
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    const size_t o = q->offset;
    const float decay = (all_decay || q->decay) ? decay_on : 1.0f;
    if (h->amsgrad)
      adamw_tensor_amsgrad(params + o, grads + o, s->exp_avg + o, s->exp_avg_sq + o,
                           s->max_exp_avg_sq + o, q->numel, decay, &c);
    else
      adamw_tensor(params + o, grads + o, s->exp_avg + o, s->exp_avg_sq + o, q->numel, decay, &c);
  }
  return 0;
}
