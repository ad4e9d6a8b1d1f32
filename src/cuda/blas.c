/* GEMMs on the GPU in mt_gemm's row-major convention (only built with
 * CUDA): fp32 (cublasSgemm), fp64 (cublasDgemm), bf16/fp16 operands with
 * fp32 accumulation (cublasGemmEx), batches of them (strided batched), the
 * low-precision policy of a context, and the linear layer (linear_t.h),
 * whose forward fuses the bias into a cuBLASLt matmul.
 *
 * Row-major to cuBLAS's column-major: a row-major (r,c) matrix with
 * leading dimension ld is the column-major (c,r) matrix, its transpose,
 * with the same ld. So row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T: cuBLAS is called with the operands swapped, M and
 * N swapped, and each operand's own op. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/kernels.h"
#include "mpitrain/mpitrain.h"

#include <limits.h>

#define BLAS_CHECK(st, what, ta, tb, M, N, K)                                                 \
  MT_CHECK((st) == CUBLAS_STATUS_SUCCESS, MT_ERR_LIB, "%s(%c%c, M=%lld N=%lld K=%lld) failed: %s", \
           what, ta, tb, (long long)(M), (long long)(N), (long long)(K),                       \
           cublasGetStatusString(st))

static cublasOperation_t op_of(char t) { return (t == 'T' || t == 't') ? CUBLAS_OP_T : CUBLAS_OP_N; }
static int is_t(char t) { return t == 'T' || t == 't'; }

/* Sizes within cuBLAS's int, leading dimensions large enough for the rows
 * they hold (what cuBLAS would refuse with a less telling status). */
static int check_gemm(const char *who, char ta, char tb, int64_t M, int64_t N, int64_t K,
                      int64_t lda, int64_t ldb, int64_t ldc) {
  MT_CHECK((ta == 'N' || ta == 'n' || is_t(ta)) && (tb == 'N' || tb == 'n' || is_t(tb)),
           MT_ERR_ARG, "%s: op %c,%c (N or T)", who, ta, tb);
  MT_CHECK(M >= 0 && N >= 0 && K >= 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX &&
               lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
           MT_ERR_ARG, "%s: sizes %lld x %lld x %lld beyond cuBLAS's int range", who,
           (long long)M, (long long)N, (long long)K);
  const int64_t ka = is_t(ta) ? M : K, kb = is_t(tb) ? K : N;
  MT_CHECK(lda >= (ka > 1 ? ka : 1) && ldb >= (kb > 1 ? kb : 1) && ldc >= (N > 1 ? N : 1),
           MT_ERR_ARG, "%s: leading dimensions %lld, %lld, %lld too small", who, (long long)lda,
           (long long)ldb, (long long)ldc);
  return 0;
}

int mt_cuda_gemm_lowp(int prec, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                      float *C, int64_t ldc, mt_cuda_ctx *cx) {
  MT_CHECK(prec == MT_PREC_BF16 || prec == MT_PREC_FP16, MT_ERR_ARG,
           "mt_cuda_gemm_lowp: precision %d is neither bf16 nor fp16", prec);
  MT_CALL(check_gemm("mt_cuda_gemm_lowp", ta, tb, M, N, K, lda, ldb, ldc));
  if (M == 0 || N == 0) return 0;
  const cudaDataType_t t = prec == MT_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  cublasStatus_t st =
      cublasGemmEx(cx->blas, op_of(tb), op_of(ta), (int)N, (int)M, (int)K, &alpha, B, t, (int)ldb,
                   A, t, (int)lda, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
  BLAS_CHECK(st, "cublasGemmEx", ta, tb, M, N, K);
  return 0;
}

int mt_cuda_gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 mt_cuda_ctx *cx) {
  MT_CALL(check_gemm("mt_cuda_gemm", ta, tb, M, N, K, lda, ldb, ldc));
  if (M == 0 || N == 0) return 0;
  if (cx->prec != MT_PREC_FP32 && K > 0) {
    /* the CPU's mt_gemm_lowp: operands rounded to bf16/fp16 (packed copies
     * in scratch), fp32 accumulation, C rounded under O2 */
    const int64_t ar = is_t(ta) ? K : M, ac = is_t(ta) ? M : K;
    const int64_t br = is_t(tb) ? N : K, bc = is_t(tb) ? K : N;
    uint16_t *a, *b;
    MT_CALL(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_GEMM_A, (size_t)(ar * ac) * 2, (void **)&a));
    MT_CALL(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_GEMM_B, (size_t)(br * bc) * 2, (void **)&b));
    MT_CALL(mt_cuda_pack_lowp(cx->prec, a, A, ar, ac, lda, cx->stream));
    MT_CALL(mt_cuda_pack_lowp(cx->prec, b, B, br, bc, ldb, cx->stream));
    MT_CALL(mt_cuda_gemm_lowp(cx->prec, ta, tb, M, N, K, alpha, a, ac, b, bc, beta, C, ldc, cx));
  } else {
    cublasStatus_t st = cublasSgemm(cx->blas, op_of(tb), op_of(ta), (int)N, (int)M, (int)K, &alpha,
                                    B, (int)ldb, A, (int)lda, &beta, C, (int)ldc);
    BLAS_CHECK(st, "cublasSgemm", ta, tb, M, N, K);
  }
  if (cx->prec != MT_PREC_FP32 && cx->round_outputs)
    MT_CALL(mt_cuda_round_rows(cx->prec, C, M, N, ldc, cx->stream));
  return 0;
}

int mt_cuda_gemm_f64(char ta, char tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                     double *C, int64_t ldc, mt_cuda_ctx *cx) {
  MT_CALL(check_gemm("mt_cuda_gemm_f64", ta, tb, M, N, K, lda, ldb, ldc));
  if (M == 0 || N == 0) return 0;
  cublasStatus_t st = cublasDgemm(cx->blas, op_of(tb), op_of(ta), (int)N, (int)M, (int)K, &alpha, B,
                                  (int)ldb, A, (int)lda, &beta, C, (int)ldc);
  BLAS_CHECK(st, "cublasDgemm", ta, tb, M, N, K);
  return 0;
}

int mt_cuda_gemm_batched(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, int64_t sA, const float *B, int64_t ldb,
                         int64_t sB, float beta, float *C, int64_t ldc, int64_t sC, int batch,
                         mt_cuda_ctx *cx) {
  MT_CALL(check_gemm("mt_cuda_gemm_batched", ta, tb, M, N, K, lda, ldb, ldc));
  MT_CHECK(batch >= 0, MT_ERR_ARG, "mt_cuda_gemm_batched: batch %d", batch);
  if (M == 0 || N == 0 || batch == 0) return 0;
  cublasStatus_t st = cublasSgemmStridedBatched(
      cx->blas, op_of(tb), op_of(ta), (int)N, (int)M, (int)K, &alpha, B, (int)ldb, sB, A,
      (int)lda, sA, &beta, C, (int)ldc, sC, batch);
  BLAS_CHECK(st, "cublasSgemmStridedBatched", ta, tb, M, N, K);
  return 0;
}

int mt_cuda_gemm_batched_f64(char ta, char tb, int64_t M, int64_t N, int64_t K, double alpha,
                             const double *A, int64_t lda, int64_t sA, const double *B,
                             int64_t ldb, int64_t sB, double beta, double *C, int64_t ldc,
                             int64_t sC, int batch, mt_cuda_ctx *cx) {
  MT_CALL(check_gemm("mt_cuda_gemm_batched_f64", ta, tb, M, N, K, lda, ldb, ldc));
  MT_CHECK(batch >= 0, MT_ERR_ARG, "mt_cuda_gemm_batched_f64: batch %d", batch);
  if (M == 0 || N == 0 || batch == 0) return 0;
  cublasStatus_t st = cublasDgemmStridedBatched(
      cx->blas, op_of(tb), op_of(ta), (int)N, (int)M, (int)K, &alpha, B, (int)ldb, sB, A,
      (int)lda, sA, &beta, C, (int)ldc, sC, batch);
  BLAS_CHECK(st, "cublasDgemmStridedBatched", ta, tb, M, N, K);
  return 0;
}

/* ------------------------------------------- linear with cuBLASLt's bias */

#define LT_CALL(expr)                                                    \
  do {                                                                   \
    cublasStatus_t ls_ = (expr);                                         \
    if (ls_ != CUBLAS_STATUS_SUCCESS) return ls_;                        \
  } while (0)

/* The largest power of two (at most 256) dividing the address. */
static uint32_t alignment(const void *p) {
  const uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

/* out (B,OC) = inp (B,IC) w^T + b in one cuBLASLt matmul, fp32 C and D,
 * A and B fp32 (prec fp32) or bf16/fp16 copies (already packed, leading
 * dimension IC). In cuBLASLt's column-major terms: D (OC,B) = w^T-view
 * (IC,OC) transposed times inp-view (IC,B), plus the bias broadcast along
 * D's rows (CUBLASLT_EPILOGUE_BIAS: one value per row of D, i.e. per
 * output channel; the bias has D's type, fp32). Descriptors live on the stack (the *Init calls
 * allocate nothing). Returns the cuBLAS status: CUBLAS_STATUS_NOT_SUPPORTED
 * when no algorithm exists for the case (the caller falls back). */
static cublasStatus_t lt_linear(mt_cuda_ctx *cx, int prec, float *out, const void *inp,
                                const void *w, const float *b, int B, int IC, int OC) {
  const cudaDataType_t ab = prec == MT_PREC_BF16   ? CUDA_R_16BF
                            : prec == MT_PREC_FP16 ? CUDA_R_16F
                                                   : CUDA_R_32F;
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t la, lb, lc;
  cublasLtMatmulPreferenceOpaque_t pref;
  LT_CALL(cublasLtMatmulDescInit((cublasLtMatmulDesc_t)&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  cublasLtMatmulDesc_t d = (cublasLtMatmulDesc_t)&desc;
  LT_CALL(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
  LT_CALL(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
  LT_CALL(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  LT_CALL(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)));
  cublasLtMatrixLayout_t A = (cublasLtMatrixLayout_t)&la, Bm = (cublasLtMatrixLayout_t)&lb,
                         Cm = (cublasLtMatrixLayout_t)&lc;
  LT_CALL(cublasLtMatrixLayoutInit(A, ab, (uint64_t)IC, (uint64_t)OC, IC));  /* w viewed (IC,OC) */
  LT_CALL(cublasLtMatrixLayoutInit(Bm, ab, (uint64_t)IC, (uint64_t)B, IC));  /* inp viewed (IC,B) */
  LT_CALL(cublasLtMatrixLayoutInit(Cm, CUDA_R_32F, (uint64_t)OC, (uint64_t)B, OC));
  cublasLtMatmulPreference_t p = (cublasLtMatmulPreference_t)&pref;
  LT_CALL(cublasLtMatmulPreferenceInit(p));
  LT_CALL(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &cx->lt_work_bytes, sizeof(cx->lt_work_bytes)));
  /* the heuristic assumes 256-byte aligned matrices unless told otherwise;
   * a layer's weights inside the flat buffer are only 64-byte aligned */
  static const cublasLtMatmulPreferenceAttributes_t align_attr[3] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES};
  const uint32_t align[3] = {alignment(w), alignment(inp), alignment(out)};
  for (int i = 0; i < 3; i++)
    LT_CALL(cublasLtMatmulPreferenceSetAttribute(p, align_attr[i], &align[i], sizeof(align[i])));
  const uint32_t align_d = align[2];
  LT_CALL(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &align_d, sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t h;
  int found = 0;
  LT_CALL(cublasLtMatmulAlgoGetHeuristic(cx->lt, d, A, Bm, Cm, Cm, p, 1, &h, &found));
  if (found < 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(cx->lt, d, &one, w, A, inp, Bm, &zero, out, Cm, out, Cm, &h.algo,
                        cx->lt_work, cx->lt_work_bytes, cx->stream);
}

/* The forward's fused path (float, a bias, cx->use_lt, no O2 rounding):
 * 0 when done, 1 when cuBLASLt has no algorithm (the caller falls back),
 * else an error. */
static int linear_forward_lt(float *out, const float *inp, const float *w, const float *b, int B,
                             int IC, int OC, mt_cuda_ctx *cx) {
  const void *a = inp, *wv = w;
  if (cx->prec != MT_PREC_FP32) {
    uint16_t *ai, *wi;
    MT_CALL(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_GEMM_A, (size_t)B * IC * 2, (void **)&ai));
    MT_CALL(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_GEMM_B, (size_t)OC * IC * 2, (void **)&wi));
    MT_CALL(mt_cuda_pack_lowp(cx->prec, ai, inp, B, IC, IC, cx->stream));
    MT_CALL(mt_cuda_pack_lowp(cx->prec, wi, w, OC, IC, IC, cx->stream));
    a = ai, wv = wi;
  }
  cublasStatus_t st = lt_linear(cx, cx->prec, out, a, wv, b, B, IC, OC);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return 1;
  MT_CHECK(st == CUBLAS_STATUS_SUCCESS, MT_ERR_LIB,
           "cublasLtMatmul (linear B=%d IC=%d OC=%d with bias, %s) failed: %s", B, IC, OC,
           mt_precision_name((mt_precision)cx->prec), cublasGetStatusString(st));
  return 0;
}

#define MT_TEMPLATE "cuda/linear_t.h"
#include "core/real_t.h"
