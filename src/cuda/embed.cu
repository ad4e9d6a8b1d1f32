// Token and position embeddings on the GPU (only built with CUDA), for
// float and double (the template embed_t.cuh).
//
// The backward of the token table is deterministic and gives the CPU's
// bits. A token may occur many times in a batch, so a thread per position
// adding into dwte would need floating-point atomics, whose order varies
// from run to run. Instead the positions are sorted by (token, position):
// 64-bit keys token << 32 | position, sorted by CUB's radix sort (the keys
// are distinct, so the sorted order is unique whatever the algorithm does
// inside). Each run of equal tokens is one thread block, whose threads own
// the channels and add that token's rows in increasing position: the order
// of the CPU's loop, which runs over positions for each channel block. The
// alternative, one thread per channel over all positions, needs no sort
// but only C threads; the sort costs a few microseconds for a batch of
// thousands of tokens and lets the work spread over every distinct token.
#include "cuda/common.cuh"
#include "cuda/kernels.h"

#include <cub/device/device_radix_sort.cuh>

namespace {

// keys[i] = token << 32 | i for the n positions
__global__ void make_keys_k(uint64_t *keys, const int32_t *tokens, int64_t n) {
  MT_GRID_STRIDE(i, n) keys[i] = (uint64_t)(uint32_t)tokens[i] << 32 | (uint64_t)i;
}

// The n positions' keys sorted by token then position, in the context's
// sort scratch (the unsorted keys, the sorted ones, CUB's temporary).
int sort_positions(mt_cuda_ctx *cx, const int32_t *tokens, int64_t n, uint64_t **sorted) {
  size_t temp = 0;
  MT_CUDA_RT(cub::DeviceRadixSort::SortKeys(NULL, temp, (const uint64_t *)NULL, (uint64_t *)NULL,
                                            (int)n, 0, 64, cx->stream));
  const size_t kbytes = ((size_t)n * sizeof(uint64_t) + 255) & ~(size_t)255;
  char *p;
  MT_CUDA_TRY(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_SORT, 2 * kbytes + temp, (void **)&p));
  uint64_t *in = (uint64_t *)p, *out = (uint64_t *)(p + kbytes);
  make_keys_k<<<mtc::grid_for(n), mtc::kBlock, 0, cx->stream>>>(in, tokens, n);
  MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  MT_CUDA_RT(cub::DeviceRadixSort::SortKeys(p + 2 * kbytes, temp, in, out, (int)n, 0, 64,
                                            cx->stream));
  *sorted = out;
  return 0;
}

// With cx->check: waits for the stream and fails as the CPU does on the
// first position whose token is outside [0,V).
int check_tokens(mt_cuda_ctx *cx, const int32_t *tokens, int V) {
  if (!cx->check) return 0;
  int pos = mtc::kNoBadRow, tok = 0;
  MT_CUDA_RT(mtc::read_flag(cx->flag, cx->stream, &pos));
  if (pos == mtc::kNoBadRow) return 0;
  MT_CUDA_RT(cudaMemcpy(&tok, tokens + pos, sizeof(int), cudaMemcpyDeviceToHost));
  return mt_cuda_fail(__FILE__, __LINE__, __func__, MT_CUDA_ERR_DATA,
                      "embedding: token %d at position %d is outside the vocabulary [0,%d)", tok,
                      pos, V);
}

} // namespace

#define MT_TEMPLATE "cuda/embed_t.cuh"
#include "core/real_t.h"
