/* GEMM microbenchmark at the exact shapes an MLP's training step runs
 * (issue 21 part 1): for each linear layer (IC -> OC) at batch B,
 *   forward      C(B,OC)  = X(B,IC) W(OC,IC)^T          ('N','T', beta 0)
 *   input grad   dX(B,IC) += dY(B,OC) W(OC,IC)          ('N','N', beta 1; not layer 0)
 *   weight grad  dW(OC,IC) += dY(B,OC)^T X(B,IC)        ('T','N', beta 1)
 * as src/nn/linear_t.h calls mt_gemm, row-major. Each library computes every
 * shape once against a double-precision reference (a wrong result fails the
 * run), then repetitions are interleaved (rep r runs every shape with every
 * library before rep r+1) and the median per call is reported.
 *
 * Libraries, by what the build links: "sgemm" dnnl_sgemm; "matmul" a dnnl
 * matmul primitive made once per shape and reused (the handles set per call,
 * as a cache behind mt_gemm would); "xsmm" a libxsmm JIT kernel of the whole
 * shape (-DHAVE_XSMM); "pack" our kernel (src/nn/gemm_pack.c) at every
 * shape; "mt" what mt_gemm runs on one thread when built --with-gemm=pack
 * (pack where mt_gemm_pack_wins, src/nn/gemm_pack.h; otherwise mt_sgemm,
 * src/nn/gemm_matmul.c: the forward's 'N','T' as a brgemm matmul
 * primitive where oneDNN has one, dnnl_sgemm for the rest). "fused" times the
 * forward with its bias and ReLU: sgemm plus the two element-wise passes
 * mpitrain runs today against one matmul primitive carrying bias and ReLU
 * (post-ops); only for the forward.
 * The same file builds against oneDNN 2.x and 3.x (bench/bench_gemm.sh builds
 * one binary per version; they cannot share a process: same symbol names).
 *
 * With -shapes FILE it times instead the shapes a training step of any
 * model ran, as mpitrain -log_gemm_shapes FILE recorded them (src/nn/
 * gemm_log.h; convolutions as their im2col GEMMs), each with its count of
 * calls, and prints the step's GEMM time at the best library of each shape
 * (the per-shape minimum of the medians over the libraries that compute
 * it): "LIMIT ms_per_step=..." for the bench scripts. bf16 shapes run the
 * paths mt_gemm_lowp takes: "bf16" (mt_gemm_bf16: a kept brgemm matmul
 * primitive, or dnnl_gemm_bf16bf16f32, where oneDNN 2.x has bf16 kernels:
 * AVX512_BF16, AMX) and "bf16emu" (the operands widened to fp32 and
 * mt_sgemm, gemm_lowp.c's emulation elsewhere), and "bf16api"
 * (dnnl_gemm_bf16bf16f32 always, what mt_gemm_lowp ran before); fp16 shapes are
 * fp32 GEMMs on rounded operands (gemm_lowp.c), so the fp32 libraries.
 * Run it with OMP_NUM_THREADS=1: oneDNN threads its calls otherwise.
 *
 *   gemm_shapes [-batch 64,128] [-in 784] [-hidden 1024,1024] [-out 10]
 *               [-shapes FILE] [-reps 15] [-ms 20]
 *               [-libs sgemm,matmul,xsmm,fused,pack,mt,bf16,bf16emu,bf16api] [-raw]
 * -raw prints one line per (rep, batch, shape, library) for a script to take
 * medians across processes: "raw TAG B shape lib seconds_per_call flops". */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_XSMM
#include <libxsmm.h>
#endif
#include "nn/gemm_pack.h"
#if DNNL_VERSION_MAJOR < 3
#include "nn/gemm_matmul.h" /* mt_gemm's dnnl_sgemm (the forward as a brgemm matmul) */
#define MT_SGEMM mt_sgemm
#else
#define MT_SGEMM dnnl_sgemm /* mpitrain builds against oneDNN 2.x only */
#endif
#include "nn/precision.h" /* mt_float_from_bf16, inline */

#define MAXL 8
#define MAXS 256 /* shapes of one run: 3 per layer, or a record's lines */
#define NLIB 9
static const char *lib_name[NLIB] = {"sgemm", "matmul", "xsmm",    "fused",  "pack",
                                     "mt",    "bf16",   "bf16emu", "bf16api"};
#define BF16_NATIVE 6 /* mt_gemm_bf16 (oneDNN 2.x bf16 kernels)             */
#define BF16_EMU 7    /* bf16 widened to fp32, then mt_sgemm: gemm_lowp.c   */
#define BF16_API 8    /* dnnl_gemm_bf16bf16f32                              */

typedef struct {
  char name[16], ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float beta;
  int fwd; /* forward of a hidden layer (bias + ReLU follow) */
  int relu;
  int bf16;      /* operands in bf16 (a record's bf16 line)          */
  int64_t count; /* calls per step (a record's count; 1 otherwise)   */
} shape;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void die(const char *what, int s) {
  fprintf(stderr, "gemm_shapes: %s failed (status %d)\n", what, s);
  exit(1);
}
#define DN(call)                         \
  do {                                   \
    dnnl_status_t s_ = (call);           \
    if (s_ != dnnl_success) die(#call, s_); \
  } while (0)

static int parse_ints(const char *s, int *v, int max) {
  int n = 0;
  while (*s && n < max) {
    char *e;
    long x = strtol(s, &e, 10);
    if (e == s || x < 1) return -1;
    v[n++] = (int)x;
    s = *e == ',' ? e + 1 : e;
    if (*e && *e != ',') return -1;
  }
  return n;
}

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* a matmul primitive of shape s; bias (1,N) and ReLU when fused */
typedef struct {
  dnnl_primitive_t p;
  dnnl_memory_t a, b, c, bias, scratch;
} mm;

#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t md_t;
static md_t mkmd(int64_t r, int64_t c, int64_t sr, int64_t sc) {
  md_t d;
  dnnl_dims_t dims = {r, c}, st = {sr, sc};
  DN(dnnl_memory_desc_create_with_strides(&d, 2, dims, dnnl_f32, st));
  return d;
}
#define MDP(d) (d)
#define MDFREE(d) dnnl_memory_desc_destroy(d)
#else
typedef dnnl_memory_desc_t md_t;
static md_t mkmd(int64_t r, int64_t c, int64_t sr, int64_t sc) {
  md_t d;
  dnnl_dims_t dims = {r, c}, st = {sr, sc};
  DN(dnnl_memory_desc_init_by_strides(&d, 2, dims, dnnl_f32, st));
  return d;
}
#define MDP(d) (&(d))
#define MDFREE(d) ((void)(d))
#endif

static void mm_make(mm *m, const shape *s, int fused) {
  md_t a = mkmd(s->M, s->K, s->ta == 'N' ? s->lda : 1, s->ta == 'N' ? 1 : s->lda);
  md_t b = mkmd(s->K, s->N, s->tb == 'N' ? s->ldb : 1, s->tb == 'N' ? 1 : s->ldb);
  md_t c = mkmd(s->M, s->N, s->ldc, 1);
  md_t bias = mkmd(1, s->N, s->N, 1);
  dnnl_primitive_attr_t attr;
  dnnl_post_ops_t po;
  DN(dnnl_primitive_attr_create(&attr));
  DN(dnnl_post_ops_create(&po));
  /* scratchpad owned here, so a call allocates nothing */
  DN(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
#if DNNL_VERSION_MAJOR >= 3
  if (s->beta != 0) DN(dnnl_post_ops_append_sum(po, 1.0f, 0, dnnl_data_type_undef));
  if (fused && s->relu) DN(dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu, 0.f, 0.f));
#else
  if (s->beta != 0) DN(dnnl_post_ops_append_sum(po, 1.0f));
  if (fused && s->relu) DN(dnnl_post_ops_append_eltwise(po, 1.f, dnnl_eltwise_relu, 0.f, 0.f));
#endif
  DN(dnnl_primitive_attr_set_post_ops(attr, po));
  dnnl_primitive_desc_t pd;
#if DNNL_VERSION_MAJOR >= 3
  DN(dnnl_matmul_primitive_desc_create(&pd, eng, a, b, fused ? bias : NULL, c, attr));
#else
  dnnl_matmul_desc_t d;
  DN(dnnl_matmul_desc_init(&d, &a, &b, fused ? &bias : NULL, &c));
  DN(dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL));
#endif
  DN(dnnl_primitive_create(&m->p, pd));
  DN(dnnl_memory_create(&m->a, MDP(a), eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&m->b, MDP(b), eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&m->c, MDP(c), eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&m->bias, MDP(bias), eng, DNNL_MEMORY_NONE));
  DN(dnnl_memory_create(&m->scratch, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0),
                        eng, DNNL_MEMORY_ALLOCATE));
  DN(dnnl_primitive_desc_destroy(pd));
  DN(dnnl_post_ops_destroy(po));
  DN(dnnl_primitive_attr_destroy(attr));
  MDFREE(a);
  MDFREE(b);
  MDFREE(c);
  MDFREE(bias);
}

static void mm_run(mm *m, const float *A, const float *B, float *C, const float *bias) {
  DN(dnnl_memory_set_data_handle(m->a, (void *)A));
  DN(dnnl_memory_set_data_handle(m->b, (void *)B));
  DN(dnnl_memory_set_data_handle(m->c, C));
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m->a},
                             {DNNL_ARG_WEIGHTS, m->b},
                             {DNNL_ARG_DST, m->c},
                             {DNNL_ARG_SCRATCHPAD, m->scratch},
                             {DNNL_ARG_BIAS, m->bias}};
  if (bias) DN(dnnl_memory_set_data_handle(m->bias, (void *)bias));
  DN(dnnl_primitive_execute(m->p, strm, bias ? 5 : 4, args));
  DN(dnnl_stream_wait(strm));
}

static void mm_free(mm *m) {
  dnnl_primitive_destroy(m->p);
  dnnl_memory_destroy(m->a);
  dnnl_memory_destroy(m->b);
  dnnl_memory_destroy(m->c);
  dnnl_memory_destroy(m->bias);
  dnnl_memory_destroy(m->scratch);
}

#ifdef HAVE_XSMM
/* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B plays
 * libxsmm's a, A its b, and the transposes swap sides */
static libxsmm_smmfunction xsmm_make(const shape *s) {
  int flags = (s->tb == 'T' ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) |
              (s->ta == 'T' ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  libxsmm_blasint m = s->N, n = s->M, k = s->K, lda = s->ldb, ldb = s->lda, ldc = s->ldc;
  float alpha = 1, beta = s->beta;
  return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, NULL);
}
#endif

/* the element-wise passes linear_t.h and the MLP run after the forward GEMM */
static void bias_relu(float *C, const float *bias, const shape *s) {
  for (int64_t i = 0; i < s->M; i++) {
    float *o = C + i * s->ldc;
#pragma omp simd
    for (int64_t j = 0; j < s->N; j++) o[j] += bias[j];
  }
  if (s->relu)
    for (int64_t i = 0; i < s->M; i++) {
      float *o = C + i * s->ldc;
#pragma omp simd
      for (int64_t j = 0; j < s->N; j++) o[j] = o[j] > 0 ? o[j] : 0;
    }
}

typedef struct {
  shape s;
  float *A, *B, *C0, *C, *bias;
  double *ref; /* op(A) op(B) in double, + beta C0, + bias/ReLU in fref */
  double *fref;
  uint16_t *Ah, *Bh; /* bf16 shapes: A and B's bits (A, B hold their values) */
  float *Aw, *Bw;    /* the emulation's widened copies                      */
  mm mm, mmf;
  int have_mm, have_mmf;
#ifdef HAVE_XSMM
  libxsmm_smmfunction xk;
#endif
} job;

static float *randbuf(size_t n, unsigned *seed) {
  float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
  if (!p) die("aligned_alloc", 0);
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1103515245u + 12345u;
    p[i] = ((*seed >> 9) & 0xffff) / 65536.0f - 0.5f;
  }
  return p;
}

/* bf16 as gemm_lowp.c keeps it: the top 16 bits, rounded to nearest even */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) { return mt_float_from_bf16(h); }
/* the widening of gemm_lowp.c's emulation (mt_bf16_to_f32's SIMD loop) */
static void widen(float *restrict d, const uint16_t *restrict h, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) d[i] = mt_float_from_bf16(h[i]);
}
/* p (n floats) rounded to bf16 in place, its bits into a new buffer */
static uint16_t *bf16_copy(float *p, size_t n) {
  uint16_t *h = aligned_alloc(64, ((n * 2 + 63) / 64) * 64);
  if (!h) die("aligned_alloc", 0);
  for (size_t i = 0; i < n; i++) h[i] = to_bf16(p[i]), p[i] = from_bf16(h[i]);
  return h;
}

#if DNNL_VERSION_MAJOR < 3
static int bf16_native(void) { /* what mt_gemm_bf16_native finds: bf16 instructions */
  const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(),
                 bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
  const uint16_t one = 0x3F80;
  float c = 0;
  return (isa & bf16) == bf16 &&
         dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) !=
             dnnl_unimplemented;
}
#else
static int bf16_native(void) { return 0; }
#endif

static void job_init(job *j, const shape *s, unsigned seed) {
  memset(j, 0, sizeof *j);
  j->s = *s;
  int64_t ar = s->ta == 'N' ? s->M : s->K, br = s->tb == 'N' ? s->K : s->N;
  j->A = randbuf((size_t)ar * s->lda, &seed);
  j->B = randbuf((size_t)br * s->ldb, &seed);
  j->C0 = randbuf((size_t)s->M * s->ldc, &seed);
  j->C = randbuf((size_t)s->M * s->ldc, &seed);
  j->bias = randbuf((size_t)s->N, &seed);
  if (s->bf16) {
    j->Ah = bf16_copy(j->A, (size_t)ar * s->lda);
    j->Bh = bf16_copy(j->B, (size_t)br * s->ldb);
    j->Aw = randbuf((size_t)ar * s->lda, &seed);
    j->Bw = randbuf((size_t)br * s->ldb, &seed);
  }
  j->ref = malloc(sizeof(double) * s->M * s->N);
  j->fref = malloc(sizeof(double) * s->M * s->N);
  for (int64_t i = 0; i < s->M; i++)
    for (int64_t n = 0; n < s->N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < s->K; k++) {
        double a = s->ta == 'N' ? j->A[i * s->lda + k] : j->A[k * s->lda + i];
        double b = s->tb == 'N' ? j->B[k * s->ldb + n] : j->B[n * s->ldb + k];
        acc += a * b;
      }
      j->ref[i * s->N + n] = acc + s->beta * j->C0[i * s->ldc + n];
      double f = acc + j->bias[n];
      j->fref[i * s->N + n] = s->relu && f < 0 ? 0 : f;
    }
}

static void run_lib(job *j, int lib) {
  const shape *s = &j->s;
  switch (lib) {
    case 0:
      DN(dnnl_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.f, j->A, s->lda, j->B, s->ldb, s->beta, j->C,
                    s->ldc));
      break;
    case 1: mm_run(&j->mm, j->A, j->B, j->C, NULL); break;
#ifdef HAVE_XSMM
    case 2: j->xk(j->B, j->A, j->C); break;
#endif
    case 3:
      if (j->have_mmf) mm_run(&j->mmf, j->A, j->B, j->C, j->bias);
      break;
    case 5: /* mt_gemm built --with-gemm=pack (mt_gemm_pack_wins, as src/nn/gemm.c) */
      if (!mt_gemm_pack_wins(s->ta, s->tb, s->M, s->N, s->K)) {
        DN(MT_SGEMM(s->ta, s->tb, s->M, s->N, s->K, 1.f, j->A, s->lda, j->B, s->ldb, s->beta, j->C,
                    s->ldc));
        break;
      }
      /* fall through */
    case 4:
      if (mt_gemm_pack(s->ta, s->tb, s->M, s->N, s->K, j->A, s->lda, j->B, s->ldb, s->beta, j->C,
                       s->ldc))
        die("mt_gemm_pack", -1);
      break;
#if DNNL_VERSION_MAJOR < 3
    case BF16_NATIVE:
      DN(mt_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, 1.f, j->Ah, s->lda, j->Bh, s->ldb, s->beta,
                      j->C, s->ldc));
      break;
    case BF16_API:
      DN(dnnl_gemm_bf16bf16f32(s->ta, s->tb, s->M, s->N, s->K, 1.f, j->Ah, s->lda, j->Bh, s->ldb,
                               s->beta, j->C, s->ldc));
      break;
#endif
    case BF16_EMU: { /* gemm_lowp.c's bf16_emulated: widen both, then mt_sgemm */
      int64_t ar = s->ta == 'N' ? s->M : s->K, br = s->tb == 'N' ? s->K : s->N;
      widen(j->Aw, j->Ah, ar * s->lda);
      widen(j->Bw, j->Bh, br * s->ldb);
      DN(MT_SGEMM(s->ta, s->tb, s->M, s->N, s->K, 1.f, j->Aw, s->lda, j->Bw, s->ldb, s->beta,
                  j->C, s->ldc));
      break;
    }
    default: break;
  }
}

/* the unfused reference point of "fused": sgemm, then the passes */
static void run_unfused(job *j) {
  const shape *s = &j->s;
  DN(dnnl_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.f, j->A, s->lda, j->B, s->ldb, 0.f, j->C, s->ldc));
  bias_relu(j->C, j->bias, s);
}

/* max |C - ref| / max |ref|, C from one call on C0 */
static double check(job *j, int lib) {
  const shape *s = &j->s;
  memcpy(j->C, j->C0, sizeof(float) * s->M * s->ldc);
  run_lib(j, lib);
  const double *ref = lib == 3 ? j->fref : j->ref;
  double e = 0, m = 0;
  for (int64_t i = 0; i < s->M; i++)
    for (int64_t n = 0; n < s->N; n++) {
      e = fmax(e, fabs(j->C[i * s->ldc + n] - ref[i * s->N + n]));
      m = fmax(m, fabs(ref[i * s->N + n]));
    }
  return e / (m > 0 ? m : 1);
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int reps = 15, raw = 0;
static double ms = 20;
static int use[NLIB] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
static const char *tag = "";

/* whether library l computes shape s (fused: a forward of the MLP only;
 * bf16 shapes: the bf16 paths only) */
static int applies(const job *j, int l) {
  if (j->s.bf16) return l == BF16_EMU || ((l == BF16_NATIVE || l == BF16_API) && bf16_native());
  if (l == BF16_NATIVE || l == BF16_EMU || l == BF16_API) return 0;
#ifdef HAVE_XSMM
  if (l == 2 && !j->xk) return 0;
#endif
  return l != 3 || j->have_mmf;
}

/* Checks and times the ns shapes of sh, prints their table (label: what
 * they are). With record set, also the step's GEMM time at the best
 * library of each shape: "LIMIT ms_per_step=..." for the bench scripts.
 * Returns 0, or 1 when a result is wrong. */
static int run_set(shape *sh, int ns, const char *label, int B, int record) {
  job *jobs = calloc(ns, sizeof *jobs);
  int(*ok)[NLIB] = calloc(ns, sizeof *ok);
  if (!jobs || !ok) die("calloc", 0);
  for (int s = 0; s < ns; s++) {
    job *j = &jobs[s];
    job_init(j, &sh[s], 1234u + 77u * s + B);
    mm_make(&j->mm, &j->s, 0);
    if (j->s.fwd) mm_make(&j->mmf, &j->s, 1), j->have_mmf = 1;
#ifdef HAVE_XSMM
    j->xk = xsmm_make(&j->s);
#endif
    for (int l = 0; l < NLIB; l++) {
      ok[s][l] = use[l] && applies(j, l);
      if (!ok[s][l]) continue;
      double e = check(j, l);
      /* fp32 accumulation over K <= a few thousand: far below 1e-4 */
      if (!(e < 1e-4)) {
        fprintf(stderr, "gemm_shapes: %s at %s (%s): relative error %.3g\n", lib_name[l],
                j->s.name, label, e);
        return 1;
      }
    }
  }
  /* calls per timing: from a first sgemm timing, ms milliseconds' worth */
  int *iters = calloc(ns, sizeof *iters);
  for (int s = 0; s < ns; s++) {
    double t = now();
    for (int i = 0; i < 3; i++) run_lib(&jobs[s], 0);
    double per = (now() - t) / 3;
    iters[s] = (int)(ms * 1e-3 / per) + 1;
  }
  /* lib index NLIB: the unfused forward (sgemm + bias + ReLU passes) */
  double *t = calloc((size_t)ns * (NLIB + 1) * reps, sizeof(double));
#define T(s, l, r) t[((size_t)(s) * (NLIB + 1) + (l)) * reps + (r)]
  for (int r = 0; r < reps; r++)
    for (int s = 0; s < ns; s++)
      for (int l = 0; l <= NLIB; l++) {
        job *j = &jobs[s];
        if (l < NLIB ? !ok[s][l] : !ok[s][3]) continue;
        run_lib(j, l < NLIB ? l : 0); /* warm */
        double t0 = now();
        for (int i = 0; i < iters[s]; i++) l < NLIB ? run_lib(j, l) : run_unfused(j);
        T(s, l, r) = (now() - t0) / iters[s];
        if (raw)
          printf("raw %s %d %s %s %.9g %.6g\n", tag, B, j->s.name,
                 l < NLIB ? lib_name[l] : "unfused", T(s, l, r), 2.0 * j->s.M * j->s.N * j->s.K);
      }
  if (!raw) {
    printf("\n%-14s       M      N      K  op%s  |  GFLOP/s:", label, record ? "  count" : "");
    for (int l = 0; l < NLIB; l++)
      if (use[l]) printf(" %8s", lib_name[l]);
    printf(" %8s %8s\n", "unfused", "best");
    double tot[NLIB + 1] = {0}, totfl = 0, best_tot = 0;
    int complete[NLIB + 1];
    for (int l = 0; l <= NLIB; l++) complete[l] = 1;
    long long calls = 0;
    for (int s = 0; s < ns; s++) {
      const shape *q = &jobs[s].s;
      double fl = 2.0 * q->M * q->N * q->K, best = 0;
      int bl = -1;
      totfl += fl * q->count;
      calls += q->count;
      printf("  %-12s %6lld %6lld %6lld  %c%c", q->name, (long long)q->M, (long long)q->N,
             (long long)q->K, q->ta, q->tb);
      if (record) printf(" %6lld", (long long)q->count);
      printf("   |          ");
      for (int l = 0; l <= NLIB; l++) {
        if (l < NLIB && !use[l]) continue;
        int have = l < NLIB ? ok[s][l] : ok[s][3];
        if (!have) {
          printf(" %8s", "-");
          if (l != 3 && l != NLIB) complete[l] = 0;
          continue;
        }
        qsort(&T(s, l, 0), reps, sizeof(double), cmpd);
        double med = T(s, l, reps / 2);
        printf(" %8.1f", fl / med * 1e-9);
        tot[l] += med * q->count;
        /* the best library: what computes the shape alone (not fused's
         * forward with bias and ReLU, not the unfused passes) */
        if (l < NLIB && l != 3 && (bl < 0 || med < best)) best = med, bl = l;
      }
      if (bl < 0) {
        fprintf(stderr, "gemm_shapes: no library computes %s (%s): see -libs\n", q->name, label);
        return 1;
      }
      best_tot += best * q->count;
      printf(" %8s\n", lib_name[bl]);
    }
    printf("  model GEMMs per step (ms):%s", record ? "       " : "");
    for (int l = 0; l < NLIB; l++)
      if (!use[l] || l == 3) continue;
      else if (complete[l]) printf(" %8.3f", tot[l] * 1e3);
      else printf(" %8s", "n/a");
    if (complete[0] && use[0] && tot[0] > 0)
      printf("   (%.2f GFLOP, sgemm %.1f GFLOP/s)\n", totfl * 1e-9, totfl / tot[0] * 1e-9);
    else
      printf("   (%.2f GFLOP)\n", totfl * 1e-9);
    printf("  at the best library per shape: %.3f ms, %.1f GFLOP/s\n", best_tot * 1e3,
           totfl / best_tot * 1e-9);
    if (record)
      printf("LIMIT ms_per_step=%.6g gflop=%.6g shapes=%d calls=%lld\n", best_tot * 1e3,
             totfl * 1e-9, ns, calls);
  }
  for (int s = 0; s < ns; s++) {
    job *j = &jobs[s];
    mm_free(&j->mm);
    if (j->have_mmf) mm_free(&j->mmf);
    free(j->A), free(j->B), free(j->C0), free(j->C), free(j->bias), free(j->ref), free(j->fref);
    free(j->Ah), free(j->Bh), free(j->Aw), free(j->Bw);
  }
  free(jobs), free(ok), free(iters), free(t);
  return 0;
}

/* A -log_gemm_shapes record (src/nn/gemm_log.h): lines
 *   KIND TA TB M N K BETA PRECISION COUNT
 * '#' lines are comments. Operands are dense row-major (lda = K or M, ...).
 * Returns the number of shapes, -1 after an error message. */
static int read_record(const char *path, shape *sh, int max) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "gemm_shapes: -shapes: cannot open %s\n", path);
    return -1;
  }
  char line[512];
  int ns = 0, ln = 0;
  while (fgets(line, sizeof line, f)) {
    ln++;
    char kind[24], ta, tb, prec[8], *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || !*p) continue;
    long long M, N, K, count;
    float beta;
    int k = sscanf(p, "%23s %c %c %lld %lld %lld %f %7s %lld", kind, &ta, &tb, &M, &N, &K, &beta,
                   prec, &count);
    const char *bad = k != 9 ? "want KIND TA TB M N K BETA PRECISION COUNT"
                      : strcmp(kind, "gemm") && strcmp(kind, "conv_fwd") &&
                              strcmp(kind, "conv_bwd_data") && strcmp(kind, "conv_bwd_w")
                          ? "KIND is not gemm, conv_fwd, conv_bwd_data or conv_bwd_w"
                      : (ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T') ? "TA, TB: N or T"
                      : M < 1 || N < 1 || K < 1 || count < 1 ? "M, N, K and COUNT must be >= 1"
                      : strcmp(prec, "fp32") && strcmp(prec, "fp16") && strcmp(prec, "bf16")
                          ? "PRECISION is not fp32, fp16 or bf16"
                      : ns == max ? "more shapes than gemm_shapes holds"
                                  : NULL;
    if (bad) {
      fprintf(stderr, "gemm_shapes: -shapes %s line %d: %s\n", path, ln, bad);
      fclose(f);
      return -1;
    }
    /* fp16 is emulated on fp32 operands (gemm_lowp.c): the fp32 libraries */
    shape q = {"", ta, tb, M, N, K, ta == 'N' ? K : M, tb == 'N' ? N : K, N, beta, 0, 0,
               !strcmp(prec, "bf16"), count};
    const char *pre = !strcmp(kind, "gemm") ? "gemm" : !strcmp(kind, "conv_fwd") ? "cfwd"
                      : !strcmp(kind, "conv_bwd_w") ? "cwgt" : "cdat";
    snprintf(q.name, sizeof q.name, "%s%d%s", pre, ns + 1, q.bf16 ? "b" : "");
    sh[ns++] = q;
  }
  fclose(f);
  if (ns == 0) fprintf(stderr, "gemm_shapes: -shapes %s: no shapes in it\n", path);
  return ns ? ns : -1;
}

int main(int argc, char **argv) {
  int batch[8] = {64, 128}, nb = 2, hidden[MAXL] = {1024, 1024}, nh = 2, in = 784, out = 10;
  const char *record = NULL;
  int libs_given = 0;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "-raw")) { raw = 1; continue; }
    if (!v) { fprintf(stderr, "gemm_shapes: option %s needs a value\n", o); return 2; }
    i++;
    if (!strcmp(o, "-batch")) nb = parse_ints(v, batch, 8);
    else if (!strcmp(o, "-hidden")) nh = parse_ints(v, hidden, MAXL - 1);
    else if (!strcmp(o, "-in")) in = atoi(v);
    else if (!strcmp(o, "-out")) out = atoi(v);
    else if (!strcmp(o, "-reps")) reps = atoi(v);
    else if (!strcmp(o, "-ms")) ms = atof(v);
    else if (!strcmp(o, "-tag")) tag = v;
    else if (!strcmp(o, "-shapes")) record = v;
    else if (!strcmp(o, "-libs")) { /* a comma-separated list of names */
      libs_given = 1;
      for (int l = 0; l < NLIB; l++) {
        size_t n = strlen(lib_name[l]);
        const char *p = v;
        use[l] = 0;
        for (; p && *p; p = strchr(p, ','), p = p ? p + 1 : p)
          if (!strncmp(p, lib_name[l], n) && (p[n] == ',' || !p[n])) use[l] = 1;
      }
    } else { fprintf(stderr, "gemm_shapes: unknown option %s\n", o); return 2; }
  }
  if (nb < 1 || nh < 1 || in < 1 || out < 1 || reps < 1 || ms <= 0) {
    fprintf(stderr, "gemm_shapes: bad -batch, -hidden, -in, -out, -reps or -ms\n");
    return 2;
  }
  if (!record && !libs_given) /* the MLP's are fp32 */
    use[BF16_NATIVE] = use[BF16_EMU] = use[BF16_API] = 0;
  if (!mt_gemm_pack_available()) use[4] = use[5] = 0;
#ifndef HAVE_XSMM
  use[2] = 0;
#else
  libxsmm_init();
#endif
  DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
  DN(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  if (!bf16_native()) use[BF16_NATIVE] = use[BF16_API] = 0;
  const dnnl_version_t *ver = dnnl_version();
  if (!raw)
    printf("oneDNN %d.%d.%d, 1 thread; ms per timing %.0f, %d interleaved reps, medians; "
           "bf16 GEMM %s\n", ver->major, ver->minor, ver->patch, ms, reps,
           bf16_native() ? "native" : "emulated (no bf16 instructions on this CPU)");
  int rc = 0;
  if (record) {
    static shape sh[MAXS];
    int ns = read_record(record, sh, MAXS);
    if (ns < 0) return 2;
    rc = run_set(sh, ns, "record", 0, 1);
  }
  int dim[MAXL + 1];
  dim[0] = in;
  for (int l = 0; l < nh; l++) dim[l + 1] = hidden[l];
  dim[nh + 1] = out;
  int nl = nh + 1;
  for (int bi = 0; bi < nb && !record && !rc; bi++) {
    int B = batch[bi];
    shape sh[3 * MAXL];
    int ns = 0;
    for (int l = 0; l < nl; l++) {
      int IC = dim[l], OC = dim[l + 1];
      sh[ns++] = (shape){"", 'N', 'T', B, OC, IC, IC, IC, OC, 0.f, 1, l < nl - 1, 0, 1};
      snprintf(sh[ns - 1].name, sizeof sh[0].name, "fwd%d", l);
      if (l) {
        sh[ns++] = (shape){"", 'N', 'N', B, IC, OC, OC, IC, IC, 1.f, 0, 0, 0, 1};
        snprintf(sh[ns - 1].name, sizeof sh[0].name, "dx%d", l);
      }
      sh[ns++] = (shape){"", 'T', 'N', OC, IC, B, OC, IC, IC, 1.f, 0, 0, 0, 1};
      snprintf(sh[ns - 1].name, sizeof sh[0].name, "dw%d", l);
    }
    char label[32];
    snprintf(label, sizeof label, "batch %d", B);
    rc = run_set(sh, ns, label, B, 0);
  }
  dnnl_stream_destroy(strm);
  dnnl_engine_destroy(eng);
  return rc;
}
