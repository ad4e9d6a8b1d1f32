/* The typed checks of test_cuda_kernels.c, a template for REAL = float and
 * double: GEMM (plain and batched), the linear layer, the element-wise
 * layers and dropout, the losses; each GPU result against the CPU function
 * it mirrors, on random (seeded) inputs and edge shapes. Gradient buffers
 * start non-zero, so "adds" is checked too. */

static void MT_T(test_gemm)(void) {
  uint64_t st = 11;
  static const int64_t shapes[][3] = {{67, 45, 129}, {1, 1, 1}, {1, 300, 7}, {513, 3, 260}};
  for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++)
    for (int c = 0; c < 4; c++) {
      const int64_t M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
      const char ta = (c & 1) ? 'T' : 'N', tb = (c & 2) ? 'T' : 'N';
      /* A is (M,K) or stored (K,M); B (K,N) or stored (N,K); padded rows */
      const int64_t lda = (ta == 'N' ? K : M) + 3, ldb = (tb == 'N' ? N : K) + 1, ldc = N + 2;
      const size_t na = (size_t)((ta == 'N' ? M : K) * lda), nb = (size_t)((tb == 'N' ? K : N) * ldb);
      const size_t nc = (size_t)(M * ldc);
      REAL *A = MT_T(cu_rand)(na, &st, 1), *B = MT_T(cu_rand)(nb, &st, 1), *C = MT_T(cu_rand)(nc, &st, 1);
      REAL *Ad = cu_dev(A, na * sizeof(REAL)), *Bd = cu_dev(B, nb * sizeof(REAL));
      REAL *Cd = cu_dev(C, nc * sizeof(REAL));
      CHECK(MT_T(mt_gemm)(ta, tb, M, N, K, (REAL)0.75, A, lda, B, ldb, (REAL)0.5, C, ldc,
                          NULL) == 0,
            "CPU gemm");
      CU_CALL(MT_T(mt_cuda_gemm)(ta, tb, M, N, K, (REAL)0.75, Ad, lda, Bd, ldb, (REAL)0.5, Cd, ldc,
                                 &cu_cx),
              "gemm %c%c %lldx%lldx%lld launched", ta, tb, (long long)M, (long long)N, (long long)K);
      char what[96];
      snprintf(what, sizeof(what), "gemm %c%c %lldx%lldx%lld (alpha .75, beta .5, padded ld)", ta, tb,
               (long long)M, (long long)N, (long long)K);
      MT_T(cu_close)(Cd, C, nc, TOLR(1e-5, 1e-12), what);
      cudaFree(Ad), cudaFree(Bd), cudaFree(Cd);
      free(A), free(B), free(C);
    }
}

static void MT_T(test_gemm_batched)(void) {
  uint64_t st = 12;
  const int64_t M = 19, N = 23, K = 31, batch = 3;
  for (int shared_a = 0; shared_a < 2; shared_a++) {
    /* A (M,K) per batch (stride 0: one A for all), B stored (N,K) (op T),
     * C (M,N) with gaps between the batches */
    const int64_t sA = shared_a ? 0 : M * K + 5, sB = N * K + 7, sC = M * N + 11;
    const size_t na = (size_t)(sA * (batch - 1) + M * K), nb = (size_t)(sB * batch),
                 nc = (size_t)(sC * batch);
    REAL *A = MT_T(cu_rand)(na, &st, 1), *B = MT_T(cu_rand)(nb, &st, 1), *C = MT_T(cu_rand)(nc, &st, 1);
    REAL *Ad = cu_dev(A, na * sizeof(REAL)), *Bd = cu_dev(B, nb * sizeof(REAL));
    REAL *Cd = cu_dev(C, nc * sizeof(REAL));
    for (int64_t i = 0; i < batch; i++)
      MT_T(mt_gemm)('N', 'T', M, N, K, (REAL)1.5, A + i * sA, K, B + i * sB, K, (REAL)-1, C + i * sC,
                    N, NULL);
    CU_CALL(MT_T(mt_cuda_gemm_batched)('N', 'T', M, N, K, (REAL)1.5, Ad, K, sA, Bd, K, sB, (REAL)-1,
                                       Cd, N, sC, (int)batch, &cu_cx),
            "batched gemm launched");
    MT_T(cu_close)(Cd, C, nc, TOLR(1e-5, 1e-12),
                   shared_a ? "batched gemm (3, A stride 0) vs a loop of mt_gemm"
                            : "batched gemm (3 strided) vs a loop of mt_gemm");
    cudaFree(Ad), cudaFree(Bd), cudaFree(Cd);
    free(A), free(B), free(C);
  }
}

/* linear forward and backward on one shape, bias or not; the CPU's under
 * pol (NULL: fp32), the device's under cu_cx */
static void MT_T(linear_case)(int B, int IC, int OC, int bias, const char *tag, double tol,
                              const mt_nn_policy *pol) {
  uint64_t st = (uint64_t)(B * 131 + IC * 7 + OC);
  const size_t ni = (size_t)B * IC, nw = (size_t)OC * IC, no = (size_t)B * OC;
  REAL *x = MT_T(cu_rand)(ni, &st, 1), *w = MT_T(cu_rand)(nw, &st, 1), *b = MT_T(cu_rand)(OC, &st, 1);
  REAL *dy = MT_T(cu_rand)(no, &st, 1), *out = MT_T(cu_rand)(no, &st, 1);
  REAL *dx = MT_T(cu_rand)(ni, &st, 1), *dw = MT_T(cu_rand)(nw, &st, 1), *db = MT_T(cu_rand)(OC, &st, 1);
  REAL *xd = cu_dev(x, ni * sizeof(REAL)), *wd = cu_dev(w, nw * sizeof(REAL));
  REAL *bd = cu_dev(b, OC * sizeof(REAL)), *dyd = cu_dev(dy, no * sizeof(REAL));
  REAL *outd = cu_dev(out, no * sizeof(REAL)), *dxd = cu_dev(dx, ni * sizeof(REAL));
  REAL *dwd = cu_dev(dw, nw * sizeof(REAL)), *dbd = cu_dev(db, OC * sizeof(REAL));
  char what[160];
  CHECK(MT_T(mt_linear_forward)(out, x, w, bias ? b : NULL, B, IC, OC, pol) == 0, "CPU linear");
  CU_CALL(MT_T(mt_cuda_linear_forward)(outd, xd, wd, bias ? bd : NULL, B, IC, OC, &cu_cx),
          "linear forward launched");
  snprintf(what, sizeof(what), "linear forward %s B=%d IC=%d OC=%d%s", tag, B, IC, OC,
           bias ? " +bias" : "");
  MT_T(cu_close)(outd, out, no, tol, what);
  /* all three gradients, then again without dinp and db (dw only) */
  for (int all = 1; all >= 0; all--) {
    CHECK(MT_T(mt_linear_backward)(all ? dx : NULL, dw, all && bias ? db : NULL, dy, x, w, B, IC,
                                   OC, pol) == 0,
          "CPU linear backward");
    CU_CALL(MT_T(mt_cuda_linear_backward)(all ? dxd : NULL, dwd, all && bias ? dbd : NULL, dyd, xd,
                                          wd, B, IC, OC, &cu_cx),
            "linear backward launched");
    snprintf(what, sizeof(what), "linear backward %s B=%d IC=%d OC=%d%s: dw", tag, B, IC, OC,
             all ? "" : " (dinp, db NULL)");
    MT_T(cu_close)(dwd, dw, nw, tol, what);
    if (!all) continue;
    snprintf(what, sizeof(what), "linear backward %s B=%d IC=%d OC=%d: dinp (adds)", tag, B, IC, OC);
    MT_T(cu_close)(dxd, dx, ni, tol, what);
    snprintf(what, sizeof(what), "linear backward %s B=%d IC=%d OC=%d: db (adds)", tag, B, IC, OC);
    if (bias) MT_T(cu_close)(dbd, db, OC, tol, what);
  }
  cudaFree(xd), cudaFree(wd), cudaFree(bd), cudaFree(dyd), cudaFree(outd), cudaFree(dxd);
  cudaFree(dwd), cudaFree(dbd);
  free(x), free(w), free(b), free(dy), free(out), free(dx), free(dw), free(db);
}

static void MT_T(test_linear)(void) {
  static const int shapes[][3] = {{37, 65, 33}, {1, 1, 1}, {300, 7, 513}, {2, 1030, 3}};
  for (int lt = MT_F64 ? 0 : 1; lt >= 0; lt--) {
    cu_cx.use_lt = lt;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
      for (int bias = 0; bias < 2; bias++)
        MT_T(linear_case)(shapes[i][0], shapes[i][1], shapes[i][2], bias,
                          lt ? "(cuBLASLt bias)" : "(GEMM + bias kernel)", TOLR(1e-5, 1e-12),
                          NULL);
  }
  cu_cx.use_lt = 1;
}

static void MT_T(test_elementwise)(void) {
  static const int64_t sizes[] = {1, 1000, 1500001}; /* the last: grid-stride loops */
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    const int64_t n = sizes[k];
    const size_t bytes = (size_t)n * sizeof(REAL);
    uint64_t st = 100 + k;
    REAL *x = MT_T(cu_rand)((size_t)n, &st, 4), *dy = MT_T(cu_rand)((size_t)n, &st, 1);
    REAL *y2 = MT_T(cu_rand)((size_t)n, &st, 1), *y = MT_T(cu_rand)((size_t)n, &st, 1);
    REAL *dx = MT_T(cu_rand)((size_t)n, &st, 1), *dx2 = MT_T(cu_rand)((size_t)n, &st, 1);
    if (n > 2) x[n / 2] = (REAL)NAN, x[1] = (REAL)0; /* NaN passes ReLU; 0 is not > 0 */
    REAL *xd = cu_dev(x, bytes), *dyd = cu_dev(dy, bytes), *y2d = cu_dev(y2, bytes);
    REAL *yd = cu_dev(y, bytes), *dxd = cu_dev(dx, bytes), *dx2d = cu_dev(dx2, bytes);
    char what[128];
#define EW_WHAT(s) (snprintf(what, sizeof(what), "%s, n=%lld", s, (long long)n), what)
    MT_T(mt_relu_forward)(y, x, n);
    CU_CALL(MT_T(mt_cuda_relu_forward)(yd, xd, n, 0), "relu forward launched");
    MT_T(cu_exact)(yd, y, (size_t)n, EW_WHAT("relu forward (NaN passes)"));
    MT_T(mt_relu_backward)(dx, dy, y, n);
    CU_CALL(MT_T(mt_cuda_relu_backward)(dxd, dyd, yd, n, 0), "relu backward launched");
    MT_T(cu_exact)(dxd, dx, (size_t)n, EW_WHAT("relu backward (adds)"));
    REAL *dyc = MT_T(cu_copy)(dy, (size_t)n);
    MT_T(mt_relu_backward)(dyc, dyc, y, n);
    CU_CALL(MT_T(mt_cuda_relu_backward)(dyd, dyd, yd, n, 0), "relu backward in place launched");
    MT_T(cu_exact)(dyd, dyc, (size_t)n, EW_WHAT("relu backward, dinp == dout (overwrites)"));
    cu_put(dyd, dy, bytes);
    if (n > 2) x[n / 2] = (REAL)0.5;
    cu_put(xd, x, bytes);
    for (int kind = 0; kind < 2; kind++) {
      MT_T(mt_gelu_forward)(y, x, n, (mt_gelu_kind)kind);
      CU_CALL(MT_T(mt_cuda_gelu_forward)(yd, xd, n, (mt_gelu_kind)kind, 0), "gelu launched");
      MT_T(cu_close)(yd, y, (size_t)n, TOLR(1e-5, 1e-14), EW_WHAT(kind ? "gelu tanh" : "gelu erf"));
      MT_T(mt_gelu_backward)(dx, dy, x, n, (mt_gelu_kind)kind);
      CU_CALL(MT_T(mt_cuda_gelu_backward)(dxd, dyd, xd, n, (mt_gelu_kind)kind, 0), "gelu bwd launched");
      MT_T(cu_close)(dxd, dx, (size_t)n, TOLR(1e-5, 1e-14),
                     EW_WHAT(kind ? "gelu tanh backward (adds)" : "gelu erf backward (adds)"));
    }
    MT_T(mt_residual_forward)(y, x, y2, n);
    CU_CALL(MT_T(mt_cuda_residual_forward)(yd, xd, y2d, n, 0), "residual launched");
    MT_T(cu_exact)(yd, y, (size_t)n, EW_WHAT("residual forward"));
    /* the exact checks below start from the same dx: gelu's left it only close */
    cu_put(dxd, dx, bytes);
    MT_T(mt_residual_backward)(dx, NULL, dy, n);
    MT_T(mt_residual_backward)(dx2, dx2, dy, n); /* both into one: adds twice */
    CU_CALL(MT_T(mt_cuda_residual_backward)(dxd, NULL, dyd, n, 0), "residual bwd launched");
    CU_CALL(MT_T(mt_cuda_residual_backward)(dx2d, dx2d, dyd, n, 0), "residual bwd launched");
    MT_T(cu_exact)(dxd, dx, (size_t)n, EW_WHAT("residual backward (da only)"));
    MT_T(cu_exact)(dx2d, dx2, (size_t)n, EW_WHAT("residual backward (da == db)"));

    /* dropout: mask and output bit for bit, at an offset, and p = 0, 1 */
    uint8_t *mask = tu_xmalloc((size_t)n), *maskg = tu_xmalloc((size_t)n);
    uint8_t *maskd = cu_dev(NULL, (size_t)n);
    const uint64_t key = mt_dropout_key(42, 7, 3, 1);
    static const double ps[] = {0.3, 0.0, 1.0, 0.9};
    for (int pi = 0; pi < 4; pi++) {
      const REAL p = (REAL)ps[pi];
      const int training = pi != 3 || n == 1; /* p = 0.9 in eval, except n = 1 */
      MT_T(mt_dropout_forward)(y, mask, x, p, key, 1000 + k, training, n);
      CU_CALL(MT_T(mt_cuda_dropout_forward)(yd, maskd, xd, p, key, 1000 + k, training, n, 0),
              "dropout launched");
      cu_get(maskg, maskd, (size_t)n);
      snprintf(what, sizeof(what), "dropout p=%g %s, n=%lld: mask and output", ps[pi],
               training ? "training" : "eval", (long long)n);
      CHECK(same_bytes(mask, maskg, (size_t)n), "%s: the mask is the CPU's, bit for bit", what);
      MT_T(cu_exact)(yd, y, (size_t)n, what);
      MT_T(mt_dropout_backward)(dx, dy, mask, p, n);
      CU_CALL(MT_T(mt_cuda_dropout_backward)(dxd, dyd, maskd, p, n, 0), "dropout bwd launched");
      MT_T(cu_close)(dxd, dx, (size_t)n, TOLR(1e-6, 1e-15), EW_WHAT("dropout backward (adds)"));
    }
    cu_put(dxd, dx, bytes); /* the loop's backward left dx only close */
    MT_T(mt_dropout_backward)(dx, dy, NULL, (REAL)0.5, n);
    CU_CALL(MT_T(mt_cuda_dropout_backward)(dxd, dyd, NULL, (REAL)0.5, n, 0), "dropout bwd launched");
    MT_T(cu_exact)(dxd, dx, (size_t)n, EW_WHAT("dropout backward without a mask (eval)"));
    cudaFree(maskd), free(mask), free(maskg), free(dyc);
    cudaFree(xd), cudaFree(dyd), cudaFree(y2d), cudaFree(yd), cudaFree(dxd), cudaFree(dx2d);
    free(x), free(dy), free(y2), free(y), free(dx), free(dx2);
#undef EW_WHAT
  }
}

/* mt_model_dropout: per-row keys from the batch key and the row ids */
static void MT_T(test_model_dropout)(void) {
  const int rows = 7;
  const int64_t row_len = 3001, n = rows * row_len;
  uint64_t st = 77;
  REAL *x = MT_T(cu_rand)((size_t)n, &st, 1), *d = MT_T(cu_rand)((size_t)n, &st, 1);
  int64_t ids[7] = {900, 3, 17, 17000000000LL, 5, 6, 123456};
  uint8_t *mask = tu_xmalloc((size_t)n), *maskg = tu_xmalloc((size_t)n);
  REAL *xd = cu_dev(x, (size_t)n * sizeof(REAL)), *dd = cu_dev(d, (size_t)n * sizeof(REAL));
  uint8_t *maskd = cu_dev(NULL, (size_t)n);
  int64_t *idsd = cu_dev(ids, sizeof(ids));
  for (int with_ids = 0; with_ids < 2; with_ids++) {
    mt_batch b = {.n = rows, .ids = with_ids ? ids : NULL, .train = 1, .key = 0x1234567890ULL};
    REAL *xc = MT_T(cu_copy)(x, (size_t)n), *dc = MT_T(cu_copy)(d, (size_t)n);
    cu_put(xd, x, (size_t)n * sizeof(REAL));
    cu_put(dd, d, (size_t)n * sizeof(REAL));
    MT_T(mt_model_dropout)(xc, mask, (REAL)0.25, &b, 5, row_len);
    CU_CALL(MT_T(mt_cuda_model_dropout)(xd, maskd, (REAL)0.25, b.key, with_ids ? idsd : NULL, rows, 5,
                                        row_len, 0),
            "model dropout launched");
    cu_get(maskg, maskd, (size_t)n);
    CHECK(same_bytes(mask, maskg, (size_t)n), "model dropout %s (%s): masks keyed per row, bit for bit",
          TY, with_ids ? "row ids" : "row numbers");
    MT_T(cu_exact)(xd, xc, (size_t)n, with_ids ? "model dropout in place (ids)" : "model dropout in place");
    MT_T(mt_model_dropout_backward)(dc, mask, (REAL)0.25, n);
    CU_CALL(MT_T(mt_cuda_model_dropout_backward)(dd, maskd, (REAL)0.25, n, 0), "launched");
    MT_T(cu_exact)(dd, dc, (size_t)n, "model dropout backward (in place)");
    free(xc), free(dc);
  }
  cudaFree(xd), cudaFree(dd), cudaFree(maskd), cudaFree(idsd);
  free(x), free(d), free(mask), free(maskg);
}

/* device scalars of the loss forwards */
typedef struct {
  double loss_sum;
  int64_t count, correct;
} MT_T(loss_out);

static void MT_T(test_xent)(void) {
  static const int shapes[][2] = {{37, 10}, {1, 1}, {5, 1000}, {3000, 7}};
  MT_T(loss_out) *sd = cu_dev(NULL, sizeof(MT_T(loss_out)));
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    const int B = shapes[k][0], C = shapes[k][1];
    const size_t n = (size_t)B * C;
    uint64_t st = 300 + k;
    REAL *l = MT_T(cu_rand)(n, &st, 3), *p = MT_T(cu_rand)(n, &st, 1), *ls = MT_T(cu_rand)(B, &st, 1);
    REAL *dl = MT_T(cu_rand)(n, &st, 1);
    for (size_t i = 0; i < n; i++) l[i] = (REAL)(round(4 * l[i]) / 2); /* ties: the first max */
    if (n > 3) l[2] = (REAL)-INFINITY;
    int32_t *y = tu_xmalloc((size_t)B * sizeof(int32_t));
    for (int i = 0; i < B; i++) y[i] = (int32_t)((uint64_t)(tu_uniform(&st) * 1e6 + 1e6) % C);
    y[0] = 0; /* not the -inf logit */
    REAL *ld = cu_dev(l, n * sizeof(REAL)), *pd = cu_dev(p, n * sizeof(REAL));
    REAL *lsd = cu_dev(ls, B * sizeof(REAL)), *dld = cu_dev(dl, n * sizeof(REAL));
    int32_t *yd = cu_dev(y, (size_t)B * sizeof(int32_t));
    MT_T(loss_out) g = {0, 0, 5};
    cu_put(sd, &g, sizeof(g));
    int64_t correct = 5;
    const double sum = MT_T(mt_softmax_xent_forward)(p, ls, &correct, l, y, B, C);
    CU_CALL(MT_T(mt_cuda_softmax_xent_forward)(pd, lsd, &sd->loss_sum, &sd->correct, ld, yd, B, C,
                                               &cu_cx),
            "softmax xent launched");
    char what[128];
    snprintf(what, sizeof(what), "softmax xent B=%d C=%d: probs", B, C);
    MT_T(cu_close)(pd, p, n, TOLR(1e-6, 1e-14), what);
    snprintf(what, sizeof(what), "softmax xent B=%d C=%d: per-row losses", B, C);
    MT_T(cu_close)(lsd, ls, B, TOLR(1e-5, 1e-13), what);
    cu_get(&g, sd, sizeof(g));
    CHECK_ERR(fabs(g.loss_sum - sum) / fmax(fabs(sum), 1e-30), TOLR(1e-5, 1e-13),
              "softmax xent %s B=%d C=%d: loss sum %.9g vs %.9g", TY, B, C, g.loss_sum, sum);
    CHECK(g.correct == correct, "softmax xent %s B=%d C=%d: top-1 hits (first maximum) added: %lld vs %lld",
          TY, B, C, (long long)g.correct, (long long)correct);
    MT_T(mt_softmax_xent_backward)(dl, p, y, (REAL)0.125, B, C);
    CU_CALL(MT_T(mt_cuda_softmax_xent_backward)(dld, pd, yd, (REAL)0.125, B, C, 0), "launched");
    snprintf(what, sizeof(what), "softmax xent backward B=%d C=%d (adds)", B, C);
    MT_T(cu_close)(dld, dl, n, TOLR(1e-6, 1e-14), what);

    /* the ignore variant: a third of the rows ignored, probs in place */
    for (int i = 0; i < B; i += 3) y[i] = -1;
    cu_put(yd, y, (size_t)B * sizeof(int32_t));
    REAL *pl = MT_T(cu_copy)(l, n);
    double isum = 0;
    int64_t icount = 0, icorrect = 0;
    CHECK(MT_T(mt_xent_ignore_forward)(pl, ls, &isum, &icount, &icorrect, pl, y, -1, B, C) == 0, "CPU");
    CU_CALL(MT_T(mt_cuda_xent_ignore_forward)(ld, lsd, &sd->loss_sum, &sd->count, &sd->correct, ld, yd,
                                              -1, B, C, &cu_cx),
            "xent ignore launched");
    MT_T(loss_out) g2;
    cu_get(&g2, sd, sizeof(g2));
    snprintf(what, sizeof(what), "xent ignore B=%d C=%d: probs in place of logits", B, C);
    MT_T(cu_close)(ld, pl, n, TOLR(1e-6, 1e-14), what);
    snprintf(what, sizeof(what), "xent ignore B=%d C=%d: losses (0 on ignored rows)", B, C);
    MT_T(cu_close)(lsd, ls, B, TOLR(1e-5, 1e-13), what);
    CHECK_ERR(fabs(g2.loss_sum - isum) / fmax(fabs(isum), 1e-30), TOLR(1e-5, 1e-13),
              "xent ignore %s B=%d C=%d: loss sum", TY, B, C);
    CHECK(g2.count == icount && g2.correct == g.correct + icorrect,
          "xent ignore %s B=%d C=%d: count %lld (%lld), hits added", TY, B, C, (long long)g2.count,
          (long long)icount);
    MT_T(mt_xent_ignore_backward)(dl, pl, y, -1, (REAL)0.5, B, C);
    CU_CALL(MT_T(mt_cuda_xent_ignore_backward)(dld, ld, yd, -1, (REAL)0.5, B, C, 0), "launched");
    snprintf(what, sizeof(what), "xent ignore backward B=%d C=%d (adds, ignored rows untouched)", B, C);
    MT_T(cu_close)(dld, dl, n, TOLR(1e-6, 1e-14), what);
    cudaFree(ld), cudaFree(pd), cudaFree(lsd), cudaFree(dld), cudaFree(yd);
    free(l), free(p), free(ls), free(dl), free(y), free(pl);
  }
  /* a label neither ignored nor a class: MT_ERR_DATA with check, else skipped */
  int32_t y[3] = {1, 7, -1}, *yd = cu_dev(y, sizeof(y));
  REAL *ld = cu_dev(NULL, 3 * 4 * sizeof(REAL));
  int rc = MT_T(mt_cuda_xent_ignore_forward)(ld, NULL, NULL, NULL, NULL, ld, yd, -1, 3, 4, &cu_cx);
  CHECK(rc == MT_ERR_DATA && strstr(mt_error_message(), "label 7 of row 1"),
        "xent ignore %s: a bad label is MT_ERR_DATA naming it (%s)", TY, mt_error_message());
  mt_error_clear();
  cu_cx.check = 0;
  rc = MT_T(mt_cuda_xent_ignore_forward)(ld, NULL, &sd->loss_sum, &sd->count, NULL, ld, yd, -1, 3, 4,
                                         &cu_cx);
  MT_T(loss_out) g;
  cu_get(&g, sd, sizeof(g));
  CHECK(rc == 0 && g.count == 1, "xent ignore %s without checks: the bad row is skipped (count %lld)",
        TY, (long long)g.count);
  cu_cx.check = 1;
  cudaFree(yd), cudaFree(ld), cudaFree(sd);
}

static void MT_T(test_mse)(void) {
  static const int shapes[][2] = {{37, 5}, {1, 1}, {2, 700}};
  double *sumd = cu_dev(NULL, sizeof(double));
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    const int B = shapes[k][0], K = shapes[k][1];
    const size_t n = (size_t)B * K;
    uint64_t st = 500 + k;
    REAL *p = MT_T(cu_rand)(n, &st, 2), *t = MT_T(cu_rand)(n, &st, 2), *ls = MT_T(cu_rand)(B, &st, 1);
    REAL *dp = MT_T(cu_rand)(n, &st, 1);
    REAL *pd = cu_dev(p, n * sizeof(REAL)), *td = cu_dev(t, n * sizeof(REAL));
    REAL *lsd = cu_dev(ls, B * sizeof(REAL)), *dpd = cu_dev(dp, n * sizeof(REAL));
    const double sum = MT_T(mt_mse_forward)(ls, p, t, B, K);
    CU_CALL(MT_T(mt_cuda_mse_forward)(lsd, sumd, pd, td, B, K, &cu_cx), "mse launched");
    double g;
    cu_get(&g, sumd, sizeof(g));
    CHECK_ERR(fabs(g - sum) / fmax(sum, 1e-30), 1e-13, "mse %s B=%d K=%d: sum of squares", TY, B, K);
    MT_T(cu_close)(lsd, ls, B, TOLR(1e-6, 1e-14), "mse per-row means");
    MT_T(mt_mse_backward)(dp, p, t, (REAL)0.25, B, K);
    CU_CALL(MT_T(mt_cuda_mse_backward)(dpd, pd, td, (REAL)0.25, B, K, 0), "launched");
    MT_T(cu_close)(dpd, dp, n, TOLR(1e-6, 1e-15), "mse backward (adds)");
    cudaFree(pd), cudaFree(td), cudaFree(lsd), cudaFree(dpd);
    free(p), free(t), free(ls), free(dp);
  }
  cudaFree(sumd);
}

static void MT_T(test_kernels)(void) {
  MT_T(test_gemm)();
  MT_T(test_gemm_batched)();
  MT_T(test_linear)();
  MT_T(test_elementwise)();
  MT_T(test_model_dropout)();
  MT_T(test_xent)();
  MT_T(test_mse)();
}
