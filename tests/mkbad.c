/* mkbad: data files that would poison a run or overflow a size, for
 * test_bad_data.sh (mkdata's `bad` kinds are the structural ones).
 *
 *   mkbad x_nan ROW OUT.h5      float /x (10000, 4), NaN at row ROW, value 2
 *   mkbad x_inf ROW OUT.h5      the same with +Inf
 *   mkbad y_nan ROW OUT.h5      regression: float /y (10000, 2), NaN at ROW
 *   mkbad scale_inf 0 OUT.h5    uint8 /x whose scale attribute is +Inf
 *   mkbad scale_nan 0 OUT.h5    ... NaN
 *   mkbad nclasses V OUT.h5     int64 attribute nclasses of /y set to V
 *   mkbad label V OUT.h5        int64 /y labels, one of them V, no nclasses
 *   mkbad wide W OUT.h5         float /x (4, W), never written (a few KiB)
 *   mkbad vocab V OUT.h5        /tokens with an int64 vocab_size of V
 *   mkbad nclasses2 V OUT.h5    nclasses an array of 2 values {V, V} (a
 *                               scalar read of it overran the int: fuzz)
 *   mkbad state_epoch V CKPT.h5 sets the checkpoint's trainer state entry
 *   mkbad state_step V CKPT.h5  epoch / step_in_epoch to V (in place: no
 *                               checksum covers them; fuzz found INT_MIN)
 *
 * The 10000 rows of x_nan put row 100 inside the default sample (its first
 * block is rows 0..511) and row 600 outside it (the second starts at 1355).
 * Every other value is finite; labels are 0..3 with nclasses 4.
 * Exit status: 0 written, 1 failure, 2 usage. */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 10000

static int attr(hid_t obj, const char *name, hid_t type, const void *v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, type, v);
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return st < 0 ? -1 : 0;
}

/* Writes buf (NULL: leaves the dataset unwritten) and returns it open. */
static hid_t dset(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims,
                  const void *buf) {
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t d = sp < 0 ? -1 : H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0 && buf && H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
    H5Dclose(d);
    return -1;
  }
  return d;
}

/* An attribute of two values. */
static int attr2(hid_t obj, const char *name, hid_t type, const void *v) {
  hsize_t two = 2;
  hid_t sp = H5Screate_simple(1, &two, NULL);
  hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, type, v);
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return st < 0 ? -1 : 0;
}

static int usage(void) {
  fputs("usage: mkbad x_nan|x_inf|y_nan|scale_inf|scale_nan|nclasses|nclasses2|label|wide|vocab|\n"
        "       state_epoch|state_step V OUT.h5\n",
        stderr);
  return 2;
}

int main(int argc, char **argv) {
  if (argc != 4) return usage();
  const char *kind = argv[1], *path = argv[3];
  char *end;
  long long v = strtoll(argv[2], &end, 10);
  if (*end || end == argv[2]) return usage();
  static float x[N * 4], y2[N * 2];
  static int64_t lab[N];
  static unsigned char u8[N * 4];
  for (int i = 0; i < N * 4; i++) x[i] = (float)((i * 37) % 101) / 101.0f, u8[i] = (unsigned char)i;
  for (int i = 0; i < N * 2; i++) y2[i] = (float)(i % 7);
  for (int i = 0; i < N; i++) lab[i] = i % 4;
  int row = (v >= 0 && v < N) ? (int)v : 0;
  if (!strncmp(kind, "state_", 6)) {
    const char *key = !strcmp(kind, "state_epoch") ? "epoch" : "step_in_epoch";
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = f < 0 ? -1 : H5Gopen2(f, "trainer_state", H5P_DEFAULT);
    int rc = g < 0 || H5Adelete(g, key) < 0 || attr(g, key, H5T_NATIVE_INT64, &v);
    if (g >= 0) H5Gclose(g);
    if (f >= 0 && H5Fclose(f) < 0) rc = 1;
    if (rc) fprintf(stderr, "mkbad: error: cannot set %s in %s\n", key, path);
    return rc;
  }
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    fprintf(stderr, "mkbad: error: cannot create %s\n", path);
    return 1;
  }
  hsize_t xd[2] = {N, 4}, yd[2] = {N, 2};
  hid_t dx = -1, dy = -1;
  int rc = 0, known = 1;
  int64_t four = 4;
  _Static_assert(sizeof(long long) == sizeof(int64_t), "v is written as an int64");
  if (!strcmp(kind, "x_nan") || !strcmp(kind, "x_inf") || !strcmp(kind, "nclasses") ||
      !strcmp(kind, "label")) {
    if (!strcmp(kind, "x_nan")) x[row * 4 + 2] = NAN;
    if (!strcmp(kind, "x_inf")) x[row * 4 + 2] = INFINITY;
    if (!strcmp(kind, "label")) lab[row] = v;
    dx = dset(f, "x", H5T_NATIVE_FLOAT, 2, xd, x);
    dy = dset(f, "y", H5T_NATIVE_INT64, 1, xd, lab);
    if (strcmp(kind, "label"))
      rc = dy < 0 || attr(dy, "nclasses", H5T_NATIVE_INT64,
                          !strcmp(kind, "nclasses") ? (const void *)&v : &four);
  } else if (!strcmp(kind, "nclasses2")) {
    int64_t two[2] = {v, v};
    dx = dset(f, "x", H5T_NATIVE_FLOAT, 2, xd, x);
    dy = dset(f, "y", H5T_NATIVE_INT64, 1, xd, lab);
    rc = dy < 0 || attr2(dy, "nclasses", H5T_NATIVE_INT64, two);
  } else if (!strcmp(kind, "y_nan")) {
    y2[row * 2 + 1] = NAN;
    dx = dset(f, "x", H5T_NATIVE_FLOAT, 2, xd, x);
    dy = dset(f, "y", H5T_NATIVE_FLOAT, 2, yd, y2);
  } else if (!strcmp(kind, "scale_inf") || !strcmp(kind, "scale_nan")) {
    double s = !strcmp(kind, "scale_inf") ? INFINITY : NAN;
    dx = dset(f, "x", H5T_NATIVE_UCHAR, 2, xd, u8);
    dy = dset(f, "y", H5T_NATIVE_INT64, 1, xd, lab);
    rc = dx < 0 || attr(dx, "scale", H5T_NATIVE_DOUBLE, &s);
  } else if (!strcmp(kind, "wide")) {
    hsize_t wd[2] = {4, (hsize_t)v};
    dx = dset(f, "x", H5T_NATIVE_FLOAT, 2, wd, NULL);
    dy = dset(f, "y", H5T_NATIVE_INT64, 1, wd, lab);
  } else if (!strcmp(kind, "vocab")) {
    hsize_t m = 1000;
    dx = dset(f, "tokens", H5T_NATIVE_INT64, 1, &m, lab);
    rc = dx < 0 || attr(dx, "vocab_size", H5T_NATIVE_INT64, &v);
    dy = dx, dx = -1;
  } else {
    known = 0;
  }
  if (known && (dy < 0 || (dx < 0 && strcmp(kind, "vocab")))) rc = 1;
  if (dx >= 0) H5Dclose(dx);
  if (dy >= 0) H5Dclose(dy);
  if (H5Fclose(f) < 0) rc = 1;
  if (!known) {
    remove(path);
    return usage();
  }
  if (rc) fprintf(stderr, "mkbad: error: writing %s failed\n", path);
  return rc ? 1 : 0;
}
