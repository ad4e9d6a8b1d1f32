// The losses on the GPU, a template for REAL = float and double (loss.cu):
// softmax cross-entropy (nn/loss_t.h), with an ignore label and mean
// squared error (nn/elementwise_t.h). Logits, probs and dlogits are
// (rows, C) row-major; labels (rows). A forward runs one block per row,
// which writes its loss (double) and its hit and counted flags into
// scratch (loss.cu: RowOut); then one block adds the rows in a fixed order.

namespace {

// The row's first maximum, as the CPU's scan `if (l[j] > mx)` from l[0]:
// over the candidates (value, index) the largest value wins, the smaller
// index on ties, and a NaN can only win at index 0 (where the scan starts;
// a later NaN never compares greater). A total order, so the butterfly
// gives the same winner in every lane.
struct MT_T(Cand) {
  REAL v;
  int i;
};

__device__ __forceinline__ bool MT_T(beats)(MT_T(Cand) a, MT_T(Cand) b) {
  if (b.i == 0 && isnan(b.v)) return false;
  if (a.i == 0 && isnan(a.v)) return true;
  return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ MT_T(Cand) MT_T(row_argmax)(const REAL *l, int C) {
  MT_T(Cand) c = {(REAL)-INFINITY, 0x7FFFFFFF};
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    const MT_T(Cand) e = {l[j], j};
    if ((j == 0 || !isnan(e.v)) && MT_T(beats)(e, c)) c = e;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const MT_T(Cand) e = {__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.i, o)};
    if (MT_T(beats)(e, c)) c = e;
  }
  __shared__ MT_T(Cand) part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = c;
  __syncthreads();
  c = lane < (int)(blockDim.x >> 5) ? part[lane] : MT_T(Cand){(REAL)-INFINITY, 0x7FFFFFFF};
  for (int o = 16; o > 0; o >>= 1) {
    const MT_T(Cand) e = {__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.i, o)};
    if (MT_T(beats)(e, c)) c = e;
  }
  return c;
}

// mt_softmax_xent_forward's row: z = sum exp((double)(l - mx)), p = exp(l -
// mx) * (REAL)(1/z), loss = log z - (l[y] - mx); a label outside [0,C)
// gives NaN (the CPU reads out of bounds there)
__global__ void MT_T(xent_rows_k)(REAL *probs, REAL *losses, RowOut out, const REAL *logits,
                                  const int32_t *y, int C) {
  const int64_t r = blockIdx.x;
  const REAL *l = logits + r * C;
  REAL *p = probs + r * C;
  const MT_T(Cand) m = MT_T(row_argmax)(l, C);
  const REAL mx = m.v;
  double z = 0.0;
  for (int j = threadIdx.x; j < C; j += blockDim.x) z += exp((double)(l[j] - mx));
  z = mtc::block_sum(z);
  const REAL inv = (REAL)(1.0 / z);
  for (int j = threadIdx.x; j < C; j += blockDim.x) p[j] = MT_EXP(l[j] - mx) * inv;
  if (threadIdx.x == 0) {
    const int yi = y[r];
    const double loss = yi >= 0 && yi < C ? log(z) - (double)(l[yi] - mx) : (double)NAN;
    if (losses) losses[r] = (REAL)loss;
    out.loss[r] = loss;
    out.hit[r] = m.i == yi;
    out.counted[r] = 1;
  }
}

// mt_xent_ignore_forward's row: p = exp(l - mx), z = sum p in double,
// p *= (REAL)(1/z), loss = log z - (l[y] - mx) on a counted row; a bad
// label is recorded (the lowest such row in *bad) and its row not counted.
// probs may equal logits: l[y] is read before the block's first write.
__global__ void MT_T(xent_ignore_rows_k)(REAL *probs, REAL *losses, RowOut out,
                                         const REAL *logits, const int32_t *y, int ignore_index,
                                         int C, int *bad) {
  const int64_t r = blockIdx.x;
  const REAL *l = logits + r * C;
  REAL *p = probs + r * C;
  const int yi = y[r];
  const int valid = yi == ignore_index || (yi >= 0 && yi < C);
  const int counted = valid && yi != ignore_index;
  const MT_T(Cand) m = MT_T(row_argmax)(l, C); // every l[j] read, before its inner barrier
  const REAL mx = m.v;
  const REAL ly = counted ? l[yi] : (REAL)0;
  __syncthreads(); // ly is read before any thread overwrites l
  double z = 0.0;
  for (int j = threadIdx.x; j < C; j += blockDim.x) {
    const REAL e = MT_EXP(l[j] - mx);
    p[j] = e;
    z += e;
  }
  z = mtc::block_sum(z);
  const REAL inv = (REAL)(1.0 / z);
  for (int j = threadIdx.x; j < C; j += blockDim.x) p[j] *= inv;
  if (threadIdx.x == 0) {
    const double loss = counted ? log(z) - (double)(ly - mx) : 0.0;
    if (losses) losses[r] = (REAL)loss;
    out.loss[r] = loss;
    out.hit[r] = counted && m.i == yi;
    out.counted[r] = counted;
    if (!valid) atomicMin(bad, (int)r);
  }
}

// mt_mse_forward's row: s = sum ((double)pred - target)^2, losses = s / K
__global__ void MT_T(mse_rows_k)(REAL *losses, RowOut out, const REAL *pred, const REAL *target,
                                 int K) {
  const int64_t r = blockIdx.x;
  double s = 0.0;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const double d = (double)pred[r * K + k] - target[r * K + k];
    s += d * d;
  }
  s = mtc::block_sum(s);
  if (threadIdx.x == 0) {
    if (losses) losses[r] = (REAL)(s / K);
    out.loss[r] = s;
    out.hit[r] = 0;
    out.counted[r] = 1;
  }
}

// dlogits (rows, C) += scale * (probs - onehot(y)) on rows whose label is
// not ignore_index (the CPU's two steps: d += scale p, then d[y] -= scale)
__global__ void MT_T(xent_bwd_k)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                 int ignore_index, REAL scale, int C, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const int64_t r = i / C;
    const int j = (int)(i - r * C), yi = y[r];
    if (yi == ignore_index) continue;
    REAL d = dlogits[i] + scale * probs[i];
    if (j == yi) d -= scale;
    dlogits[i] = d;
  }
}

__global__ void MT_T(mse_bwd_k)(REAL *dpred, const REAL *pred, const REAL *target, REAL s2,
                                int64_t n) {
  MT_GRID_STRIDE(i, n) dpred[i] += s2 * (pred[i] - target[i]);
}

} // namespace

int MT_T(mt_cuda_softmax_xent_forward)(REAL *probs, REAL *losses, double *loss_sum,
                                       int64_t *correct, const REAL *logits, const int32_t *y,
                                       int B, int C, mt_cuda_ctx *cx) {
  // logits, probs are (B,C); y and losses are (B)
  MT_CUDA_ARG(B >= 0 && C >= 1, "sizes B=%d C=%d", B, C);
  RowOut out;
  MT_CUDA_TRY(row_out(cx, B, &out));
  if (B > 0)
    MT_T(xent_rows_k)<<<B, mtc::row_threads(C), 0, cx->stream>>>(probs, losses, out, logits, y, C);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  return rows_reduce(cx, out, B, loss_sum, NULL, correct);
}

int MT_T(mt_cuda_softmax_xent_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                        REAL scale, int B, int C, cudaStream_t s) {
  const int64_t n = (int64_t)B * C;
  if (n <= 0) return 0;
  // no label is ignored: INT32_MIN is never a class
  MT_T(xent_bwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, s>>>(dlogits, probs, y, INT32_MIN, scale,
                                                            C, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_xent_ignore_forward)(REAL *probs, REAL *losses, double *loss_sum,
                                      int64_t *count, int64_t *correct, const REAL *logits,
                                      const int32_t *y, int ignore_index, int N, int C,
                                      mt_cuda_ctx *cx) {
  // logits and probs are (N,C); y and losses are (N)
  MT_CUDA_ARG(N >= 0 && C >= 1, "sizes N=%d C=%d", N, C);
  RowOut out;
  MT_CUDA_TRY(row_out(cx, N, &out));
  MT_CUDA_RT(cudaMemsetAsync(cx->flag, 0x7F, sizeof(int), cx->stream)); /* no bad row */
  if (N > 0)
    MT_T(xent_ignore_rows_k)<<<N, mtc::row_threads(C), 0, cx->stream>>>(probs, losses, out, logits, y,
                                                                  ignore_index, C, cx->flag);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  MT_CUDA_TRY(rows_reduce(cx, out, N, loss_sum, count, correct));
  return check_labels(cx, y, ignore_index, C);
}

int MT_T(mt_cuda_xent_ignore_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                       int ignore_index, REAL scale, int N, int C,
                                       cudaStream_t s) {
  const int64_t n = (int64_t)N * C;
  if (n <= 0) return 0;
  MT_T(xent_bwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, s>>>(dlogits, probs, y, ignore_index,
                                                            scale, C, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_mse_forward)(REAL *losses, double *loss_sum, const REAL *pred,
                              const REAL *target, int B, int K, mt_cuda_ctx *cx) {
  // pred and target are (B,K); losses is (B)
  MT_CUDA_ARG(B >= 0 && K >= 1, "sizes B=%d K=%d", B, K);
  RowOut out;
  MT_CUDA_TRY(row_out(cx, B, &out));
  if (B > 0) MT_T(mse_rows_k)<<<B, mtc::row_threads(K), 0, cx->stream>>>(losses, out, pred, target, K);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  return rows_reduce(cx, out, B, loss_sum, NULL, NULL);
}

int MT_T(mt_cuda_mse_backward)(REAL *dpred, const REAL *pred, const REAL *target, REAL scale,
                               int B, int K, cudaStream_t s) {
  const int64_t n = (int64_t)B * K;
  if (n <= 0) return 0;
  MT_T(mse_bwd_k)<<<mtc::grid_for(n), mtc::kBlock, 0, s>>>(dpred, pred, target, (REAL)2 * scale,
                                                           n);
  return MT_CUDA_LAUNCHED();
}
