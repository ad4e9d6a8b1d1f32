/* No checkpoint from NaN or inf, and none restarted from (issue 19):
 * mt_ckpt_write refuses buffers that hold a non-finite value, naming the
 * tensor, and leaves no file; a file that holds one anyway (written by an
 * older mpitrain: here made by overwriting a value and its checksum) fails
 * mt_ckpt_verify and mt_ckpt_read naming the tensor, and
 * mt_ckpt_find_latest passes over it to the older good checkpoint;
 * mt_space_reserve refuses a file that cannot fit, naming the bytes. One
 * rank (MPI singleton). Usage: test_nonfinite [DIR] (default: a new
 * folder under TMPDIR). */
#include "io/checkpoint.h"
#include "io/space.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void make(mt_param_table *t, float *x, mt_ckpt_buf *b, mt_ckpt_tensors *ts) {
  memset(t, 0, sizeof(*t));
  int64_t s1[2] = {6, 5}, s2[1] = {7};
  if (mt_param_table_add(t, "a.weight", 2, s1, 0) || mt_param_table_add(t, "b.bias", 1, s2, 1))
    tu_fatal("table", "");
  for (size_t i = 0; i < t->total; i++) x[i] = 0.25f * (float)i - 3.0f;
  *b = (mt_ckpt_buf){"params", x};
  *ts = (mt_ckpt_tensors){t, b, 1, mt_ckpt_replicated(), MT_FP32};
}

/* Overwrites element 2 of /params/b.bias with v and fixes its checksum, as
 * an older writer would have stored it. */
static void poison(const char *path, const mt_param_table *t, const float *x, float v) {
  const mt_param *q = &t->p[1];
  float y[16];
  memcpy(y, x + q->offset, q->numel * sizeof(float));
  y[2] = v;
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = f < 0 ? -1 : H5Dopen2(f, "params/b.bias", H5P_DEFAULT);
  uint64_t s[2] = {0, 0};
  mt_ckpt_sum(y, q->numel, 0, s);
  int ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0 &&
           H5Adelete(d, "checksum") >= 0 &&
           mt_ckpt_attr_array(d, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, 2, s) == 0;
  if (d >= 0) H5Dclose(d);
  if (f >= 0) H5Fclose(f);
  if (!ok) tu_fatal("poisoning the checkpoint failed", path);
}

static int says(const char *text) { return strstr(mt_error_message(), text) != NULL; }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mt_h5_quiet();
  char dir[1024];
  if (argc > 1) snprintf(dir, sizeof(dir), "%s", argv[1]);
  else {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof(dir), "%s/test_nonfinite.XXXXXX", tmp);
    if (!mkdtemp(dir)) tu_fatal("mkdtemp", dir);
  }
  mt_param_table t;
  float x[64];
  mt_ckpt_buf b;
  mt_ckpt_tensors ts;
  make(&t, x, &b, &ts);
  char p5[1200], p10[1200], found[1200];
  snprintf(p5, sizeof(p5), "%s/ckpt-5.h5", dir);
  snprintf(p10, sizeof(p10), "%s/ckpt-10.h5", dir);

  /* the writer refuses NaN and inf, naming the tensor; no file */
  const float bad[2] = {NAN, -INFINITY};
  const char *names[2] = {"NaN", "-inf"};
  for (int k = 0; k < 2; k++) {
    float keep = x[t.p[1].offset + 3];
    x[t.p[1].offset + 3] = bad[k];
    int rc = mt_ckpt_save(MPI_COMM_WORLD, dir, 10, 0, &ts, NULL, NULL, NULL, 0);
    CHECK(rc == MT_ERR_NUMERIC && says("/params/b.bias holds") && says(names[k]) &&
              says("(element 3)"),
          "a checkpoint holding %s is refused naming the tensor (%s)", names[k],
          mt_error_message());
    mt_error_clear();
    CHECK(access(p10, F_OK) != 0, "and no file is left");
    x[t.p[1].offset + 3] = keep;
  }

  /* a file holding inf (with a matching checksum): verify, read and the
   * newest-good search all refuse it */
  CHECK(mt_ckpt_save(MPI_COMM_WORLD, dir, 5, 0, &ts, NULL, NULL, NULL, 0) == 0, "ckpt-5 saved");
  CHECK(mt_ckpt_save(MPI_COMM_WORLD, dir, 10, 0, &ts, NULL, NULL, NULL, 0) == 0, "ckpt-10 saved");
  poison(p10, &t, x, INFINITY);
  int rc = mt_ckpt_verify(MPI_COMM_WORLD, p10, MT_CKPT_CHECK_DATA);
  CHECK(rc && says("/params/b.bias holds inf (element 2)"), "verify names the inf (%s)",
        mt_error_message());
  mt_error_clear();
  float y[64];
  mt_ckpt_buf by = {"params", y};
  mt_ckpt_tensors ty = {&t, &by, 1, mt_ckpt_replicated(), MT_FP32};
  rc = mt_ckpt_read(MPI_COMM_WORLD, p10, &ty, NULL, NULL);
  CHECK(rc && says("/params/b.bias holds inf (element 2)") && says("older checkpoint"),
        "a restart from it is refused (%s)", mt_error_message());
  mt_error_clear();
  int64_t step = 0;
  rc = mt_ckpt_find_latest(MPI_COMM_WORLD, dir, MT_CKPT_CHECK_DATA, found, sizeof(found), &step);
  CHECK(rc == 0 && step == 5 && !strcmp(found, p5), "-restart auto passes over it to ckpt-5");

  /* the reservation bounds the real file: tensors above the 1 MiB
   * alignment, two buffers, trainer state */
  {
    mt_param_table tb;
    memset(&tb, 0, sizeof(tb));
    int64_t sa[2] = {600, 700}, sb[1] = {5}, sc[2] = {1024, 300};
    if (mt_param_table_add(&tb, "big.weight", 2, sa, 0) || mt_param_table_add(&tb, "b", 1, sb, 1) ||
        mt_param_table_add(&tb, "big2.weight", 2, sc, 2))
      tu_fatal("table", "");
    float *p1 = calloc(tb.total, sizeof(float)), *p2 = calloc(tb.total, sizeof(float));
    if (!p1 || !p2) tu_fatal("out of memory", "");
    mt_ckpt_buf bb[2] = {{"params", p1}, {"momentum_buffer", p2}};
    mt_ckpt_tensors tt = {&tb, bb, 2, mt_ckpt_replicated(), MT_FP32};
    mt_ckpt_state st = {0};
    double curve[300];
    for (int i = 0; i < 300; i++) curve[i] = i;
    if (mt_ckpt_state_set_f64s(&st, "curve.train_loss", curve, 300) ||
        mt_ckpt_state_set_str(&st, "model", "mlp"))
      tu_fatal("state", "");
    mt_ckpt_meta meta = {"ddp", "mpitrain 0.1.0: backend ddp ...", "0123456789abcdef", NULL};
    char pb[1200];
    snprintf(pb, sizeof(pb), "%s/bound.h5", dir);
    CHECK(mt_ckpt_write(MPI_COMM_WORLD, pb, &tt, &meta, &st) == 0, "a checkpoint of 3.3 MiB written");
    struct stat sbuf;
    const uint64_t bound = mt_ckpt_file_bytes(&tt, &meta, &st);
    if (stat(pb, &sbuf) != 0) sbuf.st_size = -1;
    CHECK(sbuf.st_size > 0 && (uint64_t)sbuf.st_size <= bound,
          "its %lld bytes are within the %llu reserved", (long long)sbuf.st_size,
          (unsigned long long)bound);
    unlink(pb);
    mt_ckpt_state_free(&st);
    free(p1);
    free(p2);
    mt_param_table_free(&tb);
  }

  /* room: a file that cannot fit is refused before anything is written */
  char big[1200];
  snprintf(big, sizeof(big), "%s/big.h5", dir);
  rc = mt_space_reserve(big, (uint64_t)1 << 60);
  CHECK(rc == MT_ERR_WRITE && says("No space left on device") && says("it needs") &&
            says("big.h5"),
        "a reservation beyond the disk names the file and the bytes (%s)", mt_error_message());
  mt_error_clear();
  CHECK(mt_space_reserve(big, 4096) == 0, "a small one passes (the file does not exist yet)");

  unlink(p5);
  unlink(p10);
  char latest[1200];
  snprintf(latest, sizeof(latest), "%s/latest", dir);
  unlink(latest);
  if (argc < 2) rmdir(dir);
  mt_param_table_free(&t);
  MPI_Finalize();
  return tu_finish("test_nonfinite");
}
