/* Unit tests of mt_gemm on the OpenMP threads of one model (src/nn/gemm.c,
 * threads_split: under -thread_split gemm each thread computes a block of
 * C's columns of 'N','T', and of 'N','N' where the packed kernel takes the
 * blocks; oneDNN threads the rest):
 *  - all four transposes at 2 threads, N >= 512 and N < 512, against a
 *    double product (no NaN or infinity in C); beta 1 and beta 0 over NaN
 *    in C; padding columns untouched; with a bias (each block its slice of
 *    it); split (mt_gemm_split_calls) exactly where the rule says;
 *  - 'N','N' where --with-gemm=pack's kernel takes each block (at most 384
 *    rows, a block >= 512 columns, K >= 256): 2 threads == 1 thread bit
 *    for bit (its sums over K do not depend on the block's width); skipped
 *    where the build or the CPU has no such kernel;
 *  - called by two threads at once inside a parallel region (-thread_split
 *    batch), a call that splits outside one runs on its own thread, not
 *    split again: the 1-thread bits, no split counted.
 * Prints one line per check; exits non-zero when any check fails. */
#include "config.h"
#include "nn/gemm_pack.h"
#include "nn/nn.h"
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define TOL 2e-6

typedef struct {
  char ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  float *A, *B, *C0, *bias;
} gcase;

static void make(gcase *g, char ta, char tb, int64_t M, int64_t N, int64_t K, int pad, float beta,
                 int bias, uint64_t *rng) {
  *g = (gcase){ta, tb, M, N, K, (ta == 'N' ? K : M) + pad, (tb == 'N' ? N : K) + pad, N + pad,
               NULL, NULL, NULL, NULL};
  const size_t na = (size_t)((ta == 'N' ? M : K) * g->lda);
  const size_t nb = (size_t)((tb == 'N' ? K : N) * g->ldb), nc = (size_t)(M * g->ldc);
  g->A = tu_xmalloc(na * sizeof(float));
  g->B = tu_xmalloc(nb * sizeof(float));
  g->C0 = tu_xmalloc(nc * sizeof(float));
  tu_fill(g->A, na, rng, 1.0f);
  tu_fill(g->B, nb, rng, 1.0f);
  tu_fill(g->C0, nc, rng, 1.0f);
  if (beta == 0) /* C is output only: NaN in it must not leak */
    for (size_t i = 0; i < nc; i++)
      if (i % (size_t)g->ldc < (size_t)N) g->C0[i] = NAN;
  if (bias) {
    g->bias = tu_xmalloc((size_t)N * sizeof(float));
    tu_fill(g->bias, (size_t)N, rng, 1.0f);
  }
}

static void drop(gcase *g) { free(g->A), free(g->B), free(g->C0), free(g->bias); }

/* C = op(A) op(B) + beta C0 (+ bias) on nt threads: a fresh copy of C0 */
static float *run(const gcase *g, float beta, int nt, int *rc) {
  const size_t nc = (size_t)(g->M * g->ldc);
  float *C = tu_xmalloc(nc * sizeof(float));
  memcpy(C, g->C0, nc * sizeof(float));
  const int was = omp_get_max_threads();
  omp_set_num_threads(nt);
  *rc = mt_gemm_bias(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->lda, g->B, g->ldb, beta, C,
                     g->ldc, g->bias, NULL);
  omp_set_num_threads(was);
  return C;
}

/* 1 where the packed kernel is built and the CPU runs it */
static int pack_on(void) {
#ifdef MT_GEMM_PACK
  return mt_gemm_pack_available();
#else
  return 0;
#endif
}

/* C against the double product; padding as in C0 */
static void check(const gcase *g, const float *C, float beta, const char *what) {
  double num = 0, den = 0;
  int pad_ok = 1;
  long bad = 0; /* NaN or infinity: fmax would pass them over */
  for (int64_t i = 0; i < g->M; i++) {
    for (int64_t j = 0; j < g->N; j++) {
      double s = beta != 0 ? (double)beta * g->C0[i * g->ldc + j] : 0.0;
      for (int64_t k = 0; k < g->K; k++)
        s += (double)(g->ta == 'N' ? g->A[i * g->lda + k] : g->A[k * g->lda + i]) *
             (g->tb == 'N' ? g->B[k * g->ldb + j] : g->B[j * g->ldb + k]);
      if (g->bias) s += g->bias[j];
      bad += !isfinite(C[i * g->ldc + j]);
      num = fmax(num, fabs(C[i * g->ldc + j] - s));
      den = fmax(den, fabs(s));
    }
    for (int64_t j = g->N; j < g->ldc; j++)
      pad_ok &= memcmp(&C[i * g->ldc + j], &g->C0[i * g->ldc + j], sizeof(float)) == 0;
  }
  CHECK(bad == 0, "%s: every element finite (%ld not)", what, bad);
  CHECK_ERR(num / fmax(den, 1e-30), TOL, "%s", what);
  CHECK(pad_ok, "%s: padding columns untouched", what);
}

/* split: whether the rule splits this call at 2 threads */
static void one(char ta, char tb, int64_t M, int64_t N, int64_t K, int pad, float beta, int bias,
                int split, uint64_t *rng) {
  gcase g;
  make(&g, ta, tb, M, N, K, pad, beta, bias, rng);
  char what[160];
  snprintf(what, sizeof(what), "2 threads, %c%c M=%lld N=%lld K=%lld beta=%g%s", ta, tb,
           (long long)M, (long long)N, (long long)K, beta, bias ? " bias" : "");
  int rc;
  const long before = mt_gemm_split_calls();
  float *C = run(&g, beta, 2, &rc);
  CHECK(rc == 0, "%s: returns 0", what);
  CHECK(mt_gemm_split_calls() - before == split, "%s: %s", what,
        split ? "a block of columns per thread" : "not split (oneDNN's threads or one call)");
  check(&g, C, beta, what);
  free(C);
  drop(&g);
}

/* 'N','N' through the packed kernel, whole on 1 thread and in blocks on 2 */
static void pack_bits(float beta, int bias, uint64_t *rng) {
#ifdef MT_GEMM_PACK
  if (!mt_gemm_pack_available()) {
    printf("ok - pack blocks # SKIP no AVX2/FMA on this CPU\n");
    return;
  }
  gcase g;
  make(&g, 'N', 'N', 101, 1043, 300, 3, beta, bias, rng);
  int rc1, rc2;
  float *C1 = run(&g, beta, 1, &rc1), *C2 = run(&g, beta, 2, &rc2);
  CHECK(rc1 == 0 && rc2 == 0, "pack blocks beta=%g: return 0", beta);
  check(&g, C2, beta, "pack blocks, 2 threads");
  CHECK(memcmp(C1, C2, (size_t)(g.M * g.ldc) * sizeof(float)) == 0,
        "'N','N' beta=%g%s in the packed kernel: 2 threads' blocks == 1 thread bit for bit", beta,
        bias ? " bias" : "");
  free(C1), free(C2);
  drop(&g);
#else
  (void)beta, (void)bias, (void)rng;
  printf("ok - pack blocks # SKIP built without --with-gemm=pack\n");
#endif
}

/* two threads of a parallel region, each its own call at once, of a shape
 * that splits outside a region */
static void in_region(char tb, int64_t M, int64_t N, int64_t K, uint64_t *rng) {
  gcase g;
  make(&g, 'N', tb, M, N, K, 1, 1.0f, 0, rng);
  int rc;
  float *C1 = run(&g, 1.0f, 1, &rc);
  const size_t nc = (size_t)(g.M * g.ldc);
  float *two[2];
  int failed = 0;
  const long before = mt_gemm_split_calls();
  omp_set_num_threads(2);
#pragma omp parallel num_threads(2) reduction(| : failed)
  {
    float *C = two[omp_get_thread_num()] = tu_xmalloc(nc * sizeof(float));
    memcpy(C, g.C0, nc * sizeof(float));
    failed |= mt_gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, g.A, g.lda, g.B, g.ldb, 1.0f, C, g.ldc,
                      NULL) != 0;
  }
  CHECK(rc == 0 && !failed, "N%c in a parallel region: returns 0", tb);
  CHECK(mt_gemm_split_calls() == before, "N%c in a parallel region: not split again", tb);
  CHECK(memcmp(two[0], C1, nc * sizeof(float)) == 0 && memcmp(two[1], C1, nc * sizeof(float)) == 0,
        "N%c called by 2 threads of a region at once: each the 1-thread bits", tb);
  free(C1), free(two[0]), free(two[1]);
  drop(&g);
}

int main(void) {
  uint64_t rng = 41;
  const char tr[2] = {'N', 'T'};
  const int pk = pack_on();
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      const int nt = tr[a] == 'N' && tr[b] == 'T'; /* 'N','T' splits from 256 a thread */
      /* 400 + 377 columns: 'N','N' not (K 65, and 377 is too narrow a block) */
      one(tr[a], tr[b], 37, 777, 65, 2, 1.0f, 0, nt, &rng);
      /* 512 + 512: 'N','N' in the packed kernel's blocks where it is built */
      one(tr[a], tr[b], 64, 1024, 300, 0, 0.0f, 0, nt || (tr[a] == 'N' && tr[b] == 'N' && pk),
          &rng);
      one(tr[a], tr[b], 33, 300, 40, 1, 1.0f, 0, 0, &rng); /* < 256 a thread: never */
    }
  one('N', 'T', 50, 600, 70, 1, 0.0f, 1, 1, &rng);   /* the forward with its bias */
  one('N', 'N', 50, 1100, 260, 1, 1.0f, 1, pk, &rng); /* 560 + 540, the packed kernel */
  one('N', 'N', 50, 1030, 260, 1, 1.0f, 0, 0, &rng);  /* 528 + 502: a block too narrow */
  one('N', 'N', 400, 1100, 260, 0, 1.0f, 0, 0, &rng); /* 400 rows: not the kernel's */
  pack_bits(0.0f, 0, &rng);
  pack_bits(1.0f, 1, &rng);
  in_region('T', 64, 1024, 300, &rng);
  if (pk) in_region('N', 101, 1043, 300, &rng);
  return tu_finish("test_gemm_threads");
}
