// Token and position embeddings on the GPU, a template for REAL = float and
// double (embed.cu): tokens (B,T) int32; wte, dwte (V,C); wpe, dwpe
// (>=T,C); out, dout (B,T,C).

namespace {

// one thread per (position, channel); a token outside [0,V) leaves its row
// and records the lowest such position in *bad
__global__ void MT_T(embed_fwd_k)(REAL *out, const int32_t *tokens, const REAL *wte,
                                  const REAL *wpe, int T, int C, int V, int *bad, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const int64_t pos = i / C;
    const int c = (int)(i - pos * C), tok = tokens[pos];
    if (tok < 0 || tok >= V) {
      if (c == 0) atomicMin(bad, (int)pos);
      continue;
    }
    const REAL e = wte[(int64_t)tok * C + c];
    out[i] = wpe ? e + wpe[(pos % T) * C + c] : e;
  }
}

// One block per segment of equal tokens in the sorted keys (a block whose
// key starts no segment returns at once): each thread owns channels c and
// adds the segment's rows of dout to dwte's row in position order.
__global__ void MT_T(embed_dwte_k)(REAL *dwte, const REAL *dout, const uint64_t *keys, int C,
                                   int64_t n) {
  const int64_t j = blockIdx.x;
  const uint64_t tok = keys[j] >> 32;
  if (j > 0 && keys[j - 1] >> 32 == tok) return;
  int64_t end = j + 1;
  while (end < n && keys[end] >> 32 == tok) end++;
  REAL *g = dwte + (int64_t)tok * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    REAL acc = g[c];
    for (int64_t k = j; k < end; k++) acc += dout[(int64_t)(keys[k] & 0xFFFFFFFFu) * C + c];
    g[c] = acc;
  }
}

// dwpe[t,c] += sum over b in order of dout[b,t,c]; one thread per (t,c)
__global__ void MT_T(embed_dwpe_k)(REAL *dwpe, const REAL *dout, int B, int T, int C) {
  const int64_t tc = (int64_t)T * C;
  MT_GRID_STRIDE(i, tc) {
    REAL acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += dout[b * tc + i];
    dwpe[i] = acc;
  }
}

} // namespace

int MT_T(mt_cuda_embedding_forward)(REAL *out, const int32_t *tokens, const REAL *wte,
                                    const REAL *wpe, int B, int T, int C, int V,
                                    mt_cuda_ctx *cx) {
  MT_CUDA_ARG(B >= 0 && T >= 1 && C >= 1 && V >= 1, "sizes B=%d T=%d C=%d V=%d", B, T, C, V);
  const int64_t n = (int64_t)B * T * C;
  MT_CUDA_ARG((int64_t)B * T <= INT32_MAX, "%lld positions beyond int", (long long)B * T);
  if (n == 0) return 0;
  MT_CUDA_RT(cudaMemsetAsync(cx->flag, 0x7F, sizeof(int), cx->stream)); /* no bad position */
  MT_T(embed_fwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, cx->stream>>>(out, tokens, wte, wpe, T, C,
                                                                      V, cx->flag, n);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  return check_tokens(cx, tokens, V);
}

int MT_T(mt_cuda_embedding_backward)(REAL *dwte, REAL *dwpe, const REAL *dout,
                                     const int32_t *tokens, int B, int T, int C, mt_cuda_ctx *cx) {
  MT_CUDA_ARG(B >= 0 && T >= 1 && C >= 1, "sizes B=%d T=%d C=%d", B, T, C);
  const int64_t BT = (int64_t)B * T;
  MT_CUDA_ARG(BT <= INT32_MAX, "%lld positions beyond int", (long long)BT);
  if (BT == 0) return 0;
  if (dwte) {
    uint64_t *keys;
    MT_CUDA_TRY(sort_positions(cx, tokens, BT, &keys));
    MT_T(embed_dwte_k)<<<(unsigned)BT, mtc::row_threads(C), 0, cx->stream>>>(dwte, dout, keys, C,
                                                                             BT);
    MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  }
  if (dwpe) {
    MT_T(embed_dwpe_k)<<<mtc::grid_for((int64_t)T * C), mtc::kBlock, 0, cx->stream>>>(dwpe, dout, B,
                                                                                     T, C);
    MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  }
  return 0;
}
