/* GEMM. float: through oneDNN (the CPU library PyTorch itself uses:
 * mt_sgemm, gemm_matmul.c, which runs the forward's 'N','T' as a brgemm
 * matmul primitive where oneDNN has one and the rest as dnnl_sgemm), and,
 * built with --with-gemm=pack (configure's default on AVX2 machines without
 * AVX-512), the row-major 'N','N' ones (the linear layers' input gradients)
 * through our packed kernel gemm_pack.c, which ran them 1.7x dnnl_sgemm at
 * the MLP's shapes (bench/gemm_shapes.c, bench/README.md); under a
 * low-precision policy (nn/lowp.h) through gemm_lowp.c. double: through
 * the BLAS's cblas_dgemm (configure finds the library; Debian's reference
 * BLAS, or OpenBLAS when installed as its alternative), whatever the
 * policy (fp64 runs have no mixed precision). */
#include "config.h"
#include "nn/gemm_log.h"
#include "nn/gemm_matmul.h"
#include "nn/gemm_pack.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <cblas.h>
#include <dnnl.h>
#include <limits.h>
#include <stdatomic.h>
#ifdef _OPENMP
#include <omp.h>
#endif

mt_nn_trace_fn mt_nn_trace_hook;

void mt_nn_trace_set(mt_nn_trace_fn f) { mt_nn_trace_hook = f; }

/* Whether --with-gemm=pack's kernel (gemm_pack.c; configure's default on
 * AVX2 machines without AVX-512) takes a GEMM that a thread runs alone:
 * the shapes where it was measured to win (mt_gemm_pack_wins), alpha 1,
 * beta 0 or 1 (all it does). */
static int pack_takes(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                      int64_t lda, int64_t ldb, float beta, int64_t ldc) {
#ifdef MT_GEMM_PACK
  return alpha == 1 && (beta == 0 || beta == 1) && M > 0 && N > 0 && ldb >= N && ldc >= N &&
         lda >= (ta == 'N' ? K : M) && mt_gemm_pack_wins(ta, tb, M, N, K) &&
         mt_gemm_pack_available();
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)lda, (void)ldb, (void)beta;
  (void)ldc;
  return 0;
#endif
}

/* One GEMM on the calling thread, or on oneDNN's threads where the call is
 * not a thread's own (mt_gemm_own_thread): dnnl_success or the library's
 * status. The packed kernel where it takes the call on a thread's own
 * (declining without AVX2/FMA at run time: then dnnl_sgemm): at
 * -threads 2 under -thread_split batch (each thread its rows) the MLP ran
 * 1.10-1.19x at batch 128 and 1.08-1.09x at 256 against dnnl_sgemm in the
 * threads; under -thread_split gemm on each thread's block of columns
 * (threads_split). */
static dnnl_status_t gemm_one(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                              float *C, int64_t ldc, const float *bias) {
  if (pack_takes(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) && mt_gemm_own_thread() &&
      mt_gemm_pack(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc) == 0) {
    if (bias) mt_gemm_rows_add(M, N, C, ldc, bias); /* the packed kernel has no epilogue */
    return dnnl_success;
  }
  return mt_sgemm_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

static _Atomic long split_calls_;

long mt_gemm_split_calls(void) { return split_calls_; }

#ifdef _OPENMP
/* A GEMM on the OpenMP threads of one model (-thread_split gemm) as a block
 * of C's columns per thread (op(B)'s columns: B's rows for 'T', its columns
 * for 'N'), each block gemm_one on its thread, where that was measured to
 * win (bench/gemm_threads, bench/README.md):
 *  - the forward, 'N','T': oneDNN's own threading split K there, 1.61x one
 *    thread at M N K = 128 x 1024 x 1024 and 1.70x at 256 rows, with other
 *    bits than one thread's; the column blocks (dnnl_sgemm) ran 1.96-1.98x
 *    and gave one thread's bits ("The forward's columns on two threads");
 *  - the input gradient, 'N','N', where the packed kernel takes each block:
 *    on the AVX2 EPYC 1.29-1.44x oneDNN's threading at 128 x 1024 x 1024,
 *    the kernel's bits at any number of threads ("The backward's input
 *    gradient on two threads"). Without it the blocks of dnnl_sgemm only
 *    tied oneDNN's threading (X1), and the weight gradients' 'T','N' ran
 *    0.89-0.96x it there (0.97-1.08x on the AVX2 EPYC): oneDNN threads
 *    those.
 * Where mt_sgemm runs a GEMM as a brgemm matmul (AVX-512) a block's bits
 * differ from the whole width's (its K blocking follows N), so -threads 2
 * need not repeat -threads 1's bits there; the bits still do not depend on
 * the machine's load or the run. Only where every thread gets at least 256
 * columns (the MLP's head, 10 columns, ran 0.9x). *done: whether it ran the
 * GEMM (not its case: 0, nothing done). */
static int threads_split(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc, const float *bias, int *done) {
  const int nt = omp_get_max_threads();
  *done = 0;
  if (nt < 2 || omp_in_parallel() || N < 256 * (int64_t)nt || ta != 'N' || (tb != 'N' && tb != 'T'))
    return 0;
  /* blocks of whole 64-byte lines of C */
  const int64_t per = ((N + nt - 1) / nt + 15) / 16 * 16;
  if (tb == 'N' && !(pack_takes(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) &&
                     pack_takes(ta, tb, M, N - (nt - 1) * per, K, alpha, lda, ldb, beta, ldc)))
    return 0; /* the whole call's sizes, and the last block, the narrowest */
  int failed = 0;
  /* a loop over the blocks, not a block per thread number: every block is
   * computed even where the team has fewer threads (OMP_DYNAMIC) */
#pragma omp parallel for schedule(static) num_threads(nt) reduction(| : failed)
  for (int b = 0; b < nt; b++) {
    const int64_t n0 = b * per, n1 = n0 + per < N ? n0 + per : N;
    if (n1 > n0)
      failed |= gemm_one(ta, tb, M, n1 - n0, K, alpha, A, lda, B + (tb == 'N' ? n0 : n0 * ldb),
                         ldb, beta, C + n0, ldc, bias ? bias + n0 : NULL) != dnnl_success;
  }
  split_calls_++;
  MT_CHECK(!failed, MT_ERR_LIB, "dnnl_sgemm(%c,%c,M=%lld,N=%lld,K=%lld) failed in a column block",
           ta, tb, (long long)M, (long long)N, (long long)K);
  *done = 1;
  return 0;
}
#endif

static int gemm_f32(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                    const float *bias, const mt_nn_policy *pol) {
  if (M == 0 || N == 0) return 0;
  if (mt_nn_compute(pol) != MT_PREC_FP32)
    return mt_gemm_lowp_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, pol);
  if (mt_gemm_log_active()) /* -log_gemm_shapes */
    mt_gemm_log_record(MT_GEMM_LOG_GEMM, ta, tb, M, N, K, beta, MT_PREC_FP32, 1);
#ifdef _OPENMP
  int done;
  MT_CALL(threads_split(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, &done));
  if (done) return 0;
#endif
  dnnl_status_t s = gemm_one(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  MT_CHECK(s == dnnl_success, MT_ERR_LIB,
           "dnnl_sgemm(%c,%c,M=%lld,N=%lld,K=%lld) failed with status %d", ta, tb, (long long)M,
           (long long)N, (long long)K, (int)s);
  return 0;
}

int mt_gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
            const mt_nn_policy *pol) {
  return MT_NN_TRACED(MT_K_GEMM,
                      gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, pol));
}

int mt_gemm_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 const float *bias, const mt_nn_policy *pol) {
  return MT_NN_TRACED(MT_K_GEMM,
                      gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias, pol));
}

static int gemm_f64(char ta, char tb, int64_t M, int64_t N, int64_t K, double alpha,
                    const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                    double *C, int64_t ldc) {
  if (M == 0 || N == 0) return 0;
  MT_CHECK((ta == 'N' || ta == 'T') && (tb == 'N' || tb == 'T'), MT_ERR_ARG,
           "mt_gemm_f64: op %c,%c (N or T)", ta, tb);
  /* the CBLAS takes int sizes */
  MT_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
               ldc <= INT_MAX && M > 0 && N > 0 && K >= 0,
           MT_ERR_ARG, "mt_gemm_f64(M=%lld,N=%lld,K=%lld): sizes outside the BLAS's int range",
           (long long)M, (long long)N, (long long)K);
  MT_CHECK(lda >= (ta == 'N' ? K : M) && ldb >= (tb == 'N' ? N : K) && ldc >= N && lda >= 1 &&
               ldb >= 1,
           MT_ERR_ARG, "mt_gemm_f64: leading dimensions %lld, %lld, %lld too small",
           (long long)lda, (long long)ldb, (long long)ldc);
  cblas_dgemm(CblasRowMajor, ta == 'N' ? CblasNoTrans : CblasTrans,
              tb == 'N' ? CblasNoTrans : CblasTrans, (int)M, (int)N, (int)K, alpha, A, (int)lda,
              B, (int)ldb, beta, C, (int)ldc);
  return 0;
}

int mt_gemm_f64(char ta, char tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc,
                const mt_nn_policy *pol) {
  (void)pol;
  return MT_NN_TRACED(MT_K_GEMM, gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc));
}

int mt_gemm_bias_f64(char ta, char tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                     double *C, int64_t ldc, const double *bias, const mt_nn_policy *pol) {
  MT_CALL(mt_gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, pol));
  for (int64_t r = 0; bias && r < M; r++) {
    double *c = C + r * ldc;
#pragma omp simd
    for (int64_t j = 0; j < N; j++) c[j] += bias[j];
  }
  return 0;
}
