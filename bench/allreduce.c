/* MPI_Allreduce bus bandwidth by message size, and the time to all-reduce a
 * whole gradient buffer split into buckets of several sizes: the measurement
 * behind -ddp_bucket_mb's default.
 *   mpirun -np 2 bench/allreduce [gradient_MiB]
 * Bus bandwidth = 2 (p-1)/p * bytes / time (NCCL's convention). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median seconds of reps all-reduces of n floats in buckets of b floats */
static double timed(float *buf, size_t n, size_t b, int reps) {
  double t[64];
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (size_t end = n; end > 0;) {
      size_t start = end > b ? end - b : 0;
      MPI_Allreduce(MPI_IN_PLACE, buf + start, (int)(end - start), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      end = start;
    }
    double dt = MPI_Wtime() - t0, mx;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    t[r] = mx;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp);
  return t[reps / 2];
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  double grad_mib = argc > 1 ? atof(argv[1]) : 7.1; /* MLP 784-1024-1024-10 */
  size_t maxn = (size_t)128 << 18;                  /* 128 MiB of floats */
  float *buf = calloc(maxn, sizeof(float));
  double f = 2.0 * (p - 1) / p;
  if (rank == 0) printf("# %d ranks; MPI_Allreduce (float, sum), median of 15\n# size_MiB busbw_GB/s\n", p);
  for (size_t n = 1 << 14; n <= maxn; n *= 2) {
    double t = timed(buf, n, n, 15);
    if (rank == 0) printf("%9.3f %7.2f\n", n * 4.0 / 1048576, f * n * 4.0 / t / 1e9);
  }
  size_t g = (size_t)(grad_mib * 262144);
  if (rank == 0) printf("# gradient of %.1f MiB in buckets\n# bucket_MiB ms busbw_GB/s\n", grad_mib);
  const double buckets[] = {0.5, 1, 2, 4, 8, 16, 32, 64};
  for (int i = 0; i < 8; i++) {
    size_t b = (size_t)(buckets[i] * 262144);
    double t = timed(buf, g, b, 15);
    if (rank == 0) printf("%9.1f %7.3f %7.2f\n", buckets[i], t * 1e3, f * g * 4.0 / t / 1e9);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
