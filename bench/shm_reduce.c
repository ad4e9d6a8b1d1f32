/* Bus bandwidth of the shared-memory all-reduce (src/comm/shm_reduce.c,
 * -ddp_allreduce shm) against MPI_Allreduce, float sums, by size.
 *   mpirun -np 2 --bind-to none bench/shm_reduce [-reps R] [-sizes MiB,MiB,...]
 * Methods: "mpi" MPI_Allreduce in place; "shm" the window with counters
 * and 1 MiB chunks (the copy-in path); "shm_bar" the same waiting by
 * MPI_Win_sync + MPI_Barrier; "shm_256k" and "shm_4m" counters with 256 KiB
 * and 4 MiB chunks; "shm_inpl" ddp's case since 2026-11-27, the buffer in
 * the window already (mt_shm_buffer: summed where it lies, no copy in).
 * Each repetition runs every method once in turn (interleaved, so a slow
 * phase of a busy machine hits all of them); a method's time is the
 * slowest rank's, the figure its median over the repetitions. Bus bandwidth
 * (NCCL's convention) = 2 (p-1)/p x bytes / time; "shm/mpi" is mpi's time
 * over shm's (> 1: shm is faster), "inpl/shm" shm's over shm_inpl's. A
 * second line per size, "best", gives the fastest repetition of each: on a
 * busy machine the median mostly measures the other jobs, the fastest
 * repetition what the method can do. */
#include "comm/shm_reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MPI_M, SHM, SHM_BAR, SHM_256K, SHM_4M, SHM_INPL, NM };
static const char *names[NM] = {"mpi", "shm", "shm_bar", "shm_256k", "shm_4m", "shm_inpl"};

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p, reps = 9;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  char sizes[256] = "1,4,16,64";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-reps")) reps = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-sizes")) snprintf(sizes, sizeof(sizes), "%s", argv[i + 1]);
  }
  if (reps < 1) reps = 1;
  mt_shm_reduce *s[NM] = {0};
  const size_t chunk[NM] = {0, 0, 0, (size_t)1 << 18, (size_t)1 << 22, 0};
  for (int m = SHM; m < NM; m++)
    if (mt_shm_create(&s[m], MPI_COMM_WORLD, chunk[m],
                      m == SHM_BAR ? MT_SHM_SYNC_BARRIER : MT_SHM_SYNC_FLAGS)) {
      fprintf(stderr, "bench/shm_reduce: %s\n", mt_error_message());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  double *t = calloc((size_t)reps * NM, sizeof(double));
  if (rank == 0) {
    printf("# %d ranks, float sums, median of %d interleaved repetitions (slowest rank)\n", p, reps);
    printf("# size_MiB      busbw_GB/s:");
    for (int m = 0; m < NM; m++) printf(" %s", names[m]);
    printf("   shm/mpi inpl/shm\n");
  }
  for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
    double mib = atof(tok);
    size_t n = (size_t)(mib * 262144.0);
    float *buf = malloc(n * sizeof(float) + 64), *win = NULL;
    if (!buf || !t || mt_shm_buffer(s[SHM_INPL], n * sizeof(float), (void **)&win) || !win) {
      fprintf(stderr, "bench/shm_reduce: no buffer in the window (one rank per node?)\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < n; i++) buf[i] = win[i] = (float)((i * 7 + (size_t)rank) % 13) * 1e-3f;
    for (int r = -1; r < reps; r++) /* r = -1: a warm-up (windows grow, pages touched) */
      for (int m = 0; m < NM; m++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (m == MPI_M)
          MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (mt_shm_allreduce(s[m], m == SHM_INPL ? win : buf, n, MT_SHM_F32)) {
          fprintf(stderr, "bench/shm_reduce: %s\n", mt_error_message());
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        double dt = MPI_Wtime() - t0, mx;
        MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r >= 0) t[(size_t)m * (size_t)reps + (size_t)r] = mx;
      }
    double med[NM], best[NM];
    for (int m = 0; m < NM; m++) {
      qsort(t + (size_t)m * (size_t)reps, (size_t)reps, sizeof(double), cmp);
      med[m] = t[(size_t)m * (size_t)reps + (size_t)reps / 2];
      best[m] = t[(size_t)m * (size_t)reps];
    }
    for (int row = 0; row < 2 && rank == 0; row++) {
      const double *x = row ? best : med;
      printf("%9.2f %s", mib, row ? "best" : "    ");
      for (int m = 0; m < NM; m++) printf(" %7.2f", 2.0 * (p - 1) / p * (double)n * 4.0 / x[m] / 1e9);
      printf("   %5.2fx   %5.2fx\n", x[MPI_M] / x[SHM], x[SHM] / x[SHM_INPL]);
      fflush(stdout);
    }
    free(buf);
  }
  for (int m = SHM; m < NM; m++) mt_shm_destroy(&s[m]);
  free(t);
  MPI_Finalize();
  return 0;
}
