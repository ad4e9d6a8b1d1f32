/* dnnl_sgemm and dnnl_gemm_bf16bf16f32, run as oneDNN's brgemm matmul
 * primitives where oneDNN has them for this CPU (gemm_matmul.c): fp32 the
 * linear layers' forward ('N','T'), bf16 every GEMM.
 * Standalone (oneDNN and OpenMP only, no mpitrain header) so that
 * bench/gemm_shapes.c times exactly what mt_gemm runs. */
#ifndef MT_NN_GEMM_MATMUL_H
#define MT_NN_GEMM_MATMUL_H

#include <dnnl.h>
#include <stdint.h>

/* dnnl_sgemm's arguments, result and status. 'N','T' with alpha 1 and beta
 * 0 on one thread (inside an OpenMP parallel region, or outside one with
 * one OpenMP thread) runs a matmul primitive made once per shape and kept,
 * when oneDNN implements it with brgemm (AVX-512 CPUs: 1.07-1.11x
 * dnnl_sgemm at the MLP's 1024 x 1024 layers, other bits when K > 128);
 * everything else is dnnl_sgemm. Safe from several threads at once. */
dnnl_status_t mt_sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc);

/* Exported by libdnnl 2.x but not declared in its public headers: the same
 * row-major convention as dnnl_sgemm, A and B bf16 (bits), C fp32. */
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                    dnnl_dim_t K, float alpha, const uint16_t *A, dnnl_dim_t lda,
                                    const uint16_t *B, dnnl_dim_t ldb, float beta, float *C,
                                    dnnl_dim_t ldc);

/* dnnl_gemm_bf16bf16f32's arguments, result and status. On one thread (as
 * mt_sgemm's forward) every transpose, alpha and beta runs a matmul
 * primitive made once per call's shape and kept, when oneDNN implements it
 * with brgemm (CPUs with AVX512_BF16 or AMX); everything else is
 * dnnl_gemm_bf16bf16f32.
 * Only where oneDNN has bf16 kernels (mt_gemm_bf16_native). Safe from
 * several threads at once. */
dnnl_status_t mt_gemm_bf16(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                           const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                           float beta, float *C, int64_t ldc);

/* mt_sgemm and mt_gemm_bf16 with a bias: C = alpha op(A) op(B) + beta C,
 * then bias[j] (N floats; NULL: none) added to column j of every row. A
 * kept primitive carries it as matmul's bias (alpha 1: oneDNN 2.x would
 * scale it), added to each output once its sum is done, so the bits are
 * those of the GEMM and then the bias added; elsewhere the library's call
 * and then a pass over C. With beta not 0 the two orders of the sums may
 * differ (no caller does that). */
dnnl_status_t mt_sgemm_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc, const float *bias);
dnnl_status_t mt_gemm_bf16_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                                float beta, float *C, int64_t ldc, const float *bias);

/* C's M rows (ldc apart) += bias (N floats): the bias of a call that no
 * primitive carried; on the OpenMP threads when a GEMM called now would
 * have them too (not mt_gemm_own_thread). */
void mt_gemm_rows_add(int64_t M, int64_t N, float *C, int64_t ldc, const float *bias);

/* The forward ('N','T', alpha 1, beta 0) of few rows computed as its
 * transpose, C^T = B A^T, and written into C transposed (gemm_matmul.c's
 * swap_rule, the same bits): -1 where the rule says (the default), 0
 * never, 1 at every such call a primitive takes. For tests and benches;
 * set it with no GEMM running. */
void mt_sgemm_forward_swap(int mode);

/* mt_sgemm without its forward-only rule: every transpose, alpha and beta
 * through the kept primitives as mt_gemm_bf16 runs bf16, else dnnl_sgemm.
 * For tests (the table's descriptors, scales, sums and strided C in fp32,
 * on CPUs without bf16 kernels); mt_gemm uses mt_sgemm. */
dnnl_status_t mt_sgemm_matmul_any(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                  const float *A, int64_t lda, const float *B, int64_t ldb,
                                  float beta, float *C, int64_t ldc);

/* 1 when a GEMM called now runs on the calling thread alone: inside an
 * OpenMP parallel region (under -thread_split batch each of T threads runs
 * its own rows' GEMMs, nested regions off), or outside one with one OpenMP
 * thread; not a GEMM that OpenMP threads itself (-thread_split gemm). */
int mt_gemm_own_thread(void);

/* Calls' keys run by a primitive so far (and kept), keys declined (oneDNN
 * offered no brgemm kernel: the library's GEMM for them); fp32 and bf16
 * together, every thread's table (each thread keeps its own: a key run by
 * two threads counts twice). For tests. */
void mt_sgemm_matmul_stats(int *kept, int *declined);

/* The kept primitives released (at exit, with no GEMM running on any
 * thread; later calls make them again). */
void mt_sgemm_matmul_free(void);

#endif
