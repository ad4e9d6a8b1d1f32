/* Checkpoint write and read throughput against a raw write/read of the same
 * bytes to the same disk in the same run:
 *
 *   mpirun -np 2 bench/ckpt_bench DIR [floats=100000000] [reps=3]
 *
 * The model is one flat buffer of `floats` parameters in (2048, 2048)
 * tensors (a ~100 M parameter model), replicated on every rank as under
 * ddp. Rows, each the median of reps runs after one warm-up round, time
 * from a barrier to the last rank done:
 *   raw write      each rank pwrite()s its 1/p of the bytes into one file,
 *                  fsync, close (what any checkpoint must at least cost)
 *   ckpt save      mt_ckpt_save: collective HDF5 write of .tmp, checksums,
 *                  fsync, rename, latest
 *   ckpt write     mt_ckpt_write alone (no fsync: page cache speed)
 *   raw read       each rank pread()s its 1/p, file evicted from the page
 *                  cache first (posix_fadvise DONTNEED)
 *   ckpt read shard    mt_ckpt_read of this rank's 1/p (as fsdp), cold
 *   ckpt read repl     mt_ckpt_read replicated: 1/p each, checked, then
 *                  all-gathered so every rank holds everything, cold
 *   ckpt verify    mt_ckpt_verify at MT_CKPT_CHECK_DATA, cold
 *   allgather      the in-memory MPI_Allgatherv that a replicated read ends
 *                  with, alone (compared with raw read)
 *   fletcher32 write / read   the same buffer as ONE chunked dataset (4 MiB
 *                  chunks) with HDF5's Fletcher32 filter, written
 *                  collectively in parallel: the alternative to our own
 *                  checksum
 * GB/s counts the model's bytes (4 x floats) once. */
#include "io/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank_, size_;

static void die(const char *what) {
  fprintf(stderr, "ckpt_bench: rank %d: %s: %s\n", rank_, what, mt_error_message());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Drops the file's pages from the page cache (rank 0; one node). */
static void evict(const char *path) {
  if (rank_ == 0) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void my_part(size_t bytes, size_t *a, size_t *b) {
  *a = bytes / (size_t)size_ * (size_t)rank_;
  *b = rank_ + 1 == size_ ? bytes : bytes / (size_t)size_ * (size_t)(rank_ + 1);
}

static void raw_write(const char *path, const char *buf, size_t bytes) {
  if (rank_ == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("raw create");
    close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  size_t a, b;
  my_part(bytes, &a, &b);
  int fd = open(path, O_WRONLY);
  if (fd < 0) die("raw open");
  for (size_t k = a; k < b;) {
    ssize_t w = pwrite(fd, buf + k, b - k < (1u << 30) ? b - k : (1u << 30), (off_t)k);
    if (w <= 0) die("raw pwrite");
    k += (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) die("raw fsync");
}

static void raw_read(const char *path, char *buf, size_t bytes) {
  size_t a, b;
  my_part(bytes, &a, &b);
  int fd = open(path, O_RDONLY);
  if (fd < 0) die("raw open");
  for (size_t k = a; k < b;) {
    ssize_t r = pread(fd, buf + k, b - k < (1u << 30) ? b - k : (1u << 30), (off_t)k);
    if (r <= 0) die("raw pread");
    k += (size_t)r;
  }
  close(fd);
}

/* The in-place all-gather of a replicated read, in units of 16 floats. */
static void gather(float *y, size_t n) {
  int *cnt = calloc((size_t)size_, sizeof(int)), *dsp = calloc((size_t)size_, sizeof(int));
  for (int q = 0; q < size_; q++) {
    mt_ckpt_range g;
    mt_ckpt_split(n, size_, q, 16, &g);
    cnt[q] = (int)((g.b - g.a) / 16);
    dsp[q] = (int)(g.a / 16);
  }
  MPI_Datatype ty;
  MPI_Type_contiguous(16, MPI_FLOAT, &ty);
  MPI_Type_commit(&ty);
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, y, cnt, dsp, ty, MPI_COMM_WORLD);
  MPI_Type_free(&ty);
  free(cnt);
  free(dsp);
}

/* The buffer as one chunked float32 dataset with Fletcher32, collective. */
static void fletcher_io(const char *path, float *x, size_t n, int write) {
  hid_t fapl = mt_ckpt_fapl(MPI_COMM_WORLD), dxpl = mt_ckpt_dxpl();
  hid_t f = write ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)
                  : H5Fopen(path, H5F_ACC_RDONLY, fapl);
  if (f < 0) die("fletcher32 file");
  hsize_t dim = n, chunk = (hsize_t)1 << 20;
  if (chunk > dim) chunk = dim;
  hid_t sp = H5Screate_simple(1, &dim, NULL), d;
  if (write) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (H5Pset_chunk(dcpl, 1, &chunk) < 0 || H5Pset_fletcher32(dcpl) < 0) die("fletcher32 dcpl");
    d = H5Dcreate2(f, "params", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
  } else {
    d = H5Dopen2(f, "params", H5P_DEFAULT);
  }
  if (d < 0) die("fletcher32 dataset");
  /* this rank's share in whole chunks */
  hsize_t nch = (dim + chunk - 1) / chunk;
  hsize_t c0 = nch * (hsize_t)rank_ / (hsize_t)size_, c1 = nch * (hsize_t)(rank_ + 1) / (hsize_t)size_;
  hsize_t start = c0 * chunk, count = (c1 * chunk < dim ? c1 * chunk : dim) - start;
  hid_t ms = H5Screate_simple(1, &count, NULL);
  if (count)
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, &start, NULL, &count, NULL);
  else
    H5Sselect_none(sp), H5Sselect_none(ms);
  herr_t st = write ? H5Dwrite(d, H5T_NATIVE_FLOAT, ms, sp, dxpl, x + start)
                    : H5Dread(d, H5T_NATIVE_FLOAT, ms, sp, dxpl, x + start);
  if (st < 0) die(write ? "fletcher32 write" : "fletcher32 read");
  H5Sclose(ms);
  H5Sclose(sp);
  H5Dclose(d);
  if (H5Fclose(f) < 0) die("fletcher32 close");
  H5Pclose(fapl);
  H5Pclose(dxpl);
  if (write && rank_ == 0) {
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) die("fletcher32 fsync");
    close(fd);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  mt_h5_quiet();
  if (argc < 2) {
    if (rank_ == 0) fprintf(stderr, "usage: ckpt_bench DIR [floats] [reps]\n");
    MPI_Finalize();
    return 2;
  }
  const char *dir = argv[1];
  size_t want = argc > 2 ? (size_t)atoll(argv[2]) : 100000000;
  int reps = argc > 3 ? atoi(argv[3]) : 3;
  if (reps < 1 || reps > 64) reps = 3;

  mt_param_table t;
  memset(&t, 0, sizeof(t));
  for (int i = 0; t.total < want; i++) {
    char name[64];
    size_t left = want - t.total;
    int64_t shape[2] = {left >= 2048 * 2048 ? 2048 : (int64_t)((left + 2047) / 2048), 2048};
    snprintf(name, sizeof(name), "layers.%d.weight", i);
    if (mt_param_table_add(&t, name, 2, shape, i)) die("table");
  }
  const size_t n = t.total, bytes = n * sizeof(float);
  float *x = NULL, *y = NULL;
  if (mt_calloc(&x, n, sizeof(float), "params") || mt_calloc(&y, n, sizeof(float), "params copy"))
    die("alloc");
  for (size_t i = 0; i < n; i++) x[i] = (float)(i % 1000003) * 1e-3f;
  mt_ckpt_buf buf = {"params", x}, rbuf = {"params", y};
  mt_ckpt_tensors ts = {&t, &buf, 1, mt_ckpt_replicated(), MT_FP32};
  mt_ckpt_tensors rts = {&t, &rbuf, 1, mt_ckpt_replicated(), MT_FP32};
  mt_ckpt_range g; /* this rank's shard for the sharded read */
  mt_ckpt_split(n, size_, rank_, 16, &g);
  mt_ckpt_buf sbuf = {"params", y + g.a};
  mt_ckpt_tensors sts = {&t, &sbuf, 1, mt_ckpt_shard(g.a, g.b), MT_FP32};
  mt_ckpt_state st;
  memset(&st, 0, sizeof(st));
  mt_ckpt_state_set_i64(&st, "global_step", 1);
  char raw[MT_PATH_MAX], ck[MT_PATH_MAX], plain[MT_PATH_MAX], fl[MT_PATH_MAX];
  snprintf(raw, sizeof(raw), "%s/raw.bin", dir);
  snprintf(plain, sizeof(plain), "%s/plain.h5", dir);
  snprintf(fl, sizeof(fl), "%s/fletcher32.h5", dir);
  if (mt_ckpt_path(dir, 1, ck, sizeof(ck))) die("path");
  if (rank_ == 0 && mt_mkdir_p(dir)) die("mkdir");
  MPI_Barrier(MPI_COMM_WORLD);

  enum { RAW_W, SAVE, WRITE, FL_W, RAW_R, READ_S, READ_R, VERIFY, GATHER, FL_R, NROWS };
  const char *names[NROWS] = {"raw write+fsync (pwrite)", "ckpt save (write+fsync+rename)",
                              "ckpt write (no fsync)",    "fletcher32 write+fsync",
                              "raw read, cold (pread)",   "ckpt read sharded, cold",
                              "ckpt read replicated, cold", "ckpt verify data, cold",
                              "allgather of the buffer",  "fletcher32 read, cold"};
  double tm[NROWS][65];
  for (int r = -1; r < reps; r++) /* r = -1: a warm-up round, not counted */
    for (int k = 0; k < NROWS; k++) {
      /* writes start with no file in the way (truncating or replacing an
       * old 400 MB file costs ~0.1 s here, in the raw row as in ours) */
      if (rank_ == 0 && k == RAW_W) unlink(raw);
      if (rank_ == 0 && k == SAVE) unlink(ck);
      if (rank_ == 0 && k == WRITE) unlink(plain);
      if (rank_ == 0 && k == FL_W) unlink(fl);
      if (k >= RAW_R && k != GATHER) evict(k == RAW_R ? raw : k == FL_R ? fl : ck);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      int err = 0;
      switch (k) {
      case RAW_W: raw_write(raw, (const char *)x, bytes); break;
      case SAVE: err = mt_ckpt_save(MPI_COMM_WORLD, dir, 1, 1, &ts, NULL, &st, NULL, 0); break;
      case WRITE: err = mt_ckpt_write(MPI_COMM_WORLD, plain, &ts, NULL, &st); break;
      case FL_W: fletcher_io(fl, x, n, 1); break;
      case RAW_R: raw_read(raw, (char *)y, bytes); break;
      case READ_S: err = mt_ckpt_read(MPI_COMM_WORLD, ck, &sts, NULL, NULL); break;
      case READ_R: err = mt_ckpt_read(MPI_COMM_WORLD, ck, &rts, NULL, NULL); break;
      case VERIFY: err = mt_ckpt_verify(MPI_COMM_WORLD, ck, MT_CKPT_CHECK_DATA); break;
      case FL_R: fletcher_io(fl, y, n, 0); break;
      case GATHER: gather(y, n); break;
      }
      if (err) die(names[k]);
      double dt = MPI_Wtime() - t0, mx;
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (r >= 0) tm[k][r] = mx;
      if (k == READ_R && memcmp(x, y, bytes)) die("the replicated read differs from the buffer");
    }
  if (rank_ == 0) {
    printf("ckpt_bench: %zu floats (%.1f MB) in %d tensors, %d rank%s, %s, median of %d\n", n,
           bytes / 1e6, t.n, size_, size_ > 1 ? "s" : "", dir, reps);
    printf("%-32s %9s %8s %8s\n", "", "seconds", "GB/s", "vs raw");
    for (int k = 0; k < NROWS; k++) {
      qsort(tm[k], (size_t)reps, sizeof(double), cmp);
      double s = tm[k][reps / 2], base = k < RAW_R ? tm[RAW_W][reps / 2] : tm[RAW_R][reps / 2];
      printf("%-32s %9.3f %8.3f %8.2f\n", names[k], s, bytes / s / 1e9, base / s);
    }
  }
  if (rank_ == 0) {
    char lt[MT_PATH_MAX + 8];
    snprintf(lt, sizeof(lt), "%s/latest", dir);
    unlink(lt);
    unlink(raw);
    unlink(plain);
    unlink(fl);
    unlink(ck);
  }
  mt_ckpt_state_free(&st);
  mt_free(&x);
  mt_free(&y);
  mt_param_table_free(&t);
  MPI_Finalize();
  return 0;
}
