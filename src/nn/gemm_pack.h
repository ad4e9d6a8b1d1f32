/* A packed fp32 GEMM of our own for AVX2 + FMA (gemm_pack.c), for the shapes
 * where oneDNN's dnnl_sgemm leaves a gap (bench/gemm_shapes.c): row-major
 *   C = op(A) op(B) + beta C,  op 'N' or 'T', alpha 1, beta 0 or 1.
 * Standalone (no mpitrain header) so bench/gemm_shapes.c can build it too. */
#ifndef MT_NN_GEMM_PACK_H
#define MT_NN_GEMM_PACK_H
#include <stdint.h>

/* 1 when the kernel was compiled for AVX2 + FMA and the CPU runs them. */
int mt_gemm_pack_available(void);

/* 1 for the shapes where the kernel was measured to beat dnnl_sgemm on an
 * AVX2 CPU (bench/README.md; what mt_gemm gives it under --with-gemm=pack,
 * and bench/gemm_shapes.c's "mt" column):
 *  - row-major 'N','N' (the linear layers' input gradients): at most 384
 *    rows, N >= 512 and K >= 256 (1.1-1.6x: dnnl_sgemm runs these at about
 *    half its 'N','T' speed); beyond, dnnl_sgemm won or tied (512 or 2048
 *    rows: 0.8x; N 256, K 128: 0.9x);
 *  - 'T','N' weight gradients of many rows (K >= 1024) whose C has 64 Ki to
 *    256 Ki entries (the gpt's 512 x 128 and 128 x 512 of 2048 rows: 1.2x
 *    and 1.35x; 128 x 1024: 1.9x; 512 x 512: 1.4x; dnnl_sgemm is slow
 *    where A's rows are 512 or 1024 floats long); smaller (128 x 128: 0.9x;
 *    384 x 128: 1.0x) and larger ones (768 x 768, 1024 x 1024: 0.85x) not. */
int mt_gemm_pack_wins(char ta, char tb, int64_t M, int64_t N, int64_t K);

/* C (M,N) = op(A) (M,K) op(B) (K,N) + beta C, beta 0 (C is not read: NaN in
 * it does not leak) or 1. Returns 0, or -1 when an op is not 'N'/'T', beta
 * is neither 0 nor 1, a size is negative, the packing buffers cannot be
 * allocated or the kernel is unavailable (nothing written then). Threads:
 * called outside an OpenMP parallel region with several threads, they split
 * C's columns (the same bits as one thread); inside one, the calling thread
 * alone. Each thread keeps its packing buffers (~1.5 MB) for its next call
 * until it exits: calls from several threads at once are safe. */
int mt_gemm_pack(char ta, char tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

#endif
