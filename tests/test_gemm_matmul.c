/* Unit tests of mt_sgemm (src/nn/gemm_matmul.h): dnnl_sgemm with the
 * forward's 'N','T' as a kept oneDNN brgemm matmul primitive.
 *  - 'N','T' (alpha 1, beta 0) against a double triple loop at the MLP's
 *    and the gpt's kinds of shape, K on both sides of 128, odd sizes,
 *    padded leading dimensions (padding untouched), NaN in C ignored;
 *  - a second call, and calls from two OpenMP threads at once on the same
 *    shape, give the first call's bits (a primitive per entry, made for one
 *    thread);
 *  - every other case (other transposes, beta 1, alpha 0.5, 'N','T' with
 *    several OpenMP threads outside a parallel region) is dnnl_sgemm's
 *    call: its bits;
 *  - where oneDNN's ISA has AVX-512 (avx512_core) the shapes are kept as
 *    primitives; elsewhere declined;
 *  - more shapes than a thread's table holds: still right, the table
 *    bounded; a second thread's keys go into a table of its own;
 *  - every transpose, alpha and beta, odd and strided shapes (an attention
 *    head's slices, C rows apart), through the primitive table in fp32
 *    (mt_sgemm_matmul_any) and bf16 (mt_gemm_bf16): where oneDNN has
 *    brgemm kernels of the type (fp32: AVX-512; bf16: AVX512_BF16, AMX)
 *    against a double product, repeated calls and two threads with the
 *    first call's bits, dense cases kept and strided A or B declined;
 *    elsewhere the library's bits (dnnl_sgemm, dnnl_gemm_bf16bf16f32), or
 *    its status where it has no bf16 GEMM (no AVX-512);
 *  - with a bias (mt_sgemm_bias, mt_gemm_bf16_bias): the GEMM's bits and
 *    then the bias added, carried by a primitive or by a pass;
 *  - the forward as its transpose (C^T = B A^T, written out transposed)
 *    forced on and off: the same bits, with and without a bias.
 * Prints one line per check; exits non-zero when any check fails. */
#include "nn/gemm_matmul.h"
#include "nn/precision.h" /* mt_bf16_from_float, mt_float_from_bf16 */
#include "testutil.h"

#include <dnnl.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  float *A, *B, *C;
} nt_case;

static void make_case(nt_case *c, int64_t M, int64_t N, int64_t K, int pad, uint64_t *rng) {
  *c = (nt_case){M, N, K, K + pad, K + 2 * pad, N + pad, NULL, NULL, NULL};
  c->A = tu_xmalloc((size_t)(M * c->lda) * sizeof(float));
  c->B = tu_xmalloc((size_t)(N * c->ldb) * sizeof(float));
  c->C = tu_xmalloc((size_t)(M * c->ldc) * sizeof(float));
  tu_fill(c->A, (size_t)(M * c->lda), rng, 1.0f);
  tu_fill(c->B, (size_t)(N * c->ldb), rng, 1.0f);
  for (int64_t i = 0; i < M * c->ldc; i++) c->C[i] = NAN; /* beta 0: never read */
}

static void free_case(nt_case *c) { free(c->A), free(c->B), free(c->C); }

static dnnl_status_t run_nt(const nt_case *c, float *C) {
  return mt_sgemm('N', 'T', c->M, c->N, c->K, 1.0f, c->A, c->lda, c->B, c->ldb, 0.0f, C, c->ldc);
}

/* C against the double product; the padding columns still NaN */
static void check_values(const nt_case *c, const float *C, const char *what) {
  double num = 0, den = 0;
  int pad_ok = 1;
  for (int64_t i = 0; i < c->M; i++) {
    for (int64_t j = 0; j < c->N; j++) {
      double s = 0;
      for (int64_t k = 0; k < c->K; k++) s += (double)c->A[i * c->lda + k] * c->B[j * c->ldb + k];
      num = fmax(num, fabs(C[i * c->ldc + j] - s));
      den = fmax(den, fabs(s));
    }
    for (int64_t j = c->N; j < c->ldc; j++) pad_ok &= isnan(C[i * c->ldc + j]);
  }
  CHECK_ERR(num / fmax(den, 1e-30), 1e-5, "%s", what);
  CHECK(pad_ok, "%s: padding columns untouched", what);
}

/* Two OpenMP threads running a call at once, three times each (an entry
 * each): both must end with want's bits. Each run starts from C0 (NULL:
 * NaN everywhere). */
static void two_threads(dnnl_status_t (*run)(const void *, float *), const void *ctx,
                        const float *C0, const float *want, size_t nc, const char *what) {
#ifdef _OPENMP
  float *two[2] = {tu_xmalloc(nc * sizeof(float)), tu_xmalloc(nc * sizeof(float))};
  int failed = 0;
#pragma omp parallel num_threads(2) reduction(| : failed)
  {
    float *mine = two[omp_get_thread_num()];
    for (int r = 0; r < 3; r++) {
      for (size_t i = 0; i < nc; i++) mine[i] = C0 ? C0[i] : NAN;
      failed |= run(ctx, mine) != dnnl_success;
    }
  }
  CHECK(!failed && memcmp(two[0], want, nc * sizeof(float)) == 0 &&
            memcmp(two[1], want, nc * sizeof(float)) == 0,
        "%s: two threads at once give the one-thread bits", what);
  free(two[0]), free(two[1]);
#else
  (void)run, (void)ctx, (void)C0, (void)want, (void)nc, (void)what;
#endif
}

static dnnl_status_t nt_call(const void *c, float *C) { return run_nt(c, C); }

static void test_nt(void) {
  uint64_t rng = 7;
  const int64_t shapes[][4] = {{128, 1024, 784, 0}, {64, 1024, 1024, 0}, {128, 10, 1024, 0},
                               {2048, 128, 128, 0}, {300, 129, 512, 3},  {7, 300, 33, 1},
                               {1, 17, 5, 2}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    nt_case c;
    make_case(&c, shapes[s][0], shapes[s][1], shapes[s][2], (int)shapes[s][3], &rng);
    char what[96];
    snprintf(what, sizeof(what), "mt_sgemm NT M=%lld N=%lld K=%lld pad=%d", (long long)c.M,
             (long long)c.N, (long long)c.K, (int)shapes[s][3]);
    CHECK(run_nt(&c, c.C) == dnnl_success, "%s: succeeds", what);
    check_values(&c, c.C, what);
    const size_t nc = (size_t)(c.M * c.ldc);
    float *again = tu_xmalloc(nc * sizeof(float));
    for (size_t i = 0; i < nc; i++) again[i] = NAN;
    CHECK(run_nt(&c, again) == dnnl_success && memcmp(again, c.C, nc * sizeof(float)) == 0,
          "%s: a second call gives the same bits", what);
    two_threads(nt_call, &c, NULL, c.C, nc, what);
    free(again);
    free_case(&c);
  }
}

/* dnnl_sgemm's bits for the cases that are not the forward's */
static void test_others(void) {
  uint64_t rng = 9;
  enum { M = 70, N = 515, K = 257 };
  float *A = tu_xmalloc(M * K * 4 > K * N * 4 ? M * K * 4 : K * N * 4);
  float *B = tu_xmalloc(N * K * sizeof(float)), *C0 = tu_xmalloc(M * N * sizeof(float));
  float *C1 = tu_xmalloc(M * N * sizeof(float)), *C2 = tu_xmalloc(M * N * sizeof(float));
  tu_fill(A, M * K, &rng, 1.0f);
  tu_fill(B, N * K, &rng, 1.0f);
  tu_fill(C0, M * N, &rng, 1.0f);
  const struct {
    char ta, tb;
    float alpha, beta;
  } cases[] = {{'N', 'N', 1, 0}, {'N', 'T', 1, 1}, {'N', 'T', 0.5f, 0}, {'T', 'T', 1, 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char ta = cases[i].ta, tb = cases[i].tb;
    const int64_t lda = ta == 'N' ? K : M, ldb = tb == 'N' ? N : K;
    memcpy(C1, C0, M * N * sizeof(float));
    memcpy(C2, C0, M * N * sizeof(float));
    dnnl_status_t s1 = mt_sgemm(ta, tb, M, N, K, cases[i].alpha, A, lda, B, ldb, cases[i].beta,
                                C1, N);
    dnnl_status_t s2 = dnnl_sgemm(ta, tb, M, N, K, cases[i].alpha, A, lda, B, ldb,
                                  cases[i].beta, C2, N);
    CHECK(s1 == dnnl_success && s2 == dnnl_success && memcmp(C1, C2, M * N * sizeof(float)) == 0,
          "mt_sgemm %c%c alpha=%g beta=%g: dnnl_sgemm's bits", ta, tb, cases[i].alpha,
          cases[i].beta);
  }
#ifdef _OPENMP
  /* 'N','T' that oneDNN threads itself (several threads, no region) */
  const int nt = omp_get_max_threads();
  omp_set_num_threads(2);
  memcpy(C1, C0, M * N * sizeof(float));
  memcpy(C2, C0, M * N * sizeof(float));
  dnnl_status_t s1 = mt_sgemm('N', 'T', M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
  dnnl_status_t s2 = dnnl_sgemm('N', 'T', M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
  CHECK(s1 == dnnl_success && s2 == dnnl_success && memcmp(C1, C2, M * N * sizeof(float)) == 0,
        "mt_sgemm NT on 2 OpenMP threads outside a region: dnnl_sgemm's bits");
  omp_set_num_threads(nt);
#endif
  free(A), free(B), free(C0), free(C1), free(C2);
}

/* more shapes than a thread's table holds (64): every one right, the
 * table bounded; a second thread keeps a table of its own */
static void test_table(void) {
  uint64_t rng = 13;
  int ok = 1, kept, declined, kept0, declined0;
  mt_sgemm_matmul_stats(&kept0, &declined0); /* other threads' tables too */
  for (int s = 0; s < 300 && ok; s++) { /* twice: the first ones evicted by then */
    nt_case c;
    make_case(&c, 3 + s % 150 % 5, 40 + s % 150, 20 + (s % 150 * 7) % 50, 0, &rng);
    ok = run_nt(&c, c.C) == dnnl_success;
    double num = 0, den = 0;
    for (int64_t i = 0; i < c.M; i++)
      for (int64_t j = 0; j < c.N; j++) {
        double x = 0;
        for (int64_t k = 0; k < c.K; k++) x += (double)c.A[i * c.lda + k] * c.B[j * c.ldb + k];
        num = fmax(num, fabs(c.C[i * c.ldc + j] - x));
        den = fmax(den, fabs(x));
      }
    ok &= num <= 1e-5 * fmax(den, 1e-30);
    free_case(&c);
  }
  mt_sgemm_matmul_stats(&kept, &declined);
  CHECK(ok, "150 shapes in turn, twice: each right (1e-5)");
  CHECK(kept + declined - kept0 - declined0 <= 64,
        "a thread's table holds at most 64 shapes (%d kept, %d declined; %d before)", kept,
        declined, kept0 + declined0);
#ifdef _OPENMP
  /* one more shape on a second thread: a second table, this one unchanged */
  int kept2, declined2;
  nt_case c;
  make_case(&c, 5, 48, 24, 0, &rng);
  dnnl_status_t st = dnnl_success;
#pragma omp parallel num_threads(2)
  if (omp_get_thread_num() == 1) st = run_nt(&c, c.C);
  free_case(&c);
  mt_sgemm_matmul_stats(&kept2, &declined2);
  CHECK(st == dnnl_success && kept2 + declined2 == kept + declined + 1,
        "a second thread's key goes into a table of its own (%d -> %d entries)",
        kept + declined, kept2 + declined2);
#endif
}

/* bf16 operands: random values' bits, the ld-padded matrices */
static uint16_t *bf16_rand(int64_t n, uint64_t *rng) {
  float *f = tu_xmalloc((size_t)n * sizeof(float));
  uint16_t *h = tu_xmalloc((size_t)n * sizeof(uint16_t));
  tu_fill(f, (size_t)n, rng, 1.0f);
  for (int64_t i = 0; i < n; i++) h[i] = mt_bf16_from_float(f[i]);
  free(f);
  return h;
}

static float *widened(const uint16_t *h, int64_t n) {
  float *f = tu_xmalloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) f[i] = mt_float_from_bf16(h[i]);
  return f;
}

/* one call of the case's library pair: bf16 through mt_gemm_bf16 (lib 0) or
 * dnnl_gemm_bf16bf16f32 (1); fp32 through mt_sgemm_matmul_any (0) or
 * dnnl_sgemm (1) */
typedef struct {
  char ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  const uint16_t *A, *B;
  const float *Af, *Bf;
} gcase;

static dnnl_status_t call(const gcase *g, int bf16, int lib, float *C) {
  if (bf16)
    return (lib ? dnnl_gemm_bf16bf16f32 : mt_gemm_bf16)(g->ta, g->tb, g->M, g->N, g->K, g->alpha,
                                                         g->A, g->lda, g->B, g->ldb, g->beta, C,
                                                         g->ldc);
  return (lib ? dnnl_sgemm : mt_sgemm_matmul_any)(g->ta, g->tb, g->M, g->N, g->K, g->alpha,
                                                  g->Af, g->lda, g->Bf, g->ldb, g->beta, C, g->ldc);
}

static dnnl_status_t any_call_bf16(const void *g, float *C) { return call(g, 1, 0, C); }
static dnnl_status_t any_call_f32(const void *g, float *C) { return call(g, 0, 0, C); }

/* Every transpose, alpha and beta, strided operands and C through the
 * primitive table: bf16 (mt_gemm_bf16) or fp32 (mt_sgemm_matmul_any, the
 * same keys and descriptors in fp32, so that CPUs without bf16 kernels
 * test them too). kernels: oneDNN has brgemm kernels of the type here
 * (values against a double product, repeated and two-thread calls the
 * first call's bits, keys kept); else the library's bits (declined);
 * none: the type has no GEMM at all here (bf16 without AVX-512): its
 * status. */
static void test_any(int bf16, int kernels, int none) {
  const char *name = bf16 ? "mt_gemm_bf16" : "mt_sgemm_matmul_any";
  uint64_t rng = 21;
  const struct {
    char ta, tb;
    int64_t M, N, K, pad, ldc_pad;
    float alpha, beta;
  } cases[] = {
      {'N', 'T', 128, 1024, 784, 0, 0, 1, 0},     /* the MLP's forward          */
      {'N', 'N', 128, 784, 1024, 0, 0, 1, 1},     /* its input gradient         */
      {'T', 'N', 1024, 784, 128, 0, 0, 1, 1},     /* its weight gradient        */
      {'N', 'T', 64, 64, 32, 352, 0, 0.125f, 0},  /* a head's q k^T: strided    */
      {'N', 'N', 64, 32, 64, 0, 352, 1, 0},       /* att v into out's slice     */
      {'T', 'N', 64, 32, 64, 0, 352, 0.125f, 1},  /* into C rows apart, added   */
      {'T', 'T', 7, 300, 33, 0, 5, 0.5f, 1},
      {'N', 'T', 1, 17, 5, 2, 1, 1, 0},
  };
  int kept0, declined0, kept, declined;
  mt_sgemm_matmul_stats(&kept0, &declined0);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    gcase g = {cases[i].ta, cases[i].tb, cases[i].M, cases[i].N, cases[i].K, 0, 0, 0,
               cases[i].alpha, cases[i].beta, NULL, NULL, NULL, NULL};
    const int64_t M = g.M, N = g.N, K = g.K;
    const int64_t ar = g.ta == 'N' ? M : K, ac = g.ta == 'N' ? K : M;
    const int64_t br = g.tb == 'N' ? K : N, bc = g.tb == 'N' ? N : K;
    g.lda = ac + cases[i].pad, g.ldb = bc + cases[i].pad, g.ldc = N + cases[i].ldc_pad;
    uint16_t *A = bf16_rand(ar * g.lda, &rng), *B = bf16_rand(br * g.ldb, &rng);
    float *Af = widened(A, ar * g.lda), *Bf = widened(B, br * g.ldb);
    g.A = A, g.B = B, g.Af = Af, g.Bf = Bf;
    const size_t nc = (size_t)(M * g.ldc);
    float *C0 = tu_xmalloc(nc * sizeof(float)), *C = tu_xmalloc(nc * sizeof(float));
    float *C2 = tu_xmalloc(nc * sizeof(float));
    tu_fill(C0, nc, &rng, 1.0f);
    for (int64_t r = 0; r < M; r++) /* beta 0: never read */
      for (int64_t j = 0; j < N && g.beta == 0.0f; j++) C0[r * g.ldc + j] = NAN;
    char what[128];
    snprintf(what, sizeof(what), "%s %c%c M=%lld N=%lld K=%lld lda=%lld ldc=%lld alpha=%g beta=%g",
             name, g.ta, g.tb, (long long)M, (long long)N, (long long)K, (long long)g.lda,
             (long long)g.ldc, g.alpha, g.beta);
    memcpy(C, C0, nc * sizeof(float));
    const dnnl_status_t s = call(&g, bf16, 0, C);
    memcpy(C2, C0, nc * sizeof(float));
    const dnnl_status_t s2 = call(&g, bf16, 1, C2);
    if (none) {
      CHECK(s == s2, "%s: the library's status (%d)", what, (int)s2);
    } else if (!kernels) {
      CHECK(s == dnnl_success && s2 == dnnl_success && memcmp(C, C2, nc * sizeof(float)) == 0,
            "%s: no brgemm kernels, the library's bits", what);
    } else {
      CHECK(s == dnnl_success, "%s: succeeds", what);
      double num = 0, den = 0;
      int rest = 1;
      for (int64_t r = 0; r < M; r++) {
        for (int64_t j = 0; j < N; j++) {
          double x = 0;
          for (int64_t k = 0; k < K; k++)
            x += (double)(g.ta == 'N' ? Af[r * g.lda + k] : Af[k * g.lda + r]) *
                 (g.tb == 'N' ? Bf[k * g.ldb + j] : Bf[j * g.ldb + k]);
          x = g.alpha * x + (g.beta != 0.0f ? (double)g.beta * C0[r * g.ldc + j] : 0.0);
          num = fmax(num, fabs(C[r * g.ldc + j] - x));
          den = fmax(den, fabs(x));
        }
        for (int64_t j = N; j < g.ldc; j++)
          rest &= memcmp(&C[r * g.ldc + j], &C0[r * g.ldc + j], sizeof(float)) == 0;
      }
      CHECK_ERR(num / fmax(den, 1e-30), 1e-5, "%s", what);
      CHECK(rest, "%s: C past N untouched", what);
      memcpy(C2, C0, nc * sizeof(float));
      CHECK(call(&g, bf16, 0, C2) == dnnl_success && memcmp(C, C2, nc * sizeof(float)) == 0,
            "%s: a second call gives the same bits", what);
      two_threads(bf16 ? any_call_bf16 : any_call_f32, &g, C0, C, nc, what);
    }
    free(A), free(B), free(Af), free(Bf), free(C0), free(C), free(C2);
  }
  mt_sgemm_matmul_stats(&kept, &declined);
  printf("# %s: %d keys kept as brgemm primitives, %d declined\n", name, kept - kept0,
         declined - declined0);
  /* the two with strided A or B are declined (oneDNN's brgemm takes dense
   * operands: a matmul is its gemm again), in the table of each of the two
   * threads that ran them */
#ifdef _OPENMP
  const int tables = 2;
#else
  const int tables = 1;
#endif
  if (!none)
    CHECK(kernels ? kept > kept0 && declined - declined0 == 2 * tables
                  : kept == kept0 && declined > declined0,
          "%s: %s", name,
          kernels ? "dense cases kept as brgemm primitives, strided A or B declined"
                  : "every case declined without brgemm kernels (the library's call)");
}

/* The bias (mt_sgemm_bias, mt_gemm_bf16_bias): the GEMM's bits, then the
 * bias added, whether a primitive carries it (NT, alpha 1, beta 0: kept
 * where oneDNN has the kernels; dense and ldc > N) or the library's call
 * and a pass do (NN, alpha 0.5); the padding untouched. */
static void test_bias(int avx512) {
  uint64_t rng = 21;
  int kept0, declined0, kept, declined;
  mt_sgemm_matmul_stats(&kept0, &declined0);
  static const struct {
    char ta, tb;
    float alpha;
    int64_t M, N, K, pad;
  } cases[] = {{'N', 'T', 1.0f, 64, 96, 40, 0},  {'N', 'T', 1.0f, 33, 70, 129, 5},
               {'N', 'N', 1.0f, 16, 48, 24, 0},  {'N', 'T', 0.5f, 8, 32, 16, 0},
               {'N', 'T', 1.0f, 128, 256, 128, 0}};
  for (int bf16 = 0; bf16 <= 1; bf16++)
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
      const int64_t M = cases[i].M, N = cases[i].N, K = cases[i].K, ldc = N + cases[i].pad;
      const char ta = cases[i].ta, tb = cases[i].tb;
      const int64_t lda = K, ldb = tb == 'T' ? K : N;
      float *A = tu_xmalloc((size_t)(M * K) * sizeof(float));
      float *B = tu_xmalloc((size_t)(K * N) * sizeof(float));
      float *bias = tu_xmalloc((size_t)N * sizeof(float));
      float *C0 = tu_xmalloc((size_t)(M * ldc) * sizeof(float));
      float *C1 = tu_xmalloc((size_t)(M * ldc) * sizeof(float));
      tu_fill(A, (size_t)(M * K), &rng, 1.0f);
      tu_fill(B, (size_t)(K * N), &rng, 1.0f);
      tu_fill(bias, (size_t)N, &rng, 2.0f);
      uint16_t *Ah = tu_xmalloc((size_t)(M * K) * 2), *Bh = tu_xmalloc((size_t)(K * N) * 2);
      for (int64_t j = 0; j < M * K; j++) Ah[j] = mt_bf16_from_float(A[j]);
      for (int64_t j = 0; j < K * N; j++) Bh[j] = mt_bf16_from_float(B[j]);
      for (int64_t j = 0; j < M * ldc; j++) C0[j] = C1[j] = NAN;
      dnnl_status_t s0, s1;
      if (bf16) {
        s0 = mt_gemm_bf16(ta, tb, M, N, K, cases[i].alpha, Ah, lda, Bh, ldb, 0.0f, C0, ldc);
        s1 = mt_gemm_bf16_bias(ta, tb, M, N, K, cases[i].alpha, Ah, lda, Bh, ldb, 0.0f, C1, ldc,
                               bias);
      } else {
        s0 = mt_sgemm(ta, tb, M, N, K, cases[i].alpha, A, lda, B, ldb, 0.0f, C0, ldc);
        s1 = mt_sgemm_bias(ta, tb, M, N, K, cases[i].alpha, A, lda, B, ldb, 0.0f, C1, ldc, bias);
      }
      for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < N; j++) C0[r * ldc + j] += bias[j];
      char what[160];
      snprintf(what, sizeof(what), "%s_bias %c%c alpha=%g %lldx%lldx%lld ldc=%lld",
               bf16 ? "mt_gemm_bf16" : "mt_sgemm", ta, tb, cases[i].alpha, (long long)M,
               (long long)N, (long long)K, (long long)ldc);
      if (bf16 && s0 == dnnl_unimplemented) {
        CHECK(s1 == dnnl_unimplemented, "%s: no bf16 GEMM here, none with the bias", what);
      } else {
        CHECK(s0 == dnnl_success && s1 == dnnl_success &&
                  memcmp(C0, C1, (size_t)(M * ldc) * sizeof(float)) == 0,
              "%s: the GEMM's bits, then the bias added (padding untouched)", what);
      }
      free(A), free(B), free(bias), free(C0), free(C1), free(Ah), free(Bh);
      if (!bf16 && i + 1 == sizeof(cases) / sizeof(cases[0])) {
        mt_sgemm_matmul_stats(&kept, &declined);
        /* fp32: three NT alpha-1 keys without a bias and three with one */
        CHECK(avx512 ? kept - kept0 >= 6 : kept == kept0,
              "fp32 bias: %s (%d new keys kept)",
              avx512 ? "the keys with a bias kept as primitives of their own" : "none kept",
              kept - kept0);
      }
    }
}

/* The forward as its transpose (mt_sgemm_forward_swap): forced on and
 * off, with and without a bias, at the MLP's shapes (where the rule swaps)
 * and odd ones: the same bits either way, padding untouched; on AVX-512 the
 * swapped keys kept as primitives of their own (else both dnnl_sgemm). */
static void test_swap(int avx512) {
  uint64_t rng = 31;
  /* padded operands are declined either way (dnnl_sgemm's bits) */
  const int64_t shapes[][4] = {{64, 1024, 1024, 0}, {128, 1024, 784, 0}, {128, 10, 1024, 0},
                               {60, 1000, 1000, 0}, {100, 300, 257, 0},  {7, 256, 300, 0},
                               {32, 512, 1024, 16}, {1, 17, 5, 2},       {129, 33, 70, 5}};
  int kept0, declined0, kept, declined;
  mt_sgemm_matmul_stats(&kept0, &declined0);
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    nt_case c;
    make_case(&c, shapes[s][0], shapes[s][1], shapes[s][2], (int)shapes[s][3], &rng);
    const size_t nc = (size_t)(c.M * c.ldc);
    float *bias = tu_xmalloc((size_t)c.N * sizeof(float));
    tu_fill(bias, (size_t)c.N, &rng, 2.0f);
    for (int b = 0; b <= 1; b++) {
      float *C[2];
      dnnl_status_t st[2];
      for (int on = 0; on <= 1; on++) {
        C[on] = tu_xmalloc(nc * sizeof(float));
        for (size_t i = 0; i < nc; i++) C[on][i] = NAN;
        mt_sgemm_forward_swap(on);
        st[on] = mt_sgemm_bias('N', 'T', c.M, c.N, c.K, 1.0f, c.A, c.lda, c.B, c.ldb, 0.0f, C[on],
                               c.ldc, b ? bias : NULL);
      }
      mt_sgemm_forward_swap(-1);
      char what[128];
      snprintf(what, sizeof(what), "swapped forward M=%lld N=%lld K=%lld pad=%d%s",
               (long long)c.M, (long long)c.N, (long long)c.K, (int)shapes[s][3],
               b ? " bias" : "");
      CHECK(st[0] == dnnl_success && st[1] == dnnl_success &&
                memcmp(C[0], C[1], nc * sizeof(float)) == 0,
            "%s: the unswapped call's bits (padding untouched)", what);
      if (!b) check_values(&c, C[1], what);
      free(C[0]), free(C[1]);
    }
    free(bias);
    free_case(&c);
  }
  mt_sgemm_matmul_stats(&kept, &declined);
  /* each dense shape (the first 6): swapped and not, with and without a
   * bias, 4 keys, test_nt having made 3 of them (without the swapped ones,
   * at most 2 a shape) */
  CHECK(avx512 ? kept - kept0 >= 4 * 6 - 3 : kept == kept0,
        "swapped forward: %s (%d new keys kept, %d declined)",
        avx512 ? "its keys kept as primitives of their own" : "none kept (dnnl_sgemm)",
        kept - kept0, declined - declined0);
}

int main(void) {
#ifdef _OPENMP
  omp_set_num_threads(1); /* the forward's one-thread GEMM */
#endif
  test_nt();
  int kept, declined;
  mt_sgemm_matmul_stats(&kept, &declined);
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const int avx512 = (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
  printf("# oneDNN ISA 0x%x: %d shapes kept as brgemm primitives, %d declined\n", (unsigned)isa,
         kept, declined);
  CHECK(avx512 ? kept > 0 : declined > 0 && kept == 0,
        "%s: the forward's shapes %s", avx512 ? "AVX-512" : "no AVX-512",
        avx512 ? "run as brgemm primitives" : "declined (dnnl_sgemm)");
  test_swap(avx512); /* early: its keys must fit in the table */
  test_others();
  test_any(0, avx512, 0);
  /* bf16 kernels: oneDNN's ISA has AVX512_BF16 (mt_gemm_bf16_native's test) */
  const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
  test_any(1, ((unsigned)isa & bf16) == bf16, !avx512);
  test_bias(avx512); /* before the table is full */
  test_table();
  mt_sgemm_matmul_free();
  mt_sgemm_matmul_stats(&kept, &declined);
  CHECK(kept == 0 && declined == 0, "mt_sgemm_matmul_free empties the table");
  return tu_finish("test_gemm_matmul");
}
