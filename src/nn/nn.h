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

/* ======================================================================
 * Layers of the CNN and GPT models (conv.c, pool.c, norm.c, attention.c,
 * embed.c, elementwise.c). Same conventions as above: NCHW activations,
 * PyTorch weight layouts, backward ADDS, NULL for a gradient not needed.
 * ====================================================================== */

/* ------------------------------------------------------------- conv2d */

/* Geometry of a 2-d convolution. Fill the inputs and call
 * mt_conv2d_shape_init, which checks them and sets OH and OW
 * (OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1, as PyTorch). */
typedef struct {
  int B, IC, H, W;  /* input (B,IC,H,W); B: the largest batch of a call     */
  int OC, KH, KW;   /* weight (OC, IC/groups, KH, KW), bias (OC)            */
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups; /* dil 1 = none */
  int OH, OW;       /* output (B,OC,OH,OW): set by mt_conv2d_shape_init     */
} mt_conv2d_shape;

/* Fills s->OH, s->OW; MT_ERR_ARG when a size is out of range (sizes < 1,
 * padding < 0, channels not divisible by groups, kernel larger than the
 * padded input). */
int mt_conv2d_shape_init(mt_conv2d_shape *s);

/* A convolution of one geometry with its oneDNN primitives (forward,
 * backward-data, backward-weights), their memory formats and internal
 * buffers, made once by mt_conv2d_init and owned by the caller; forward and
 * backward then allocate nothing. A call takes any batch n <= s.B: n == s.B
 * runs in one piece, a smaller n in at most log2(s.B) power-of-two pieces
 * (primitives for each are made up front). Callable inside an OpenMP
 * parallel region (one thread each) and outside one (all threads): the
 * primitives are made for both. Not to be used by two threads at once:
 * per-thread models keep one each. */
typedef struct mt_conv2d_impl mt_conv2d_impl;
typedef struct {
  mt_conv2d_shape s;
  int has_bias;
  mt_conv2d_impl *impl;
} mt_conv2d;

/* Checks the shape (as mt_conv2d_shape_init) and creates the primitives.
 * On failure *c is left freed (mt_conv2d_free is still safe). */
int mt_conv2d_init(mt_conv2d *c, const mt_conv2d_shape *s, int has_bias);
/* Releases everything; accepts a zeroed or already freed *c. */
void mt_conv2d_free(mt_conv2d *c);
/* out (B,OC,OH,OW) = conv(inp (B,IC,H,W), w) + b for 0 <= B <= c->s.B.
 * b must be NULL exactly when the convolution was made without a bias. */
int mt_conv2d_forward(float *out, const float *inp, const float *w, const float *b, int B,
                      mt_conv2d *c);
/* dinp += conv^T(dout, w); dw += corr(inp, dout); db += sum over (B,OH,OW)
 * of dout. Any of dinp, dw, db may be NULL (db must be NULL without bias). */
int mt_conv2d_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int B, mt_conv2d *c);

/* -------------------------------------------------------------- pooling */

/* Geometry of max/average pooling over (B,C,H,W). Fill the inputs and call
 * mt_pool2d_shape_init: floor mode, pad <= kernel/2 (as PyTorch). */
typedef struct {
  int B, C, H, W;
  int KH, KW, stride_h, stride_w, pad_h, pad_w;
  int count_include_pad; /* average pooling only: PyTorch's default is 1 */
  int OH, OW;            /* output (B,C,OH,OW): set by mt_pool2d_shape_init */
} mt_pool2d_shape;

int mt_pool2d_shape_init(mt_pool2d_shape *s);
/* out (B,C,OH,OW) = max over each window (padding counts as -inf, NaN
 * wins, the first maximum is taken on ties); argmax (B,C,OH,OW) keeps the
 * index h*W+w of the chosen input within its (H,W) plane. */
void mt_maxpool2d_forward(float *out, int32_t *argmax, const float *inp, const mt_pool2d_shape *s);
/* dinp (B,C,H,W) += dout scattered to the argmax positions. */
void mt_maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax,
                           const mt_pool2d_shape *s);
/* out = mean over each window; the divisor is KH*KW when count_include_pad
 * (windows clipped to the padded input), else the number of real inputs. */
void mt_avgpool2d_forward(float *out, const float *inp, const mt_pool2d_shape *s);
void mt_avgpool2d_backward(float *dinp, const float *dout, const mt_pool2d_shape *s);
/* out (B,C) = mean of inp (B,C,HW) over HW; backward: dinp += dout / HW. */
void mt_global_avgpool_forward(float *out, const float *inp, int B, int C, int HW);
void mt_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int HW);

/* -------------------------------------------------------- normalisation */

/* LayerNorm over the last dimension of inp (N,C) (N = B*T rows):
 * out = (inp - mean) * rstd * weight + bias, with mean and rstd (N) kept for
 * backward (biased variance, as PyTorch). weight and bias (C) may be NULL
 * (no affine part). */
void mt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps);
/* dinp (N,C) += ...; dweight, dbias (C) += ...; each may be NULL. */
void mt_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int N, int C);

/* BatchNorm2d over inp (B,C,HW): statistics per channel C.
 * training: mean and rstd (C) of this batch (biased variance) normalise it
 *   and are kept for backward; running_mean and running_var (C) are updated
 *   as r = (1 - momentum) r + momentum * batch, with the unbiased variance
 *   (as PyTorch); needs B*HW > 1 (else MT_ERR_ARG).
 * eval: normalises with running_mean/var; mean and rstd receive them too.
 * weight and bias (C) may be NULL (affine=False). */
int mt_batchnorm2d_forward(float *out, float *mean, float *rstd, float *running_mean,
                           float *running_var, const float *inp, const float *weight,
                           const float *bias, int B, int C, int HW, float eps, float momentum,
                           int training);
/* Adds the gradients; training must be the flag the forward ran with (in
 * eval mode the statistics are constants). Any gradient may be NULL. */
void mt_batchnorm2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int B, int C, int HW, int training);

/* ------------------------------------------------------------ embedding */

/* out (B,T,C) = wte[tokens[b,t]] + wpe[t]; wte is (V,C), wpe (maxT >= T, C)
 * or NULL. MT_ERR_DATA when a token is outside [0,V) (out is then
 * unspecified). */
int mt_embedding_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                         int B, int T, int C, int V);
/* dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t]; either may be
 * NULL. Tokens must be valid (the forward checked them). */
void mt_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                           int B, int T, int C);

/* ------------------------------------------------------------ attention */

/* Causal multi-head self-attention, llm.c layout. inp (B,T,3C) holds q, k, v
 * side by side, each (B,T,NH,hs) with hs = C/NH; out (B,T,C).
 * preatt (B,NH,T,T) = q k^T / sqrt(hs) for t2 <= t, 0 above the diagonal;
 * att (B,NH,T,T) = softmax of each row over t2 <= t, 0 above it. */
int mt_attention_forward(float *out, float *preatt, float *att, const float *inp, int B, int T,
                         int C, int NH);
/* dinp (B,T,3C) += gradient of q, k, v. scratch holds B*NH*T*T floats and is
 * overwritten; the forward's preatt may serve (backward does not need it). */
int mt_attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                          const float *att, int B, int T, int C, int NH);

/* ---------------------------------------------------------- element-wise */

/* GELU, exact (x * Phi(x), erf) or PyTorch's approximate='tanh'. */
typedef enum { MT_GELU_ERF = 0, MT_GELU_TANH = 1 } mt_gelu_kind;
void mt_gelu_forward(float *out, const float *inp, int64_t n, mt_gelu_kind kind);
/* dinp += dout * gelu'(inp). */
void mt_gelu_backward(float *dinp, const float *dout, const float *inp, int64_t n,
                      mt_gelu_kind kind);

/* out = a + b (n elements; out may alias a or b); backward: da += dout,
 * db += dout (either may be NULL). */
void mt_residual_forward(float *out, const float *a, const float *b, int64_t n);
void mt_residual_backward(float *da, float *db, const float *dout, int64_t n);

/* Dropout keyed by the counter-based generator of src/core/core.h:
 * key = mt_dropout_key(seed, step, rank, layer), element i is kept when
 * mt_randu(key, offset + i) >= p, so a resumed run draws the same masks.
 * offset is 0 for a mask per rank; a backend that must match `sp` exactly
 * can key with rank 0 and pass the global position of its first element.
 * training: out = inp * mask / (1 - p) (all zero when p >= 1), mask (n)
 *   records kept elements as 1, dropped as 0;
 * eval (or p <= 0): out = inp, mask (may be NULL) all 1.
 * out may equal inp. */
uint64_t mt_dropout_key(uint64_t seed, uint64_t step, int rank, int layer);
void mt_dropout_forward(float *out, uint8_t *mask, const float *inp, float p, uint64_t key,
                        uint64_t offset, int training, int64_t n);
/* dinp += dout * mask / (1 - p); mask NULL means eval (dinp += dout). */
void mt_dropout_backward(float *dinp, const float *dout, const uint8_t *mask, float p, int64_t n);

/* --------------------------------------------------------------- losses */

/* Softmax cross-entropy over C classes for N rows with an ignore label: a
 * row whose label is ignore_index adds no loss and gets no gradient (its
 * probs are still written, its loss is 0). probs (N,C) may equal logits.
 * *loss_sum receives the sum over counted rows, *count the number of
 * counted rows (divide by it for PyTorch's reduction='mean'); losses (N)
 * and correct (top-1 hits are added to it) may be NULL.
 * MT_ERR_DATA when a label is neither ignore_index nor in [0,C). */
int mt_xent_ignore_forward(float *probs, float *losses, double *loss_sum, int64_t *count,
                           int64_t *correct, const float *logits, const int32_t *y,
                           int ignore_index, int N, int C);
/* dlogits (N,C) += scale * (probs - onehot(y)) on counted rows only. */
void mt_xent_ignore_backward(float *dlogits, const float *probs, const int32_t *y,
                             int ignore_index, float scale, int N, int C);

/* Mean-squared error for pred, target (B,K): returns the sum of squared
 * errors (divide by B*K for PyTorch's reduction='mean'); losses (B), may be
 * NULL, gets each row's mean over K. */
double mt_mse_forward(float *losses, const float *pred, const float *target, int B, int K);
/* dpred (B,K) += scale * 2 * (pred - target). */
void mt_mse_backward(float *dpred, const float *pred, const float *target, float scale, int B,
                     int K);

#endif
