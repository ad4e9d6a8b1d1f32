/* Kernel events: what each kind of layer takes of a step, for -log_view.
 *
 * The models call the layers through nn.h's type-generic macros
 * (MT_NN_GENERIC); each macro marks its call with the layer's kind. Every
 * GEMM (mt_gemm, mt_gemm_f64) and every conversion of a GEMM operand to
 * bf16 or fp16 (held activations, the weight cache, operands converted at
 * the call) marks itself too, inside the layer that made it. A hook that
 * the trainer installs with -log_view (mt_nn_trace_set; trainer/profile.c)
 * turns the marks into PETSc events; without one a mark costs a load and a
 * branch. Marks made inside an OpenMP parallel construct (the per-thread
 * models of -thread_split batch, attention's heads), even one run by a
 * single thread, are not kept: PETSc logs from one thread, and the events
 * mean the same at any thread count. Events nest, as PETSc's do: a linear
 * layer's GEMMs count in mtGemm and in mtLinear, attention's per-head
 * GEMMs in mtAttention only. */
#ifndef MT_NN_TRACE_H
#define MT_NN_TRACE_H

#ifdef _OPENMP
#include <omp.h>
#endif

typedef enum {
  MT_K_LINEAR = 0,  /* linear layers: their GEMMs, the bias, ReLU and bias gradient */
  MT_K_GEMM,        /* every GEMM, the linear layers' included               */
  MT_K_CONV,        /* convolutions                                          */
  MT_K_POOL,        /* max, average and global average pooling               */
  MT_K_NORM,        /* layer and batch normalisation                         */
  MT_K_ATTENTION,   /* causal self-attention (its per-head GEMMs and softmax) */
  MT_K_ACTIVATION,  /* ReLU and GELU on their own                            */
  MT_K_ELEMENTWISE, /* residual adds, dropout                                */
  MT_K_LOSS,        /* the losses (softmax cross-entropy, mean squared error) */
  MT_K_EMBEDDING,   /* token and position embeddings                         */
  MT_K_CONVERT,     /* GEMM operands to bf16 or fp16                         */
  MT_K_COUNT
} mt_kernel;

/* The hook: begin (1) or end (0) of kernel k; begin returns whether it
 * logged (then the matching end is called), so a hook may decline. */
typedef int (*mt_nn_trace_fn)(mt_kernel k, int begin);
extern mt_nn_trace_fn mt_nn_trace_hook;
/* Installs f (NULL: none). Not while a marked call runs. */
void mt_nn_trace_set(mt_nn_trace_fn f);

static inline int mt_nn_trace_begin(mt_kernel k) {
  if (!mt_nn_trace_hook) return 0;
#ifdef _OPENMP
  if (omp_get_level() > 0) return 0; /* inside a parallel construct, of one thread too */
#endif
  return mt_nn_trace_hook(k, 1);
}
static inline void mt_nn_trace_end(int on, mt_kernel k) {
  if (on) (void)mt_nn_trace_hook(k, 0);
}

/* A call marked with kernel k: its value (MT_NN_TRACED) or none
 * (MT_NN_TRACED_VOID). GNU statement expressions: the call is evaluated
 * once. */
#define MT_NN_TRACED(k, call)                                                                    \
  ({                                                                                             \
    const int mt_tr_on_ = mt_nn_trace_begin(k);                                                  \
    const __typeof__(call) mt_tr_r_ = (call);                                                    \
    mt_nn_trace_end(mt_tr_on_, k);                                                               \
    mt_tr_r_;                                                                                    \
  })
#define MT_NN_TRACED_VOID(k, call)                                                               \
  ({                                                                                             \
    const int mt_tr_on_ = mt_nn_trace_begin(k);                                                  \
    (call);                                                                                      \
    mt_nn_trace_end(mt_tr_on_, k);                                                               \
  })

#endif
