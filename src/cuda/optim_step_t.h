/* The optimizer steps' C side on the GPU, a template for REAL = float and
 * double (optim_step.c): the checks and scalars of optim/sgd_t.h and
 * optim/adamw_t.h, the kernels in optim.cu. */

int MT_T(mt_cuda_sgd_step)(const mt_cuda_table *t, REAL *params, const REAL *grads, REAL *buf,
                           int first_step, const mt_sgd_hparams *h, int all_decay, double lr,
                           cudaStream_t s) {
  const REAL mom = (REAL)h->momentum, damp = (REAL)1 - (REAL)h->dampening;
  MT_CHECK(mom == (REAL)0 || buf, MT_ERR_ARG, "SGD momentum needs a momentum buffer");
  MT_CALL(MT_T(mt_cuda_sgd_kernel)(t, params, grads, buf, first_step, h->nesterov, mom, damp,
                                   (REAL)h->weight_decay, all_decay, (REAL)lr, s));
  return 0;
}

void MT_T(mt_cuda_adamw_state_free)(MT_T(mt_cuda_adamw_state) *s) {
  if (!s) return;
  cudaFree(s->exp_avg);
  cudaFree(s->exp_avg_sq);
  cudaFree(s->max_exp_avg_sq);
  memset(s, 0, sizeof(*s));
}

static int MT_T(zeroed)(REAL **p, size_t n) {
  cudaError_t e = cudaMalloc((void **)p, n * sizeof(REAL));
  if (e == cudaSuccess) e = cudaMemset(*p, 0, n * sizeof(REAL));
  MT_CHECK(e == cudaSuccess, MT_ERR_LIB, "AdamW state of %zu values on the GPU: %s", n,
           cudaGetErrorString(e));
  return 0;
}

int MT_T(mt_cuda_adamw_state_init)(MT_T(mt_cuda_adamw_state) *s, size_t n, int amsgrad) {
  memset(s, 0, sizeof(*s));
  MT_CHECK(n > 0, MT_ERR_ARG, "AdamW state for an empty parameter buffer");
  int rc = MT_T(zeroed)(&s->exp_avg, n);
  if (!rc) rc = MT_T(zeroed)(&s->exp_avg_sq, n);
  if (!rc && amsgrad) rc = MT_T(zeroed)(&s->max_exp_avg_sq, n);
  if (rc) {
    MT_T(mt_cuda_adamw_state_free)(s);
    MT_CALL(rc);
  }
  s->n = n;
  return 0;
}

int MT_T(mt_cuda_adamw_step)(const mt_cuda_table *t, REAL *params, const REAL *grads,
                             MT_T(mt_cuda_adamw_state) *s, const mt_adamw_hparams *h,
                             int all_decay, double lr, cudaStream_t st) {
  MT_CALL(mt_adamw_check(h));
  MT_CHECK(s->exp_avg && s->exp_avg_sq, MT_ERR_ARG, "AdamW state not initialised");
  MT_CHECK(!h->amsgrad || s->max_exp_avg_sq, MT_ERR_ARG,
           "AdamW with amsgrad needs a state made with amsgrad");
  MT_CHECK(s->n >= t->total, MT_ERR_ARG, "AdamW state of %zu values for %zu parameters", s->n,
           t->total);
  MT_CHECK(isfinite(lr) && lr >= 0.0, MT_ERR_ARG, "AdamW learning rate %g", lr);
  const long k = s->step + 1;
  const double bc1 = 1.0 - pow(h->beta1, (double)k);
  const double bc2 = 1.0 - pow(h->beta2, (double)k);
  const MT_T(mt_cuda_adamw_coef) c = {.beta1 = (REAL)h->beta1,
                                      .beta2 = (REAL)h->beta2,
                                      .one_minus_beta1 = (REAL)(1.0 - h->beta1),
                                      .one_minus_beta2 = (REAL)(1.0 - h->beta2),
                                      .step_size = (REAL)(lr / bc1),
                                      .bc2_sqrt = (REAL)sqrt(bc2),
                                      .eps = (REAL)h->eps,
                                      .decay_on = (REAL)(1.0 - lr * h->weight_decay)};
  MT_CALL(MT_T(mt_cuda_adamw_kernel)(t, params, grads, s->exp_avg, s->exp_avg_sq,
                                     h->amsgrad ? s->max_exp_avg_sq : NULL, &c, all_decay, st));
  s->step = k;
  return 0;
}
