/* The typed checks of test_cuda_optim.c, a template for REAL = float and
 * double: SGD and AdamW steps over a parameter table (params and every
 * state buffer after three steps, the table's padding untouched), the L2
 * norm, clipping by norm and by value, scaling. */

/* the padding of t in the device buffer d is still the host's h, bit for bit */
static void MT_T(check_padding)(const mt_param_table *t, const REAL *d, const REAL *h,
                                const char *what) {
  REAL *g = tu_xmalloc(t->total * sizeof(REAL));
  cu_get(g, d, t->total * sizeof(REAL));
  size_t bad = 0, pad = 0;
  for (int k = 0; k < t->n; k++) {
    const size_t end = k + 1 < t->n ? t->p[k + 1].offset : t->total;
    for (size_t i = t->p[k].offset + t->p[k].numel; i < end; i++, pad++)
      bad += memcmp(&g[i], &h[i], sizeof(REAL)) != 0;
  }
  CHECK(bad == 0, "%s %s: the %zu padding values untouched", what, TY, pad);
  free(g);
}

static void MT_T(test_sgd)(const mt_param_table *t, const mt_cuda_table *dt) {
  const size_t n = t->total, bytes = n * sizeof(REAL);
  static const mt_sgd_hparams hs[] = {{0, 0, 0.01, 0}, {0.9, 0.1, 0.01, 0}, {0.9, 0, 0, 1}, {0.8, 0.5, 0.05, 1}};
  static const double lrs[] = {0.1, 0.05, 0.02};
  for (size_t c = 0; c < sizeof(hs) / sizeof(hs[0]); c++)
    for (int all_decay = 0; all_decay < 2; all_decay++) {
      uint64_t st = 1300 + c;
      REAL *p = MT_T(cu_rand)(n, &st, 1), *b = MT_T(cu_rand)(n, &st, 1), *p0 = MT_T(cu_copy)(p, n);
      REAL *pd = cu_dev(p, bytes), *bd = cu_dev(b, bytes), *gd = cu_dev(NULL, bytes);
      const int mom = hs[c].momentum != 0;
      for (int step = 0; step < 3; step++) {
        REAL *g = MT_T(cu_rand)(n, &st, 1);
        cu_put(gd, g, bytes);
        CHECK(MT_T(mt_sgd_step)(t, p, g, mom ? b : NULL, step == 0, &hs[c], all_decay, lrs[step]) == 0,
              "CPU sgd");
        CU_CALL(MT_T(mt_cuda_sgd_step)(dt, pd, gd, mom ? bd : NULL, step == 0, &hs[c], all_decay, lrs[step],
                                       0),
                "sgd step launched");
        free(g);
      }
      char what[160];
      snprintf(what, sizeof(what), "sgd momentum %g dampening %g wd %g%s%s, 3 steps: params",
               hs[c].momentum, hs[c].dampening, hs[c].weight_decay, hs[c].nesterov ? " nesterov" : "",
               all_decay ? " (all decay)" : " (1-d skipped)");
      MT_T(cu_close)(pd, p, n, TOLR(1e-6, 1e-15), what);
      if (mom) MT_T(cu_close)(bd, b, n, TOLR(1e-6, 1e-15), "sgd momentum buffer");
      MT_T(check_padding)(t, pd, p0, "sgd params");
      cudaFree(pd), cudaFree(bd), cudaFree(gd), free(p), free(b), free(p0);
    }
  const mt_sgd_hparams h = {0.9, 0, 0, 0};
  const int rc = MT_T(mt_cuda_sgd_step)(dt, NULL, NULL, NULL, 1, &h, 0, 0.1, 0);
  CHECK(rc == MT_ERR_ARG, "sgd %s: momentum without a buffer is MT_ERR_ARG", TY);
  mt_error_clear();
}

static void MT_T(test_adamw)(const mt_param_table *t, const mt_cuda_table *dt) {
  const size_t n = t->total, bytes = n * sizeof(REAL);
  static const double lrs[] = {1e-3, 2e-3, 5e-4};
  for (int amsgrad = 0; amsgrad < 2; amsgrad++)
    for (int all_decay = 0; all_decay < 2; all_decay++) {
      mt_adamw_hparams h = mt_adamw_defaults();
      h.amsgrad = amsgrad, h.weight_decay = 0.1;
      uint64_t st = 1400 + 2 * amsgrad + all_decay;
      REAL *p = MT_T(cu_rand)(n, &st, 1), *p0 = MT_T(cu_copy)(p, n);
      REAL *pd = cu_dev(p, bytes), *gd = cu_dev(NULL, bytes);
      MT_T(mt_adamw_state) cs;
      MT_T(mt_cuda_adamw_state) gs;
      CHECK(MT_T(mt_adamw_state_init)(&cs, n, amsgrad) == 0, "CPU state");
      CU_CALL(MT_T(mt_cuda_adamw_state_init)(&gs, n, amsgrad), "AdamW state on the GPU");
      for (int step = 0; step < 3; step++) {
        REAL *g = MT_T(cu_rand)(n, &st, step == 1 ? 0.01 : 1); /* a small step: amsgrad keeps the max */
        cu_put(gd, g, bytes);
        CHECK(MT_T(mt_adamw_step)(t, p, g, &cs, &h, all_decay, lrs[step]) == 0, "CPU adamw");
        CU_CALL(MT_T(mt_cuda_adamw_step)(dt, pd, gd, &gs, &h, all_decay, lrs[step], 0), "adamw launched");
        free(g);
      }
      char what[128];
      snprintf(what, sizeof(what), "adamw%s wd 0.1%s, 3 steps: params", amsgrad ? " amsgrad" : "",
               all_decay ? " (all decay)" : " (1-d skipped)");
      MT_T(cu_close)(pd, p, n, TOLR(1e-6, 1e-14), what);
      MT_T(cu_close)(gs.exp_avg, cs.exp_avg, n, TOLR(1e-6, 1e-15), "adamw exp_avg");
      MT_T(cu_close)(gs.exp_avg_sq, cs.exp_avg_sq, n, TOLR(1e-6, 1e-15), "adamw exp_avg_sq");
      if (amsgrad) MT_T(cu_close)(gs.max_exp_avg_sq, cs.max_exp_avg_sq, n, TOLR(1e-6, 1e-15), "adamw max_exp_avg_sq");
      CHECK(gs.step == cs.step && gs.step == 3, "adamw %s: step count %ld", TY, gs.step);
      MT_T(check_padding)(t, pd, p0, "adamw params");
      mt_adamw_hparams bad = h;
      bad.beta1 = 1.0;
      const int rc = MT_T(mt_cuda_adamw_step)(dt, pd, gd, &gs, &bad, all_decay, 1e-3, 0);
      CHECK(rc == MT_ERR_OPTION && gs.step == 3, "adamw %s: beta1 = 1 refused as on the CPU, nothing done", TY);
      mt_error_clear();
      MT_T(mt_adamw_state_free)(&cs);
      MT_T(mt_cuda_adamw_state_free)(&gs);
      cudaFree(pd), cudaFree(gd), free(p), free(p0);
    }
}

static void MT_T(test_clip)(void) {
  static const size_t sizes[] = {1, 1000, 3000001, 0};
  double *normd = cu_dev(NULL, sizeof(double));
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    const size_t n = sizes[k], bytes = n * sizeof(REAL);
    uint64_t st = 1500 + k;
    REAL *g = MT_T(cu_rand)(n, &st, 1), *gd = cu_dev(g, bytes);
    const double norm = MT_T(mt_l2_norm)(g, n);
    double a = -1, b = -2;
    CU_CALL(MT_T(mt_cuda_l2_norm)(gd, n, normd, &cu_cx), "l2 norm launched");
    cu_get(&a, normd, sizeof(double));
    CU_CALL(MT_T(mt_cuda_l2_norm)(gd, n, normd, &cu_cx), "l2 norm launched");
    cu_get(&b, normd, sizeof(double));
    CHECK_ERR(fabs(a - norm) / fmax(norm, 1e-300), 1e-12, "l2 norm %s of %zu values (double sums)", TY, n);
    CHECK(memcmp(&a, &b, sizeof(a)) == 0, "l2 norm %s of %zu values: two runs give the same bits", TY, n);
    for (int clips = 0; clips < 2 && n; clips++) {
      const double max_norm = clips ? norm / 2 : norm * 2;
      REAL *c = MT_T(cu_copy)(g, n);
      cu_put(gd, g, bytes);
      MT_T(mt_clip_grad_norm)(c, n, max_norm);
      CU_CALL(MT_T(mt_cuda_clip_grad_norm)(gd, n, max_norm, normd, &cu_cx), "clip launched");
      MT_T(cu_close)(gd, c, n, TOLR(1e-6, 1e-15), clips ? "clip_grad_norm (clipped)" : "clip_grad_norm (under the limit)");
      memcpy(c, g, bytes);
      cu_put(gd, g, bytes);
      MT_T(mt_clip_grad_norm_given)(c, n, 3.0, 1.0);
      CU_CALL(MT_T(mt_cuda_clip_grad_norm_given)(gd, n, 3.0, 1.0, 0), "launched");
      MT_T(cu_exact)(gd, c, n, "clip_grad_norm_given (norm 3, max 1)");
      memcpy(c, g, bytes);
      if (n > 2) c[0] = (REAL)NAN, c[1] = (REAL)INFINITY, c[2] = (REAL)-INFINITY;
      cu_put(gd, c, bytes);
      CHECK(MT_T(mt_clip_grad_value)(c, n, 0.25) == 0, "CPU clip value");
      CU_CALL(MT_T(mt_cuda_clip_grad_value)(gd, n, 0.25, 0), "launched");
      MT_T(cu_exact)(gd, c, n, "clip_grad_value 0.25 (NaN stays, inf clamped)");
      for (size_t i = 0; i < n; i++) c[i] *= (REAL)0.375;
      CU_CALL(MT_T(mt_cuda_scale)(gd, n, (REAL)0.375, 0), "launched");
      MT_T(cu_exact)(gd, c, n, "scale by 0.375");
      free(c);
    }
    cudaFree(gd), free(g);
  }
  const int rc = MT_T(mt_cuda_clip_grad_value)(NULL, 10, 0.0, 0);
  CHECK(rc == MT_ERR_ARG, "clip_grad_value %s 0 is MT_ERR_ARG", TY);
  mt_error_clear();
  cudaFree(normd);
}

static void MT_T(test_optim)(const mt_param_table *t, const mt_cuda_table *dt) {
  MT_T(test_sgd)(t, dt);
  MT_T(test_adamw)(t, dt);
  MT_T(test_clip)();
}
