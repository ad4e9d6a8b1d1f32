/* CUDA kernels and cuBLAS calls beside their CPU versions in src/nn/ (only
 * built with CUDA). Pointers are device pointers; every call is
 * asynchronous on the given stream (0: the default stream) and returns 0 or
 * MT_ERR_LIB with the CUDA/cuBLAS error of the launch. */
#ifndef MT_CUDA_KERNELS_H
#define MT_CUDA_KERNELS_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GELU, as mt_gelu_forward / mt_gelu_backward (kind: mt_gelu_kind,
 * 0 erf, 1 tanh); out may equal inp; backward adds into dinp. */
int mt_cuda_gelu_forward(float *out, const float *inp, int64_t n, int kind, cudaStream_t s);
int mt_cuda_gelu_backward(float *dinp, const float *dout, const float *inp, int64_t n, int kind,
                          cudaStream_t s);

/* Row-major C = alpha * op(A) op(B) + beta * C as mt_gemm, with cuBLAS
 * (fp32, no TF32 unless the handle's math mode allows it). */
int mt_cuda_gemm(cublasHandle_t h, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);

/* The launchers of kernels.cu behind the calls above: each returns the
 * launch's cudaError_t (0: cudaSuccess). */
int mt_cuda_launch_gelu_forward(float *out, const float *inp, int64_t n, int kind, cudaStream_t s);
int mt_cuda_launch_gelu_backward(float *dinp, const float *dout, const float *inp, int64_t n,
                                 int kind, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
