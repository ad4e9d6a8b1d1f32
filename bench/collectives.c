/* Bus bandwidth of the sharding collectives (src/comm/collectives.c) against
 * MPI's own, by size of the full buffer, and how well their non-blocking
 * forms overlap a compute loop.
 *   mpirun -np 2 bench/collectives [-reps R] [-min KiB] [-max MiB] [-seg floats]
 *                                  [-win W] [-overlap MiB] [-compute_ms MS] [-best 1]
 * Bus bandwidth (NCCL's convention) of a full buffer of B bytes taking t s:
 * all-reduce 2 (p-1)/p B / t; reduce-scatter and all-gather (p-1)/p B / t.
 * Each repetition times every method once, in turn, so slow phases of a busy
 * machine hit all of them; the figure is the median over repetitions of the
 * slowest rank's time (-best 1: the fastest repetition, for a busy
 * machine where a rank loses its core now and then). "rs/ar" is mt_reduce_scatter's time over
 * MPI_Allreduce's for the same full buffer (< 1: the reduce-scatter is
 * faster); "v1/ar" the same for "rs_v1", mt_coll_start_reduce_scatter_v
 * with the whole buffer in the last rank's block: fsdp's reduction of a unit
 * that one rank owns (src/backends/fsdp.c), the common case at 2 ranks. */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { AR, RSB, RS_RING, RS_CHUNK, RS_AR, RS_AUTO, IRSB, RS_V1, AG, AG_RING, AG_AUTO, NM };
static const char *names[NM] = {"Allreduce", "RSB",   "rs_ring",   "rs_chunk", "rs_allred", "mt_rs",
                                "IRSB",      "rs_v1", "Allgather", "ag_ring",  "mt_ag"};

static int rank_, size_;

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int best_; /* -best: the fastest repetition instead of the median */

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof(double), cmp);
  if (best_) return t[0];
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void die(int err) {
  if (!err) return;
  fprintf(stderr, "rank %d: %s\n%s", rank_, mt_error_message(), mt_error_traceback());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* one run of method m on a full buffer of n floats */
static void run(int m, float *full, float *out, float *shard, size_t n) {
  size_t s = n / (size_t)size_;
  MPI_Comm w = MPI_COMM_WORLD;
  mt_coll *h = NULL;
  switch (m) {
  case AR: MPI_Allreduce(full, out, (int)n, MPI_FLOAT, MPI_SUM, w); break;
  case RSB: MPI_Reduce_scatter_block(full, shard, (int)s, MPI_FLOAT, MPI_SUM, w); break;
  case RS_RING: die(mt_reduce_scatter_method(shard, full, s, w, MT_COLL_RING)); break;
  case RS_CHUNK: die(mt_reduce_scatter_method(shard, full, s, w, MT_COLL_MPI_CHUNKED)); break;
  case RS_AR: die(mt_reduce_scatter_method(shard, full, s, w, MT_COLL_ALLREDUCE)); break;
  case RS_AUTO: die(mt_reduce_scatter(shard, full, s, w)); break;
  case IRSB:
    die(mt_coll_start_reduce_scatter(&h, shard, full, s, w, MT_COLL_MPI));
    die(mt_coll_wait(&h));
    break;
  case RS_V1: { /* fsdp's gradient path for a unit with one owner */
    int counts[64] = {0}, displs[64] = {0}, k = size_ < 64 ? size_ : 64;
    counts[k - 1] = (int)n;
    die(mt_coll_start_reduce_scatter_v(&h, out, full, counts, displs, w));
    die(mt_coll_wait(&h));
    break;
  }
  case AG: MPI_Allgather(shard, (int)s, MPI_FLOAT, out, (int)s, MPI_FLOAT, w); break;
  case AG_RING: die(mt_all_gather_method(out, shard, s, w, MT_COLL_RING)); break;
  case AG_AUTO: die(mt_all_gather(out, shard, s, w)); break;
  }
}

/* seconds of one run (the slowest rank's), iterated so it lasts >= ~2 ms */
static double timed(int m, float *full, float *out, float *shard, size_t n, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) run(m, full, out, shard, n);
  double dt = (MPI_Wtime() - t0) / iters, mx;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

/* ------------------------------------------------------------- overlap */

#define GB 96 /* GEMM-like unit: C += A B on GB x GB floats */
static float ga[GB * GB], gb[GB * GB], gc[GB * GB];

static void gemm_unit(void) {
  for (int i = 0; i < GB; i++)
    for (int k = 0; k < GB; k++) {
      float a = ga[i * GB + k];
      for (int j = 0; j < GB; j++) gc[i * GB + j] += a * gb[k * GB + j];
    }
}

/* units of compute, calling mt_coll_test after each when h is set */
static void compute(int units, mt_coll *h) {
  for (int u = 0; u < units; u++) {
    gemm_unit();
    if (h) {
      int done;
      die(mt_coll_test(h, &done));
    }
  }
}

/* start, compute (testing or not), wait; returns the slowest rank's time */
static double overlapped(int ag, int method, int units, int test, float *full, float *out,
                         float *shard, size_t s) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  mt_coll *h = NULL;
  if (ag)
    die(mt_coll_start_all_gather(&h, out, shard, s, MPI_COMM_WORLD, method));
  else
    die(mt_coll_start_reduce_scatter(&h, shard, full, s, MPI_COMM_WORLD, method));
  compute(units, test ? h : NULL);
  die(mt_coll_wait(&h));
  double dt = MPI_Wtime() - t0, mx;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mx;
}

static void overlap_bench(double mib, double compute_ms, int reps, float *full, float *out,
                          float *shard) {
  size_t n = (size_t)(mib * 262144) / (size_t)size_ * (size_t)size_, s = n / (size_t)size_;
  /* calibrate the units of compute to compute_ms (rank 0's count for all) */
  for (int i = 0; i < GB * GB; i++) ga[i] = gb[i] = 1e-3f * (float)(i % 7);
  double t0 = MPI_Wtime();
  compute(50, NULL);
  int units = (int)(compute_ms * 1e-3 / ((MPI_Wtime() - t0) / 50) + 0.5);
  MPI_Bcast(&units, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank_ == 0)
    printf("\n# overlap: %.1f MiB full buffer, %d GEMM units (%dx%d) ~ %.0f ms of compute, "
           "%s of %d\n# op method   comm_ms compute_ms  test:total_ms hidden%%   "
           "notest:total_ms hidden%%\n", mib, units, GB, GB, compute_ms, best_ ? "best" : "median",
           reps);
  const int methods[2] = {MT_COLL_RING, MT_COLL_MPI};
  for (int ag = 0; ag < 2; ag++)
    for (int mi = 0; mi < 2; mi++) {
      double tc[64], tm[64], tt[64], tn[64];
      for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double a = MPI_Wtime();
        compute(units, NULL);
        double dt = MPI_Wtime() - a;
        MPI_Allreduce(&dt, &tm[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        tc[r] = overlapped(ag, methods[mi], 0, 0, full, out, shard, s);
        tt[r] = overlapped(ag, methods[mi], units, 1, full, out, shard, s);
        tn[r] = overlapped(ag, methods[mi], units, 0, full, out, shard, s);
      }
      double c = median(tc, reps), m = median(tm, reps), t = median(tt, reps),
             u = median(tn, reps), lo = c < m ? c : m;
      if (rank_ == 0)
        printf("%s %-6s %9.2f %10.2f %14.2f %7.0f %17.2f %7.0f\n", ag ? "ag" : "rs",
               mi ? "MPI" : "ring", c * 1e3, m * 1e3, t * 1e3, 100 * (c + m - t) / lo, u * 1e3,
               100 * (c + m - u) / lo);
    }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  int reps = 11, win = 0;
  double min_kib = 64, max_mib = 64, ov_mib = 16, compute_ms = 20;
  long seg = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-min")) min_kib = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-max")) max_mib = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-seg")) seg = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "-win")) win = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-overlap")) ov_mib = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-compute_ms")) compute_ms = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-best")) best_ = atoi(argv[i + 1]);
  }
  if (reps < 1) reps = 1;
  if (reps > 64) reps = 64;
  mt_coll_set_ring(seg > 0 ? (size_t)seg : 0, win);
  size_t maxn = (size_t)(max_mib * 262144), ovn = (size_t)(ov_mib * 262144);
  if (ovn > maxn) maxn = ovn;
  float *full = malloc(maxn * sizeof(float)), *out = malloc(maxn * sizeof(float)),
        *shard = malloc(maxn * sizeof(float));
  for (size_t i = 0; i < maxn; i++) full[i] = out[i] = shard[i] = (float)(i % 1000) * 1e-3f;
  double rsf = (size_ - 1.0) / size_, arf = 2 * rsf;
  if (rank_ == 0) {
    printf("# %d ranks; %s of %d; bus bandwidth GB/s; size = full buffer (all blocks)\n",
           size_, best_ ? "best" : "median", reps);
    printf("# auto: reduce-scatter %s, all-gather %s\n# size_KiB",
           mt_coll_auto_method(0, 1 << 20, size_) == MT_COLL_RING ? "ring" : "other",
           mt_coll_auto_method(1, 1 << 20, size_) == MT_COLL_RING ? "ring" : "MPI");
    for (int m = 0; m < NM; m++) printf(" %9s", names[m]);
    printf("   rs/ar   v1/ar\n");
  }
  for (size_t n = (size_t)(min_kib * 256); n <= maxn; n *= 2) {
    size_t nn = n / (size_t)size_ * (size_t)size_;
    double t[NM][64];
    int iters = n < (1 << 18) ? (int)((1 << 18) / n) : 1;
    for (int m = 0; m < NM; m++) timed(m, full, out, shard, nn, 1); /* warm-up */
    for (int r = 0; r < reps; r++)
      for (int m = 0; m < NM; m++) t[m][r] = timed(m, full, out, shard, nn, iters);
    if (rank_ == 0) {
      printf("%10.0f", nn * 4.0 / 1024);
      double tar = median(t[AR], reps), trs = median(t[RS_AUTO], reps);
      for (int m = 0; m < NM; m++) {
        double tm = m == AR ? tar : median(t[m], reps);
        printf(" %9.2f", (m == AR ? arf : rsf) * nn * 4.0 / tm / 1e9);
      }
      printf("   %5.2f   %5.2f\n", trs / tar, median(t[RS_V1], reps) / tar);
      fflush(stdout);
    }
  }
  if (ov_mib > 0) overlap_bench(ov_mib, compute_ms, reps, full, out, shard);
  free(full);
  free(out);
  free(shard);
  MPI_Finalize();
  return 0;
}
