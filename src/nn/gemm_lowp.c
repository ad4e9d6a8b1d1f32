/* GEMMs under the low-precision policy of nn/lowp.h: bf16 through oneDNN's
 * bf16 kernels (fp32 accumulation, fp32 C; mt_gemm_bf16: a kept brgemm
 * matmul primitive, or dnnl_gemm_bf16bf16f32), fp16 emulated by rounding the
 * operands to fp16 and running the fp32 GEMM. On a CPU without bf16
 * instructions bf16 is emulated the same way (mt_gemm_bf16_native). */
#include "nn/gemm_log.h"
#include "nn/gemm_matmul.h"
#include "nn/lowp.h"
#include "nn/precision.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <stdlib.h>
#include <string.h>

mt_nn_policy mt_nn_policy_make(mt_precision compute, int round_outputs) {
  return (mt_nn_policy){.compute = compute,
                        .round_outputs = compute != MT_PREC_FP32 && round_outputs};
}

size_t mt_nn_weight_cache_elem(mt_precision p) {
  return p == MT_PREC_BF16 ? sizeof(uint16_t) : p == MT_PREC_FP16 ? sizeof(float) : 0;
}

static _Thread_local uint64_t converted_;

uint64_t mt_nn_converted(void) { return converted_; }

/* n floats of src into dst in precision p (bf16 bits, or fp16 values held
 * in floats); 0 when p is fp32 */
static int convert(mt_precision p, void *dst, const float *src, size_t n) {
  if (p != MT_PREC_BF16 && p != MT_PREC_FP16) return 0;
  const int tr = mt_nn_trace_begin(MT_K_CONVERT);
  if (p == MT_PREC_BF16) {
    mt_f32_to_bf16(dst, src, n);
  } else {
    memcpy(dst, src, n * sizeof(float));
    mt_round_fp16(dst, n);
  }
  mt_nn_trace_end(tr, MT_K_CONVERT);
  converted_ += n;
  return 1;
}

void mt_nn_weight_cache_fill(mt_nn_policy *p, const float *params, void *cache, size_t n) {
  if (!convert(p->compute, cache, params, n)) return;
  p->cache_src = params;
  p->cache = cache;
  p->cache_n = n;
}

void mt_nn_weight_cache_off(mt_nn_policy *p) {
  p->cache_src = NULL;
  p->cache = NULL;
  p->cache_n = 0;
}

static _Thread_local struct {
  void *p;
  size_t cap;
} scratch_[MT_NN_SCRATCH];

int mt_nn_scratch(int slot, size_t bytes, void **p) {
  MT_CHECK(slot >= 0 && slot < MT_NN_SCRATCH, MT_ERR_ARG, "scratch slot %d", slot);
  if (scratch_[slot].cap < bytes) {
    mt_free(&scratch_[slot].p);
    scratch_[slot].cap = 0;
    size_t cap = bytes + bytes / 4 + 64;
    MT_CALL(mt_calloc(&scratch_[slot].p, cap, 1, "low-precision GEMM operands"));
    scratch_[slot].cap = cap;
  }
  *p = scratch_[slot].p;
  return 0;
}

int mt_nn_rounded_copy(mt_precision p, int slot, const float *x, size_t n, const float **out) {
  if (p == MT_PREC_FP32 || n == 0) {
    *out = x;
    return 0;
  }
  float *s;
  MT_CALL(mt_nn_scratch(slot, n * sizeof(float), (void **)&s));
  memcpy(s, x, n * sizeof(float));
  mt_round_to(p, s, n);
  *out = s;
  return 0;
}

/* ------------------------------------------------------- held operands */

typedef struct mt_nn_held {
  const float *src;
  size_t n;
  void *copy; /* kept when cleared, grown as needed */
  size_t cap;
} held;

/* MT_NN_NO_HOLDS=1 turns holding off (tests compare against it; the
 * numbers are the same, only converted more often) */
static int holds_off(void) {
  static _Atomic int off = -1;
  if (off < 0) {
    const char *e = getenv("MT_NN_NO_HOLDS");
    off = e && *e && strcmp(e, "0") != 0;
  }
  return off;
}

/* a held entry of t for x[0..n) with a copy of n elements of es bytes
 * (not filled), or NULL */
static held *hold_entry(mt_nn_holds *t, const float *x, size_t n, size_t es) {
  if (t->n == t->cap) {
    const int cap = t->cap ? 2 * t->cap : 16;
    held *g = realloc(t->h, (size_t)cap * sizeof(*g));
    if (!g) return NULL; /* not held: the GEMMs convert as before */
    memset(g + t->cap, 0, (size_t)(cap - t->cap) * sizeof(*g));
    t->h = g;
    t->cap = cap;
  }
  held *e = &t->h[t->n];
  if (e->cap < n * es) {
    mt_free(&e->copy);
    e->cap = 0;
    if (mt_calloc(&e->copy, n, es, "held low-precision operands")) {
      mt_error_clear();
      return NULL;
    }
    e->cap = n * es;
  }
  e->src = x;
  e->n = n;
  return e;
}

void mt_nn_hold(mt_nn_holds *t, const mt_nn_policy *p, const float *x, size_t n) {
  const size_t es = mt_nn_weight_cache_elem(mt_nn_compute(p));
  if (!es || !x || !n || holds_off()) return;
  held *e = hold_entry(t, x, n, es);
  if (!e) return;
  convert(p->compute, e->copy, x, n);
  t->n++;
}

uint16_t *mt_nn_hold_out(mt_nn_holds *t, const mt_nn_policy *p, const float *x, size_t n) {
  if (mt_nn_compute(p) != MT_PREC_BF16 || !x || !n || holds_off()) return NULL;
  held *e = hold_entry(t, x, n, sizeof(uint16_t));
  if (!e) return NULL;
  t->n++;
  return e->copy;
}

void mt_nn_holds_clear(mt_nn_holds *t, int from) {
  if (from < t->n) t->n = from < 0 ? 0 : from;
}

void mt_nn_holds_free(mt_nn_holds *t) {
  for (int i = 0; i < t->cap; i++) mt_free(&t->h[i].copy);
  free(t->h);
  *t = (mt_nn_holds){0};
}

const mt_nn_policy *mt_nn_with_holds(const mt_nn_policy *p, mt_nn_holds *t, mt_nn_policy *copy) {
  if (!p) return NULL;
  *copy = *p;
  for (const mt_nn_holds *c = p->holds; c; c = c->next)
    if (c == t) return copy; /* searched already: no cycle */
  t->next = p->holds;
  copy->holds = t;
  return copy;
}

static _Thread_local mt_nn_holds local_;

mt_nn_holds *mt_nn_holds_local(void) { return &local_; }

const void *mt_nn_held_copy(const mt_nn_policy *p, const float *x, size_t n) {
  const size_t es = mt_nn_weight_cache_elem(mt_nn_compute(p));
  if (!es || !x || !n) return NULL;
  const float *end = x + n;
  if (p->cache && x >= p->cache_src && end <= p->cache_src + p->cache_n)
    return (const char *)p->cache + (size_t)(x - p->cache_src) * es;
  for (const mt_nn_holds *t = p->holds; t; t = t->next)
    for (int i = 0; i < t->n; i++) {
      const held *h = &t->h[i];
      if (x >= h->src && end <= h->src + h->n)
        return (const char *)h->copy + (size_t)(x - h->src) * es;
    }
  return NULL;
}

void mt_nn_to_bf16(uint16_t *dst, const float *src, size_t n) {
  mt_f32_to_bf16(dst, src, n);
  converted_ += n;
}

/* The operand X (rows x cols, leading dimension ld) converted to p's
 * precision: a view into p's weight cache or a held copy when X lies inside
 * one (mt_nn_held_copy), else a packed copy (leading dimension cols) in
 * scratch slot. */
static int operand(const mt_nn_policy *p, const float *X, int64_t rows, int64_t cols, int64_t ld,
                   int slot, const void **out, int64_t *ldo) {
  const size_t es = mt_nn_weight_cache_elem(p->compute);
  if ((*out = mt_nn_held_copy(p, X, (size_t)((rows - 1) * ld + cols)))) {
    *ldo = ld;
    return 0;
  }
  void *s;
  MT_CALL(mt_nn_scratch(slot, (size_t)(rows * cols) * es, &s));
  if (ld == cols)
    convert(p->compute, s, X, (size_t)(rows * cols));
  else
    for (int64_t r = 0; r < rows; r++)
      convert(p->compute, (char *)s + (size_t)(r * cols) * es, X + r * ld, (size_t)cols);
  *out = s;
  *ldo = cols;
  return 0;
}

/* 1: oneDNN's bf16 GEMM runs on this CPU in bf16 instructions; 0: it does
 * not; -1: not asked yet. Every thread finds the same answer, so a race
 * only asks twice.
 *
 * oneDNN 2.x answers dnnl_unimplemented without AVX-512, but on AVX-512
 * CPUs without AVX512_BF16 (Skylake-SP to Ice Lake) it runs the GEMM in
 * an emulation of its own: measured on such a Xeon (bench/README.md,
 * "bf16 on a CPU without bf16 instructions"), the MLP's step under sp-amp
 * took 43 ms against 9.5 ms for the same products widened to fp32 here.
 * So native means oneDNN's effective ISA (which honours DNNL_MAX_CPU_ISA)
 * includes avx512_core_bf16 (AVX512_BF16; AMX's ISAs contain it) and the
 * kernel is there. */
static _Atomic int bf16_native_ = -1;

void mt_gemm_bf16_emulate(int on) { bf16_native_ = on ? 0 : -1; }

/* Whether oneDNN's effective ISA contains `need` and its bf16 GEMM answers
 * a 1 x 1 x 1 product (not dnnl_unimplemented). */
static int bf16_gemm_on(dnnl_cpu_isa_t need) {
  const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
  const uint16_t one = 0x3F80; /* 1.0 */
  float c = 0;
  return (isa & (unsigned)need) == (unsigned)need &&
         dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) !=
             dnnl_unimplemented;
}

int mt_gemm_bf16_force_native(void) {
  if (!bf16_gemm_on(dnnl_cpu_isa_avx512_core)) return 0;
  bf16_native_ = 1;
  return 1;
}

const char *mt_dnnl_isa_name(void) {
  const char *s = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
  return !s ? "?" : strncmp(s, "cpu_isa_", 8) ? s : s + 8;
}

int mt_gemm_bf16_native(void) {
  if (bf16_native_ < 0) bf16_native_ = bf16_gemm_on(dnnl_cpu_isa_avx512_core_bf16);
  return bf16_native_;
}

/* The bf16 product without oneDNN's bf16 kernel: the operands (bf16 bits,
 * as operand() made them) widened to fp32, which is exact, and the fp32
 * GEMM. A product of two bf16 values is exact in fp32 and the sums are
 * fp32, as in the bf16 kernel: the same numbers up to the order of the
 * sums. Scratch slots 4 and 5 (the convolutions' fp16 copies are not live
 * during a GEMM). */
static dnnl_status_t bf16_emulated(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                   const uint16_t *a, int64_t la, const uint16_t *b, int64_t lb,
                                   float beta, float *C, int64_t ldc, const float *bias, int *err) {
  const int tA = ta == 'T' || ta == 't', tB = tb == 'T' || tb == 't';
  const int64_t ra = tA ? K : M, ca = tA ? M : K, rb = tB ? N : K, cb = tB ? K : N;
  float *fa, *fb;
  *err = mt_nn_scratch(4, (size_t)(ra * ca) * sizeof(float), (void **)&fa);
  if (!*err) *err = mt_nn_scratch(5, (size_t)(rb * cb) * sizeof(float), (void **)&fb);
  if (*err) return dnnl_out_of_memory;
  for (int64_t r = 0; r < ra; r++) mt_bf16_to_f32(fa + r * ca, a + r * la, (size_t)ca);
  for (int64_t r = 0; r < rb; r++) mt_bf16_to_f32(fb + r * cb, b + r * lb, (size_t)cb);
  return mt_sgemm_bias(ta, tb, M, N, K, alpha, fa, ca, fb, cb, beta, C, ldc, bias);
}

/* p's bf16 product of bf16 operands into C (then bias added to its rows;
 * NULL: none), and its status */
static int bf16_product(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const uint16_t *a, int64_t la, const uint16_t *b, int64_t lb, float beta,
                        float *C, int64_t ldc, const float *bias, dnnl_status_t *s) {
  int err = 0;
  if (mt_gemm_bf16_native())
    *s = mt_gemm_bf16_bias(ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc, bias);
  else
    *s = bf16_emulated(ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc, bias, &err);
  return err;
}

/* the status s of p's M x N product into C, then O2's rounding of C */
static int finish(dnnl_status_t s, char ta, char tb, int64_t M, int64_t N, int64_t K, float *C,
                  int64_t ldc, const mt_nn_policy *p) {
  MT_CHECK(s == dnnl_success, MT_ERR_LIB,
           "%s GEMM (%c,%c,M=%lld,N=%lld,K=%lld) failed with status %d",
           mt_precision_name(p->compute), ta, tb, (long long)M, (long long)N, (long long)K, (int)s);
  if (p->round_outputs)
    for (int64_t r = 0; r < M; r++) mt_round_to(p->compute, C + r * ldc, (size_t)N);
  return 0;
}

int mt_gemm_lowp_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *C, int64_t ldc, const float *bias, const mt_nn_policy *p) {
  if (M == 0 || N == 0) return 0;
  if (mt_gemm_log_active()) /* -log_gemm_shapes */
    mt_gemm_log_record(MT_GEMM_LOG_GEMM, ta, tb, M, N, K, beta, p->compute, 1);
  const int tA = ta == 'T' || ta == 't', tB = tb == 'T' || tb == 't';
  const void *a = NULL, *b = NULL;
  int64_t la = 0, lb = 0;
  if (K > 0) {
    MT_CALL(operand(p, A, tA ? K : M, tA ? M : K, lda, 0, &a, &la));
    MT_CALL(operand(p, B, tB ? N : K, tB ? K : N, ldb, 1, &b, &lb));
  }
  /* O2 rounds the product, then the sum with the bias (as the layer's
   * output is rounded): the bias after the rounding, then rounded again */
  const float *fused = p->round_outputs || K == 0 ? NULL : bias;
  dnnl_status_t s;
  if (K == 0)
    s = dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else if (p->compute == MT_PREC_BF16)
    MT_CALL(bf16_product(ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc, fused, &s));
  else
    s = mt_sgemm_bias(ta, tb, M, N, K, alpha, a, la, b, lb, beta, C, ldc, fused);
  MT_CALL(finish(s, ta, tb, M, N, K, C, ldc, p));
  /* a row at a time: the bias added and the sum rounded while in cache */
  for (int64_t r = 0; bias && !fused && r < M; r++) {
    mt_gemm_rows_add(1, N, C + r * ldc, ldc, bias);
    if (p->round_outputs) mt_round_to(p->compute, C + r * ldc, (size_t)N);
  }
  return 0;
}

int mt_gemm_lowp(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 const mt_nn_policy *p) {
  return mt_gemm_lowp_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, p);
}

static int gemm_bf16_ops(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                         float beta, float *C, int64_t ldc, const mt_nn_policy *p) {
  MT_CHECK(mt_nn_compute(p) == MT_PREC_BF16, MT_ERR_ARG,
           "mt_gemm_bf16_ops: the policy computes in %s, not bf16",
           mt_precision_name(mt_nn_compute(p)));
  if (M == 0 || N == 0) return 0;
  if (mt_gemm_log_active())
    mt_gemm_log_record(MT_GEMM_LOG_GEMM, ta, tb, M, N, K, beta, p->compute, 1);
  dnnl_status_t s = dnnl_success;
  if (K == 0) /* C = beta C */
    for (int64_t r = 0; r < M; r++)
      for (int64_t c = 0; c < N; c++) C[r * ldc + c] = beta == 0.0f ? 0.0f : beta * C[r * ldc + c];
  else
    MT_CALL(bf16_product(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, &s));
  return finish(s, ta, tb, M, N, K, C, ldc, p);
}

int mt_gemm_bf16_ops(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                     const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb, float beta,
                     float *C, int64_t ldc, const mt_nn_policy *p) {
  return MT_NN_TRACED(MT_K_GEMM,
                      gemm_bf16_ops(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, p));
}
