/* The compute-precision policy of the layers (mixed precision, autocast).
 *
 * A value passed down, not process state: an mt_nn_policy says how the
 * layers that take one compute, and NULL means fp32. The trainer holds the
 * run's policy (mt_nn_policy_make from -amp, -amp_dtype) and makes the
 * built-in models with a pointer to it (models.h); a model passes it to
 * every GEMM, linear layer and attention it calls and gives it to its
 * convolutions when it makes them (their oneDNN primitives fix their
 * precision then). So two models of one process may compute in different
 * precisions, and a user's model (the public mt_model_ops, which never
 * sees a policy) computes in fp32. A double layer (_f64) ignores the
 * policy: -precision fp64 has no mixed precision.
 *
 * With a low precision every GEMM of mt_gemm (linear layers, attention's
 * products, forward and backward) and every convolution takes its inputs
 * and weights rounded to that precision and accumulates in fp32 into fp32
 * outputs; softmax, losses, norms, pooling, element-wise layers and
 * reductions stay fp32 (PyTorch's autocast lists).
 *   bf16: oneDNN's bf16 kernels (dnnl_gemm_bf16bf16f32; convolution
 *     primitives with bf16 src/weights/diff_dst and f32 dst/diff_src/
 *     diff_weights), AVX512_BF16 on this CPU.
 *   fp16: oneDNN 2.6 has no fp16 kernels for CPUs without AVX512_FP16, so
 *     it is emulated: the inputs are rounded to fp16 (mt_round_fp16, into
 *     fp32 copies) and the fp32 kernels run on them. A product of two fp16
 *     values is exact in fp32 (11 + 11 significant bits), so this is
 *     fp16-input, fp32-accumulate arithmetic (up to summation order) with
 *     fp32 speed.
 * round_outputs (O2, *-amp-apex): every GEMM/convolution output (also the
 * gradients they produce) is rounded to the low precision as well, as
 * when activations and gradients are held in bf16/fp16.
 *
 * Weight cast cache (part of the policy, since the models hold a pointer
 * to it): rounding a layer's weights on every call would cost as much
 * memory traffic as a small GEMM. During a training step the trainer
 * converts the whole flat parameter buffer once (mt_nn_weight_cache_fill)
 * and a GEMM whose operand lies inside that buffer reads the converted
 * copy. The cache is switched off (mt_nn_weight_cache_off) as soon as the
 * parameters may change, so an evaluation or a later step never sees stale
 * weights. The threads' models share the trainer's policy: the cache is
 * filled and cleared outside their parallel compute, and only read in it.
 *
 * Held operands (mt_nn_hold): an activation that several GEMMs read (a
 * layer's input: its forward and its weight gradient; a gradient: the
 * linear backward's two products; attention's q, k, v: every head's
 * products) is converted once, when held, into a table of held operands,
 * and a GEMM whose policy points to that table (mt_nn_with_holds) reads the
 * converted copy of any operand inside it. The holder promises the values
 * do not change until it clears the table. A model owns the table of its
 * forward-to-backward holds (so it does not matter which thread runs its
 * backward); a layer holding for the span of one call uses the calling
 * thread's (mt_nn_holds_local). MT_NN_NO_HOLDS=1 in the environment turns
 * holding off (the same numbers, converted at every GEMM).
 *
 * Scratch: operands outside the cache are converted into per-thread
 * scratch buffers that grow to the largest size seen and are then reused
 * (allocation happens in the first steps only). They cache allocations,
 * not policy. */
#ifndef MT_NN_LOWP_H
#define MT_NN_LOWP_H

#include "nn/precision.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mt_nn_policy {
  mt_precision compute; /* MT_PREC_FP32: the rest does not apply            */
  int round_outputs;    /* O2: GEMM/convolution outputs rounded to compute  */
  /* the weight cast cache (mt_nn_weight_cache_fill), NULL when off: cache
   * holds src's n floats converted to compute */
  const float *cache_src;
  const void *cache;
  size_t cache_n;
  /* held operands the GEMMs look in (mt_nn_with_holds), NULL: none */
  const struct mt_nn_holds *holds;
} mt_nn_policy;

/* A table of held operands (mt_nn_hold); {0} is an empty one. */
typedef struct mt_nn_holds {
  struct mt_nn_held *h; /* n in use, then free ones keeping their copies */
  int n, cap;
  const struct mt_nn_holds *next; /* searched after this one */
} mt_nn_holds;

/* A policy computing in compute (round_outputs only counts for a low
 * precision), its cache off. */
mt_nn_policy mt_nn_policy_make(mt_precision compute, int round_outputs);
/* What a policy pointer says, NULL being fp32. */
static inline mt_precision mt_nn_compute(const mt_nn_policy *p) {
  return p ? p->compute : MT_PREC_FP32;
}
static inline int mt_nn_rounds(const mt_nn_policy *p) { return p && p->round_outputs; }

/* Converts params (n floats) into cache (bf16: n uint16_t; fp16: n floats
 * holding fp16 values) and makes p's GEMMs read operands inside params
 * from it (nothing under fp32). cache must stay valid until
 * mt_nn_weight_cache_off(p). */
void mt_nn_weight_cache_fill(mt_nn_policy *p, const float *params, void *cache, size_t n);
void mt_nn_weight_cache_off(mt_nn_policy *p);
/* Bytes per element of the cache for precision p (0 for fp32). */
size_t mt_nn_weight_cache_elem(mt_precision p);

/* The calling thread's scratch buffer number slot (0..MT_NN_SCRATCH-1)
 * with at least bytes bytes (grown when smaller, contents lost). */
#define MT_NN_SCRATCH 6
int mt_nn_scratch(int slot, size_t bytes, void **p);

/* An fp32 copy of x (n floats) rounded to p, in scratch slot; *out is x
 * itself when p is fp32. */
int mt_nn_rounded_copy(mt_precision p, int slot, const float *x, size_t n, const float **out);

/* Converts x[0..n) to p's precision into table t, now; GEMMs under a
 * policy with t (mt_nn_with_holds) read it until t is cleared. Nothing
 * under fp32 or a NULL policy; when the copy cannot be made, GEMMs convert
 * as without a hold. */
void mt_nn_hold(mt_nn_holds *t, const mt_nn_policy *p, const float *x, size_t n);
/* A hold whose copy the caller writes: x[0..n) held in t as mt_nn_hold
 * does, but nothing converted; the returned buffer (n bf16 values) is for
 * x's producer to fill with x's values rounded to bf16 in the pass that
 * makes them (mt_layernorm_forward_ex, mt_gelu_forward_ex), and x itself
 * need not be written when only p's GEMMs read it. NULL (nothing held;
 * the caller writes x, and may mt_nn_hold it) unless p computes in bf16,
 * or with holding off (MT_NN_NO_HOLDS) or no memory. */
uint16_t *mt_nn_hold_out(mt_nn_holds *t, const mt_nn_policy *p, const float *x, size_t n);
/* Drops t's holds from the nth on (0: all), keeping their memory. */
void mt_nn_holds_clear(mt_nn_holds *t, int from);
void mt_nn_holds_free(mt_nn_holds *t);
/* A copy of p (NULL stays NULL) whose GEMMs look in t, then in the tables
 * p looked in. */
const mt_nn_policy *mt_nn_with_holds(const mt_nn_policy *p, mt_nn_holds *t, mt_nn_policy *copy);
/* The calling thread's table, for holds that end within one call
 * (clear from the n it found). */
mt_nn_holds *mt_nn_holds_local(void);
/* Elements converted by the calling thread's GEMM operands and holds so far
 * (tests: a held operand is converted once). */
uint64_t mt_nn_converted(void);

/* For layers that lay out their own bf16 operands (attention's heads): the
 * copy of x[0..n) that p's weight cache or held operands keep, in p's
 * precision (bf16: uint16_t bits), or NULL when none covers it. */
const void *mt_nn_held_copy(const mt_nn_policy *p, const float *x, size_t n);
/* n floats to bf16 (round to nearest even), counted in mt_nn_converted. */
void mt_nn_to_bf16(uint16_t *dst, const float *src, size_t n);
/* mt_gemm_lowp for a bf16 policy p whose A and B are bf16 already: the
 * product as p computes it (oneDNN's bf16 kernels, or widened to fp32
 * where the CPU has none), outputs rounded under O2. */
int mt_gemm_bf16_ops(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                     float *C, int64_t ldc, const mt_nn_policy *p);
/* Whether oneDNN's bf16 GEMM runs on this CPU in bf16 instructions
 * (AVX512_BF16 or AMX, as oneDNN's effective ISA says); without them
 * mt_gemm_lowp computes bf16 products in fp32 from the bf16 operands (the
 * same numbers up to the order of the sums, no speed-up; oneDNN's own
 * emulation on AVX-512 without bf16 was 4.5x slower than this). */
int mt_gemm_bf16_native(void);
/* oneDNN's effective ISA on this CPU, as it names it ("avx512_core_vnni") */
const char *mt_dnnl_isa_name(void);
/* Tests: emulate bf16 from now on (1), or ask the CPU again (0). Models made
 * before keep their convolutions' choice. */
void mt_gemm_bf16_emulate(int on);
/* Tests: oneDNN's bf16 kernels from now on wherever oneDNN has them at all
 * (AVX-512; without bf16 instructions oneDNN emulates them itself, slowly),
 * so the native path's layouts run on any AVX-512 CPU. 0 where it has none
 * (nothing changed). mt_gemm_bf16_emulate(0) asks the CPU again. */
int mt_gemm_bf16_force_native(void);

/* mt_gemm under the low-precision policy p (gemm.c dispatches here). */
int mt_gemm_lowp(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 const mt_nn_policy *p);
/* The same with bias (mt_gemm_bias): carried by the product where its
 * kernel takes it; under O2 added after the product's rounding, and the
 * sum rounded again. */
int mt_gemm_lowp_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *C, int64_t ldc, const float *bias, const mt_nn_policy *p);

#endif
