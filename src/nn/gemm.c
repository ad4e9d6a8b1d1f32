/* GEMM through oneDNN (the CPU library PyTorch itself uses); under a
 * low-precision policy (nn/lowp.h) through gemm_lowp.c. */
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <dnnl.h>

int mt_gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M == 0 || N == 0) return 0;
  if (mt_nn_precision() != MT_PREC_FP32)
    return mt_gemm_lowp(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  dnnl_status_t s = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  MT_CHECK(s == dnnl_success, MT_ERR_LIB,
           "dnnl_sgemm(%c,%c,M=%lld,N=%lld,K=%lld) failed with status %d", ta, tb, (long long)M,
           (long long)N, (long long)K, (int)s);
  return 0;
}
