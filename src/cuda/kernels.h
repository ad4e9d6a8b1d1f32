/* CUDA kernels and cuBLAS calls beside their CPU versions in src/nn/ and
 * src/optim/ (only built with CUDA; the optimizer steps are declared in
 * cuda/cuda_optim.h, which needs the parameter table of mpitrain.h).
 *
 * Every entry point mirrors a CPU function: the name with mt_cuda_ in place
 * of mt_, the same arguments in the same order with the same meaning, then
 * what the GPU needs last: a cudaStream_t for a kernel that needs nothing
 * else, or an mt_cuda_ctx (stream, cuBLAS handles, workspace) for one that
 * calls cuBLAS or needs scratch memory. Conventions, as on the CPU:
 *  - every pointer is a device pointer (unless a comment says host);
 *  - backward functions ADD into every gradient they produce; NULL for a
 *    gradient that is not wanted;
 *  - layouts are the CPU's (row-major, NCHW, PyTorch weight layouts);
 *  - the calls are asynchronous on the stream; each returns 0, or an
 *    mpitrain error code with the message recorded (MT_ERR_LIB with the
 *    CUDA or cuBLAS error, MT_ERR_ARG for bad sizes, MT_ERR_DATA for bad
 *    tokens or labels), so MT_CALL works on them. A kernel that faults is
 *    reported by a later call (CUDA's errors are sticky) or by the caller's
 *    synchronisation;
 *  - a CPU function that returns a value (a loss sum, a norm, a flag)
 *    writes it into a device scalar instead, so nothing waits for the GPU;
 *  - results are deterministic: no floating-point atomics; every sum has a
 *    fixed order for given sizes (block trees, fixed grids, two passes), so
 *    two runs give the same bits;
 *  - each call exists for float (-precision fp32, the plain name) and
 *    double (-precision fp64, the name with _f64), declared once in
 *    cuda/kernels_decl_t.h; the bf16/fp16 functions below are float only.
 *
 * No entry point allocates, except through the context's scratch slots
 * (mt_cuda_scratch): buffers that grow to the largest size asked for and
 * are then reused, as the CPU's low-precision scratch does. */
#ifndef MT_CUDA_KERNELS_H
#define MT_CUDA_KERNELS_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "cuda/bits.h"    /* mt_cuda_seg */
#include "nn/nn.h"        /* mt_conv2d_shape, mt_pool2d_shape, mt_gelu_kind */
#include "nn/precision.h" /* mt_precision: MT_PREC_FP32, MT_PREC_BF16, MT_PREC_FP16 */

/* ------------------------------------------------------------ context */

/* Scratch slots of a context (see mt_cuda_scratch). */
enum {
  MT_CUDA_SCRATCH_GEMM_A = 0, /* low-precision copy of a GEMM's A            */
  MT_CUDA_SCRATCH_GEMM_B,     /* ... and of its B                            */
  MT_CUDA_SCRATCH_REDUCE,     /* partial sums of the reductions              */
  MT_CUDA_SCRATCH_SORT,       /* the embedding backward's sorted token list  */
  MT_CUDA_SCRATCH_COL,        /* conv2d's im2col columns (<= col_bytes)      */
  MT_CUDA_SCRATCH_N
};

/* What the calls of one stream share. Made by mt_cuda_ctx_create; the
 * fields after `flag` are settings the caller may change between calls.
 * One context serves one stream at a time (its scratch is reused from one
 * call to the next, which the stream's order makes safe). */
typedef struct {
  cudaStream_t stream;     /* every call of this context runs on it      */
  cublasHandle_t blas;     /* bound to stream, host pointer mode         */
  cublasLtHandle_t lt;     /* the linear layers' fused bias (cuBLASLt)   */
  void *lt_work;           /* cuBLASLt's workspace, lt_work_bytes        */
  size_t lt_work_bytes;
  void *scratch[MT_CUDA_SCRATCH_N];
  size_t scratch_bytes[MT_CUDA_SCRATCH_N];
  int *flag;               /* a device int: the data checks' result      */
  /* settings */
  int prec;          /* mt_precision of mt_cuda_gemm's operands (float):
                        MT_PREC_FP32 (default), MT_PREC_BF16 or
                        MT_PREC_FP16, as mt_nn_policy.compute on the CPU
                        (nn/lowp.h) */
  int round_outputs; /* O2: GEMM outputs rounded to prec as well (0), as
                        mt_nn_policy.round_outputs                      */
  int use_lt;        /* 1 (default): linear forward with a bias through
                        cuBLASLt's bias epilogue; 0: GEMM + bias kernel  */
  int check;         /* 1 (default): the calls that validate data
                        (tokens, labels) wait for the stream and return
                        MT_ERR_DATA as the CPU does; 0: no waiting, and a
                        bad token or label only skips its row            */
  size_t col_bytes;  /* the most conv2d's columns may take (0: 64 MiB);
                        one image's columns are made in any case         */
} mt_cuda_ctx;

/* Makes the cuBLAS and cuBLASLt handles, binds them to stream (0: the
 * default stream), allocates the cuBLASLt workspace (32 MiB) and the flag.
 * The handle's math mode is CUBLAS_DEFAULT_MATH: fp32 GEMMs are plain fp32
 * (no TF32) unless mt_cuda_ctx_allow_tf32 says otherwise. On failure
 * everything made is released and *cx is zeroed. */
int mt_cuda_ctx_create(mt_cuda_ctx *cx, cudaStream_t stream);
/* Waits for the stream, frees everything; accepts a zeroed or destroyed
 * context. */
void mt_cuda_ctx_destroy(mt_cuda_ctx *cx);
/* TF32 tensor cores for the fp32 GEMMs (on = 1) or not (0, the default). */
int mt_cuda_ctx_allow_tf32(mt_cuda_ctx *cx, int on);
/* Scratch slot `slot` with at least bytes bytes in *p: grown (freed and
 * allocated again, stream-ordered, contents lost) when smaller, else the
 * same buffer as before. */
int mt_cuda_scratch(mt_cuda_ctx *cx, int slot, size_t bytes, void **p);

/* ------------------------------------------------ error side (ops.c) */

/* The error codes used by the .cu files, which do not include mpitrain.h
 * (nvcc gets no MPI); ops.c checks them against mt_err_code. */
enum { MT_CUDA_ERR_ARG = 1, MT_CUDA_ERR_DATA = 4, MT_CUDA_ERR_LIB = 8 };

/* 0 for cudaSuccess, else records MT_ERR_LIB naming func and the CUDA error
 * (code is a cudaError_t) and returns it. */
int mt_cuda_status(const char *file, int line, const char *func, int code);
/* Records an error of the given code (MT_CUDA_ERR_*) with a message and
 * returns the code. */
int mt_cuda_fail(const char *file, int line, const char *func, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* As in mpitrain.h: a traceback frame on the way up. */
void mt_error_push(const char *file, int line, const char *func, int code);

#define MT_CUDA_LAUNCHED() mt_cuda_status(__FILE__, __LINE__, __func__, (int)cudaGetLastError())
#define MT_CUDA_RT(expr)                                                        \
  do {                                                                          \
    cudaError_t mt_ce_ = (expr);                                                \
    if (mt_ce_ != cudaSuccess) return mt_cuda_status(__FILE__, __LINE__, __func__, (int)mt_ce_); \
  } while (0)
#define MT_CUDA_TRY(expr)                                                       \
  do {                                                                          \
    int mt_e_ = (expr);                                                         \
    if (mt_e_) {                                                                \
      mt_error_push(__FILE__, __LINE__, __func__, mt_e_);                       \
      return mt_e_;                                                             \
    }                                                                           \
  } while (0)
#define MT_CUDA_ARG(cond, ...)                                                  \
  do {                                                                          \
    if (!(cond)) return mt_cuda_fail(__FILE__, __LINE__, __func__, MT_CUDA_ERR_ARG, __VA_ARGS__); \
  } while (0)

/* -------------------------------------------- bf16 / fp16 (float only) */

/* The conversions of nn/precision.h with its exact bit rules (round to
 * nearest even on the bits, NaN -> 0x7FC0 for bf16 and sign | 0x7E00 for
 * fp16, fp16 subnormals produced exactly, fp32 subnormals rounded for bf16
 * and flushed below 2^-25 for fp16, exact widening with fp16 NaNs made
 * quiet): the same code as the CPU's scalar functions (cuda/bits.h), so
 * every input gives the CPU's bits. dst and src must not overlap. */
int mt_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, cudaStream_t s);
int mt_cuda_bf16_to_f32(float *dst, const uint16_t *src, size_t n, cudaStream_t s);
int mt_cuda_f32_to_fp16(uint16_t *dst, const float *src, size_t n, cudaStream_t s);
int mt_cuda_fp16_to_f32(float *dst, const uint16_t *src, size_t n, cudaStream_t s);
/* In place, as mt_round_bf16 / mt_round_fp16 / mt_round_to (prec an
 * mt_precision; fp32 leaves x as it is). */
int mt_cuda_round_bf16(float *x, size_t n, cudaStream_t s);
int mt_cuda_round_fp16(float *x, size_t n, cudaStream_t s);
int mt_cuda_round_to(int prec, float *x, size_t n, cudaStream_t s);
/* *flag (a device int) = 1 when any of the n values is inf or NaN, else 0
 * (mt_has_nonfinite and its fp16/bf16 twins; n == 0: 0). */
int mt_cuda_has_nonfinite(const float *x, size_t n, int *flag, cudaStream_t s);
int mt_cuda_has_nonfinite_fp16(const uint16_t *x, size_t n, int *flag, cudaStream_t s);
int mt_cuda_has_nonfinite_bf16(const uint16_t *x, size_t n, int *flag, cudaStream_t s);

/* Row-major C (fp32) = alpha op(A) op(B) + beta C with A and B in bf16
 * (prec MT_PREC_BF16) or fp16 (MT_PREC_FP16) bits, fp32 accumulation
 * (cublasGemmEx, CUBLAS_COMPUTE_32F): the CPU's bf16 GEMM and its fp16
 * emulation, up to summation order. */
int mt_cuda_gemm_lowp(int prec, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                      float *C, int64_t ldc, mt_cuda_ctx *cx);

/* Internal to the library: operand packing for mt_cuda_gemm under a
 * low-precision policy (rows x cols at leading dimension ld into a packed
 * bf16/fp16 matrix), and the rounding of a GEMM's output rows (O2). */
int mt_cuda_pack_lowp(int prec, uint16_t *dst, const float *src, int64_t rows, int64_t cols,
                      int64_t ld, cudaStream_t s);
int mt_cuda_round_rows(int prec, float *x, int64_t rows, int64_t cols, int64_t ld,
                       cudaStream_t s);

/* -------------------------------------------- parameter table (optim) */

/* A parameter table on the device (cuda/cuda_optim.h makes it from an
 * mt_param_table); mt_cuda_seg, one tensor, is in cuda/bits.h. */
typedef struct {
  int n;            /* tensors                                           */
  size_t total;     /* elements of the flat buffers (padding included)   */
  mt_cuda_seg *seg; /* device, n entries in increasing offset            */
} mt_cuda_table;

/* ------------------------------------------ every layer, both types */

#define MT_TEMPLATE "cuda/kernels_decl_t.h"
#include "core/real_t.h"

#ifdef __cplusplus
}
#endif

#endif
