/* The layers of nn.h, declared once for REAL = float (the plain names) and
 * REAL = double (MT_T: name_f64); included twice by nn.h through
 * core/real_t.h. Scalars that scale values (alpha, eps, p, scale) have the
 * type of the buffers. */

/* The layers whose products follow a compute-precision policy (nn/lowp.h)
 * take it as their last argument, pol: NULL computes in fp32; double
 * ignores it. */

/* Row-major C = alpha * op(A) op(B) + beta * C, op = 'N' or 'T' (float:
 * oneDNN's sgemm, or pol's low precision; double: the BLAS's cblas_dgemm). */
int MT_T(mt_gemm)(char ta, char tb, int64_t M, int64_t N, int64_t K, REAL alpha, const REAL *A,
                  int64_t lda, const REAL *B, int64_t ldb, REAL beta, REAL *C, int64_t ldc,
                  const mt_nn_policy *pol);
/* The same, then bias[j] (N values; NULL: none) added to column j of C's
 * rows: carried by the GEMM (its epilogue) where a kept oneDNN primitive
 * runs it, the bits of adding it after (gemm_matmul.h, mt_sgemm_bias). */
int MT_T(mt_gemm_bias)(char ta, char tb, int64_t M, int64_t N, int64_t K, REAL alpha,
                       const REAL *A, int64_t lda, const REAL *B, int64_t ldb, REAL beta, REAL *C,
                       int64_t ldc, const REAL *bias, const mt_nn_policy *pol);

/* out (B,OC) = inp (B,IC) @ w^T + b; w is (OC,IC), b is (OC) or NULL. */
int MT_T(mt_linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                            int IC, int OC, const mt_nn_policy *pol);
/* dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp; db (OC) += sum_rows dout.
 * dinp and db may be NULL (not needed). */
int MT_T(mt_linear_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout, const REAL *inp,
                             const REAL *w, int B, int IC, int OC, const mt_nn_policy *pol);

/* The same with what flags (MT_LINEAR_*, nn.h) fuse: forward, the ReLU of
 * the output; backward, the ReLU's mask on dout (which it then overwrites;
 * out is the forward's output, after the ReLU), and writing dw and db, or
 * dinp, instead of adding to them. */
int MT_T(mt_linear_forward_ex)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                               int IC, int OC, unsigned flags, const mt_nn_policy *pol);
int MT_T(mt_linear_backward_ex)(REAL *dinp, REAL *dw, REAL *db, REAL *dout, const REAL *out,
                                const REAL *inp, const REAL *w, int B, int IC, int OC,
                                unsigned flags, const mt_nn_policy *pol);

/* out = max(inp, 0), n elements; out may equal inp. */
void MT_T(mt_relu_forward)(REAL *out, const REAL *inp, int64_t n);
/* dinp += dout where out > 0. dinp may equal dout (then it is overwritten
 * with the masked gradient instead of added to). */
void MT_T(mt_relu_backward)(REAL *dinp, const REAL *dout, const REAL *out, int64_t n);

/* Softmax cross-entropy over C classes for B rows.
 * probs (B,C) keeps the softmax for backward; losses (B) per-sample loss
 * (may be NULL); returns the loss sum and adds top-1 hits to *correct. */
double MT_T(mt_softmax_xent_forward)(REAL *probs, REAL *losses, int64_t *correct,
                                     const REAL *logits, const int32_t *y, int B, int C);
/* dlogits (B,C) += scale * (probs - onehot(y)). */
void MT_T(mt_softmax_xent_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                    REAL scale, int B, int C);

/* ======================================================================
 * Layers of the CNN and GPT models (conv.c, conv64.c, pool.c, norm.c,
 * attention.c, embed.c, elementwise.c). Same conventions as above: NCHW
 * activations, PyTorch weight layouts, backward ADDS, NULL for a gradient
 * not needed.
 * ====================================================================== */

/* Checks the shape (as mt_conv2d_shape_init) and makes the convolution (see
 * mt_conv2d in nn.h), computing under pol: its primitives fix the
 * precision now and it keeps pol's round_outputs (not the pointer; a
 * convolution reads no weight cache). On failure *c is left freed
 * (mt_conv2d_free is still safe). */
int MT_T(mt_conv2d_init)(mt_conv2d *c, const mt_conv2d_shape *s, int has_bias,
                         const mt_nn_policy *pol);
/* out (B,OC,OH,OW) = conv(inp (B,IC,H,W), w) + b for 0 <= B <= c->s.B.
 * b must be NULL exactly when the convolution was made without a bias.
 * inp and dinp are in c->src_block's layout, out and dout in
 * c->dst_block's (NCHW unless made with src_any / dst_any: nn.h). */
int MT_T(mt_conv2d_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                            mt_conv2d *c);
/* dinp += conv^T(dout, w); dw += corr(inp, dout); db += sum over (B,OH,OW)
 * of dout. Any of dinp, dw, db may be NULL (db must be NULL without bias). */
int MT_T(mt_conv2d_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout, const REAL *inp,
                             const REAL *w, int B, mt_conv2d *c);

/* out (B,C,OH,OW) = max over each window (padding counts as -inf, NaN
 * wins, the first maximum is taken on ties); argmax (B,C,OH,OW) keeps the
 * index h*W+w of the chosen input within its (H,W) plane. */
void MT_T(mt_maxpool2d_forward)(REAL *out, int32_t *argmax, const REAL *inp,
                                const mt_pool2d_shape *s);
/* dinp (B,C,H,W) += dout scattered to the argmax positions. */
void MT_T(mt_maxpool2d_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                 const mt_pool2d_shape *s);
/* The backward of ReLU then max-pool in one pass: dinp += dout scattered
 * to the argmax positions where the pool's output out (B,C,OH,OW) is > 0
 * (= mt_maxpool2d_backward into zeros, then mt_relu_backward with the
 * ReLU's output, whose value at the argmax is out). */
void MT_T(mt_maxpool2d_relu_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                      const REAL *out, const mt_pool2d_shape *s);
/* Either of the two (out NULL: mt_maxpool2d_backward; given:
 * mt_maxpool2d_relu_backward), with flags (MT_POOL_*): MT_POOL_SET_DINP
 * writes the whole of dinp, 0 where no argmax points, instead of adding
 * to it (no zeroing pass before; on 2x2 windows over blocked channels with
 * even H and W, one pass that reads nothing of dinp). */
void MT_T(mt_maxpool2d_backward_ex)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                    const REAL *out, const mt_pool2d_shape *s, int flags);
/* out = mean over each window; the divisor is KH*KW when count_include_pad
 * (windows clipped to the padded input), else the number of real inputs. */
void MT_T(mt_avgpool2d_forward)(REAL *out, const REAL *inp, const mt_pool2d_shape *s);
void MT_T(mt_avgpool2d_backward)(REAL *dinp, const REAL *dout, const mt_pool2d_shape *s);
/* out (B,C) = mean of inp (B,C,HW) over HW; backward: dinp += dout / HW. */
void MT_T(mt_global_avgpool_forward)(REAL *out, const REAL *inp, int B, int C, int HW);
void MT_T(mt_global_avgpool_backward)(REAL *dinp, const REAL *dout, int B, int C, int HW);

/* LayerNorm over the last dimension of inp (N,C) (N = B*T rows):
 * out = (inp - mean) * rstd * weight + bias, with mean and rstd (N) kept for
 * backward (biased variance, as PyTorch). weight and bias (C) may be NULL
 * (no affine part). */
void MT_T(mt_layernorm_forward)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                                const REAL *weight, const REAL *bias, int N, int C, REAL eps);
/* The same with its output as bf16 bits (rounded to nearest even) in
 * out_bf16 when that is not NULL, out then not written: an activation
 * that only low-precision GEMMs read (mt_nn_hold_out). */
void MT_T(mt_layernorm_forward_ex)(REAL *out, uint16_t *out_bf16, REAL *mean, REAL *rstd,
                                   const REAL *inp, const REAL *weight, const REAL *bias, int N,
                                   int C, REAL eps);
/* dinp (N,C) += ...; dweight, dbias (C) += ...; each may be NULL. */
void MT_T(mt_layernorm_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                 const REAL *inp, const REAL *weight, const REAL *mean,
                                 const REAL *rstd, int N, int C);

/* BatchNorm2d over inp (B,C,HW): statistics per channel C.
 * training: mean and rstd (C) of this batch (biased variance) normalise it
 *   and are kept for backward; running_mean and running_var (C) are updated
 *   as r = (1 - momentum) r + momentum * batch, with the unbiased variance
 *   (as PyTorch); needs B*HW > 1 (else MT_ERR_ARG).
 * eval: normalises with running_mean/var; mean and rstd receive them too.
 * weight and bias (C) may be NULL (affine=False). */
int MT_T(mt_batchnorm2d_forward)(REAL *out, REAL *mean, REAL *rstd, REAL *running_mean,
                                 REAL *running_var, const REAL *inp, const REAL *weight,
                                 const REAL *bias, int B, int C, int HW, REAL eps, REAL momentum,
                                 int training);
/* Adds the gradients; training must be the flag the forward ran with (in
 * eval mode the statistics are constants). Any gradient may be NULL. */
void MT_T(mt_batchnorm2d_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                   const REAL *inp, const REAL *weight, const REAL *mean,
                                   const REAL *rstd, int B, int C, int HW, int training);

/* out (B,T,C) = wte[tokens[b,t]] + wpe[t]; wte is (V,C), wpe (maxT >= T, C)
 * or NULL. MT_ERR_DATA when a token is outside [0,V) (out is then
 * unspecified). */
int MT_T(mt_embedding_forward)(REAL *out, const int32_t *tokens, const REAL *wte,
                               const REAL *wpe, int B, int T, int C, int V);
/* dwte[tokens[b,t]] += dout[b,t]; dwpe[t] += sum_b dout[b,t]; either may be
 * NULL. Tokens must be valid (the forward checked them). */
void MT_T(mt_embedding_backward)(REAL *dwte, REAL *dwpe, const REAL *dout, const int32_t *tokens,
                                 int B, int T, int C);

/* Causal multi-head self-attention, llm.c layout. inp (B,T,3C) holds q, k, v
 * side by side, each (B,T,NH,hs) with hs = C/NH; out (B,T,C).
 * preatt (B,NH,T,T) = q k^T / sqrt(hs) for t2 <= t, 0 above the diagonal;
 * att (B,NH,T,T) = softmax of each row over t2 <= t, 0 above it. */
int MT_T(mt_attention_forward)(REAL *out, REAL *preatt, REAL *att, const REAL *inp, int B, int T,
                               int C, int NH, const mt_nn_policy *pol);
/* dinp (B,T,3C) += gradient of q, k, v. scratch holds B*NH*T*T values and
 * is overwritten; the forward's preatt may serve (backward does not need
 * it). _ex with MT_ATTN_SET_DINP: dinp written whole (=). */
int MT_T(mt_attention_backward)(REAL *dinp, REAL *scratch, const REAL *dout, const REAL *inp,
                                const REAL *att, int B, int T, int C, int NH,
                                const mt_nn_policy *pol);
int MT_T(mt_attention_backward_ex)(REAL *dinp, REAL *scratch, const REAL *dout, const REAL *inp,
                                   const REAL *att, int B, int T, int C, int NH, unsigned flags,
                                   const mt_nn_policy *pol);

/* GELU (mt_gelu_kind). The tanh form as x sigmoid(2u) with float's
 * vectorisable mt_vexp (nn/fastmath.h), double's libm's exp. */
void MT_T(mt_gelu_forward)(REAL *out, const REAL *inp, int64_t n, mt_gelu_kind kind);
/* The same into out_bf16 as bf16 bits when that is not NULL (out then not
 * written), as mt_layernorm_forward_ex. */
void MT_T(mt_gelu_forward_ex)(REAL *out, uint16_t *out_bf16, const REAL *inp, int64_t n,
                              mt_gelu_kind kind);
/* dinp += dout * gelu'(inp); _ex with MT_GELU_SET_DINP: dinp = (dinp may
 * then be dout: in place). */
void MT_T(mt_gelu_backward)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                            mt_gelu_kind kind);
void MT_T(mt_gelu_backward_ex)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                               mt_gelu_kind kind, unsigned flags);

/* out = a + b (n elements; out may alias a or b); backward: da += dout,
 * db += dout (either may be NULL). */
void MT_T(mt_residual_forward)(REAL *out, const REAL *a, const REAL *b, int64_t n);
void MT_T(mt_residual_backward)(REAL *da, REAL *db, const REAL *dout, int64_t n);

/* Dropout (see mt_dropout_key in nn.h):
 * training: out = inp * mask / (1 - p) (all zero when p >= 1), mask (n)
 *   records kept elements as 1, dropped as 0;
 * eval (or p <= 0): out = inp, mask (may be NULL) all 1.
 * out may equal inp. */
void MT_T(mt_dropout_forward)(REAL *out, uint8_t *mask, const REAL *inp, REAL p, uint64_t key,
                              uint64_t offset, int training, int64_t n);
/* dinp += dout * mask / (1 - p); mask NULL means eval (dinp += dout). */
void MT_T(mt_dropout_backward)(REAL *dinp, const REAL *dout, const uint8_t *mask, REAL p,
                               int64_t n);

/* Softmax cross-entropy over C classes for N rows with an ignore label: a
 * row whose label is ignore_index adds no loss and gets no gradient (its
 * probs are still written, its loss is 0). probs (N,C) may equal logits.
 * *loss_sum receives the sum over counted rows, *count the number of
 * counted rows (divide by it for PyTorch's reduction='mean'); losses (N)
 * and correct (top-1 hits are added to it) may be NULL.
 * MT_ERR_DATA when a label is neither ignore_index nor in [0,C). */
int MT_T(mt_xent_ignore_forward)(REAL *probs, REAL *losses, double *loss_sum, int64_t *count,
                                 int64_t *correct, const REAL *logits, const int32_t *y,
                                 int ignore_index, int N, int C);
/* dlogits (N,C) += scale * (probs - onehot(y)) on counted rows only. */
void MT_T(mt_xent_ignore_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                   int ignore_index, REAL scale, int N, int C);

/* Mean-squared error for pred, target (B,K): returns the sum of squared
 * errors (divide by B*K for PyTorch's reduction='mean'); losses (B), may be
 * NULL, gets each row's mean over K. */
double MT_T(mt_mse_forward)(REAL *losses, const REAL *pred, const REAL *target, int B, int K);
/* dpred (B,K) += scale * 2 * (pred - target). */
void MT_T(mt_mse_backward)(REAL *dpred, const REAL *pred, const REAL *target, REAL scale, int B,
                           int K);
