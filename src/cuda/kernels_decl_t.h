/* The CUDA entry points of kernels.h, declared once for REAL = float (the
 * plain names) and REAL = double (MT_T: name_f64); included twice by
 * kernels.h through core/real_t.h. Each mirrors the CPU function named in
 * its comment (nn/nn_decl_t.h): same arguments, same order, same meaning,
 * device pointers, then the stream or the context (which also stands for
 * the CPU's last argument, the policy: cx->prec, cx->round_outputs).
 * Scalars that scale values have the buffers' type, as on the CPU. */

/* ------------------------------------------------------------- GEMM */

/* mt_gemm: row-major C = alpha op(A) op(B) + beta C, op 'N' or 'T'.
 * float: cublasSgemm in fp32 (no TF32 unless the context allows it); under
 * a low-precision context (cx->prec bf16/fp16) A and B are converted into
 * scratch with the CPU's bit rules and multiplied by mt_cuda_gemm_lowp,
 * and with cx->round_outputs C is rounded to that precision afterwards, as
 * mt_gemm_lowp does. double: cublasDgemm. Sizes and leading dimensions
 * must fit cuBLAS's int (MT_ERR_ARG otherwise). */
int MT_T(mt_cuda_gemm)(char ta, char tb, int64_t M, int64_t N, int64_t K, REAL alpha,
                       const REAL *A, int64_t lda, const REAL *B, int64_t ldb, REAL beta, REAL *C,
                       int64_t ldc, mt_cuda_ctx *cx);
/* batch GEMMs of the same shape in one call (cublas<t>gemmStridedBatched):
 * matrix i of A starts at A + i * sA (sA may be 0: the same A for all), and
 * so for B and C. Always in the buffers' type (no low-precision policy). */
int MT_T(mt_cuda_gemm_batched)(char ta, char tb, int64_t M, int64_t N, int64_t K, REAL alpha,
                               const REAL *A, int64_t lda, int64_t sA, const REAL *B,
                               int64_t ldb, int64_t sB, REAL beta, REAL *C, int64_t ldc,
                               int64_t sC, int batch, mt_cuda_ctx *cx);

/* ----------------------------------------------------------- linear */

/* mt_linear_forward: out (B,OC) = inp (B,IC) @ w^T + b; w (OC,IC), b (OC)
 * or NULL. float with a bias and cx->use_lt: one cuBLASLt matmul with the
 * bias epilogue (fp32, or bf16/fp16 operands under cx->prec; not under
 * round_outputs, whose rounding comes between the product and the bias on
 * the CPU); where cuBLASLt has no algorithm for the case, and otherwise,
 * mt_cuda_gemm and a bias kernel. */
int MT_T(mt_cuda_linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                                 int IC, int OC, mt_cuda_ctx *cx);
/* mt_linear_backward: dinp (B,IC) += dout @ w; dw (OC,IC) += dout^T @ inp;
 * db (OC) += the column sums of dout (deterministic, summed in double).
 * Any of dinp, dw, db may be NULL. */
int MT_T(mt_cuda_linear_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,
                                  const REAL *inp, const REAL *w, int B, int IC, int OC,
                                  mt_cuda_ctx *cx);
/* out (rows,cols) += b (cols) on every row (the bias of a linear layer). */
int MT_T(mt_cuda_bias_add)(REAL *out, const REAL *b, int64_t rows, int64_t cols, cudaStream_t s);
/* dst (cols) += sum over the rows of src (rows,cols), in double, in a fixed
 * order: chunks of rows summed by a 2-d grid into scratch, then the chunks
 * in order. */
int MT_T(mt_cuda_sum_rows)(REAL *dst, const REAL *src, int64_t rows, int64_t cols,
                           mt_cuda_ctx *cx);

/* ------------------------------------------------------ element-wise */

/* mt_relu_forward / mt_relu_backward (dinp == dout: overwritten with the
 * masked gradient, as on the CPU). */
int MT_T(mt_cuda_relu_forward)(REAL *out, const REAL *inp, int64_t n, cudaStream_t s);
int MT_T(mt_cuda_relu_backward)(REAL *dinp, const REAL *dout, const REAL *out, int64_t n,
                                cudaStream_t s);
/* mt_gelu_forward / mt_gelu_backward (erf or tanh; the tanh form uses
 * CUDA's tanh where the float CPU code has mt_tanhf: within 3 ulp). */
int MT_T(mt_cuda_gelu_forward)(REAL *out, const REAL *inp, int64_t n, mt_gelu_kind kind,
                               cudaStream_t s);
int MT_T(mt_cuda_gelu_backward)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                                mt_gelu_kind kind, cudaStream_t s);
/* mt_residual_forward / mt_residual_backward. */
int MT_T(mt_cuda_residual_forward)(REAL *out, const REAL *a, const REAL *b, int64_t n,
                                   cudaStream_t s);
int MT_T(mt_cuda_residual_backward)(REAL *da, REAL *db, const REAL *dout, int64_t n,
                                    cudaStream_t s);
/* mt_dropout_forward / mt_dropout_backward: element i is kept when
 * mt_randu(key, offset + i) >= p, drawn by the same generator on the device
 * (cuda/bits.h), so the mask and the output are the CPU's, bit for bit. */
int MT_T(mt_cuda_dropout_forward)(REAL *out, uint8_t *mask, const REAL *inp, REAL p,
                                  uint64_t key, uint64_t offset, int training, int64_t n,
                                  cudaStream_t s);
int MT_T(mt_cuda_dropout_backward)(REAL *dinp, const REAL *dout, const uint8_t *mask, REAL p,
                                   int64_t n, cudaStream_t s);
/* mt_model_dropout for a training batch of n rows of row_len values, in
 * place: row i is keyed mt_key(key, layer + 1, ids ? ids[i] : i), key the
 * batch's (mt_batch.key), ids its row ids (device, or NULL). */
int MT_T(mt_cuda_model_dropout)(REAL *x, uint8_t *mask, REAL p, uint64_t key,
                                const int64_t *ids, int n, int layer, int64_t row_len,
                                cudaStream_t s);
/* mt_model_dropout_backward: d = mask ? d / (1 - p) : 0, in place. */
int MT_T(mt_cuda_model_dropout_backward)(REAL *d, const uint8_t *mask, REAL p, int64_t n,
                                         cudaStream_t s);

/* ------------------------------------------------------------ losses */

/* mt_softmax_xent_forward: probs (B,C), losses (B) (may be NULL); the loss
 * sum goes to *loss_sum (a device double, overwritten; may be NULL) and
 * the top-1 hits (the first maximum, as on the CPU) are added to *correct
 * (a device int64, may be NULL). A label outside [0,C) (which the CPU does
 * not check) gives that row a NaN loss. One block per row; the row sums in
 * double. */
int MT_T(mt_cuda_softmax_xent_forward)(REAL *probs, REAL *losses, double *loss_sum,
                                       int64_t *correct, const REAL *logits, const int32_t *y,
                                       int B, int C, mt_cuda_ctx *cx);
/* mt_softmax_xent_backward: dlogits += scale * (probs - onehot(y)). */
int MT_T(mt_cuda_softmax_xent_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                        REAL scale, int B, int C, cudaStream_t s);
/* mt_xent_ignore_forward: *loss_sum and *count (device scalars,
 * overwritten, may be NULL), *correct added to (may be NULL). A label
 * neither ignore_index nor in [0,C): MT_ERR_DATA as on the CPU when
 * cx->check (the call then waits for the stream), else the row counts as
 * ignored. probs may equal logits. */
int MT_T(mt_cuda_xent_ignore_forward)(REAL *probs, REAL *losses, double *loss_sum,
                                      int64_t *count, int64_t *correct, const REAL *logits,
                                      const int32_t *y, int ignore_index, int N, int C,
                                      mt_cuda_ctx *cx);
int MT_T(mt_cuda_xent_ignore_backward)(REAL *dlogits, const REAL *probs, const int32_t *y,
                                       int ignore_index, REAL scale, int N, int C,
                                       cudaStream_t s);
/* mt_mse_forward: the sum of squared errors into *loss_sum (device double,
 * overwritten), each row's mean into losses (B) (may be NULL). */
int MT_T(mt_cuda_mse_forward)(REAL *losses, double *loss_sum, const REAL *pred,
                              const REAL *target, int B, int K, mt_cuda_ctx *cx);
int MT_T(mt_cuda_mse_backward)(REAL *dpred, const REAL *pred, const REAL *target, REAL scale,
                               int B, int K, cudaStream_t s);

/* ------------------------------------------------------------- norms */

/* mt_layernorm_forward: one block per row, mean and variance in double
 * (two passes over the row), then the CPU's per-element expression. */
int MT_T(mt_cuda_layernorm_forward)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                                    const REAL *weight, const REAL *bias, int N, int C, REAL eps,
                                    cudaStream_t s);
/* mt_layernorm_backward: dinp one block per row; dweight and dbias column
 * sums in double (as mt_cuda_sum_rows). */
int MT_T(mt_cuda_layernorm_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                     const REAL *inp, const REAL *weight, const REAL *mean,
                                     const REAL *rstd, int N, int C, mt_cuda_ctx *cx);
/* mt_batchnorm2d_forward (training: batch statistics in double, one block
 * per channel, running statistics updated; eval: the running ones).
 * MT_ERR_ARG when training with B*HW <= 1. */
int MT_T(mt_cuda_batchnorm2d_forward)(REAL *out, REAL *mean, REAL *rstd, REAL *running_mean,
                                      REAL *running_var, const REAL *inp, const REAL *weight,
                                      const REAL *bias, int B, int C, int HW, REAL eps,
                                      REAL momentum, int training, mt_cuda_ctx *cx);
int MT_T(mt_cuda_batchnorm2d_backward)(REAL *dinp, REAL *dweight, REAL *dbias, const REAL *dout,
                                       const REAL *inp, const REAL *weight, const REAL *mean,
                                       const REAL *rstd, int B, int C, int HW, int training,
                                       mt_cuda_ctx *cx);

/* ----------------------------------------------------------- pooling */

/* mt_maxpool2d_forward: one thread per output, the CPU's scan order (the
 * first maximum, a NaN always wins), so out and argmax are the CPU's bits.
 * s is a host pointer (checked by mt_pool2d_shape_init). */
int MT_T(mt_cuda_maxpool2d_forward)(REAL *out, int32_t *argmax, const REAL *inp,
                                    const mt_pool2d_shape *s, cudaStream_t st);
/* mt_maxpool2d_backward: one thread per input element gathering the
 * outputs whose argmax it is, in increasing output order (the CPU's order
 * of its scatter: the same bits, no atomics). */
int MT_T(mt_cuda_maxpool2d_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                                     const mt_pool2d_shape *s, cudaStream_t st);
/* mt_avgpool2d_forward / backward (count_include_pad as on the CPU; the
 * backward gathers, as the max-pool's). */
int MT_T(mt_cuda_avgpool2d_forward)(REAL *out, const REAL *inp, const mt_pool2d_shape *s,
                                    cudaStream_t st);
int MT_T(mt_cuda_avgpool2d_backward)(REAL *dinp, const REAL *dout, const mt_pool2d_shape *s,
                                     cudaStream_t st);
/* mt_global_avgpool_forward (one block per plane, summed in double) and
 * backward. */
int MT_T(mt_cuda_global_avgpool_forward)(REAL *out, const REAL *inp, int B, int C, int HW,
                                         cudaStream_t st);
int MT_T(mt_cuda_global_avgpool_backward)(REAL *dinp, const REAL *dout, int B, int C, int HW,
                                          cudaStream_t st);

/* ----------------------------------------------------------- conv2d */

/* mt_conv2d_forward for a geometry s (host pointer, checked by
 * mt_conv2d_shape_init; any stride, padding, dilation and groups) and
 * 0 <= B <= s->B images: im2col of a chunk of images into the context's
 * column scratch (at most 64 MiB, at least one image), then per group one
 * strided-batched GEMM over the chunk's images, then the bias. b may be
 * NULL (no bias). */
int MT_T(mt_cuda_conv2d_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                                 const mt_conv2d_shape *s, mt_cuda_ctx *cx);
/* mt_conv2d_backward: dw += dout_g col_g^T image after image (a fixed
 * order); dinp += col2im(w_g^T dout_g), col2im gathering each input
 * element's columns (no atomics); db += the per-channel sums of dout (one
 * block per channel, in double). Any of dinp, dw, db may be NULL. */
int MT_T(mt_cuda_conv2d_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,
                                  const REAL *inp, const REAL *w, int B,
                                  const mt_conv2d_shape *s, mt_cuda_ctx *cx);

/* -------------------------------------------------------- embedding */

/* mt_embedding_forward: out (B,T,C) = wte[tokens] + wpe[t] (wpe may be
 * NULL). A token outside [0,V): MT_ERR_DATA naming the first such position
 * when cx->check (the call then waits for the stream), else its row of out
 * is left as it was. */
int MT_T(mt_cuda_embedding_forward)(REAL *out, const int32_t *tokens, const REAL *wte,
                                    const REAL *wpe, int B, int T, int C, int V,
                                    mt_cuda_ctx *cx);
/* mt_embedding_backward, deterministic and with the CPU's bits: the
 * positions are sorted by (token, position) (CUB's radix sort of 64-bit
 * keys, into the context's sort scratch), then one thread block per
 * distinct token adds that token's rows of dout to its row of dwte in
 * position order, which is the CPU's order; dwpe: one thread per (t,c)
 * summing over b in order. Either gradient may be NULL. */
int MT_T(mt_cuda_embedding_backward)(REAL *dwte, REAL *dwpe, const REAL *dout,
                                     const int32_t *tokens, int B, int T, int C, mt_cuda_ctx *cx);

/* -------------------------------------------------------- attention */

/* mt_attention_forward, llm.c's layout: inp (B,T,3C) = q, k, v side by
 * side, preatt and att (B,NH,T,T), out (B,T,C). For each image: preatt =
 * q k^T / sqrt(hs) as one strided-batched GEMM over the heads, the causal
 * softmax one block per row (zeros above the diagonal in preatt and att),
 * out = att v as another. MT_ERR_ARG unless C is a multiple of NH. */
int MT_T(mt_cuda_attention_forward)(REAL *out, REAL *preatt, REAL *att, const REAL *inp, int B,
                                    int T, int C, int NH, mt_cuda_ctx *cx);
/* mt_attention_backward: dinp (B,T,3C) += the gradients of q, k, v;
 * scratch (B,NH,T,T) is overwritten (the forward's preatt may serve). */
int MT_T(mt_cuda_attention_backward)(REAL *dinp, REAL *scratch, const REAL *dout,
                                     const REAL *inp, const REAL *att, int B, int T, int C,
                                     int NH, mt_cuda_ctx *cx);

/* ------------------------------------------- norms and clipping (optim) */

/* mt_l2_norm: *norm (a device double) = the L2 norm of the n values, in
 * two deterministic passes (a fixed grid of blocks summing squares in
 * double into scratch, then one block summing those in order). */
int MT_T(mt_cuda_l2_norm)(const REAL *g, size_t n, double *norm, mt_cuda_ctx *cx);
/* mt_clip_grad_norm: the norm as above into *norm (device, may not be
 * NULL), then g *= (REAL)(max_norm / (norm + 1e-6)) where that is below 1,
 * decided on the device (nothing waits). */
int MT_T(mt_cuda_clip_grad_norm)(REAL *g, size_t n, double max_norm, double *norm,
                                 mt_cuda_ctx *cx);
/* mt_clip_grad_norm_given: the norm given on the host. */
int MT_T(mt_cuda_clip_grad_norm_given)(REAL *g, size_t n, double norm, double max_norm,
                                       cudaStream_t s);
/* mt_clip_grad_value: clamp into [-c, c], NaN stays NaN; MT_ERR_ARG unless
 * clip_value > 0. */
int MT_T(mt_cuda_clip_grad_value)(REAL *g, size_t n, double clip_value, cudaStream_t s);
/* x[i] *= a (the scaler's unscale, a clipping coefficient). */
int MT_T(mt_cuda_scale)(REAL *x, size_t n, REAL a, cudaStream_t s);

/* ------------------------- the kernels of the optimizer steps (internal) */

/* The elements of the table's tensors (padding untouched), one thread per
 * element, each finding its tensor by a binary search over the offsets.
 * The public steps (cuda/cuda_optim.h) check the hyper-parameters and form
 * these scalars as the CPU does. */
int MT_T(mt_cuda_sgd_kernel)(const mt_cuda_table *t, REAL *params, const REAL *grads, REAL *buf,
                             int first_step, int nesterov, REAL momentum, REAL damp, REAL wd,
                             int all_decay, REAL lr, cudaStream_t s);
typedef struct {
  REAL beta1, beta2, one_minus_beta1, one_minus_beta2;
  REAL step_size; /* lr / (1 - beta1^k)                                    */
  REAL bc2_sqrt;  /* sqrt(1 - beta2^k)                                     */
  REAL eps;
  REAL decay_on;  /* 1 - lr * wd, the factor of a decayed tensor           */
} MT_T(mt_cuda_adamw_coef);
/* max_exp_avg_sq NULL: no amsgrad */
int MT_T(mt_cuda_adamw_kernel)(const mt_cuda_table *t, REAL *params, const REAL *grads,
                               REAL *exp_avg, REAL *exp_avg_sq, REAL *max_exp_avg_sq,
                               const MT_T(mt_cuda_adamw_coef) *c, int all_decay, cudaStream_t s);
