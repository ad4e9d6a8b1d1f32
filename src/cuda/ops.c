/* The C side of the CUDA compute calls (only built with CUDA): kernel
 * launches with their errors recorded, and cuBLAS GEMM in mt_gemm's
 * row-major convention. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/kernels.h"
#include "mpitrain/mpitrain.h"

#include <limits.h>

static int launched(const char *what, int e) {
  if (e != (int)cudaSuccess)
    return MT_ERR(MT_ERR_LIB, "%s: kernel launch failed: %s (%s)", what,
                  cudaGetErrorString((cudaError_t)e), cudaGetErrorName((cudaError_t)e));
  return 0;
}

int mt_cuda_gelu_forward(float *out, const float *inp, int64_t n, int kind, cudaStream_t s) {
  return launched(__func__, mt_cuda_launch_gelu_forward(out, inp, n, kind, s));
}

int mt_cuda_gelu_backward(float *dinp, const float *dout, const float *inp, int64_t n, int kind,
                          cudaStream_t s) {
  return launched(__func__, mt_cuda_launch_gelu_backward(dinp, dout, inp, n, kind, s));
}

static cublasOperation_t op_of(char t) { return (t == 'T' || t == 't') ? CUBLAS_OP_T : CUBLAS_OP_N; }

int mt_cuda_gemm(cublasHandle_t h, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
  MT_CHECK(M >= 0 && N >= 0 && K >= 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX &&
               lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
           MT_ERR_ARG, "mt_cuda_gemm: sizes %lld x %lld x %lld beyond cuBLAS's int range",
           (long long)M, (long long)N, (long long)K);
  if (M == 0 || N == 0) return 0;
  /* row-major C (M,N) = op(A) op(B) is column-major C^T (N,M) = op(B)^T op(A)^T:
   * the column-major views of B and A are already their transposes. */
  cublasStatus_t st = cublasSgemm(h, op_of(tb), op_of(ta), (int)N, (int)M, (int)K, &alpha, B,
                                  (int)ldb, A, (int)lda, &beta, C, (int)ldc);
  if (st != CUBLAS_STATUS_SUCCESS)
    return MT_ERR(MT_ERR_LIB, "cublasSgemm(%c%c, M=%lld N=%lld K=%lld) failed: %s", ta, tb,
                  (long long)M, (long long)N, (long long)K, cublasGetStatusString(st));
  return 0;
}
