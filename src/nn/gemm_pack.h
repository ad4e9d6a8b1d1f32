/* A packed fp32 GEMM of our own for AVX2 + FMA (gemm_pack.c), for the shapes
 * where oneDNN's dnnl_sgemm leaves a gap (bench/gemm_shapes.c): row-major
 *   C = op(A) op(B) + beta C,  op 'N' or 'T', alpha 1, beta 0 or 1.
 * Standalone (no mpitrain header) so bench/gemm_shapes.c can build it too. */
#ifndef MT_NN_GEMM_PACK_H
#define MT_NN_GEMM_PACK_H
#include <stdint.h>

/* 1 when the kernel was compiled for AVX2 + FMA and the CPU runs them. */
int mt_gemm_pack_available(void);

/* C (M,N) = op(A) (M,K) op(B) (K,N) + beta C, beta 0 (C is not read: NaN in
 * it does not leak) or 1. Returns 0, or -1 when an op is not 'N'/'T', beta
 * is neither 0 nor 1, a size is negative, the packing buffers cannot be
 * allocated or the kernel is unavailable (nothing written then). Threads:
 * called outside an OpenMP parallel region with several threads, they split
 * C's columns (the same bits as one thread); inside one, the calling thread
 * alone. Each thread keeps its packing buffers (~1.1 MB) for its next call
 * until it exits: calls from several threads at once are safe. */
int mt_gemm_pack(char ta, char tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
