// bf16 / fp16 on the GPU (only built with CUDA): the conversions and
// in-place roundings of nn/precision.h with its exact bit rules (the scalar
// functions of cuda/bits.h, the CPU's integer code), the inf/NaN test of
// the loss scaler, and the operand packing of a low-precision GEMM. Float
// only. One thread per element in grid-stride loops; a conversion reads and
// writes flat arrays of n elements.
#include "cuda/bits.h"
#include "cuda/common.cuh"
#include "cuda/kernels.h"

namespace {

__global__ void to_bf16_k(uint16_t *dst, const float *src, int64_t n) {
  MT_GRID_STRIDE(i, n) dst[i] = mt_cu_bf16_from_float(src[i]);
}

__global__ void from_bf16_k(float *dst, const uint16_t *src, int64_t n) {
  MT_GRID_STRIDE(i, n) dst[i] = mt_cu_float_from_bf16(src[i]);
}

__global__ void to_fp16_k(uint16_t *dst, const float *src, int64_t n) {
  MT_GRID_STRIDE(i, n) dst[i] = mt_cu_fp16_from_float(src[i]);
}

__global__ void from_fp16_k(float *dst, const uint16_t *src, int64_t n) {
  MT_GRID_STRIDE(i, n) dst[i] = mt_cu_float_from_fp16(src[i]);
}

// x (rows, cols) at leading dimension ld, rounded in place through bf16
// (fp16 = 0) or fp16 (fp16 = 1). Every NaN comes out as the quiet NaN of
// the CPU's mt_round_*: bf16 0x7FC00000; fp16 sign | 0x7FC00000 (the
// widening of sign | 0x7E00).
__global__ void round_k(float *x, int64_t rows, int64_t cols, int64_t ld, int fp16) {
  MT_GRID_STRIDE(i, rows * cols) {
    float *p = x + (i / cols) * ld + i % cols;
    *p = fp16 ? mt_cu_float_from_fp16(mt_cu_fp16_from_float(*p))
              : mt_cu_float_from_bf16(mt_cu_bf16_from_float(*p));
  }
}

// dst (rows, cols) packed = src (rows, cols) at leading dimension ld,
// converted to bf16 or fp16 bits
__global__ void pack_k(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld,
                       int fp16) {
  MT_GRID_STRIDE(i, rows * cols) {
    const float v = src[(i / cols) * ld + i % cols];
    dst[i] = fp16 ? mt_cu_fp16_from_float(v) : mt_cu_bf16_from_float(v);
  }
}

// *flag = 1 when some x[i] is inf or NaN (!(|x| <= FLT_MAX)); the flag was
// zeroed before; every writer stores the same 1, so the race is benign
__global__ void nonfinite_k(const float *x, int64_t n, int *flag) {
  int bad = 0;
  MT_GRID_STRIDE(i, n) bad |= !(fabsf(x[i]) <= 3.402823466e38f);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

// the same on 16-bit values: inf or NaN when the exponent bits are all set
__global__ void nonfinite16_k(const uint16_t *x, int64_t n, uint16_t expm, int *flag) {
  int bad = 0;
  MT_GRID_STRIDE(i, n) bad |= (x[i] & expm) == expm;
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

int fp16_of(int prec) { return prec == MT_PREC_FP16; }

} // namespace

#define LAUNCH(kernel, n, ...)                                       \
  do {                                                               \
    if ((int64_t)(n) <= 0) return 0;                                 \
    kernel<<<mtc::grid_for((int64_t)(n)), mtc::kBlock, 0, s>>>(__VA_ARGS__); \
    return MT_CUDA_LAUNCHED();                                       \
  } while (0)

int mt_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, cudaStream_t s) {
  LAUNCH(to_bf16_k, n, dst, src, (int64_t)n);
}
int mt_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n, cudaStream_t s) {
  LAUNCH(from_bf16_k, n, dst, src, (int64_t)n);
}
int mt_cuda_f32_to_fp16(uint16_t *dst, const float *src, size_t n, cudaStream_t s) {
  LAUNCH(to_fp16_k, n, dst, src, (int64_t)n);
}
int mt_cuda_fp16_to_f32(float *dst, const uint16_t *src, size_t n, cudaStream_t s) {
  LAUNCH(from_fp16_k, n, dst, src, (int64_t)n);
}
int mt_cuda_round_bf16(float *x, size_t n, cudaStream_t s) {
  LAUNCH(round_k, n, x, 1, (int64_t)n, (int64_t)n, 0);
}
int mt_cuda_round_fp16(float *x, size_t n, cudaStream_t s) {
  LAUNCH(round_k, n, x, 1, (int64_t)n, (int64_t)n, 1);
}
int mt_cuda_round_to(int prec, float *x, size_t n, cudaStream_t s) {
  if (prec != MT_PREC_BF16 && prec != MT_PREC_FP16) return 0;
  LAUNCH(round_k, n, x, 1, (int64_t)n, (int64_t)n, fp16_of(prec));
}
int mt_cuda_round_rows(int prec, float *x, int64_t rows, int64_t cols, int64_t ld,
                       cudaStream_t s) {
  if (prec != MT_PREC_BF16 && prec != MT_PREC_FP16) return 0;
  LAUNCH(round_k, rows * cols, x, rows, cols, ld, fp16_of(prec));
}
int mt_cuda_pack_lowp(int prec, uint16_t *dst, const float *src, int64_t rows, int64_t cols,
                      int64_t ld, cudaStream_t s) {
  MT_CUDA_ARG(prec == MT_PREC_BF16 || prec == MT_PREC_FP16, "precision %d is neither bf16 nor fp16",
              prec);
  LAUNCH(pack_k, rows * cols, dst, src, rows, cols, ld, fp16_of(prec));
}

// the flag is zeroed first, so an empty buffer answers 0
#define NONFINITE(kernel, ...)                                       \
  do {                                                               \
    MT_CUDA_RT(cudaMemsetAsync(flag, 0, sizeof(int), s));            \
    LAUNCH(kernel, n, __VA_ARGS__);                                  \
  } while (0)

int mt_cuda_has_nonfinite(const float *x, size_t n, int *flag, cudaStream_t s) {
  NONFINITE(nonfinite_k, x, (int64_t)n, flag);
}
int mt_cuda_has_nonfinite_fp16(const uint16_t *x, size_t n, int *flag, cudaStream_t s) {
  NONFINITE(nonfinite16_k, x, (int64_t)n, (uint16_t)0x7C00u, flag);
}
int mt_cuda_has_nonfinite_bf16(const uint16_t *x, size_t n, int *flag, cudaStream_t s) {
  NONFINITE(nonfinite16_k, x, (int64_t)n, (uint16_t)0x7F80u, flag);
}
