/* mkdata synth, regress and bad: the data files the test scripts train on
 * (mkdata.c's comment says what each holds), all written through one
 * layout description, which the broken files of bad bend one way each. */
#include "mkdata.h"

#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ random */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((splitmix64(s) >> 11) + 0.5) * 0x1.0p-53; }

static double normal(uint64_t *s) {
  double u = uniform01(s), v = uniform01(s);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* x (n, d) float, y (n) in [0, c). The class means depend on (d, c) only, so
 * files made with different seeds (a training and a validation set) are
 * samples of the same task; the seed picks the samples. */
static int synth_fill(long n, long d, int c, uint64_t seed, float **xo, int32_t **yo) {
  uint64_t task = 0x5eed0000ull ^ ((uint64_t)d << 32) ^ (uint64_t)c;
  uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
  float *m = malloc((size_t)c * (size_t)d * sizeof(*m));
  float *x = malloc((size_t)(n ? n : 1) * (size_t)d * sizeof(*x));
  int32_t *y = malloc((size_t)(n ? n : 1) * sizeof(*y));
  if (!m || !x || !y) {
    free(m), free(x), free(y);
    mk_fail("out of memory for %ld x %ld samples", n, d);
    return -1;
  }
  for (long i = 0; i < (long)c * d; i++) m[i] = (float)(1.5 * normal(&task));
  for (long i = 0; i < n; i++) {
    y[i] = (int32_t)(splitmix64(&s) % (uint64_t)c);
    for (long j = 0; j < d; j++) x[i * d + j] = m[y[i] * d + j] + (float)normal(&s);
  }
  free(m);
  *xo = x;
  *yo = y;
  return 0;
}

/* ------------------------------------------------------------ writing */

static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  if (sp < 0) return -1;
  hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, mtype, v);
  if (a >= 0 && H5Aclose(a) < 0) st = -1;
  H5Sclose(sp);
  return st < 0 ? -1 : 0;
}

static int attr_string(hid_t obj, const char *name, const char *str) {
  hid_t t = H5Tcopy(H5T_C_S1);
  int rc = -1;
  if (t >= 0 && H5Tset_size(t, strlen(str) + 1) >= 0) rc = attr_write(obj, name, t, t, str);
  if (t >= 0) H5Tclose(t);
  return rc;
}

/* Contiguous dataset written whole; the opened dataset is returned in *out
 * (caller closes). A zero-sized dataset is created but not written. */
static int dset(hid_t f, const char *name, hid_t ftype, hid_t mtype, int rank,
                const hsize_t *dims, const void *buf, hid_t *out) {
  hid_t sp = H5Screate_simple(rank, dims, NULL), d = -1;
  hsize_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  if (sp >= 0) d = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int rc = (sp < 0 || d < 0) ? -1 : 0;
  if (!rc && n && H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) rc = -1;
  if (sp >= 0) H5Sclose(sp);
  if (rc && d >= 0) H5Dclose(d);
  if (!rc) *out = d;
  return rc;
}

/* What a (possibly broken) classification file looks like. */
typedef struct {
  long nx, ny, d;
  int nclasses;
  int has_x, has_y, has_scale, has_nclasses;
  int xrank;   /* 2: (nx, d); 1: (nx); 4: (nx, 1, s, s) with d = s*s */
  char xtype;  /* 'f' float32, 'u' uint8 (+scale), 'l' int64 */
  char ytype;  /* 'i' int32, 'f' float32, 'b' 32-bit bitfield */
} layout;

static int write_set(const char *path, const layout *L, const float *x, const int32_t *y,
                     const char *source) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    mk_fail("%s: cannot create", path);
    return -1;
  }
  size_t nxe = (size_t)L->nx * (size_t)(L->xrank >= 2 ? L->d : 1) + 1;
  void *xb = malloc(nxe * 8), *yb = malloc(((size_t)L->ny + 1) * 8);
  hid_t dx = -1, dy = -1;
  int rc = -1;
  if (!xb || !yb) goto out;
  if (attr_string(f, "source", source)) goto out;
  if (L->has_x) {
    hsize_t side = (hsize_t)lrint(sqrt((double)L->d));
    hsize_t dims[4] = {(hsize_t)L->nx, (hsize_t)L->d, 0, 0};
    if (L->xrank == 4) dims[1] = 1, dims[2] = dims[3] = side;
    size_t n = nxe - 1;
    hid_t ft = H5T_IEEE_F32LE, mt = H5T_NATIVE_FLOAT;
    if (L->xtype == 'f') {
      memcpy(xb, x, n * sizeof(float));
    } else if (L->xtype == 'u') {
      ft = H5T_STD_U8LE, mt = H5T_NATIVE_UCHAR;
      for (size_t i = 0; i < n; i++) {
        double v = 255.0 * (0.5 + x[i] / 12.0);
        ((unsigned char *)xb)[i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : lrint(v));
      }
    } else {
      ft = H5T_STD_I64LE, mt = H5T_NATIVE_INT64;
      for (size_t i = 0; i < n; i++) ((int64_t *)xb)[i] = (int64_t)lrint(10 * x[i]);
    }
    if (dset(f, "x", ft, mt, L->xrank, dims, xb, &dx)) goto out;
    double scale = 1.0 / 255.0;
    if (L->xtype == 'u' && L->has_scale &&
        attr_write(dx, "scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &scale))
      goto out;
  }
  if (L->has_y) {
    hsize_t n = (hsize_t)L->ny;
    hid_t ft = H5T_STD_I32LE, mt = H5T_NATIVE_INT32;
    if (L->ytype == 'i' || L->ytype == 'b') {
      memcpy(yb, y, (size_t)n * sizeof(int32_t));
      if (L->ytype == 'b') ft = H5T_STD_B32LE, mt = H5T_NATIVE_B32; /* neither class */
    } else {
      ft = H5T_IEEE_F32LE, mt = H5T_NATIVE_FLOAT;
      for (hsize_t i = 0; i < n; i++) ((float *)yb)[i] = (float)y[i];
    }
    if (dset(f, "y", ft, mt, 1, &n, yb, &dy)) goto out;
    if (L->has_nclasses && attr_write(dy, "nclasses", H5T_STD_I32LE, H5T_NATIVE_INT, &L->nclasses))
      goto out;
  }
  rc = 0;
out:
  if (dx >= 0 && H5Dclose(dx) < 0) rc = -1;
  if (dy >= 0 && H5Dclose(dy) < 0) rc = -1;
  if (H5Fclose(f) < 0) rc = -1;
  free(xb);
  free(yb);
  if (rc) mk_fail("%s: write failed", path);
  return rc;
}

int cmd_synth(int argc, char **argv) {
  long n, d, c, seed;
  if (argc < 5 || argc > 6 || (argc == 6 && strcmp(argv[5], "uint8") && strcmp(argv[5], "image"))) {
    mk_fail("usage: mkdata synth OUT.h5 N D C SEED [uint8|image]");
    return 2;
  }
  if (mk_parse_long(argv[1], 0, 1L << 30, "N", &n) || mk_parse_long(argv[2], 1, 1L << 20, "D", &d) ||
      mk_parse_long(argv[3], 1, 1L << 20, "C", &c) || mk_parse_long(argv[4], 0, LONG_MAX, "SEED", &seed))
    return 2;
  int image = argc == 6 && !strcmp(argv[5], "image");
  if (image && lrint(sqrt((double)d)) * lrint(sqrt((double)d)) != d) {
    mk_fail("synth image: D = %ld is not a square", d);
    return 2;
  }
  float *x;
  int32_t *y;
  if (synth_fill(n, d, (int)c, (uint64_t)seed, &x, &y)) return 1;
  layout L = {.nx = n, .ny = n, .d = d, .nclasses = (int)c, .has_x = 1, .has_y = 1,
              .has_scale = 1, .has_nclasses = 1, .xrank = image ? 4 : 2,
              .xtype = argc == 6 && !image ? 'u' : 'f',
              .ytype = 'i'};
  char src[256];
  snprintf(src, sizeof(src), "mkdata synth N=%ld D=%ld C=%ld SEED=%ld%s%s", n, d, c, seed,
           argc == 6 ? " " : "", argc == 6 ? argv[5] : "");
  int rc = write_set(argv[0], &L, x, y, src);
  free(x);
  free(y);
  return rc ? 1 : 0;
}

/* Regression data: x uniform in [-1, 1] (N,D) float32, y (N,K) float32 with
 * y_k = sum_j w_kj x_j + 0.5 tanh(x_k x_{k+1}); w is the same for every
 * file (one function), SEED draws the inputs. */
int cmd_regress(int argc, char **argv) {
  long n, d, k, seed;
  if (argc != 5 || mk_parse_long(argv[1], 1, 1L << 26, "N", &n) ||
      mk_parse_long(argv[2], 2, 1L << 16, "D", &d) || mk_parse_long(argv[3], 1, 1L << 10, "K", &k) ||
      mk_parse_long(argv[4], 0, LONG_MAX, "SEED", &seed)) {
    mk_fail("usage: mkdata regress OUT.h5 N D K SEED (D >= 2)");
    return 2;
  }
  float *x = calloc((size_t)(n * d), sizeof(float)), *y = calloc((size_t)(n * k), sizeof(float));
  float *w = calloc((size_t)(k * d), sizeof(float));
  if (!x || !y || !w) {
    mk_fail("regress: out of memory");
    return 1;
  }
  uint64_t fw = 12345, st = (uint64_t)seed; /* one function; SEED draws the inputs */
  for (long i = 0; i < k * d; i++) w[i] = (float)((2.0 * uniform01(&fw) - 1.0) / sqrt((double)d));
  for (long i = 0; i < n * d; i++) x[i] = (float)(2.0 * uniform01(&st) - 1.0);
  for (long i = 0; i < n; i++)
    for (long q = 0; q < k; q++) {
      const float *r = x + i * d;
      double v = 0.5 * tanh((double)r[q % d] * r[(q + 1) % d]);
      for (long j = 0; j < d; j++) v += (double)w[q * d + j] * r[j];
      y[i * k + q] = (float)v;
    }
  hid_t f = H5Fcreate(argv[0], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  int rc = f < 0;
  hsize_t dx[2] = {(hsize_t)n, (hsize_t)d}, dy[2] = {(hsize_t)n, (hsize_t)k};
  const char *names[2] = {"x", "y"};
  const hsize_t *dims[2] = {dx, dy};
  const float *data[2] = {x, y};
  for (int t = 0; t < 2 && !rc; t++) {
    hid_t sp = H5Screate_simple(2, dims[t], NULL);
    hid_t ds = H5Dcreate2(f, names[t], H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    rc = ds < 0 || H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data[t]) < 0;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
  }
  if (f >= 0 && H5Fclose(f) < 0) rc = 1;
  if (rc) mk_fail("regress: cannot write %s", argv[0]);
  else printf("%s: %ld samples, %ld inputs, %ld targets\n", argv[0], n, d, k);
  free(x);
  free(y);
  free(w);
  return rc;
}

static const char *const bad_kinds[] = {"nox",       "noy",       "xdtype", "ydtype",
                                        "xrank",     "nmismatch", "label_high", "label_neg",
                                        "empty",     "garbage",   "noclasses",  "noscale",
                                        "hugeclasses", NULL};

int cmd_bad(int argc, char **argv) {
  if (argc != 2) {
    mk_fail("usage: mkdata bad KIND OUT.h5");
    return 2;
  }
  const char *kind = argv[0], *path = argv[1];
  int known = 0;
  for (int i = 0; bad_kinds[i]; i++) known |= !strcmp(kind, bad_kinds[i]);
  if (!known) {
    mk_fail("bad: unknown KIND '%s' (nox noy xdtype ydtype xrank nmismatch label_high label_neg "
         "empty garbage noclasses noscale hugeclasses)", kind);
    return 2;
  }
  if (!strcmp(kind, "garbage")) {
    FILE *f = fopen(path, "wb");
    if (!f) {
      mk_fail("%s: cannot create", path);
      return 1;
    }
    uint64_t s = 7;
    fputs("this is not an HDF5 file\n", f);
    for (int i = 0; i < 4096; i++) fputc((int)(splitmix64(&s) & 0xff), f);
    if (fclose(f)) {
      mk_fail("%s: write failed", path);
      return 1;
    }
    return 0;
  }
  float *x;
  int32_t *y;
  if (synth_fill(64, 8, 4, 1, &x, &y)) return 1;
  layout L = {.nx = 64, .ny = 64, .d = 8, .nclasses = 4, .has_x = 1, .has_y = 1,
              .has_scale = 1, .has_nclasses = 1, .xrank = 2, .xtype = 'f', .ytype = 'i'};
  if (!strcmp(kind, "nox")) L.has_x = 0;
  if (!strcmp(kind, "noy")) L.has_y = 0;
  if (!strcmp(kind, "xdtype")) L.xtype = 'l';
  if (!strcmp(kind, "ydtype")) L.ytype = 'b'; /* float /y is regression now */
  if (!strcmp(kind, "xrank")) L.xrank = 1;
  if (!strcmp(kind, "nmismatch")) L.ny = 60;
  if (!strcmp(kind, "label_high")) y[37] = 4;
  if (!strcmp(kind, "label_neg")) y[41] = -1;
  if (!strcmp(kind, "empty")) L.nx = L.ny = 0;
  if (!strcmp(kind, "noclasses")) L.has_nclasses = 0;
  /* valid labels, but an nclasses attribute of 1e8: a model sized by it
   * needs gigabytes (the memory forecast's test) */
  if (!strcmp(kind, "hugeclasses")) L.nclasses = 100000000;
  if (!strcmp(kind, "noscale")) L.xtype = 'u', L.has_scale = 0;
  char src[128];
  snprintf(src, sizeof(src), "mkdata bad %s (deliberately broken)", kind);
  int rc = write_set(path, &L, x, y, src);
  free(x);
  free(y);
  return rc ? 1 : 0;
}
