/* The C side of the CUDA compute calls (only built with CUDA): errors of
 * the .cu files recorded as mpitrain errors (nvcc needs neither MPI nor the
 * error machinery), and the context with its handles and scratch. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/kernels.h"
#include "mpitrain/mpitrain.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Static_assert((int)MT_CUDA_ERR_ARG == (int)MT_ERR_ARG &&
                   (int)MT_CUDA_ERR_DATA == (int)MT_ERR_DATA &&
                   (int)MT_CUDA_ERR_LIB == (int)MT_ERR_LIB,
               "the codes of kernels.h are mt_err_code's");

#define LT_WORK_BYTES ((size_t)32 << 20) /* cuBLASLt's advice for Hopper */

int mt_cuda_status(const char *file, int line, const char *func, int code) {
  if (code == (int)cudaSuccess) return 0;
  return mt_error_set(file, line, func, MT_ERR_LIB, "%s: CUDA error: %s (%s)", func,
                      cudaGetErrorString((cudaError_t)code), cudaGetErrorName((cudaError_t)code));
}

int mt_cuda_fail(const char *file, int line, const char *func, int code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return mt_error_set(file, line, func, code, "%s: %s", func, msg);
}

#define CUDA_CALL(expr)                                                                  \
  do {                                                                                   \
    cudaError_t ce_ = (expr);                                                            \
    if (ce_ != cudaSuccess) return mt_cuda_status(__FILE__, __LINE__, __func__, (int)ce_); \
  } while (0)

#define BLAS_CALL(expr)                                                                  \
  do {                                                                                   \
    cublasStatus_t bs_ = (expr);                                                         \
    MT_CHECK(bs_ == CUBLAS_STATUS_SUCCESS, MT_ERR_LIB, "%s failed: %s", #expr,             \
             cublasGetStatusString(bs_));                                                \
  } while (0)

static int ctx_make(mt_cuda_ctx *cx) {
  BLAS_CALL(cublasCreate(&cx->blas));
  BLAS_CALL(cublasSetStream(cx->blas, cx->stream));
  BLAS_CALL(cublasSetPointerMode(cx->blas, CUBLAS_POINTER_MODE_HOST));
  BLAS_CALL(cublasSetMathMode(cx->blas, CUBLAS_DEFAULT_MATH));
  BLAS_CALL(cublasLtCreate(&cx->lt));
  CUDA_CALL(cudaMalloc(&cx->lt_work, LT_WORK_BYTES));
  cx->lt_work_bytes = LT_WORK_BYTES;
  CUDA_CALL(cudaMalloc((void **)&cx->flag, sizeof(int)));
  return 0;
}

int mt_cuda_ctx_create(mt_cuda_ctx *cx, cudaStream_t stream) {
  memset(cx, 0, sizeof(*cx));
  cx->stream = stream;
  cx->prec = MT_PREC_FP32;
  cx->use_lt = 1;
  cx->check = 1;
  int e = ctx_make(cx);
  if (e) {
    mt_cuda_ctx_destroy(cx);
    MT_CALL(e);
  }
  return 0;
}

void mt_cuda_ctx_destroy(mt_cuda_ctx *cx) {
  if (!cx) return;
  if (cx->blas || cx->lt_work) (void)cudaStreamSynchronize(cx->stream);
  for (int i = 0; i < MT_CUDA_SCRATCH_N; i++) cudaFree(cx->scratch[i]);
  cudaFree(cx->lt_work);
  cudaFree(cx->flag);
  if (cx->lt) cublasLtDestroy(cx->lt);
  if (cx->blas) cublasDestroy(cx->blas);
  memset(cx, 0, sizeof(*cx));
}

int mt_cuda_ctx_allow_tf32(mt_cuda_ctx *cx, int on) {
  BLAS_CALL(cublasSetMathMode(cx->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return 0;
}

int mt_cuda_scratch(mt_cuda_ctx *cx, int slot, size_t bytes, void **p) {
  MT_CHECK(slot >= 0 && slot < MT_CUDA_SCRATCH_N, MT_ERR_ARG, "CUDA scratch slot %d", slot);
  if (cx->scratch_bytes[slot] < bytes) {
    /* stream-ordered: the old buffer is released after the work queued on
     * it, the new one is usable by what is queued next */
    if (cx->scratch[slot]) CUDA_CALL(cudaFreeAsync(cx->scratch[slot], cx->stream));
    cx->scratch[slot] = NULL;
    cx->scratch_bytes[slot] = 0;
    const size_t cap = bytes + bytes / 4 + 256;
    CUDA_CALL(cudaMallocAsync(&cx->scratch[slot], cap, cx->stream));
    cx->scratch_bytes[slot] = cap;
  }
  *p = cx->scratch[slot];
  return 0;
}
