/* torch.optim.SGD on a flat buffer, one loop per tensor; a template for
 * REAL = float and double (sgd.c). */

int MT_T(mt_sgd_step)(const mt_param_table *t, REAL *params, const REAL *grads, REAL *buf,
                      int first_step, const mt_sgd_hparams *h, int all_decay, double lr) {
  const REAL mom = (REAL)h->momentum, damp = (REAL)1 - (REAL)h->dampening;
  const REAL lrf = (REAL)lr;
  MT_CHECK(mom == (REAL)0 || buf, MT_ERR_ARG, "SGD momentum needs a momentum buffer");
  for (int k = 0; k < t->n; k++) {
    const mt_param *q = &t->p[k];
    REAL *p = params + q->offset;
    const REAL *g = grads + q->offset;
    REAL *b = buf ? buf + q->offset : NULL;
    const REAL wd = (all_decay || q->decay) ? (REAL)h->weight_decay : (REAL)0;
    const size_t n = q->numel;
    if (mom == (REAL)0) {
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
      for (size_t i = 0; i < n; i++) p[i] -= lrf * (g[i] + wd * p[i]);
    } else if (first_step) {
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
      for (size_t i = 0; i < n; i++) {
        REAL d = g[i] + wd * p[i];
        b[i] = d;
        p[i] -= lrf * (h->nesterov ? d + mom * d : d);
      }
    } else if (h->nesterov) {
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
      for (size_t i = 0; i < n; i++) {
        REAL d = g[i] + wd * p[i];
        REAL v = mom * b[i] + damp * d;
        b[i] = v;
        p[i] -= lrf * (d + mom * v);
      }
    } else {
#pragma omp parallel for simd schedule(static) if (parallel : n > 262144)
      for (size_t i = 0; i < n; i++) {
        REAL d = g[i] + wd * p[i];
        REAL v = mom * b[i] + damp * d;
        b[i] = v;
        p[i] -= lrf * v;
      }
    }
  }
  return 0;
}
