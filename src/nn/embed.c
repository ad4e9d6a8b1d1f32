/* Token and position embeddings (llm.c's encoder). */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

int mt_embedding_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                         int B, int T, int C, int V) {
  // tokens is (B,T); wte is (V,C); wpe is (>=T,C); out is (B,T,C)
  const int64_t BT = (int64_t)B * T;
  for (int64_t i = 0; i < BT; i++)
    MT_CHECK(tokens[i] >= 0 && tokens[i] < V, MT_ERR_DATA,
             "embedding: token %d at position %lld is outside the vocabulary [0,%d)",
             (int)tokens[i], (long long)i, V);
#pragma omp parallel for schedule(static) if (BT * C > 65536)
  for (int64_t i = 0; i < BT; i++) {
    float *o = out + i * C;
    const float *e = wte + (int64_t)tokens[i] * C;
    if (wpe) {
      const float *p = wpe + (i % T) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] = e[c];
    }
  }
  return 0;
}

void mt_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
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
        float *g = dwte + (int64_t)tokens[i] * C;
        const float *d = dout + i * C;
        for (int c = c0; c < c1; c++) g[c] += d[c];
      }
    }
  }
  if (dwpe) {
#pragma omp parallel for schedule(static) if (BT * C > 65536)
    for (int t = 0; t < T; t++) {
      float *g = dwpe + (int64_t)t * C;
      for (int b = 0; b < B; b++) {
        const float *d = dout + ((int64_t)b * T + t) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) g[c] += d[c];
      }
    }
  }
}
