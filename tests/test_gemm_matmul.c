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
 *  - more shapes than the table holds: still right, the table bounded.
 * Prints one line per check; exits non-zero when any check fails. */
#include "nn/gemm_matmul.h"
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
#ifdef _OPENMP
    /* two threads at once on the shape: an entry each, one thread's bits */
    float *two[2] = {tu_xmalloc(nc * sizeof(float)), tu_xmalloc(nc * sizeof(float))};
    int failed = 0;
#pragma omp parallel num_threads(2) reduction(| : failed)
    {
      float *mine = two[omp_get_thread_num()];
      for (size_t i = 0; i < nc; i++) mine[i] = NAN;
      for (int r = 0; r < 3; r++) failed |= run_nt(&c, mine) != dnnl_success;
    }
    CHECK(!failed && memcmp(two[0], c.C, nc * sizeof(float)) == 0 &&
              memcmp(two[1], c.C, nc * sizeof(float)) == 0,
          "%s: two threads at once give the one-thread bits", what);
    free(two[0]), free(two[1]);
#endif
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

/* more shapes than the table's 64: every one right, the table bounded */
static void test_table(void) {
  uint64_t rng = 13;
  int ok = 1, kept, declined;
  for (int s = 0; s < 80 && ok; s++) {
    nt_case c;
    make_case(&c, 3 + s % 5, 40 + s, 20 + (s * 7) % 50, 0, &rng);
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
  CHECK(ok, "80 shapes in turn: each right (1e-5)");
  CHECK(kept + declined <= 64, "the table holds at most 64 shapes (%d kept, %d declined)", kept,
        declined);
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
  test_others();
  test_table();
  mt_sgemm_matmul_free();
  mt_sgemm_matmul_stats(&kept, &declined);
  CHECK(kept == 0 && declined == 0, "mt_sgemm_matmul_free empties the table");
  return tu_finish("test_gemm_matmul");
}
