/* The typed checks of test_cuda_layers.c, a template for REAL = float and
 * double: LayerNorm, BatchNorm2d, pooling, conv2d, embedding, attention,
 * each GPU result (outputs, every gradient, statistics) against the CPU
 * function it mirrors. Gradient buffers start non-zero ("adds"). */

/* a device copy of n REALs (the CPU array keeps its own) */
#define UP(x, n) ((REAL *)cu_dev((x), (size_t)(n) * sizeof(REAL)))

static void MT_T(test_layernorm)(void) {
  static const int shapes[][2] = {{37, 768}, {1, 1}, {3, 1000}, {2000, 33}};
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
    for (int affine = 0; affine < 2; affine++) {
      const int N = shapes[k][0], C = shapes[k][1];
      const size_t n = (size_t)N * C;
      uint64_t st = 700 + k;
      REAL *x = MT_T(cu_rand)(n, &st, 2), *w = MT_T(cu_rand)(C, &st, 1), *b = MT_T(cu_rand)(C, &st, 1);
      REAL *y = MT_T(cu_rand)(n, &st, 1), *m = MT_T(cu_rand)(N, &st, 1), *r = MT_T(cu_rand)(N, &st, 1);
      REAL *dy = MT_T(cu_rand)(n, &st, 1), *dx = MT_T(cu_rand)(n, &st, 1);
      REAL *dw = MT_T(cu_rand)(C, &st, 1), *db = MT_T(cu_rand)(C, &st, 1);
      REAL *xd = UP(x, n), *wd = UP(w, C), *bd = UP(b, C), *yd = UP(y, n), *md = UP(m, N);
      REAL *rd = UP(r, N), *dyd = UP(dy, n), *dxd = UP(dx, n), *dwd = UP(dw, C), *dbd = UP(db, C);
      char what[128];
      MT_T(mt_layernorm_forward)(y, m, r, x, affine ? w : NULL, affine ? b : NULL, N, C, (REAL)1e-5);
      CU_CALL(MT_T(mt_cuda_layernorm_forward)(yd, md, rd, xd, affine ? wd : NULL, affine ? bd : NULL, N,
                                              C, (REAL)1e-5, 0),
              "layernorm launched");
      snprintf(what, sizeof(what), "layernorm N=%d C=%d%s", N, C, affine ? " affine" : "");
      MT_T(cu_close)(yd, y, n, TOLR(1e-5, 1e-12), what);
      MT_T(cu_close)(md, m, N, TOLR(1e-6, 1e-14), "layernorm mean");
      MT_T(cu_close)(rd, r, N, TOLR(1e-6, 1e-14), "layernorm rstd");
      MT_T(mt_layernorm_backward)(dx, affine ? dw : NULL, affine ? db : NULL, dy, x, affine ? w : NULL, m,
                                  r, N, C);
      CU_CALL(MT_T(mt_cuda_layernorm_backward)(dxd, affine ? dwd : NULL, affine ? dbd : NULL, dyd, xd,
                                               affine ? wd : NULL, md, rd, N, C, &cu_cx),
              "layernorm backward launched");
      MT_T(cu_close)(dxd, dx, n, TOLR(1e-5, 1e-12), "layernorm backward: dinp (adds)");
      if (affine) {
        MT_T(cu_close)(dwd, dw, C, TOLR(1e-5, 1e-12), "layernorm backward: dweight (adds)");
        MT_T(cu_close)(dbd, db, C, TOLR(1e-5, 1e-12), "layernorm backward: dbias (adds)");
      }
      cudaFree(xd), cudaFree(wd), cudaFree(bd), cudaFree(yd), cudaFree(md), cudaFree(rd);
      cudaFree(dyd), cudaFree(dxd), cudaFree(dwd), cudaFree(dbd);
      free(x), free(w), free(b), free(y), free(m), free(r), free(dy), free(dx), free(dw), free(db);
    }
}

static void MT_T(test_batchnorm)(void) {
  static const int shapes[][3] = {{4, 3, 25}, {1, 1, 2}, {16, 8, 784}, {3, 5, 1}};
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
    for (int mode = 0; mode < 4; mode++) {
      const int training = mode & 1, affine = mode >> 1;
      const int B = shapes[k][0], C = shapes[k][1], HW = shapes[k][2];
      const size_t n = (size_t)B * C * HW;
      uint64_t st = 800 + k;
      REAL *x = MT_T(cu_rand)(n, &st, 3), *w = MT_T(cu_rand)(C, &st, 1), *b = MT_T(cu_rand)(C, &st, 1);
      REAL *y = MT_T(cu_rand)(n, &st, 1), *m = MT_T(cu_rand)(C, &st, 1), *r = MT_T(cu_rand)(C, &st, 1);
      REAL *rm = MT_T(cu_rand)(C, &st, 1), *rv = MT_T(cu_rand)(C, &st, 1);
      REAL *dy = MT_T(cu_rand)(n, &st, 1), *dx = MT_T(cu_rand)(n, &st, 1);
      REAL *dw = MT_T(cu_rand)(C, &st, 1), *db = MT_T(cu_rand)(C, &st, 1);
      for (int c = 0; c < C; c++) rv[c] = (REAL)(1.5 + rv[c]); /* a variance */
      REAL *xd = UP(x, n), *wd = UP(w, C), *bd = UP(b, C), *yd = UP(y, n), *md = UP(m, C);
      REAL *rd = UP(r, C), *rmd = UP(rm, C), *rvd = UP(rv, C), *dyd = UP(dy, n), *dxd = UP(dx, n);
      REAL *dwd = UP(dw, C), *dbd = UP(db, C);
      char what[128];
      snprintf(what, sizeof(what), "batchnorm B=%d C=%d HW=%d %s%s", B, C, HW,
               training ? "training" : "eval", affine ? " affine" : "");
      CHECK(MT_T(mt_batchnorm2d_forward)(y, m, r, rm, rv, x, affine ? w : NULL, affine ? b : NULL, B, C,
                                         HW, (REAL)1e-5, (REAL)0.1, training) == 0,
            "CPU batchnorm");
      CU_CALL(MT_T(mt_cuda_batchnorm2d_forward)(yd, md, rd, rmd, rvd, xd, affine ? wd : NULL,
                                                affine ? bd : NULL, B, C, HW, (REAL)1e-5, (REAL)0.1,
                                                training, &cu_cx),
              "%s launched", what);
      MT_T(cu_close)(yd, y, n, TOLR(1e-5, 1e-12), what);
      MT_T(cu_close)(md, m, C, TOLR(1e-6, 1e-14), "batchnorm mean");
      MT_T(cu_close)(rd, r, C, TOLR(1e-6, 1e-14), "batchnorm rstd");
      MT_T(cu_close)(rmd, rm, C, TOLR(1e-6, 1e-14), "batchnorm running mean");
      MT_T(cu_close)(rvd, rv, C, TOLR(1e-6, 1e-14), "batchnorm running var (unbiased)");
      MT_T(mt_batchnorm2d_backward)(dx, affine ? dw : NULL, affine ? db : NULL, dy, x, affine ? w : NULL,
                                    m, r, B, C, HW, training);
      CU_CALL(MT_T(mt_cuda_batchnorm2d_backward)(dxd, affine ? dwd : NULL, affine ? dbd : NULL, dyd, xd,
                                                 affine ? wd : NULL, md, rd, B, C, HW, training, &cu_cx),
              "batchnorm backward launched");
      MT_T(cu_close)(dxd, dx, n, TOLR(1e-5, 1e-12), "batchnorm backward: dinp (adds)");
      if (affine) {
        MT_T(cu_close)(dwd, dw, C, TOLR(1e-5, 1e-12), "batchnorm backward: dweight (adds)");
        MT_T(cu_close)(dbd, db, C, TOLR(1e-5, 1e-12), "batchnorm backward: dbias (adds)");
      }
      cudaFree(xd), cudaFree(wd), cudaFree(bd), cudaFree(yd), cudaFree(md), cudaFree(rd);
      cudaFree(rmd), cudaFree(rvd), cudaFree(dyd), cudaFree(dxd), cudaFree(dwd), cudaFree(dbd);
      free(x), free(w), free(b), free(y), free(m), free(r), free(rm), free(rv), free(dy), free(dx);
      free(dw), free(db);
    }
  REAL *one = UP(NULL, 4);
  const int rc = MT_T(mt_cuda_batchnorm2d_forward)(one, one, one, one, one, one, NULL, NULL, 1, 1, 1,
                                                   (REAL)1e-5, (REAL)0.1, 1, &cu_cx);
  CHECK(rc == MT_ERR_ARG, "batchnorm %s: training on one value per channel is MT_ERR_ARG (%s)", TY,
        mt_error_message());
  mt_error_clear();
  cudaFree(one);
}

static void MT_T(test_pool)(void) {
  /* B C H W KH KW stride_h stride_w pad_h pad_w */
  static const int shapes[][10] = {{2, 3, 8, 8, 2, 2, 2, 2, 0, 0},  {2, 3, 9, 7, 3, 3, 2, 2, 1, 1},
                                   {1, 2, 5, 5, 3, 3, 1, 1, 1, 1},  {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
                                   {3, 4, 31, 17, 4, 3, 3, 2, 2, 1}};
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    const int *q = shapes[k];
    mt_pool2d_shape s = {.B = q[0], .C = q[1], .H = q[2], .W = q[3], .KH = q[4], .KW = q[5],
                         .stride_h = q[6], .stride_w = q[7], .pad_h = q[8], .pad_w = q[9]};
    CHECK(mt_pool2d_shape_init(&s) == 0, "pool shape %zu", k);
    const size_t ni = (size_t)s.B * s.C * s.H * s.W, no = (size_t)s.B * s.C * s.OH * s.OW;
    uint64_t st = 900 + k;
    REAL *x = MT_T(cu_rand)(ni, &st, 2), *y = MT_T(cu_rand)(no, &st, 1), *dy = MT_T(cu_rand)(no, &st, 1);
    REAL *dx = MT_T(cu_rand)(ni, &st, 1);
    for (size_t i = 0; i < ni; i++) x[i] = (REAL)round(2 * x[i]); /* ties: the first maximum */
    if (ni > 20) x[7] = (REAL)NAN, x[ni - 3] = (REAL)NAN;     /* NaN wins */
    int32_t *am = tu_xmalloc(no * 4), *amg = tu_xmalloc(no * 4), *amd = cu_dev(NULL, no * 4);
    REAL *xd = UP(x, ni), *yd = UP(y, no), *dyd = UP(dy, no), *dxd = UP(dx, ni);
    char what[128];
    snprintf(what, sizeof(what), "maxpool %dx%d/%dx%d pad %dx%d on (%d,%d,%d,%d)", s.KH, s.KW, s.stride_h,
             s.stride_w, s.pad_h, s.pad_w, s.B, s.C, s.H, s.W);
    MT_T(mt_maxpool2d_forward)(y, am, x, &s);
    CU_CALL(MT_T(mt_cuda_maxpool2d_forward)(yd, amd, xd, &s, 0), "%s launched", what);
    cu_get(amg, amd, no * 4);
    CHECK(same_bytes(am, amg, no * 4), "%s %s: argmax bit for bit (ties, NaN)", what, TY);
    MT_T(cu_exact)(yd, y, no, what);
    MT_T(mt_maxpool2d_backward)(dx, dy, am, &s);
    CU_CALL(MT_T(mt_cuda_maxpool2d_backward)(dxd, dyd, amd, &s, 0), "launched");
    MT_T(cu_exact)(dxd, dx, ni, "maxpool backward (adds; gathered in the CPU's order)");
    if (ni > 20) x[7] = x[ni - 3] = (REAL)1; /* average pooling: no NaN */
    cu_put(xd, x, ni * sizeof(REAL));
    for (int i = 0; i < 2; i++) {
      s.count_include_pad = i;
      MT_T(mt_avgpool2d_forward)(y, x, &s);
      CU_CALL(MT_T(mt_cuda_avgpool2d_forward)(yd, xd, &s, 0), "launched");
      MT_T(cu_close)(yd, y, no, TOLR(1e-6, 1e-15), i ? "avgpool (count_include_pad)" : "avgpool");
      MT_T(mt_avgpool2d_backward)(dx, dy, &s);
      CU_CALL(MT_T(mt_cuda_avgpool2d_backward)(dxd, dyd, &s, 0), "launched");
      MT_T(cu_close)(dxd, dx, ni, TOLR(1e-6, 1e-15), "avgpool backward (adds)");
    }
    cudaFree(amd), cudaFree(xd), cudaFree(yd), cudaFree(dyd), cudaFree(dxd);
    free(x), free(y), free(dy), free(dx), free(am), free(amg);
  }
  static const int gshapes[][3] = {{3, 5, 49}, {1, 1, 1}, {2, 4, 3000}};
  for (size_t k = 0; k < 3; k++) {
    const int B = gshapes[k][0], C = gshapes[k][1], HW = gshapes[k][2];
    const size_t ni = (size_t)B * C * HW, no = (size_t)B * C;
    uint64_t st = 950 + k;
    REAL *x = MT_T(cu_rand)(ni, &st, 1), *y = MT_T(cu_rand)(no, &st, 1), *dy = MT_T(cu_rand)(no, &st, 1);
    REAL *dx = MT_T(cu_rand)(ni, &st, 1);
    REAL *xd = UP(x, ni), *yd = UP(y, no), *dyd = UP(dy, no), *dxd = UP(dx, ni);
    MT_T(mt_global_avgpool_forward)(y, x, B, C, HW);
    CU_CALL(MT_T(mt_cuda_global_avgpool_forward)(yd, xd, B, C, HW, 0), "launched");
    /* a mean of H*W values summed in another order: f64 was 25 ulps off on an H100 */
    MT_T(cu_close)(yd, y, no, TOLR(1e-6, 1e-13), "global avgpool");
    MT_T(mt_global_avgpool_backward)(dx, dy, B, C, HW);
    CU_CALL(MT_T(mt_cuda_global_avgpool_backward)(dxd, dyd, B, C, HW, 0), "launched");
    MT_T(cu_close)(dxd, dx, ni, TOLR(1e-6, 1e-15), "global avgpool backward (adds)");
    cudaFree(xd), cudaFree(yd), cudaFree(dyd), cudaFree(dxd), free(x), free(y), free(dy), free(dx);
  }
}

static void MT_T(test_conv)(void) {
  /* B IC H W OC KH KW sh sw ph pw dh dw groups */
  static const int shapes[][14] = {{2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
                                   {3, 4, 11, 10, 6, 3, 2, 2, 1, 0, 1, 2, 1, 2},
                                   {1, 5, 4, 4, 7, 1, 1, 1, 1, 0, 0, 1, 1, 1},
                                   {5, 6, 6, 6, 6, 6, 6, 1, 1, 0, 0, 1, 1, 3},
                                   {2, 4, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 4},
                                   {4, 2, 15, 13, 3, 5, 3, 3, 2, 2, 1, 2, 3, 1}};
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    const int *q = shapes[k], bias = k % 2 == 0;
    mt_conv2d_shape s = {.B = q[0], .IC = q[1], .H = q[2], .W = q[3], .OC = q[4], .KH = q[5],
                         .KW = q[6], .stride_h = q[7], .stride_w = q[8], .pad_h = q[9], .pad_w = q[10],
                         .dil_h = q[11], .dil_w = q[12], .groups = q[13]};
    mt_conv2d c;
    if (MT_T(mt_conv2d_init)(&c, &s, bias, NULL)) {
      CHECK(0, "CPU conv2d init: %s", mt_error_message());
      mt_error_clear();
      continue;
    }
    s = c.s; /* OH, OW */
    const size_t ni = (size_t)s.B * s.IC * s.H * s.W, no = (size_t)s.B * s.OC * s.OH * s.OW;
    const size_t nw = (size_t)s.OC * (s.IC / s.groups) * s.KH * s.KW;
    uint64_t st = 1000 + k;
    REAL *x = MT_T(cu_rand)(ni, &st, 1), *w = MT_T(cu_rand)(nw, &st, 1), *b = MT_T(cu_rand)(s.OC, &st, 1);
    REAL *y = MT_T(cu_rand)(no, &st, 1), *dy = MT_T(cu_rand)(no, &st, 1), *dx = MT_T(cu_rand)(ni, &st, 1);
    REAL *dw = MT_T(cu_rand)(nw, &st, 1), *db = MT_T(cu_rand)(s.OC, &st, 1);
    REAL *xd = UP(x, ni), *wd = UP(w, nw), *bd = UP(b, s.OC), *yd = UP(y, no), *dyd = UP(dy, no);
    REAL *dxd = UP(dx, ni), *dwd = UP(dw, nw), *dbd = UP(db, s.OC);
    /* the whole batch with the default column cap, then one image less
     * with one image per chunk */
    for (int pass = 0; pass < 2; pass++) {
      const int B = pass && s.B > 1 ? s.B - 1 : s.B;
      cu_cx.col_bytes = pass ? 1 : 0;
      char what[160];
      snprintf(what, sizeof(what),
               "conv2d %d->%d %dx%d stride %dx%d pad %dx%d dil %dx%d groups %d, batch %d of %d%s%s",
               s.IC, s.OC, s.KH, s.KW, s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dil_h, s.dil_w,
               s.groups, B, s.B, bias ? ", bias" : "", pass ? ", one image per chunk" : "");
      const size_t bo = no / s.B * B, bi = ni / s.B * B;
      CHECK(MT_T(mt_conv2d_forward)(y, x, w, bias ? b : NULL, B, &c) == 0, "CPU conv2d");
      CU_CALL(MT_T(mt_cuda_conv2d_forward)(yd, xd, wd, bias ? bd : NULL, B, &s, &cu_cx), "%s launched",
              what);
      MT_T(cu_close)(yd, y, bo, TOLR(1e-5, 1e-12), what);
      CHECK(MT_T(mt_conv2d_backward)(dx, dw, bias ? db : NULL, dy, x, w, B, &c) == 0, "CPU backward");
      CU_CALL(MT_T(mt_cuda_conv2d_backward)(dxd, dwd, bias ? dbd : NULL, dyd, xd, wd, B, &s, &cu_cx),
              "conv2d backward launched");
      MT_T(cu_close)(dxd, dx, bi, TOLR(1e-5, 1e-12), "conv2d backward: dinp (adds; col2im)");
      MT_T(cu_close)(dwd, dw, nw, TOLR(1e-5, 1e-12), "conv2d backward: dweight (adds)");
      if (bias) MT_T(cu_close)(dbd, db, s.OC, TOLR(1e-5, 1e-12), "conv2d backward: dbias (adds)");
    }
    cu_cx.col_bytes = 0;
    mt_conv2d_free(&c);
    cudaFree(xd), cudaFree(wd), cudaFree(bd), cudaFree(yd), cudaFree(dyd), cudaFree(dxd);
    cudaFree(dwd), cudaFree(dbd);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db);
  }
}

static void MT_T(test_embedding)(void) {
  static const int shapes[][4] = {{3, 17, 33, 50}, {1, 1, 1, 1}, {8, 64, 768, 1000}};
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    const int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], V = shapes[k][3];
    const size_t bt = (size_t)B * T, n = bt * C;
    uint64_t st = 1100 + k;
    int32_t *tok = tu_xmalloc(bt * 4);
    for (size_t i = 0; i < bt; i++) /* many repeats: a few tokens are frequent */
      tok[i] = (int32_t)((uint64_t)(fabs(tu_uniform(&st)) * fabs(tu_uniform(&st)) * V) % (uint64_t)V);
    REAL *wte = MT_T(cu_rand)((size_t)V * C, &st, 1), *wpe = MT_T(cu_rand)((size_t)T * C, &st, 1);
    REAL *y = MT_T(cu_rand)(n, &st, 1), *dy = MT_T(cu_rand)(n, &st, 1);
    REAL *dwte = MT_T(cu_rand)((size_t)V * C, &st, 1), *dwpe = MT_T(cu_rand)((size_t)T * C, &st, 1);
    int32_t *tokd = cu_dev(tok, bt * 4);
    REAL *wted = UP(wte, (size_t)V * C), *wped = UP(wpe, (size_t)T * C), *yd = UP(y, n), *dyd = UP(dy, n);
    REAL *dwted = UP(dwte, (size_t)V * C), *dwped = UP(dwpe, (size_t)T * C);
    char what[128];
    for (int pos = 0; pos < 2; pos++) {
      snprintf(what, sizeof(what), "embedding B=%d T=%d C=%d V=%d%s", B, T, C, V, pos ? " + positions" : "");
      CHECK(MT_T(mt_embedding_forward)(y, tok, wte, pos ? wpe : NULL, B, T, C, V) == 0, "CPU embedding");
      CU_CALL(MT_T(mt_cuda_embedding_forward)(yd, tokd, wted, pos ? wped : NULL, B, T, C, V, &cu_cx),
              "%s launched", what);
      MT_T(cu_exact)(yd, y, n, what);
    }
    MT_T(mt_embedding_backward)(dwte, dwpe, dy, tok, B, T, C);
    CU_CALL(MT_T(mt_cuda_embedding_backward)(dwted, dwped, dyd, tokd, B, T, C, &cu_cx), "launched");
    MT_T(cu_exact)(dwted, dwte, (size_t)V * C, "embedding backward: dwte (sorted tokens, the CPU's order)");
    MT_T(cu_exact)(dwped, dwpe, (size_t)T * C, "embedding backward: dwpe (adds)");
    MT_T(mt_embedding_backward)(dwte, NULL, dy, tok, B, T, C);
    CU_CALL(MT_T(mt_cuda_embedding_backward)(dwted, NULL, dyd, tokd, B, T, C, &cu_cx), "launched");
    MT_T(cu_exact)(dwted, dwte, (size_t)V * C, "embedding backward again, dwpe NULL: dwte");
    if (k == 0) { /* a token outside the vocabulary */
      tok[5] = V + 49;
      cu_put(tokd, tok, bt * 4);
      int rc = MT_T(mt_cuda_embedding_forward)(yd, tokd, wted, NULL, B, T, C, V, &cu_cx);
      CHECK(rc == MT_ERR_DATA && strstr(mt_error_message(), "token 99 at position 5"),
            "embedding %s: a token outside [0,V) is MT_ERR_DATA naming it (%s)", TY, mt_error_message());
      mt_error_clear();
      cu_cx.check = 0;
      rc = MT_T(mt_cuda_embedding_forward)(yd, tokd, wted, NULL, B, T, C, V, &cu_cx);
      CHECK(rc == 0, "embedding %s without checks: no wait, no error", TY);
      cu_cx.check = 1;
    }
    cudaFree(tokd), cudaFree(wted), cudaFree(wped), cudaFree(yd), cudaFree(dyd), cudaFree(dwted);
    cudaFree(dwped);
    free(tok), free(wte), free(wpe), free(y), free(dy), free(dwte), free(dwpe);
  }
}

static void MT_T(test_attention)(void) {
  /* B <= NH: one batched GEMM per image; B > NH (the last two): one per head */
  static const int shapes[][4] = {{2, 5, 12, 3}, {1, 1, 4, 1}, {3, 37, 64, 4}, {1, 130, 32, 2},
                                  {6, 20, 32, 2}, {5, 9, 12, 1}};
  for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
    const int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], NH = shapes[k][3];
    const size_t ni = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    uint64_t st = 1200 + k;
    REAL *x = MT_T(cu_rand)(ni, &st, 1), *y = MT_T(cu_rand)(no, &st, 1), *pre = MT_T(cu_rand)(na, &st, 1);
    REAL *att = MT_T(cu_rand)(na, &st, 1), *dy = MT_T(cu_rand)(no, &st, 1), *dx = MT_T(cu_rand)(ni, &st, 1);
    REAL *scr = MT_T(cu_rand)(na, &st, 1);
    REAL *xd = UP(x, ni), *yd = UP(y, no), *pred = UP(pre, na), *attd = UP(att, na), *dyd = UP(dy, no);
    REAL *dxd = UP(dx, ni), *scrd = UP(scr, na);
    char what[128];
    snprintf(what, sizeof(what), "attention B=%d T=%d C=%d NH=%d", B, T, C, NH);
    CHECK(MT_T(mt_attention_forward)(y, pre, att, x, B, T, C, NH, NULL) == 0, "CPU attention");
    CU_CALL(MT_T(mt_cuda_attention_forward)(yd, pred, attd, xd, B, T, C, NH, &cu_cx), "%s launched", what);
    MT_T(cu_close)(yd, y, no, TOLR(1e-5, 1e-12), what);
    MT_T(cu_close)(pred, pre, na, TOLR(1e-5, 1e-12), "attention preatt (0 above the diagonal)");
    MT_T(cu_close)(attd, att, na, TOLR(1e-6, 1e-13), "attention att (causal softmax)");
    CHECK(MT_T(mt_attention_backward)(dx, scr, dy, x, att, B, T, C, NH, NULL) == 0, "CPU backward");
    CU_CALL(MT_T(mt_cuda_attention_backward)(dxd, scrd, dyd, xd, attd, B, T, C, NH, &cu_cx),
            "attention backward launched");
    MT_T(cu_close)(dxd, dx, ni, TOLR(1e-5, 1e-12), "attention backward: dq, dk, dv (adds)");
    cudaFree(xd), cudaFree(yd), cudaFree(pred), cudaFree(attd), cudaFree(dyd), cudaFree(dxd);
    cudaFree(scrd);
    free(x), free(y), free(pre), free(att), free(dy), free(dx), free(scr);
  }
  const int rc = MT_T(mt_cuda_attention_forward)(NULL, NULL, NULL, NULL, 1, 4, 10, 3, &cu_cx);
  CHECK(rc == MT_ERR_ARG, "attention %s: C not a multiple of NH is MT_ERR_ARG", TY);
  mt_error_clear();
}

static void MT_T(test_layers)(void) {
  MT_T(test_layernorm)();
  MT_T(test_batchnorm)();
  MT_T(test_pool)();
  MT_T(test_conv)();
  MT_T(test_embedding)();
  MT_T(test_attention)();
}

#undef UP
