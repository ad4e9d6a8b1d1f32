/* Layers as free functions (llm.c style): outputs, cached values, inputs,
 * weights, sizes. Backward functions ADD into every gradient they produce
 * (zeroing is the caller's separate step). No layer allocates. Weights use
 * PyTorch's layouts, e.g. a linear weight is (OC, IC).
 *
 * Every layer exists for float (the names below, -precision fp32) and for
 * double (the same name with _f64, -precision fp64: mt_linear_forward_f64
 * takes double buffers and double scalars), declared once in nn_decl_t.h
 * for both types. A source file that defines MT_NN_GENERIC before including
 * this header may call either through the plain name: mt_linear_forward(out,
 * ...) picks the double version when out is a double pointer (C11 _Generic;
 * see the end of this file). */
#ifndef MT_NN_H
#define MT_NN_H

#include <stddef.h>
#include <stdint.h>

#include "nn/trace.h"

/* The compute-precision policy some layers take (nn/lowp.h; NULL: fp32). */
typedef struct mt_nn_policy mt_nn_policy;

/* ------------------------------------------------------------- conv2d */

/* Geometry of a 2-d convolution. Fill the inputs and call
 * mt_conv2d_shape_init, which checks them and sets OH and OW
 * (OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1, as PyTorch). */
typedef struct {
  int B, IC, H, W;  /* input (B,IC,H,W); B: the largest batch of a call     */
  int OC, KH, KW;   /* weight (OC, IC/groups, KH, KW), bias (OC)            */
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups; /* dil 1 = none */
  int OH, OW;       /* output (B,OC,OH,OW): set by mt_conv2d_shape_init     */
  /* What the caller lets the convolution do beyond PyTorch's Conv2d (0, 0:
   * nothing). relu: the output is ReLU(conv), applied inside the kernel (a
   * oneDNN post-op), so no pass of its own over the output. dst_any: the
   * output and its gradient may be in the layout the kernels run fastest
   * in, nChw{b}c (channel blocks of b side by side; b chosen by oneDNN for
   * this CPU: 8 with AVX2, 16 with AVX-512), instead of NCHW, so they are
   * not reordered at every call; mt_conv2d.dst_block says which was chosen.
   * src_any: the same for the input and its gradient, in the layout the
   * forward picks for its input (mt_conv2d.src_block), which the layer
   * before then writes (a pool's oblock) instead of the convolution
   * reordering NCHW into it for the forward and backward-weights and its
   * input gradient back. */
  int relu, dst_any, src_any;
} mt_conv2d_shape;

/* Fills s->OH, s->OW; MT_ERR_ARG when a size is out of range (sizes < 1,
 * padding < 0, channels not divisible by groups, kernel larger than the
 * padded input). */
int mt_conv2d_shape_init(mt_conv2d_shape *s);

/* A convolution of one geometry. float (mt_conv2d_init): its oneDNN
 * primitives (forward, backward-data, backward-weights), their memory
 * formats and internal buffers, made once by mt_conv2d_init and owned by
 * the caller; forward and backward then allocate nothing. A call takes any
 * batch n <= s.B: n == s.B runs in one piece, a smaller n in at most
 * log2(s.B) power-of-two pieces (primitives for each are made up front).
 * Callable inside an OpenMP parallel region (one thread each) and outside
 * one (all threads): the primitives are made for both. Not to be used by
 * two threads at once: per-thread models keep one each.
 * double (mt_conv2d_init_f64): direct loops in double (conv64.c), no
 * primitives (impl stays NULL), nothing allocated; a convolution made for
 * one type refuses the other's calls (the float calls need impl, the
 * double ones its absence). */
typedef struct mt_conv2d_impl mt_conv2d_impl;
typedef struct {
  mt_conv2d_shape s;
  int has_bias;
  /* layout of out and dout: 0 = NCHW; b = nChw{b}c, element (n,c,h,w) at
   * ((n*OC/b + c/b)*OH*OW + h*OW + w)*b + c%b (set when made; only with
   * s.dst_any, OC a multiple of b and oneDNN preferring it) */
  int dst_block;
  /* layout of inp and dinp, the same way: 0 = NCHW, b = nChw{b}c (only with
   * s.src_any, IC a multiple of b, and not with few input channels, which
   * run on NCHW: see conv.c's act_plain) */
  int src_block;
  mt_conv2d_impl *impl;
} mt_conv2d;

/* Releases everything; accepts a zeroed or already freed *c. */
void mt_conv2d_free(mt_conv2d *c);

/* -------------------------------------------------------------- pooling */

/* Geometry of max/average pooling over (B,C,H,W). Fill the inputs and call
 * mt_pool2d_shape_init: floor mode, pad <= kernel/2 (as PyTorch). */
typedef struct {
  int B, C, H, W;
  int KH, KW, stride_h, stride_w, pad_h, pad_w;
  int count_include_pad; /* average pooling only: PyTorch's default is 1 */
  int OH, OW;            /* output (B,C,OH,OW): set by mt_pool2d_shape_init */
  /* layout of the input (and its gradient): 0 = NCHW; b = nChw{b}c as a
   * convolution's output with dst_block b (C a multiple of b). oblock: the
   * same for the output, its argmax and its gradient: NCHW (0) for a
   * linear layer, or the next convolution's src_block, so that tensor
   * reaches it in its own layout. */
  int cblock, oblock;
} mt_pool2d_shape;

int mt_pool2d_shape_init(mt_pool2d_shape *s);

/* ---------------------------------------------------------- element-wise */

/* GELU, exact (x * Phi(x), erf) or PyTorch's approximate='tanh'. */
typedef enum { MT_GELU_ERF = 0, MT_GELU_TANH = 1 } mt_gelu_kind;

/* Dropout keyed by the counter-based generator of src/core/core.h:
 * key = mt_dropout_key(seed, step, rank, layer), element i is kept when
 * mt_randu(key, offset + i) >= p, so a resumed run draws the same masks.
 * offset is 0 for a mask per rank; a backend that must match `sp` exactly
 * can key with rank 0 and pass the global position of its first element. */
uint64_t mt_dropout_key(uint64_t seed, uint64_t step, int rank, int layer);

/* What mt_linear_forward_ex and mt_linear_backward_ex fuse (or'ed): the
 * element-wise passes over a layer's activations that go away. */
enum {
  MT_LINEAR_RELU = 1,      /* ReLU after the bias; backward: its mask    */
  MT_LINEAR_SET_GRADS = 2, /* backward writes dw and db (=), not +=      */
  MT_LINEAR_SET_DINP = 4   /* backward writes dinp (=), not +=           */
};

/* What mt_maxpool2d_backward_ex does (or'ed). */
enum { MT_POOL_SET_DINP = 1 /* dinp written whole (=), not += */ };
/* What mt_gelu_backward_ex and mt_attention_backward_ex do. */
enum { MT_GELU_SET_DINP = 1 /* dinp written whole (=), not += */ };
enum { MT_ATTN_SET_DINP = 1 /* dinp written whole (=), not += */ };
/* Tests and bench/attn_parts: attention under a bf16 policy lays each
 * head's operands out dense in bf16 (1; attention_t.h), hands mt_gemm
 * their strided slices (0), or does the first where oneDNN's bf16 kernels
 * run and the second where bf16 is emulated (-1, the default). */
void mt_attention_dense_heads(int on);
/* Tests: the float GEMMs mt_gemm has run as blocks of columns on the
 * threads of one model (gemm.c's threads_split) in this process so far. */
long mt_gemm_split_calls(void);

/* ------------------------------------------------- every layer, both types */

#define MT_TEMPLATE "nn/nn_decl_t.h"
#include "core/real_t.h"

/* ---------------------------------------------- calls by the buffer type */

#ifdef MT_NN_GENERIC
/* f(x, ...) calls f when x is a float pointer and f_f64 when it is a double
 * pointer (x is the argument named in each macro: one that is never NULL). */
#define MT_NN_PICK(x, f)                                                       \
  _Generic((x), float *: f, const float *: f, double *: f##_f64, const double *: f##_f64)
#define mt_gemm(ta, tb, M, N, K, alpha, A, ...) \
  MT_NN_PICK(A, mt_gemm)(ta, tb, M, N, K, alpha, A, __VA_ARGS__)
#define mt_linear_forward(out, ...) \
  MT_NN_TRACED(MT_K_LINEAR, MT_NN_PICK(out, mt_linear_forward)(out, __VA_ARGS__))
#define mt_linear_backward(dinp, dw, db, dout, ...) \
  MT_NN_TRACED(MT_K_LINEAR, MT_NN_PICK(dout, mt_linear_backward)(dinp, dw, db, dout, __VA_ARGS__))
#define mt_linear_forward_ex(out, ...) \
  MT_NN_TRACED(MT_K_LINEAR, MT_NN_PICK(out, mt_linear_forward_ex)(out, __VA_ARGS__))
#define mt_linear_backward_ex(dinp, dw, db, dout, ...) \
  MT_NN_TRACED(MT_K_LINEAR, \
               MT_NN_PICK(dout, mt_linear_backward_ex)(dinp, dw, db, dout, __VA_ARGS__))
#define mt_relu_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_ACTIVATION, MT_NN_PICK(out, mt_relu_forward)(out, __VA_ARGS__))
#define mt_relu_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_ACTIVATION, MT_NN_PICK(dout, mt_relu_backward)(dinp, dout, __VA_ARGS__))
#define mt_softmax_xent_forward(probs, ...) \
  MT_NN_TRACED(MT_K_LOSS, MT_NN_PICK(probs, mt_softmax_xent_forward)(probs, __VA_ARGS__))
#define mt_softmax_xent_backward(dlogits, ...) \
  MT_NN_TRACED_VOID(MT_K_LOSS, MT_NN_PICK(dlogits, mt_softmax_xent_backward)(dlogits, __VA_ARGS__))
#define mt_conv2d_forward(out, ...) \
  MT_NN_TRACED(MT_K_CONV, MT_NN_PICK(out, mt_conv2d_forward)(out, __VA_ARGS__))
#define mt_conv2d_backward(dinp, dw, db, dout, ...) \
  MT_NN_TRACED(MT_K_CONV, MT_NN_PICK(dout, mt_conv2d_backward)(dinp, dw, db, dout, __VA_ARGS__))
#define mt_maxpool2d_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, MT_NN_PICK(out, mt_maxpool2d_forward)(out, __VA_ARGS__))
#define mt_maxpool2d_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, MT_NN_PICK(dout, mt_maxpool2d_backward)(dinp, dout, __VA_ARGS__))
#define mt_maxpool2d_relu_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, \
                    MT_NN_PICK(dout, mt_maxpool2d_relu_backward)(dinp, dout, __VA_ARGS__))
#define mt_maxpool2d_backward_ex(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, MT_NN_PICK(dout, mt_maxpool2d_backward_ex)(dinp, dout, __VA_ARGS__))
#define mt_avgpool2d_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, MT_NN_PICK(out, mt_avgpool2d_forward)(out, __VA_ARGS__))
#define mt_avgpool2d_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, MT_NN_PICK(dout, mt_avgpool2d_backward)(dinp, dout, __VA_ARGS__))
#define mt_global_avgpool_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, MT_NN_PICK(out, mt_global_avgpool_forward)(out, __VA_ARGS__))
#define mt_global_avgpool_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_POOL, \
                    MT_NN_PICK(dout, mt_global_avgpool_backward)(dinp, dout, __VA_ARGS__))
#define mt_layernorm_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_NORM, MT_NN_PICK(out, mt_layernorm_forward)(out, __VA_ARGS__))
#define mt_layernorm_forward_ex(out, ...) \
  MT_NN_TRACED_VOID(MT_K_NORM, MT_NN_PICK(out, mt_layernorm_forward_ex)(out, __VA_ARGS__))
#define mt_layernorm_backward(dinp, dweight, dbias, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_NORM, \
                    MT_NN_PICK(dout, mt_layernorm_backward)(dinp, dweight, dbias, dout, \
                                                            __VA_ARGS__))
#define mt_batchnorm2d_forward(out, ...) \
  MT_NN_TRACED(MT_K_NORM, MT_NN_PICK(out, mt_batchnorm2d_forward)(out, __VA_ARGS__))
#define mt_batchnorm2d_backward(dinp, dweight, dbias, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_NORM, \
                    MT_NN_PICK(dout, mt_batchnorm2d_backward)(dinp, dweight, dbias, dout, \
                                                              __VA_ARGS__))
#define mt_embedding_forward(out, ...) \
  MT_NN_TRACED(MT_K_EMBEDDING, MT_NN_PICK(out, mt_embedding_forward)(out, __VA_ARGS__))
#define mt_embedding_backward(dwte, dwpe, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_EMBEDDING, \
                    MT_NN_PICK(dout, mt_embedding_backward)(dwte, dwpe, dout, __VA_ARGS__))
#define mt_attention_forward(out, ...) \
  MT_NN_TRACED(MT_K_ATTENTION, MT_NN_PICK(out, mt_attention_forward)(out, __VA_ARGS__))
#define mt_attention_backward(dinp, scratch, dout, ...) \
  MT_NN_TRACED(MT_K_ATTENTION, \
               MT_NN_PICK(dout, mt_attention_backward)(dinp, scratch, dout, __VA_ARGS__))
#define mt_attention_backward_ex(dinp, scratch, dout, ...) \
  MT_NN_TRACED(MT_K_ATTENTION, \
               MT_NN_PICK(dout, mt_attention_backward_ex)(dinp, scratch, dout, __VA_ARGS__))
#define mt_gelu_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_ACTIVATION, MT_NN_PICK(out, mt_gelu_forward)(out, __VA_ARGS__))
#define mt_gelu_forward_ex(out, ...) \
  MT_NN_TRACED_VOID(MT_K_ACTIVATION, MT_NN_PICK(out, mt_gelu_forward_ex)(out, __VA_ARGS__))
#define mt_gelu_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_ACTIVATION, MT_NN_PICK(dout, mt_gelu_backward)(dinp, dout, __VA_ARGS__))
#define mt_gelu_backward_ex(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_ACTIVATION, MT_NN_PICK(dout, mt_gelu_backward_ex)(dinp, dout, __VA_ARGS__))
#define mt_residual_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_ELEMENTWISE, MT_NN_PICK(out, mt_residual_forward)(out, __VA_ARGS__))
#define mt_residual_backward(da, db, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_ELEMENTWISE, \
                    MT_NN_PICK(dout, mt_residual_backward)(da, db, dout, __VA_ARGS__))
#define mt_dropout_forward(out, ...) \
  MT_NN_TRACED_VOID(MT_K_ELEMENTWISE, MT_NN_PICK(out, mt_dropout_forward)(out, __VA_ARGS__))
#define mt_dropout_backward(dinp, dout, ...) \
  MT_NN_TRACED_VOID(MT_K_ELEMENTWISE, \
                    MT_NN_PICK(dout, mt_dropout_backward)(dinp, dout, __VA_ARGS__))
#define mt_xent_ignore_forward(probs, ...) \
  MT_NN_TRACED(MT_K_LOSS, MT_NN_PICK(probs, mt_xent_ignore_forward)(probs, __VA_ARGS__))
#define mt_xent_ignore_backward(dlogits, ...) \
  MT_NN_TRACED_VOID(MT_K_LOSS, MT_NN_PICK(dlogits, mt_xent_ignore_backward)(dlogits, __VA_ARGS__))
#define mt_mse_forward(losses, pred, ...) \
  MT_NN_TRACED(MT_K_LOSS, MT_NN_PICK(pred, mt_mse_forward)(losses, pred, __VA_ARGS__))
#define mt_mse_backward(dpred, ...) \
  MT_NN_TRACED_VOID(MT_K_LOSS, MT_NN_PICK(dpred, mt_mse_backward)(dpred, __VA_ARGS__))
#endif

#endif
