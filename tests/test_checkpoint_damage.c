/* test_checkpoint's modes errors (truncated file, flipped byte, missing
 * tensor, shape and format mismatches, bad parts, disagreeing ranks: one
 * clear error on every rank) and dir (mt_ckpt_save's folder: latest, keep
 * K, the fallback past damaged checkpoints, stale .tmp files). */
#include "test_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

/* ------------------------------------------------------------- errors */

static void copy_file(const char *from, const char *to, double keep_fraction) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  if (!a || !b) tu_fatal("cannot copy", from);
  fseek(a, 0, SEEK_END);
  long n = ftell(a);
  fseek(a, 0, SEEK_SET);
  long keep = (long)(n * keep_fraction);
  char *buf = tu_xmalloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, a) != (size_t)n) tu_fatal("cannot read", from);
  if (fwrite(buf, 1, (size_t)keep, b) != (size_t)keep) tu_fatal("cannot write", to);
  free(buf);
  fclose(a);
  fclose(b);
}

/* Flips one byte in the middle of dataset name's data (serial HDF5 finds
 * the data's address; contiguous layout). */
static void flip_byte(const char *path, const char *name, size_t elem) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
  haddr_t at = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
  if (d >= 0) H5Dclose(d);
  if (f >= 0) H5Fclose(f);
  if (at == HADDR_UNDEF) tu_fatal("cannot find the data of", name);
  int fd = open(path, O_RDWR);
  unsigned char c;
  off_t pos = (off_t)(at + 4 * elem + 1);
  if (fd < 0 || pread(fd, &c, 1, pos) != 1) tu_fatal("cannot read", path);
  c ^= 0x5a;
  if (pwrite(fd, &c, 1, pos) != 1 || close(fd)) tu_fatal("cannot write", path);
}

static void set_format(const char *path, int v) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = f < 0 ? -1 : H5Aopen(f, "format", H5P_DEFAULT);
  if (a < 0 || H5Awrite(a, H5T_NATIVE_INT, &v) < 0) tu_fatal("cannot rewrite format of", path);
  H5Aclose(a);
  H5Fclose(f);
}

void test_errors(void) {
  char rep[1024], trunc[1024], flip[1024], fmt[1024], gap[1024];
  path_in(rep, sizeof(rep), "rep.h5");
  path_in(trunc, sizeof(trunc), "trunc.h5");
  path_in(flip, sizeof(flip), "flip.h5");
  path_in(fmt, sizeof(fmt), "fmt.h5");
  path_in(gap, sizeof(gap), "gap.h5");
  if (rank_ == 0) {
    copy_file(rep, trunc, 0.6);
    copy_file(rep, flip, 1.0);
    flip_byte(flip, "/exp_avg/head.weight", 1234);
    copy_file(rep, fmt, 1.0);
    set_format(fmt, 99);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  model r;
  model_make(&r, 0, 0, 0, 0);
  int rc = mt_ckpt_read(MPI_COMM_WORLD, trunc, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_FILE, "truncated file", "trunc.h5", "truncated", NULL);
  rc = mt_ckpt_verify(MPI_COMM_WORLD, trunc, MT_CKPT_CHECK_OPEN);
  expect_err(rc, MT_ERR_FILE, "verify of a truncated file", "trunc.h5", "truncated", NULL);

  rc = mt_ckpt_read(MPI_COMM_WORLD, flip, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_DATA, "flipped byte", "flip.h5", "/exp_avg/head.weight", "checksum");
  rc = mt_ckpt_verify(MPI_COMM_WORLD, flip, MT_CKPT_CHECK_DATA);
  expect_err(rc, MT_ERR_DATA, "verify of a flipped byte", "flip.h5", "/exp_avg/head.weight",
             "checksum");
  CHECK_OK(mt_ckpt_verify(MPI_COMM_WORLD, flip, MT_CKPT_CHECK_OPEN),
           "the flipped file's structure is intact (only data verification finds it)");

  rc = mt_ckpt_read(MPI_COMM_WORLD, fmt, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_DATA, "format version 99", "fmt.h5", "format version 99", NULL);
  model_free(&r);

  /* structural mismatches leave buffers and state untouched */
  const char *miss[4][3] = {{NULL, NULL, NULL},
                            {"/params/extra.weight", "no tensor", "(3, 3)"},
                            {"/params/head.weight", "(101, 41)", "(101, 42)"},
                            {"/params/scalar", "in the file but not in the model", NULL}};
  for (int v = 1; v <= 3; v++) {
    model_make(&r, v, 0, 0, 0);
    mt_ckpt_state st;
    memset(&st, 0, sizeof(st));
    mt_ckpt_state_set_i64(&st, "sentinel", 1);
    rc = mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, &st);
    expect_err(rc, MT_ERR_DATA, miss[v][0], miss[v][0], miss[v][1], miss[v][2]);
    int untouched = st.n == 1 && mt_ckpt_state_find(&st, "sentinel");
    for (int b = 0; b < NBUF; b++)
      for (size_t i = 0; i < r.t.total; i++) {
        uint32_t u;
        memcpy(&u, &r.x[b][i], 4);
        untouched &= u == 0xffffffffu;
      }
    CHECK(all_ok(untouched), "buffers and state untouched after the %s error", miss[v][0]);
    mt_ckpt_state_free(&st);
    model_free(&r);
  }
  /* a buffer the file does not hold */
  model_make(&r, 0, 0, 0, 0);
  r.bufs[2].name = "exp_avg_sq";
  rc = mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_DATA, "missing buffer", "/exp_avg_sq", "params", NULL);
  model_free(&r);

  /* sharded parts with a gap: refused on all ranks, no file left */
  model_make(&r, 0, 0, 0, 0);
  size_t total = r.t.total, lo, hi;
  model_free(&r);
  {
    mt_ckpt_range g;
    mt_ckpt_split(total, size_, rank_, 1, &g);
    lo = g.a;
    hi = g.b;
    if (rank_ == size_ - 1) hi = lo + (hi - lo) / 2; /* the end of head.weight on no rank */
  }
  model_make(&r, 0, 1, lo, hi);
  model_fill(&r, 3);
  rc = mt_ckpt_write(MPI_COMM_WORLD, gap, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_ARG, "sharded parts with a gap", "head.weight", "on no rank", NULL);
  CHECK(all_ok(access(gap, F_OK) != 0), "no file left by the refused write");
  model_free(&r);

  /* ranks passing different state */
  if (size_ > 1) {
    model_make(&r, 0, 0, 0, 0);
    model_fill(&r, 3);
    mt_ckpt_state st;
    make_state(&st, rank_ == 1 ? 2 : 1);
    rc = mt_ckpt_write(MPI_COMM_WORLD, gap, &r.ts, NULL, &st);
    expect_err(rc, MT_ERR_ARG, "ranks with different state", "different trainer state", NULL, NULL);
    CHECK(all_ok(access(gap, F_OK) != 0), "no file left by the refused write");
    mt_ckpt_state_free(&st);
    model_free(&r);
  }
  /* a failure on one rank only (rank 1 passes no data): the same error on
   * every rank, rank 0 holding rank 1's message, and no hang */
  if (size_ > 1) {
    model_make(&r, 0, 0, 0, 0);
    if (rank_ == 1) r.bufs[0].data = NULL;
    rc = mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, NULL);
    expect_err(rc, MT_ERR_ARG, "one rank without data", "rank 1:", "buffer params has no data",
               NULL);
    model_free(&r);
  }
  /* a missing file; an unwritable place */
  rc = mt_ckpt_read(MPI_COMM_WORLD, "/nonexistent/ckpt.h5", NULL, NULL, NULL);
  expect_err(rc, MT_ERR_FILE, "missing file", "/nonexistent/ckpt.h5", "no such file", NULL);
  model_make(&r, 0, 0, 0, 0);
  model_fill(&r, 3);
  rc = mt_ckpt_write(MPI_COMM_WORLD, "/nonexistent/ckpt.h5", &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_FILE, "unwritable file", "/nonexistent/ckpt.h5", "cannot create", NULL);
  model_free(&r);
}

/* ----------------------------------------------------------- directory */

static int read_latest(const char *d, char *buf, size_t cap) {
  char p[1100];
  snprintf(p, sizeof(p), "%s/latest", d);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  int ok = fgets(buf, (int)cap, f) != NULL;
  fclose(f);
  return ok ? 0 : -1;
}

void test_dir(void) {
  char d[1024], p[1100], latest[256];
  path_in(d, sizeof(d), "ck/sub");
  model m;
  model_make(&m, 0, 0, 0, 0);
  mt_ckpt_state st;
  int64_t s, *steps = NULL;
  int n = 0;
  make_state(&st, 0);
  mt_ckpt_meta meta = {"sp", "", "00000000000000aa", NULL}; /* pruning takes this run's files */
  int64_t found = -1;
  int rc = mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found);
  expect_err(rc, MT_ERR_FILE, "no checkpoint yet", "no checkpoint", "ck/sub", NULL);

  for (s = 10; s <= 50; s += 10) {
    model_fill(&m, (uint64_t)s);
    mt_ckpt_state_set_i64(&st, "global_step", s);
    CHECK_OK(mt_ckpt_save(MPI_COMM_WORLD, d, s, 3, &m.ts, &meta, &st, p, sizeof(p)),
             "save step %lld: %s", (long long)s, mt_error_message());
  }
  CHECK_OK(mt_ckpt_list(MPI_COMM_WORLD, d, &steps, &n), "list");
  CHECK(n == 3 && steps[0] == 50 && steps[1] == 40 && steps[2] == 30,
        "keep 3: steps 50, 40, 30 remain, newest first (%d)", n);
  mt_free(&steps);
  CHECK(read_latest(d, latest, sizeof(latest)) == 0 && !strcmp(latest, "ckpt-50.h5\n"),
        "latest names ckpt-50.h5");
  CHECK(count_tmp(d) == 0, "no .tmp file left");
  CHECK(strstr(p, "ckpt-50.h5") != NULL, "save returns the file name %.200s", p);
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "find latest");
  CHECK(found == 50, "the newest is 50 (%lld)", (long long)found);

  /* damage the newest two: a flipped byte in 50, a truncated 40 */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    char a[1100], b[1100];
    snprintf(a, sizeof(a), "%s/ckpt-50.h5", d);
    flip_byte(a, "/momentum_buffer/embed.weight", 10);
    snprintf(a, sizeof(a), "%s/ckpt-40.h5", d);
    snprintf(b, sizeof(b), "%s/x", d);
    copy_file(a, b, 0.5);
    rename(b, a);
    /* a stale temporary of a crashed save, newer than everything */
    snprintf(a, sizeof(a), "%s/ckpt-60.h5.tmp", d);
    FILE *f = fopen(a, "w");
    fputs("partial", f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "find latest past damaged ones: %s", mt_error_message());
  CHECK(found == 30 && strstr(p, "ckpt-30.h5"), "falls back to 30 (%lld, %.200s)", (long long)found, p);
  mt_ckpt_state got;
  memset(&got, 0, sizeof(got));
  model r;
  model_make(&r, 0, 0, 0, 0);
  CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, p, &r.ts, NULL, &got), "read the fallback");
  int64_t gs = -1;
  mt_ckpt_state_get_i64(&got, "global_step", &gs);
  CHECK(all_ok(model_diffs(&r, 30) == 0) && gs == 30, "fallback holds step 30's tensors and state");
  mt_ckpt_state_free(&got);
  model_free(&r);
  /* the damaged newest: OPEN passes 50, DATA does not */
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_OPEN, p, sizeof(p), &found),
           "structural check");
  CHECK(found == 50, "a structural check alone takes 50 (%lld)", (long long)found);

  /* a new save replaces the stale tmp of step 60 and prunes; the truncated
   * 40 cannot be read as this run's: it is left alone, not counted */
  model_fill(&m, 60);
  CHECK_OK(mt_ckpt_save(MPI_COMM_WORLD, d, 60, 2, &m.ts, &meta, &st, NULL, 0), "save step 60");
  CHECK_OK(mt_ckpt_list(MPI_COMM_WORLD, d, &steps, &n), "list");
  CHECK(n == 3 && steps[0] == 60 && steps[1] == 50 && steps[2] == 40,
        "keep 2: 60 and 50 remain, the unreadable 40 too, 30 is removed (%d)", n);
  mt_free(&steps);
  CHECK(count_tmp(d) == 0, "the stale .tmp is gone");
  CHECK(read_latest(d, latest, sizeof(latest)) == 0 && !strcmp(latest, "ckpt-60.h5\n"),
        "latest names ckpt-60.h5");
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "find latest");
  CHECK(found == 60, "the newest is 60");

  /* every checkpoint damaged */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    char a[1100];
    snprintf(a, sizeof(a), "%s/ckpt-60.h5", d);
    if (truncate(a, 1000) != 0) tu_fatal("cannot truncate", a);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  rc = mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found);
  expect_err(rc, MT_ERR_FILE, "all damaged", "none of the 3 checkpoints", "ckpt-60.h5", NULL);
  mt_ckpt_state_free(&st);
  model_free(&m);
}
