/* One GEMM on T OpenMP threads, five ways: dnnl_sgemm on one thread,
 * dnnl_sgemm threading itself, a block of C's columns per thread, each a
 * one-thread dnnl_sgemm (what mt_gemm does on the threads of one model:
 * src/nn/gemm.c threads_split), and our packed AVX2 kernel
 * (src/nn/gemm_pack.c, which mt_gemm runs where built --with-gemm=pack
 * for the shapes of mt_gemm_pack_wins: the MLP's input gradients, the
 * gpt's weight gradients of many rows) on one thread and as the column
 * blocks.
 * Prints the best time of each over the repetitions, interleaved, their
 * ratios to one thread of dnnl_sgemm, and whether each result has one
 * thread's bits (the packed blocks: the packed kernel's one thread's).
 *
 *   make bench/gemm_threads
 *   bench/gemm_threads [-threads 2] [-reps 200] [M N K OPS]...
 *
 * OPS is two letters (N or T, row-major as mt_gemm); without shapes, the
 * MLP's forward and backward at batch 128 and the 256-row forward. */
#define _POSIX_C_SOURCE 200809L
#include "nn/gemm_pack.h" /* -I src */

#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "gemm_threads: %s\n", what);
  exit(1);
}

static void gemm(char ta, char tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float *C, int ldc) {
  if (dnnl_sgemm(ta, tb, M, N, K, 1.f, A, lda, B, ldb, 0.f, C, ldc) != dnnl_success)
    die("dnnl_sgemm failed");
}

static void one(int M, int N, int K, char ta, char tb, int nt, int reps) {
  const int lda = ta == 'N' ? K : M, ldb = tb == 'N' ? N : K;
  const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
  float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
  float *C1 = malloc(nc * sizeof(float)), *Ct = malloc(nc * sizeof(float));
  float *Cs = malloc(nc * sizeof(float)), *P1 = malloc(nc * sizeof(float));
  float *Ps = malloc(nc * sizeof(float));
  if (!A || !B || !C1 || !Ct || !Cs || !P1 || !Ps) die("out of memory");
  const int pack = mt_gemm_pack_available();
  for (size_t i = 0; i < na; i++) A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
  const int per = ((N + nt - 1) / nt + 15) / 16 * 16;
  double b1 = 1e30, bt = 1e30, bs = 1e30, p1 = 1e30, ps = 1e30;
  for (int r = 0; r < reps; r++) {
    omp_set_num_threads(1);
    double t = now();
    gemm(ta, tb, M, N, K, A, lda, B, ldb, C1, N);
    t = now() - t;
    b1 = t < b1 ? t : b1;
    omp_set_num_threads(nt);
    t = now();
    gemm(ta, tb, M, N, K, A, lda, B, ldb, Ct, N);
    t = now() - t;
    bt = t < bt ? t : bt;
    t = now();
#pragma omp parallel num_threads(nt)
    {
      const int n0 = omp_get_thread_num() * per, n1 = n0 + per < N ? n0 + per : N;
      if (n1 > n0)
        gemm(ta, tb, M, n1 - n0, K, A, lda, tb == 'T' ? B + (size_t)n0 * ldb : B + n0, ldb,
             Cs + n0, N);
    }
    t = now() - t;
    bs = t < bs ? t : bs;
    if (!pack) continue;
    omp_set_num_threads(1); /* the kernel splits C's columns itself on several */
    t = now();
    if (mt_gemm_pack(ta, tb, M, N, K, A, lda, B, ldb, 0.f, P1, N)) die("gemm_pack failed");
    t = now() - t;
    p1 = t < p1 ? t : p1;
    omp_set_num_threads(nt);
    t = now();
#pragma omp parallel num_threads(nt)
    {
      const int n0 = omp_get_thread_num() * per, n1 = n0 + per < N ? n0 + per : N;
      if (n1 > n0 && mt_gemm_pack(ta, tb, M, n1 - n0, K, A, lda,
                                  tb == 'T' ? B + (size_t)n0 * ldb : B + n0, ldb, 0.f, Ps + n0, N))
        die("gemm_pack failed");
    }
    t = now() - t;
    ps = t < ps ? t : ps;
  }
  const double gf = 2.0 * M * N * K / 1e9;
  printf("%5d %5d %5d %c%c | %8.3f %6.1f | %8.3f %5.2fx %-5s | %8.3f %5.2fx %-5s", M, N, K, ta,
         tb, b1 * 1e3, gf / b1, bt * 1e3, b1 / bt,
         memcmp(Ct, C1, nc * sizeof(float)) ? "no" : "yes", bs * 1e3, b1 / bs,
         memcmp(Cs, C1, nc * sizeof(float)) ? "no" : "yes");
  if (pack)
    printf(" | %8.3f %5.2fx | %8.3f %5.2fx %-5s\n", p1 * 1e3, b1 / p1, ps * 1e3, b1 / ps,
           memcmp(Ps, P1, nc * sizeof(float)) ? "no" : "yes");
  else
    printf(" | (no AVX2/FMA: no packed kernel)\n");
  free(A), free(B), free(C1), free(Ct), free(Cs), free(P1), free(Ps);
}

int main(int argc, char **argv) {
  int nt = 2, reps = 200, a = 1;
  for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
    if (!strcmp(argv[a], "-threads"))
      nt = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "-reps"))
      reps = atoi(argv[a + 1]);
    else
      die("options: -threads T, -reps R, then M N K OPS ...");
  }
  if (nt < 1 || reps < 1 || (argc - a) % 4) die("want T >= 1, R >= 1 and shapes of 4 words");
  printf("oneDNN %d.%d, %d threads, best of %d; 'bits': the result has one thread's bits\n",
         dnnl_version()->major, dnnl_version()->minor, nt, reps);
  printf("    M     N     K op |  1 thr ms GF/s | oneDNN ms  x1thr bits  | columns ms  x1thr bits "
         " |  pack ms  x1thr |  pack cols  x1thr bits\n");
  static const char *mlp[] = {"128", "1024", "784",  "NT", "128",  "1024", "1024", "NT",
                              "128", "10",   "1024", "NT", "128",  "1024", "1024", "NN",
                              "1024", "1024", "128", "TN", "1024", "784",  "128",  "TN",
                              "256", "1024", "1024", "NT"};
  const int own = argc - a;
  char **sh = own ? argv + a : (char **)mlp;
  const int n = own ? own : (int)(sizeof(mlp) / sizeof(mlp[0]));
  for (int i = 0; i < n; i += 4) {
    const int M = atoi(sh[i]), N = atoi(sh[i + 1]), K = atoi(sh[i + 2]);
    const char *op = sh[i + 3];
    if (M < 1 || N < 1 || K < 1 || strlen(op) != 2 || !strchr("NT", op[0]) || !strchr("NT", op[1]))
      die("a shape is M N K OPS, OPS two of N and T");
    one(M, N, K, op[0], op[1], nt, reps);
  }
  return 0;
}
