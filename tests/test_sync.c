/* Collective helpers under MPI at any rank count (run by test_outputs.sh at
 * 1 to 4 ranks, and alone by make check):
 * - mt_allgather_values (public: mpitrain/mpitrain.h alone declares it and
 *   mt_value): every rank receives every rank's values of mixed types in
 *   rank order; long strings are cut; n = 0 works; ranks passing different
 *   counts or types fail on every rank, without a hang;
 * - mt_outputs_write: ranks with unequal row counts (none on some, several
 *   write rounds on others) make one file whose rows are every rank's rows
 *   in order, read back serially; rows out of data-set order or ranks with
 *   different logits widths fail on every rank and leave no file. */
#include <mpitrain/mpitrain.h>

#include "io/outputs.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rank_, size_;

/* Every rank's agreement that cond holds on all ranks. */
static int all_ranks(int cond) {
  int v = cond ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

static void test_allgather(void) {
  char name[200]; /* rank 1: a string too long to keep whole */
  if (rank_ == 1) {
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    memcpy(name, "rank-1", 6);
  } else {
    snprintf(name, sizeof(name), "rank-%d", rank_);
  }
  mt_value mine[3] = {mt_value_str(name), mt_value_i64(1000 * (int64_t)rank_ + 7),
                      mt_value_f64(rank_ + 0.25)};
  mt_value *all = calloc((size_t)size_ * 3, sizeof(mt_value));
  int err = mt_allgather_values(MPI_COMM_WORLD, mine, 3, all);
  int ok = err == 0;
  for (int r = 0; ok && r < size_; r++) {
    char want[32];
    snprintf(want, sizeof(want), "rank-%d", r);
    const mt_value *v = all + 3 * r;
    ok = v[0].type == MT_VALUE_STR && v[1].type == MT_VALUE_I64 && v[2].type == MT_VALUE_F64 &&
         v[1].i == 1000 * (int64_t)r + 7 && v[2].f == r + 0.25 &&
         (r == 1 ? strlen(v[0].s) == MT_VALUE_STR_MAX - 1 && !strncmp(v[0].s, want, strlen(want))
                 : !strcmp(v[0].s, want));
  }
  CHECK(all_ranks(ok), "all-gather: every rank holds every rank's values in rank order");
  CHECK(all_ranks(mt_allgather_values(MPI_COMM_WORLD, mine, 0, all) == 0), "all-gather of 0 values");
  free(all);
  all = calloc((size_t)size_ * 3, sizeof(mt_value));

  if (size_ > 1) {
    /* rank 0 passes 2 values, the others 3: an error everywhere, no hang */
    mt_error_clear();
    err = mt_allgather_values(MPI_COMM_WORLD, mine, rank_ == 0 ? 2 : 3, all);
    CHECK(all_ranks(err == MT_ERR_ARG), "all-gather: different counts fail on every rank");
    CHECK(strstr(mt_error_message(), "from 2 to 3 values") != NULL, "  and say so (%s)",
          mt_error_message());
    /* the last rank passes a double where the others pass an int64 */
    mt_error_clear();
    mt_value odd[3] = {mine[0], rank_ == size_ - 1 ? mt_value_f64(1) : mine[1], mine[2]};
    err = mt_allgather_values(MPI_COMM_WORLD, odd, 3, all);
    CHECK(all_ranks(err == MT_ERR_ARG), "all-gather: different types fail on every rank");
    char want[64];
    snprintf(want, sizeof(want), "rank %d passes a double at position 1", size_ - 1);
    CHECK(rank_ != 0 || strstr(mt_error_message(), want) != NULL, "  and name the rank (%s)",
          mt_error_message());
    mt_error_clear();
  }
  free(all);
}

/* What the row of sample s holds (any rank can compute it). */
static int32_t label_of(int64_t s) { return (int32_t)(s % 7); }
static int32_t pred_of(int64_t s) { return (int32_t)((s * 3) % 7); }
static float loss_of(int64_t s) { return 0.5f + (float)s / 8.0f; }
static float logit_of(int64_t s, int k) { return (float)s - 0.25f * (float)k; }

/* Rank r's rows: none on rank 0 and rank 2 (when size > 1), 5 * r + 1 on
 * the others (11 on a single rank); sample indices with gaps. */
static int64_t rows_of(int r, int size) {
  if (size == 1) return 11;
  return r == 0 || r == 2 ? 0 : 5 * r + 1;
}
static int64_t first_of(int r, int size) {
  int64_t f = 0;
  for (int q = 0; q < r; q++) f += 3 * rows_of(q, size) + 2;
  return f;
}

static void test_outputs(const char *dir) {
  const int C = 3;
  int64_t rows = rows_of(rank_, size_), first = first_of(rank_, size_), total = 0;
  for (int r = 0; r < size_; r++) total += rows_of(r, size_);
  size_t n = (size_t)(rows ? rows : 1);
  int64_t *index = calloc(n, sizeof(int64_t));
  int32_t *label = calloc(n, sizeof(int32_t)), *pred = calloc(n, sizeof(int32_t));
  float *loss = calloc(n, sizeof(float)), *logits = calloc(n * C, sizeof(float));
  for (int64_t i = 0; i < rows; i++) {
    int64_t s = index[i] = first + 2 * i;
    label[i] = label_of(s);
    pred[i] = pred_of(s);
    loss[i] = loss_of(s);
    for (int k = 0; k < C; k++) logits[i * C + k] = logit_of(s, k);
  }
  char path[1200];
  snprintf(path, sizeof(path), "%s/sub/out.h5", dir);
  mt_outputs_rows r = {rows, index, label, pred, loss, logits, C, MT_FP32, 0, 0, 0, NULL};
  mt_outputs_meta m = {"val", 0, "data.h5", 1000, 3, 42, "mlp"};
  mt_outputs_chunk_bytes = 3 * (20 + 4 * C); /* 3 rows per round: several rounds */
  int err = mt_outputs_write(MPI_COMM_WORLD, path, &m, &r);
  CHECK(all_ranks(err == 0), "outputs: %lld rows from %d ranks (3 per write round) written: %s",
        (long long)total, size_, err ? mt_error_message() : "ok");
  mt_outputs_chunk_bytes = (int64_t)64 << 20;

  /* rank 0 reads the file back serially and checks every row */
  int ok = 1;
  if (rank_ == 0) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    int64_t *ix = calloc((size_t)total + 1, sizeof(int64_t));
    int32_t *lb = calloc((size_t)total + 1, sizeof(int32_t)), *pr = calloc((size_t)total + 1, 4);
    float *ls = calloc((size_t)total + 1, 4), *lg = calloc(((size_t)total + 1) * C, 4);
    const char *names[5] = {"index", "label", "pred", "loss", "logits"};
    void *bufs[5] = {ix, lb, pr, ls, lg};
    hid_t types[5] = {H5T_NATIVE_INT64, H5T_NATIVE_INT32, H5T_NATIVE_INT32, H5T_NATIVE_FLOAT,
                      H5T_NATIVE_FLOAT};
    ok = f >= 0;
    for (int k = 0; ok && k < 5; k++) {
      hid_t d = H5Dopen2(f, names[k], H5P_DEFAULT);
      hid_t sp = d < 0 ? -1 : H5Dget_space(d);
      hsize_t dims[2] = {0, 0};
      int nd = sp < 0 ? -1 : H5Sget_simple_extent_dims(sp, dims, NULL);
      ok = nd == (k == 4 ? 2 : 1) && dims[0] == (hsize_t)total && (k < 4 || dims[1] == (hsize_t)C);
      if (ok && total) ok = H5Dread(d, types[k], H5S_ALL, H5S_ALL, H5P_DEFAULT, bufs[k]) >= 0;
      if (sp >= 0) H5Sclose(sp);
      if (d >= 0) H5Dclose(d);
    }
    int64_t rows_attr = -1;
    hid_t a = ok ? H5Aopen(f, "rows", H5P_DEFAULT) : -1;
    if (a < 0 || H5Aread(a, H5T_NATIVE_INT64, &rows_attr) < 0) ok = 0;
    if (a >= 0) H5Aclose(a);
    ok = ok && rows_attr == total;
    int64_t j = 0;
    for (int q = 0; ok && q < size_; q++)
      for (int64_t i = 0; ok && i < rows_of(q, size_); i++, j++) {
        int64_t s = first_of(q, size_) + 2 * i;
        ok = ix[j] == s && lb[j] == label_of(s) && pr[j] == pred_of(s) && ls[j] == loss_of(s);
        for (int k = 0; ok && k < C; k++) ok = lg[j * C + k] == logit_of(s, k);
      }
    if (f >= 0) H5Fclose(f);
    free(ix), free(lb), free(pr), free(ls), free(lg);
  }
  CHECK(all_ranks(ok), "outputs: the file holds every rank's rows, in order, read back serially");
  char tmp[1300];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  CHECK(all_ranks(access(tmp, F_OK) != 0), "outputs: no .tmp left");

  if (size_ > 1) {
    /* one row per rank, the ranks in descending sample order */
    snprintf(path, sizeof(path), "%s/bad.h5", dir);
    int64_t desc = 10 * (int64_t)(size_ - rank_);
    mt_outputs_rows b = {1, &desc, label, pred, loss, logits, C, MT_FP32, 0, 0, 0, NULL};
    mt_error_clear();
    err = mt_outputs_write(MPI_COMM_WORLD, path, &m, &b);
    CHECK(all_ranks(err == MT_ERR_ARG), "outputs: rows out of data-set order fail on every rank");
    CHECK(all_ranks(access(path, F_OK) != 0), "  and leave no file");
    /* another logits width on the last rank */
    r.logits_len = rank_ == size_ - 1 ? 2 : C;
    mt_error_clear();
    err = mt_outputs_write(MPI_COMM_WORLD, path, &m, &r);
    CHECK(all_ranks(err == MT_ERR_ARG), "outputs: different logits widths fail on every rank");
    CHECK(all_ranks(access(path, F_OK) != 0), "  and leave no file");
    mt_error_clear();
  }
  free(index), free(label), free(pred), free(loss), free(logits);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  mt_h5_quiet();
  char dir[1024] = "";
  if (rank_ == 0) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/mt-test-sync.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof(dir), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!dir[0]) {
    printf("FAIL cannot make a scratch folder\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  test_allgather();
  test_outputs(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    char p[1200];
    snprintf(p, sizeof(p), "%s/sub/out.h5", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/sub", dir);
    rmdir(p);
    rmdir(dir);
  }
  int fails = tu_nfailed, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0)
    printf("test_sync on %d ranks: %d checks per rank, %d failed on all ranks\n", size_,
           tu_nchecks, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
