/* Fully connected layer, PyTorch layout: w is (OC, IC). */
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

int mt_linear_forward(float *out, const float *inp, const float *w, const float *b, int B, int IC,
                      int OC) {
  // inp is (B,IC), w is (OC,IC), b is (OC), out is (B,OC)
  MT_CALL(mt_gemm('N', 'T', B, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC));
  if (b) {
#pragma omp parallel for schedule(static) if ((long)B * OC > 65536)
    for (int i = 0; i < B; i++) {
      float *o = out + (size_t)i * OC;
#pragma omp simd
      for (int j = 0; j < OC; j++) o[j] += b[j];
    }
    /* O2 (nn/lowp.h): the output is a low-precision tensor, bias included */
    if (mt_nn_round_outputs()) mt_round_to(mt_nn_precision(), out, (size_t)B * OC);
  }
  return 0;
}

int mt_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int B, int IC, int OC) {
  // dout is (B,OC); dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp; db += sum_b dout
  if (dinp) MT_CALL(mt_gemm('N', 'N', B, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC));
  MT_CALL(mt_gemm('T', 'N', OC, IC, B, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC));
  if (db) {
    for (int i = 0; i < B; i++) {
      const float *d = dout + (size_t)i * OC;
#pragma omp simd
      for (int j = 0; j < OC; j++) db[j] += d[j];
    }
  }
  return 0;
}
