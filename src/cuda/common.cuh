// Launch geometry and reductions shared by the .cu files (device code
// only; included by nvcc). Reductions are deterministic: a warp sums by an
// xor butterfly (every lane ends with the same bits, since each step adds
// the same two values in either lane), a block by a fixed tree over its
// warps, so for a given block size the order of every sum is fixed.
#ifndef MT_CUDA_COMMON_CUH
#define MT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace mtc {

constexpr int kBlock = 256;        // threads of an element-wise block
constexpr int64_t kMaxGrid = 4096; // blocks of a grid-stride launch: about
                                   // four waves of a 132-SM GPU; larger n
                                   // is covered by the grid-stride loops

// Blocks for n elements at block threads each, at most kMaxGrid, at least 1.
static inline unsigned grid_for(int64_t n, int block = kBlock) {
  int64_t g = (n + block - 1) / block;
  if (g > kMaxGrid) g = kMaxGrid;
  return g > 0 ? (unsigned)g : 1u;
}

// Threads of a block that works on one row of n values: the warps that
// cover n, at most 256 (fixed by n, so a row's sums have a fixed order).
static inline unsigned row_threads(int64_t n) {
  return n <= 32 ? 32 : n <= 64 ? 64 : n <= 128 ? 128 : 256;
}

// Element i of a 1-d grid-stride loop over [0, n), 64-bit.
#define MT_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n); \
       i += (int64_t)gridDim.x * blockDim.x)

// a * b rounded on its own, never fused into an FMA with a following add:
// where the CPU forms a product first and adds it later, the GPU must too
// to give the same bits
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// fmax ignores a NaN on either side, so the butterfly stays symmetric.
template <typename A>
__device__ __forceinline__ A warp_max(A v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. Safe to call several times in a row.
template <typename A>
__device__ A block_sum(A v) {
  __shared__ A part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads(); // the previous call's readers are done with part
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : A(0);
  return warp_sum(v);
}

template <typename A>
__device__ A block_max(A v) {
  __shared__ A part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nw ? part[lane] : A(-INFINITY);
  return warp_max(v);
}

// The device int *flag on the host, after the work queued on st before it
// (the data checks of the embedding and of the cross-entropy).
static inline cudaError_t read_flag(const int *flag, cudaStream_t st, int *out) {
  cudaError_t e = cudaMemcpyAsync(out, flag, sizeof(int), cudaMemcpyDeviceToHost, st);
  return e != cudaSuccess ? e : cudaStreamSynchronize(st);
}

// No bad row: the value cudaMemsetAsync(flag, 0x7F, ...) leaves, above
// any row index; a kernel lowers it with atomicMin to the first bad row.
constexpr int kNoBadRow = 0x7F7F7F7F;

// ---------------------------------------------------------- column sums
// dst[j] += sum over rows r of load(r, j), for a (rows, cols) matrix, in
// double and in a fixed order: the rows are cut into nchunks chunks; block
// (jb, c) of a (cols/32, nchunks) grid of 32x8 threads sums columns
// [32 jb, 32 jb + 32) over chunk c (thread row ty takes rows ty, ty+8, ...
// of the chunk; the 8 partial sums are then added in ty order) into
// part[c * cols + j]; then one thread per column adds the chunks in order.

constexpr int kColTile = 32, kColRows = 8;

// chunks for rows rows: about 128 rows each, at most 256 of them
static inline int64_t colsum_chunks(int64_t rows) {
  int64_t c = (rows + 127) / 128;
  return c < 1 ? 1 : (c > 256 ? 256 : c);
}

template <typename Load>
__global__ void colsum_partial_k(double *part, Load load, int64_t rows, int64_t cols,
                                 int64_t chunk) {
  __shared__ double acc[kColRows][kColTile];
  const int64_t j = (int64_t)blockIdx.x * kColTile + threadIdx.x;
  const int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
  double a = 0.0;
  if (j < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) a += load(r, j);
  acc[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    double s = acc[0][threadIdx.x];
    for (int k = 1; k < kColRows; k++) s += acc[k][threadIdx.x];
    part[(int64_t)blockIdx.y * cols + j] = s;
  }
}

template <typename T>
__global__ void colsum_finish_k(T *dst, const double *part, int64_t nchunks, int64_t cols) {
  MT_GRID_STRIDE(j, cols) {
    double s = 0.0;
    for (int64_t c = 0; c < nchunks; c++) s += part[c * cols + j];
    dst[j] += (T)s;
  }
}

// Launches both passes on stream st with part (nchunks * cols doubles,
// nchunks = colsum_chunks(rows)); returns the launch's error.
template <typename T, typename Load>
cudaError_t colsum(T *dst, double *part, Load load, int64_t rows, int64_t cols,
                   cudaStream_t st) {
  const int64_t nchunks = colsum_chunks(rows), chunk = (rows + nchunks - 1) / nchunks;
  const dim3 grid((unsigned)((cols + kColTile - 1) / kColTile), (unsigned)nchunks);
  colsum_partial_k<<<grid, dim3(kColTile, kColRows), 0, st>>>(part, load, rows, cols, chunk);
  colsum_finish_k<<<grid_for(cols), kBlock, 0, st>>>(dst, part, nchunks, cols);
  return cudaGetLastError();
}

} // namespace mtc

#endif
