/* Token and position embeddings (llm.c's encoder), a template for REAL =
 * float and double (embed.c). */

int MT_T(mt_embedding_forward)(REAL *out, const int32_t *tokens, const REAL *wte,
                               const REAL *wpe, int B, int T, int C, int V) {
  // tokens is (B,T); wte is (V,C); wpe is (>=T,C); out is (B,T,C)
  const int64_t BT = (int64_t)B * T;
  for (int64_t i = 0; i < BT; i++)
    MT_CHECK(tokens[i] >= 0 && tokens[i] < V, MT_ERR_DATA,
             "embedding: token %d at position %lld is outside the vocabulary [0,%d)",
             (int)tokens[i], (long long)i, V);
#pragma omp parallel for schedule(static) if (BT * C > 65536)
  for (int64_t i = 0; i < BT; i++) {
    REAL *o = out + i * C;
    const REAL *e = wte + (int64_t)tokens[i] * C;
    if (wpe) {
      const REAL *p = wpe + (i % T) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = e[c];
    }
  }
  return 0;
}

void MT_T(mt_embedding_backward)(REAL *dwte, REAL *dwpe, const REAL *dout, const int32_t *tokens,
                                 int B, int T, int C) {
  // dout is (B,T,C); dwte is (V,C); dwpe is (>=T,C)
  const int64_t BT = (int64_t)B * T;
  enum { CB = 64 };
  if (dwte) {
    /* a token may repeat: threads own channel blocks, never rows */
#pragma omp parallel for schedule(static) if (BT * C > 65536)
    for (int c0 = 0; c0 < C; c0 += CB) {
      const int c1 = c0 + CB < C ? c0 + CB : C;
      for (int64_t i = 0; i < BT; i++) {
        REAL *g = dwte + (int64_t)tokens[i] * C;
        const REAL *d = dout + i * C;
        for (int c = c0; c < c1; c++) g[c] += d[c];
      }
    }
  }
  if (dwpe) {
#pragma omp parallel for schedule(static) if (BT * C > 65536)
    for (int t = 0; t < T; t++) {
      REAL *g = dwpe + (int64_t)t * C;
      for (int b = 0; b < B; b++) {
        const REAL *d = dout + ((int64_t)b * T + t) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) g[c] += d[c];
      }
    }
  }
}
