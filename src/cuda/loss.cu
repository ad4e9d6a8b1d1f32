// The losses on the GPU (only built with CUDA): softmax cross-entropy,
// its ignore-label variant (the gpt's) and mean squared error, forward and
// backward, for float and double (the template loss_t.cuh). The forwards
// return their sums in device scalars, added in a fixed order.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace {

// Per-row results of a forward, in the context's reduction scratch.
struct RowOut {
  double *loss;  // (rows) the row's loss in double
  int *hit;      // (rows) 1 when the top-1 class is the label
  int *counted;  // (rows) 0 for an ignored row
};

int row_out(mt_cuda_ctx *cx, int64_t rows, RowOut *o) {
  const size_t n = rows > 0 ? (size_t)rows : 1;
  char *p;
  MT_CUDA_TRY(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_REDUCE, n * (sizeof(double) + 2 * sizeof(int)),
                              (void **)&p));
  o->loss = (double *)p;
  o->hit = (int *)(p + n * sizeof(double));
  o->counted = o->hit + n;
  return 0;
}

// One block: the rows' sums in a fixed order (thread t takes rows t,
// t + 1024, ..., then the block's tree).
__global__ void rows_reduce_k(RowOut o, int64_t rows, double *loss_sum, int64_t *count,
                              int64_t *correct) {
  double s = 0.0;
  long long c = 0, h = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    s += o.loss[r];
    c += o.counted[r];
    h += o.hit[r];
  }
  s = mtc::block_sum(s);
  c = mtc::block_sum(c);
  h = mtc::block_sum(h);
  if (threadIdx.x == 0) {
    if (loss_sum) *loss_sum = s;
    if (count) *count = (int64_t)c;
    if (correct) *correct += (int64_t)h;
  }
}

int rows_reduce(mt_cuda_ctx *cx, RowOut o, int64_t rows, double *loss_sum, int64_t *count,
                int64_t *correct) {
  if (!loss_sum && !count && !correct) return 0;
  rows_reduce_k<<<1, 1024, 0, cx->stream>>>(o, rows, loss_sum, count, correct);
  return MT_CUDA_LAUNCHED();
}

// With cx->check: waits for the stream and fails as the CPU does on the
// first row whose label is neither ignore_index nor in [0,C).
int check_labels(mt_cuda_ctx *cx, const int32_t *y, int ignore_index, int C) {
  if (!cx->check) return 0;
  int row = mtc::kNoBadRow, label = 0;
  MT_CUDA_RT(mtc::read_flag(cx->flag, cx->stream, &row));
  if (row == mtc::kNoBadRow) return 0;
  MT_CUDA_RT(cudaMemcpy(&label, y + row, sizeof(int), cudaMemcpyDeviceToHost));
  return mt_cuda_fail(__FILE__, __LINE__, __func__, MT_CUDA_ERR_DATA,
                      "cross-entropy: label %d of row %d is outside [0,%d) and not the ignore "
                      "index %d",
                      label, row, C, ignore_index);
}

} // namespace

#define MT_TEMPLATE "cuda/loss_t.cuh"
#include "core/real_t.h"
