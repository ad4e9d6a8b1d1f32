/* dnnl_sgemm, with the linear layers' forward ('N','T') run as oneDNN's
 * brgemm matmul primitive where oneDNN has one for this CPU (gemm_matmul.c).
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

/* 1 when a GEMM called now runs on the calling thread alone: inside an
 * OpenMP parallel region (under -thread_split batch each of T threads runs
 * its own rows' GEMMs, nested regions off), or outside one with one OpenMP
 * thread; not a GEMM that OpenMP threads itself (-thread_split gemm). */
int mt_gemm_own_thread(void);

/* Shapes run by a primitive so far (and kept), shapes declined (oneDNN
 * offered no brgemm kernel: dnnl_sgemm for them). For tests. */
void mt_sgemm_matmul_stats(int *kept, int *declined);

/* The kept primitives released (at exit; later calls make them again). */
void mt_sgemm_matmul_free(void);

#endif
