/* Layers as free functions (llm.c style): outputs, cached values, inputs,
 * weights, sizes. Backward functions ADD into every gradient they produce
 * (zeroing is the caller's separate step). No layer allocates. Weights use
 * PyTorch's layouts, e.g. a linear weight is (OC, IC). */
#ifndef MT_NN_H
#define MT_NN_H

#include <stddef.h>
#include <stdint.h>

/* Row-major C = alpha * op(A) op(B) + beta * C, op = 'N' or 'T' (oneDNN). */
int mt_gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* out (B,OC) = inp (B,IC) @ w^T + b; w is (OC,IC), b is (OC) or NULL. */
int mt_linear_forward(float *out, const float *inp, const float *w, const float *b, int B, int IC,
                      int OC);
/* dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp; db (OC) += sum_rows dout.
 * dinp and db may be NULL (not needed). */
int mt_linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int B, int IC, int OC);

/* out = max(inp, 0), n elements; out may equal inp. */
void mt_relu_forward(float *out, const float *inp, int64_t n);
/* dinp += dout where out > 0. dinp may equal dout (then it is overwritten
 * with the masked gradient instead of added to). */
void mt_relu_backward(float *dinp, const float *dout, const float *out, int64_t n);

/* Softmax cross-entropy over C classes for B rows.
 * probs (B,C) keeps the softmax for backward; losses (B) per-sample loss
 * (may be NULL); returns the loss sum and adds top-1 hits to *correct. */
double mt_softmax_xent_forward(float *probs, float *losses, int64_t *correct,
                               const float *logits, const int32_t *y, int B, int C);
/* dlogits (B,C) += scale * (probs - onehot(y)). */
void mt_softmax_xent_backward(float *dlogits, const float *probs, const int32_t *y, float scale,
                              int B, int C);

#endif
