/* The distributed sampler and the loader, under MPI at any rank count:
 * - the permutation is a permutation, identical on every rank, different
 *   between epochs;
 * - every rank runs the same number of training steps, and the ranks'
 *   micro-batches of a step partition that step's global batch;
 * - validation blocks cover every index exactly once over the ranks;
 * - the loader (with and without prefetch) hands out exactly the planned rows. */
#include "data/data.h"
#include "io/io.h"
#include "testutil.h"

#define CHECK_OK(expr, ...) CHECK((expr) == 0, __VA_ARGS__)

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank_, size_;

static void test_permutation(void) {
  const int64_t ns[] = {1, 2, 7, 1000, 60001};
  for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
    int64_t n = ns[k];
    int64_t *p = malloc((size_t)n * sizeof(*p)), *q = malloc((size_t)n * sizeof(*q));
    char *seen = calloc((size_t)n, 1);
    mt_sampler_permutation(42, 3, n, p);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
      if (p[i] < 0 || p[i] >= n || seen[p[i]]) ok = 0;
      else seen[p[i]] = 1;
    }
    CHECK(ok, "permutation of %lld is a permutation", (long long)n);
    /* identical on every rank: compare hashes */
    uint64_t h = mt_hash_bytes(p, (size_t)n * sizeof(*p), 0), lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi, "permutation of %lld identical on all %d ranks", (long long)n, size_);
    if (n >= 7) {
      mt_sampler_permutation(42, 4, n, q);
      CHECK(memcmp(p, q, (size_t)n * sizeof(*p)) != 0, "epochs 3 and 4 differ (n=%lld)", (long long)n);
      mt_sampler_permutation(43, 3, n, q);
      CHECK(memcmp(p, q, (size_t)n * sizeof(*p)) != 0, "seeds 42 and 43 differ (n=%lld)", (long long)n);
      mt_sampler_permutation(42, 3, n, q);
      CHECK(memcmp(p, q, (size_t)n * sizeof(*p)) == 0, "same (seed, epoch) repeats (n=%lld)", (long long)n);
    }
    free(p), free(q), free(seen);
  }
}

static void test_train_split(void) {
  /* N not divisible by the world size nor the batch */
  const int64_t n = 1001;
  const int micro = 3, accum = 2;
  const int B = micro * accum * size_;
  int64_t steps = mt_sampler_train_steps(n, B, 0);
  int64_t smin, smax;
  MPI_Allreduce(&steps, &smin, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&steps, &smax, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(smin == smax && steps == n / B, "equal training steps on all ranks (%lld)", (long long)steps);
  CHECK(mt_sampler_train_steps(n, B, 5) == (steps < 5 ? steps : 5), "max steps caps the epoch");
  /* every position of each step's global batch used exactly once */
  int ok = 1;
  for (int64_t s = 0; s < steps && ok; s++) {
    char *used = calloc((size_t)B, 1);
    for (int r = 0; r < size_; r++)
      for (int k = 0; k < accum; k++) {
        int64_t f = mt_sampler_train_first(s, B, size_, r, k, micro);
        for (int i = 0; i < micro; i++) {
          int64_t pos = f + i - s * B;
          if (pos < 0 || pos >= B || used[pos]) ok = 0;
          else used[pos] = 1;
        }
      }
    free(used);
  }
  CHECK(ok, "micro-batches of all ranks partition each global batch");
}

static void test_val_blocks(void) {
  const int64_t ns[] = {1, 3, 10, 1001};
  for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
    int64_t n = ns[k], start, count;
    mt_sampler_val_block(n, rank_, size_, &start, &count);
    int *mine = calloc((size_t)n, sizeof(int)), *all = calloc((size_t)n, sizeof(int));
    for (int64_t i = start; i < start + count; i++) mine[i]++;
    MPI_Allreduce(mine, all, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= all[i] == 1;
    CHECK(ok, "validation of %lld samples on %d ranks: each index exactly once", (long long)n, size_);
    free(mine), free(all);
  }
  /* in whole pieces: each index once, every block starts at a piece */
  const int64_t pieces[] = {1, 4, 64};
  for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++)
    for (size_t q = 0; q < 3; q++) {
      int64_t n = ns[k], P = pieces[q], start, count;
      mt_sampler_val_pieces(n, P, rank_, size_, &start, &count);
      int *mine = calloc((size_t)n, sizeof(int)), *all = calloc((size_t)n, sizeof(int));
      for (int64_t i = start; i < start + count; i++) mine[i]++;
      MPI_Allreduce(mine, all, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      int ok = count >= 0 && (count == 0 || start % P == 0);
      for (int64_t i = 0; i < n; i++) ok &= all[i] == 1;
      CHECK(ok, "validation of %lld samples in pieces of %lld on %d ranks: each index once, "
            "blocks of whole pieces", (long long)n, (long long)P, size_);
      free(mine), free(all);
    }
}

/* A file whose row i holds the values i*10 + j, label i % 5; /x stored as
 * `how` says: the ways the loader reads rows straight from the file (plain
 * contiguous, behind a user block) and those it leaves to HDF5 (chunked and
 * compressed, big-endian). */
enum { X_PLAIN, X_USERBLOCK, X_CHUNKED, X_BIGENDIAN, X_KINDS };
static const char *const x_kind[X_KINDS] = {"contiguous", "contiguous after a 512-byte user block",
                                            "chunked + deflate", "big-endian"};

static int make_file(const char *path, int64_t n, int d, int how) {
  float *x = malloc((size_t)(n * d) * sizeof(float));
  int32_t *y = malloc((size_t)n * sizeof(int32_t));
  for (int64_t i = 0; i < n; i++) {
    for (int j = 0; j < d; j++) x[i * d + j] = (float)(i * 10 + j);
    y[i] = (int32_t)(i % 5);
  }
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (how == X_USERBLOCK) H5Pset_userblock(fcpl, 512);
  hsize_t xd[2] = {(hsize_t)n, (hsize_t)d}, ck[2] = {16, (hsize_t)d};
  if (how == X_CHUNKED) H5Pset_chunk(dcpl, 2, ck), H5Pset_deflate(dcpl, 1);
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  hid_t xs = H5Screate_simple(2, xd, NULL);
  hid_t dx = H5Dcreate2(f, "x", how == X_BIGENDIAN ? H5T_IEEE_F32BE : H5T_IEEE_F32LE, xs,
                        H5P_DEFAULT, dcpl, H5P_DEFAULT);
  int e = f < 0 || dx < 0 || H5Dwrite(dx, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0;
  H5Dclose(dx), H5Sclose(xs), H5Pclose(fcpl), H5Pclose(dcpl);
  hsize_t dn = (hsize_t)n;
  hid_t sp = H5Screate_simple(1, &dn, NULL);
  hid_t ds = H5Dcreate2(f, "y", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) < 0) e = 1;
  H5Dclose(ds), H5Sclose(sp), H5Fclose(f);
  free(x), free(y);
  return e;
}

static void test_loader(int how) {
  char path[256];
  snprintf(path, sizeof(path), "sampler_test_%d_%d.h5", (int)getpid(), rank_);
  const int64_t n = 97;
  const int d = 3;
  CHECK(make_file(path, n, d, how) == 0, "test file written (/x %s)", x_kind[how]);
  mt_dataset ds;
  CHECK_OK(mt_dataset_open(&ds, path, MPI_COMM_SELF, NULL, 0, MT_DATA_CHECK_SAMPLE), "dataset opens");
  CHECK(ds.n == n && ds.spec.sample_numel == d && ds.spec.nclasses == 5, "dataset shape and classes");
  const int direct = how == X_PLAIN || how == X_USERBLOCK;
  CHECK(ds.direct == direct, "/x %s: rows read %s", x_kind[how],
        direct ? "straight from the file" : "through HDF5");
  int64_t perm[97];
  mt_sampler_permutation(7, 0, n, perm);
  int counts[] = {10, 1, 30, 17, 0, 39};
  /* read from the file, then (a direct /x) from its copy in memory */
  CHECK_OK(mt_dataset_hold(&ds, (double)(n * d * 4) - 1), "hold below /x's size: nothing");
  CHECK(ds.x_mem == NULL, "/x %s of %lld bytes: not held under a limit one byte short", x_kind[how],
        (long long)(n * d * 4));
  for (int pf = 0; pf < 4; pf++) {
    if (pf == 2) {
      CHECK_OK(mt_dataset_hold(&ds, (double)(n * d * 4)), "hold at /x's size");
      CHECK((ds.x_mem != NULL) == direct, "/x %s: %s", x_kind[how],
            direct ? "held in memory" : "not held (HDF5 reads it)");
    }
    mt_loader *L = NULL;
    CHECK_OK(mt_loader_create(&L, &ds, 40, pf % 2), "loader created (prefetch %d)", pf % 2);
    int ok = 1;
    for (int epoch = 0; epoch < 2; epoch++) {
      CHECK_OK(mt_loader_start(L, perm, counts, 6), "plan started");
      int64_t off = 0;
      for (int b = 0; b < 6; b++) {
        mt_batch bt;
        if (mt_loader_next(L, &bt)) {
          ok = 0;
          break;
        }
        const float *x = bt.x;
        const int32_t *y = bt.labels;
        int m = bt.n;
        /* the batch holds exactly the planned rows (in ascending order) */
        char *want = calloc((size_t)n, 1);
        for (int i = 0; i < counts[b]; i++) want[perm[off + i]] = 1;
        ok &= m == counts[b];
        for (int i = 0; i < m; i++) {
          int64_t row = (int64_t)(x[i * d] / 10);
          ok &= row >= 0 && row < n && want[row] && y[i] == row % 5 && x[i * d + 2] == row * 10 + 2;
          if (row >= 0 && row < n) want[row] = 0;
        }
        free(want);
        off += counts[b];
      }
    }
    CHECK(ok, "loader hands out exactly the planned rows, two epochs (prefetch %d, /x %s%s)", pf % 2,
          x_kind[how], ds.x_mem ? ", in memory" : "");
    mt_batch bt;
    mt_error_clear();
    CHECK(mt_loader_next(L, &bt) != 0, "asking past the plan is an error");
    mt_error_clear();
    mt_loader_destroy(&L);
    CHECK(L == NULL, "loader destroyed");
  }
  mt_dataset_unhold(&ds);
  CHECK(ds.x_mem == NULL, "unhold frees the copy");
  if (direct) { /* a file cut short after it was opened: an error naming it, nothing held */
    CHECK(truncate(path, (off_t)ds.x_offset + 8) == 0, "file cut after /x's first values");
    mt_error_clear();
    const int rc = mt_dataset_hold(&ds, 1e9);
    CHECK(rc != 0 && strstr(mt_error_message(), path) && strstr(mt_error_message(), "shorter"),
          "hold of a cut file: '%s'", mt_error_message());
    CHECK(ds.x_mem == NULL, "hold of a cut file keeps nothing");
    mt_error_clear();
  }
  mt_dataset_close(&ds);
  unlink(path);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  mt_h5_quiet();
  test_permutation();
  test_train_split();
  test_val_blocks();
  for (int how = 0; how < X_KINDS; how++) test_loader(how);
  int fails = tu_nfailed, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("test_sampler on %d ranks: %d checks per rank, %d failed on all ranks\n", size_, tu_nchecks, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
