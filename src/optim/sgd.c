/* torch.optim.SGD on a flat buffer, one loop per tensor. */
#include "optim/optim.h"

int mt_sgd_step(const mt_param_table *t, float *params, const float *grads, float *buf,
                int first_step, const mt_sgd_hparams *h, int all_decay, double lr) {
  const float mom = (float)h->momentum, damp = 1.0f - (float)h->dampening;
  const float lrf = (float)lr;
  MT_CHECK(mom == 0.0f || buf, MT_ERR_ARG, "SGD momentum needs a momentum buffer");
  for (int k = 0; k < t->n; k++) {
    const mt_param *q = &t->p[k];
    float *p = params + q->offset;
    const float *g = grads + q->offset;
    float *b = buf ? buf + q->offset : NULL;
    const float wd = (all_decay || q->decay) ? (float)h->weight_decay : 0.0f;
    const size_t n = q->numel;
    if (mom == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > 262144)
      for (size_t i = 0; i < n; i++) p[i] -= lrf * (g[i] + wd * p[i]);
    } else if (first_step) {
#pragma omp parallel for simd schedule(static) if (n > 262144)
      for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        b[i] = d;
        p[i] -= lrf * (h->nesterov ? d + mom * d : d);
      }
    } else if (h->nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 262144)
      for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float v = mom * b[i] + damp * d;
        b[i] = v;
        p[i] -= lrf * (d + mom * v);
      }
    } else {
#pragma omp parallel for simd schedule(static) if (n > 262144)
      for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float v = mom * b[i] + damp * d;
        b[i] = v;
        p[i] -= lrf * v;
      }
    }
  }
  return 0;
}
