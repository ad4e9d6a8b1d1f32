/* mkdata: data files and checks for the test scripts.
 *
 *   mkdata synth OUT.h5 N D C SEED [uint8|image]  learnable synthetic classes
 *   mkdata regress OUT.h5 N D K SEED         float targets y (N,K) of x (N,D)
 *   mkdata bad KIND OUT.h5                   a small file broken in one way
 *   mkdata compare A.h5 B.h5 RTOL [SKIP]     float32 and float64 datasets of A vs
 *                                            B (names containing SKIP left out;
 *                                            compared as doubles, so float32
 *                                            against float64 works too)
 *   mkdata types FILE.h5 [float32|float64]   each root dataset's type; with a
 *                                            type: every float dataset of it
 *   mkdata flip FILE.h5 DATASET [BYTE]       flips the lowest bit of byte BYTE
 *                                            (default 0) of a contiguous
 *                                            dataset's data in the file
 *   mkdata unattr FILE.h5 NAME               removes root attribute NAME
 *   mkdata unlink FILE.h5 NAME               removes root dataset NAME (a data
 *                                            file without /y: -mode predict's)
 *   mkdata stats FILE.h5                     shapes, label histogram, mean x
 *   mkdata outstats FILE.h5 [N]              an outputs file (src/io/outputs.h):
 *                                            rows in order, mean loss, accuracy
 *   mkdata rows A.h5 B.h5 RTOL [subset]      outputs files row by row
 *   mkdata outindex FILE.h5                  an outputs file's /index, one a line
 *
 * synth: class c has a mean vector m_c (entries N(0, 1.5^2), fixed by D and C
 * so that sets made with different seeds are the same task); a sample of
 * class y is m_y + N(0, 1) noise, so classes are well separated and an MLP
 * reaches high accuracy. float32 by default; with "uint8" the value
 * v = 0.5 + x/12 is stored as round(255 v) clipped to 0..255 with scale 1/255.
 * With "image" (D a square s*s) /x is float32 (N, 1, s, s), for the cnn.
 * The file is a function of (N, D, C, SEED) only.
 *
 * Exit status: 0 success, 1 failure (one line on stderr), 2 usage error. */
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  fputs("mkdata: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

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
    fail("out of memory for %ld x %ld samples", n, d);
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
    fail("%s: cannot create", path);
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
  if (rc) fail("%s: write failed", path);
  return rc;
}

static int parse_long(const char *s, long lo, long hi, const char *what, long *v) {
  char *end;
  *v = strtol(s, &end, 10);
  if (!*s || *end || *v < lo || *v > hi) {
    fail("%s: '%s' is not an integer in %ld..%ld", what, s, lo, hi);
    return -1;
  }
  return 0;
}

static int cmd_synth(int argc, char **argv) {
  long n, d, c, seed;
  if (argc < 5 || argc > 6 || (argc == 6 && strcmp(argv[5], "uint8") && strcmp(argv[5], "image"))) {
    fail("usage: mkdata synth OUT.h5 N D C SEED [uint8|image]");
    return 2;
  }
  if (parse_long(argv[1], 0, 1L << 30, "N", &n) || parse_long(argv[2], 1, 1L << 20, "D", &d) ||
      parse_long(argv[3], 1, 1L << 20, "C", &c) || parse_long(argv[4], 0, LONG_MAX, "SEED", &seed))
    return 2;
  int image = argc == 6 && !strcmp(argv[5], "image");
  if (image && lrint(sqrt((double)d)) * lrint(sqrt((double)d)) != d) {
    fail("synth image: D = %ld is not a square", d);
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
static int cmd_regress(int argc, char **argv) {
  long n, d, k, seed;
  if (argc != 5 || parse_long(argv[1], 1, 1L << 26, "N", &n) ||
      parse_long(argv[2], 2, 1L << 16, "D", &d) || parse_long(argv[3], 1, 1L << 10, "K", &k) ||
      parse_long(argv[4], 0, LONG_MAX, "SEED", &seed)) {
    fail("usage: mkdata regress OUT.h5 N D K SEED (D >= 2)");
    return 2;
  }
  float *x = calloc((size_t)(n * d), sizeof(float)), *y = calloc((size_t)(n * k), sizeof(float));
  float *w = calloc((size_t)(k * d), sizeof(float));
  if (!x || !y || !w) {
    fail("regress: out of memory");
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
  if (rc) fail("regress: cannot write %s", argv[0]);
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

static int cmd_bad(int argc, char **argv) {
  if (argc != 2) {
    fail("usage: mkdata bad KIND OUT.h5");
    return 2;
  }
  const char *kind = argv[0], *path = argv[1];
  int known = 0;
  for (int i = 0; bad_kinds[i]; i++) known |= !strcmp(kind, bad_kinds[i]);
  if (!known) {
    fail("bad: unknown KIND '%s' (nox noy xdtype ydtype xrank nmismatch label_high label_neg "
         "empty garbage noclasses noscale hugeclasses)", kind);
    return 2;
  }
  if (!strcmp(kind, "garbage")) {
    FILE *f = fopen(path, "wb");
    if (!f) {
      fail("%s: cannot create", path);
      return 1;
    }
    uint64_t s = 7;
    fputs("this is not an HDF5 file\n", f);
    for (int i = 0; i < 4096; i++) fputc((int)(splitmix64(&s) & 0xff), f);
    if (fclose(f)) {
      fail("%s: write failed", path);
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

/* ------------------------------------------------------------ reading */

/* Reads a whole dataset as mtype (esize bytes a value, converted by HDF5);
 * rank, dims out. */
static void *read_as(hid_t f, const char *file, const char *name, hid_t mtype, size_t esize,
                     int *rank, hsize_t *dims, size_t *n) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  hid_t sp = d < 0 ? -1 : H5Dget_space(d);
  void *buf = NULL;
  *rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  if (*rank < 0 || *rank > 16 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
    fail("%s: cannot read dataset /%s", file, name);
    goto out;
  }
  *n = 1;
  for (int i = 0; i < *rank; i++) *n *= dims[i];
  buf = malloc((*n ? *n : 1) * esize);
  if (!buf || (*n && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)) {
    fail("%s: cannot read dataset /%s as %s", file, name,
         esize == sizeof(double) ? "double" : "float");
    free(buf);
    buf = NULL;
  }
out:
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  return buf;
}

static float *read_float(hid_t f, const char *file, const char *name, int *rank, hsize_t *dims,
                         size_t *n) {
  return read_as(f, file, name, H5T_NATIVE_FLOAT, sizeof(float), rank, dims, n);
}

static double *read_double(hid_t f, const char *file, const char *name, int *rank,
                           hsize_t *dims, size_t *n) {
  return read_as(f, file, name, H5T_NATIVE_DOUBLE, sizeof(double), rank, dims, n);
}

/* Type class and size of a root dataset; class H5T_NO_CLASS if not one. */
static H5T_class_t dset_class(hid_t f, const char *name, size_t *size) {
  H5T_class_t c = H5T_NO_CLASS;
  *size = 0;
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0) return c;
  hid_t o = H5Oopen(f, name, H5P_DEFAULT);
  if (o < 0) return c;
  if (H5Iget_type(o) == H5I_DATASET) {
    hid_t t = H5Dget_type(o);
    if (t >= 0) {
      c = H5Tget_class(t);
      *size = H5Tget_size(t);
      H5Tclose(t);
    }
  }
  H5Oclose(o);
  return c;
}

typedef struct {
  hid_t b;
  const char *fa, *fb;
  double rtol;
  int seen, bad;
  const char *skip; /* names containing it are not compared */
} cmp_ctx;

static void shape_str(char *s, size_t len, int rank, const hsize_t *dims) {
  size_t k = (size_t)snprintf(s, len, "(");
  for (int i = 0; i < rank && k < len; i++)
    k += (size_t)snprintf(s + k, len - k, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
  if (k < len) snprintf(s + k, len - k, ")");
}

static herr_t cmp_one(hid_t a, const char *name, const H5L_info_t *info, void *op) {
  (void)info;
  cmp_ctx *c = op;
  size_t sa, sb;
  if (dset_class(a, name, &sa) != H5T_FLOAT) return 0; /* float32 and float64 */
  if (c->skip && strstr(name, c->skip)) {
    printf("%-40s skipped\n", name);
    return 0;
  }
  c->seen++;
  if (dset_class(c->b, name, &sb) != H5T_FLOAT) {
    printf("%-40s MISSING (no float dataset of that name in %s)\n", name, c->fb);
    c->bad++;
    return 0;
  }
  int ra, rb;
  hsize_t da[16], db[16];
  size_t na, nb;
  double *xa = read_double(a, c->fa, name, &ra, da, &na);
  double *xb = xa ? read_double(c->b, c->fb, name, &rb, db, &nb) : NULL;
  if (!xa || !xb) {
    free(xa);
    c->bad++;
    return 0;
  }
  int same = ra == rb;
  for (int i = 0; same && i < ra; i++) same = da[i] == db[i];
  char sha[256], shb[256];
  shape_str(sha, sizeof(sha), ra, da);
  shape_str(shb, sizeof(shb), rb, db);
  if (!same) {
    printf("%-40s SHAPE MISMATCH %s vs %s in %s\n", name, sha, shb, c->fb);
    c->bad++;
  } else {
    /* NaN anywhere makes err NaN, which fails the test below. */
    double amax = 0, dmax = 0;
    for (size_t i = 0; i < na; i++) {
      double d = fabs(xa[i] - xb[i]);
      if (!(fabs(xa[i]) <= amax)) amax = fabs(xa[i]);
      if (!(d <= dmax)) dmax = d;
      if (isnan(amax) || isnan(dmax)) break;
    }
    double err = dmax / fmax(amax, 1e-30);
    if (isnan(amax)) err = NAN;
    int ok = err <= c->rtol;
    char ty[24] = ""; /* the types, when not both float32 */
    if (sa != 4 || sb != 4) snprintf(ty, sizeof(ty), " float%zu/float%zu", 8 * sa, 8 * sb);
    printf("%-40s %-16s rel_err %.3e %s%s\n", name, sha, err, ok ? "ok" : "FAIL", ty);
    c->bad += !ok;
  }
  free(xa);
  free(xb);
  return 0;
}

static int cmd_compare(int argc, char **argv) {
  char *end;
  double rtol = argc == 3 || argc == 4 ? strtod(argv[2], &end) : -1;
  if ((argc != 3 && argc != 4) || *end || !(rtol >= 0)) {
    fail("usage: mkdata compare A.h5 B.h5 RTOL [SKIP] (RTOL >= 0)");
    return 2;
  }
  hid_t a = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t b = a < 0 ? -1 : H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (a < 0 || b < 0) {
    fail("%s: cannot open as HDF5", a < 0 ? argv[0] : argv[1]);
    if (a >= 0) H5Fclose(a);
    return 1;
  }
  cmp_ctx c = {.b = b, .fa = argv[0], .fb = argv[1], .rtol = rtol, .skip = argc == 4 ? argv[3] : NULL};
  hsize_t idx = 0;
  herr_t st = H5Literate(a, H5_INDEX_NAME, H5_ITER_INC, &idx, cmp_one, &c);
  H5Fclose(a);
  H5Fclose(b);
  if (st < 0) {
    fail("%s: cannot list the root group", argv[0]);
    return 1;
  }
  if (c.seen == 0) {
    fail("%s: no float dataset at the root to compare", argv[0]);
    return 1;
  }
  printf("%d dataset%s compared, %d failed (rtol %g)\n", c.seen, c.seen == 1 ? "" : "s", c.bad,
         rtol);
  return c.bad ? 1 : 0;
}

/* Shapes, the mean/min/max of x (times scale), the label histogram. */
static int cmd_stats(int argc, char **argv) {
  if (argc != 1) {
    fail("usage: mkdata stats FILE.h5");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    fail("%s: cannot open as HDF5", argv[0]);
    return 1;
  }
  int rx, ry, rc = 1;
  hsize_t dx[16], dy[16];
  size_t nx, ny;
  float *x = read_float(f, argv[0], "x", &rx, dx, &nx);
  float *y = x ? read_float(f, argv[0], "y", &ry, dy, &ny) : NULL;
  double scale = 1.0;
  int nc = 0;
  if (!x || !y) goto out;
  if (H5Aexists_by_name(f, "x", "scale", H5P_DEFAULT) > 0) {
    hid_t at = H5Aopen_by_name(f, "x", "scale", H5P_DEFAULT, H5P_DEFAULT);
    if (at < 0 || H5Aread(at, H5T_NATIVE_DOUBLE, &scale) < 0) scale = NAN;
    if (at >= 0) H5Aclose(at);
  }
  if (H5Aexists_by_name(f, "y", "nclasses", H5P_DEFAULT) > 0) {
    hid_t at = H5Aopen_by_name(f, "y", "nclasses", H5P_DEFAULT, H5P_DEFAULT);
    if (at < 0 || H5Aread(at, H5T_NATIVE_INT, &nc) < 0) nc = -1;
    if (at >= 0) H5Aclose(at);
  }
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < nx; i++) {
    double v = x[i] * scale;
    sum += v;
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
  printf("x: rank %d, %zu values, scale %.9g, mean %.6f min %.6f max %.6f\n", rx, nx, scale,
         nx ? sum / (double)nx : 0.0, lo, hi);
  printf("y: %zu labels, nclasses %d, histogram:", ny, nc);
  long hist[256] = {0}, outside = 0;
  for (size_t i = 0; i < ny; i++) {
    if (y[i] >= 0 && y[i] < 256 && (int)y[i] < (nc > 0 ? nc : 256))
      hist[(int)y[i]]++;
    else
      outside++;
  }
  for (int k = 0; k < (nc > 0 && nc <= 256 ? nc : 0); k++) printf(" %ld", hist[k]);
  printf("; outside: %ld\n", outside);
  rc = 0;
out:
  free(x);
  free(y);
  H5Fclose(f);
  return rc;
}

/* ------------------------------------------------------- outputs files */

/* Reads a whole dataset converted to mtype (esize bytes per value); the
 * first dimension into *rows and the product of the others into *width. */
static void *read_col(hid_t f, const char *file, const char *name, hid_t mtype, size_t esize,
                      hsize_t *rows, hsize_t *width) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  hid_t sp = d < 0 ? -1 : H5Dget_space(d);
  hsize_t dims[16];
  int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  void *buf = NULL;
  if (rank < 1 || rank > 16 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
    fail("%s: cannot read dataset /%s", file, name);
    goto out;
  }
  *rows = dims[0];
  *width = 1;
  for (int i = 1; i < rank; i++) *width *= dims[i];
  size_t n = (size_t)(*rows * *width);
  buf = malloc((n ? n : 1) * esize);
  if (!buf || (n && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)) {
    fail("%s: cannot read dataset /%s", file, name);
    free(buf);
    buf = NULL;
  }
out:
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  return buf;
}

typedef struct {
  hid_t f;
  hsize_t rows, C; /* C: logits per row, 0 without /logits                */
  long long *index;
  int *label, *pred;
  double *loss, *logits; /* float32 or float64 in the file */
} outfile;

static void out_close(outfile *o) {
  free(o->index);
  free(o->label);
  free(o->pred);
  free(o->loss);
  free(o->logits);
  if (o->f >= 0) H5Fclose(o->f);
}

/* Opens an outputs file: every column there, each with the same rows, and
 * the index strictly ascending (data-set order, each sample once). */
static int out_open(const char *file, outfile *o) {
  memset(o, 0, sizeof(*o));
  o->f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (o->f < 0) {
    fail("%s: cannot open as HDF5", file);
    return -1;
  }
  hsize_t r[5], w[5];
  o->index = read_col(o->f, file, "index", H5T_NATIVE_LLONG, sizeof(long long), &r[0], &w[0]);
  o->label = o->index ? read_col(o->f, file, "label", H5T_NATIVE_INT, sizeof(int), &r[1], &w[1]) : NULL;
  o->pred = o->label ? read_col(o->f, file, "pred", H5T_NATIVE_INT, sizeof(int), &r[2], &w[2]) : NULL;
  o->loss = o->pred ? read_col(o->f, file, "loss", H5T_NATIVE_DOUBLE, sizeof(double), &r[3], &w[3]) : NULL;
  if (!o->loss) return -1;
  o->rows = r[0];
  if (H5Lexists(o->f, "logits", H5P_DEFAULT) > 0) {
    o->logits = read_col(o->f, file, "logits", H5T_NATIVE_DOUBLE, sizeof(double), &r[4], &o->C);
    if (!o->logits) return -1;
    if (r[4] != o->rows) {
      fail("%s: /logits has %llu rows, /index %llu", file, (unsigned long long)r[4],
           (unsigned long long)o->rows);
      return -1;
    }
  }
  for (int k = 1; k < 4; k++)
    if (r[k] != o->rows || w[k] != 1) {
      fail("%s: the columns have different lengths", file);
      return -1;
    }
  for (hsize_t i = 1; i < o->rows; i++)
    if (o->index[i] <= o->index[i - 1]) {
      fail("%s: row %llu has index %lld after %lld (not ascending, or twice)", file,
           (unsigned long long)i, o->index[i], o->index[i - 1]);
      return -1;
    }
  return 0;
}

/* outstats: rows, index range, mean loss, accuracy (pred == label, label
 * >= 0), and with logits that pred is their argmax and loss their
 * cross-entropy. With N: the index must be exactly 0..N-1. */
static int cmd_outstats(int argc, char **argv) {
  long n = -1;
  if ((argc != 1 && argc != 2) || (argc == 2 && parse_long(argv[1], 0, LONG_MAX, "N", &n))) {
    fail("usage: mkdata outstats FILE.h5 [N]");
    return 2;
  }
  outfile o;
  if (out_open(argv[0], &o)) {
    out_close(&o);
    return 1;
  }
  int rc = 0;
  if (n >= 0 && (o.rows != (hsize_t)n || (n > 0 && (o.index[0] != 0 || o.index[n - 1] != n - 1)))) {
    fail("%s: rows are not exactly the samples 0..%ld", argv[0], n - 1);
    rc = 1;
  }
  double sum = 0, hits = 0, labelled = 0, worst = 0;
  long bad_pred = 0;
  for (hsize_t i = 0; i < o.rows; i++) {
    sum += o.loss[i];
    if (o.label[i] >= 0) {
      labelled++;
      hits += o.pred[i] == o.label[i];
    }
    if (!o.logits) continue;
    const double *l = o.logits + i * o.C;
    int arg = 0;
    for (hsize_t j = 1; j < o.C; j++)
      if (l[j] > l[arg]) arg = (int)j;
    bad_pred += arg != o.pred[i];
    double z = 0;
    for (hsize_t j = 0; j < o.C; j++) z += exp((double)l[j] - l[arg]);
    int y = o.label[i];
    if (y >= 0 && (hsize_t)y < o.C) {
      double ce = log(z) - ((double)l[y] - l[arg]);
      double e = fabs(ce - o.loss[i]) / fmax(1.0, fabs(ce));
      if (!(e <= worst)) worst = e;
    }
  }
  printf("rows %llu index %lld..%lld mean_loss %.9g accuracy %.9g", (unsigned long long)o.rows,
         o.rows ? o.index[0] : -1, o.rows ? o.index[o.rows - 1] : -1,
         o.rows ? sum / (double)o.rows : 0.0, labelled > 0 ? hits / labelled : -1.0);
  if (o.logits) printf(" logits %llu argmax_mismatch %ld loss_err %.3g", (unsigned long long)o.C,
                       bad_pred, worst);
  printf("\n");
  if (o.logits && (bad_pred || !(worst <= 1e-5))) {
    fail("%s: pred or loss disagree with the logits", argv[0]);
    rc = 1;
  }
  out_close(&o);
  return rc;
}

/* rows: every row of B equals the row of A with the same index (integers
 * exactly, floats to RTOL of the column's largest magnitude in A); B holds
 * the same indices as A, or with "subset" some of them. */
static int cmd_rows(int argc, char **argv) {
  char *end = NULL;
  double rtol = argc >= 3 ? strtod(argv[2], &end) : -1;
  if (argc < 3 || argc > 4 || *end || !(rtol >= 0) || (argc == 4 && strcmp(argv[3], "subset"))) {
    fail("usage: mkdata rows A.h5 B.h5 RTOL [subset]");
    return 2;
  }
  int subset = argc == 4, rc = 1;
  outfile a, b;
  memset(&b, 0, sizeof(b));
  b.f = -1;
  if (out_open(argv[0], &a) || out_open(argv[1], &b)) goto done;
  if (a.C != b.C) {
    fail("logits: %llu per row in %s, %llu in %s", (unsigned long long)a.C, argv[0],
         (unsigned long long)b.C, argv[1]);
    goto done;
  }
  if (!subset && a.rows != b.rows) {
    fail("%llu rows in %s, %llu in %s", (unsigned long long)a.rows, argv[0],
         (unsigned long long)b.rows, argv[1]);
    goto done;
  }
  double amax_loss = 0, amax_logit = 0, dloss = 0, dlogit = 0;
  for (hsize_t i = 0; i < a.rows; i++) amax_loss = fmax(amax_loss, fabs(a.loss[i]));
  for (hsize_t i = 0; i < a.rows * a.C; i++) amax_logit = fmax(amax_logit, fabs(a.logits[i]));
  long bad_int = 0;
  hsize_t i = 0;
  for (hsize_t j = 0; j < b.rows; j++) {
    while (i < a.rows && a.index[i] < b.index[j]) i++;
    if (i == a.rows || a.index[i] != b.index[j]) {
      fail("%s: sample %lld (row %llu) is not in %s", argv[1], b.index[j], (unsigned long long)j,
           argv[0]);
      goto done;
    }
    bad_int += a.label[i] != b.label[j] || a.pred[i] != b.pred[j];
    double d = fabs((double)a.loss[i] - b.loss[j]);
    if (!(d <= dloss)) dloss = d;
    for (hsize_t k = 0; k < a.C; k++) {
      d = fabs((double)a.logits[i * a.C + k] - b.logits[j * b.C + k]);
      if (!(d <= dlogit)) dlogit = d;
    }
  }
  double el = dloss / fmax(amax_loss, 1e-30), eg = a.C ? dlogit / fmax(amax_logit, 1e-30) : 0;
  printf("%llu rows of %s matched in %s: label/pred mismatches %ld, loss rel_err %.3e, logits "
         "rel_err %.3e (rtol %g)\n", (unsigned long long)b.rows, argv[1], argv[0], bad_int, el, eg,
         rtol);
  rc = bad_int == 0 && el <= rtol && eg <= rtol ? 0 : 1;
done:
  out_close(&a);
  out_close(&b);
  return rc;
}

/* types: each root dataset's type (float32, float64, int32, ...); with
 * EXPECT, exit 1 unless every float dataset is of that type and there is
 * one at least. */
typedef struct {
  const char *want;
  int floats, other;
} types_ctx;

static herr_t type_one(hid_t f, const char *name, const H5L_info_t *info, void *op) {
  (void)info;
  types_ctx *c = op;
  size_t sz;
  H5T_class_t k = dset_class(f, name, &sz);
  if (k == H5T_NO_CLASS) return 0;
  char ty[32];
  snprintf(ty, sizeof(ty), "%s%zu", k == H5T_FLOAT ? "float" : k == H5T_INTEGER ? "int" : "other",
           8 * sz);
  printf("%-40s %s\n", name, ty);
  if (k != H5T_FLOAT) return 0;
  c->floats++;
  c->other += c->want && strcmp(ty, c->want);
  return 0;
}

static int cmd_types(int argc, char **argv) {
  if (argc != 1 && argc != 2) {
    fail("usage: mkdata types FILE.h5 [float32|float64]");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    fail("%s: cannot open as HDF5", argv[0]);
    return 1;
  }
  types_ctx c = {argc == 2 ? argv[1] : NULL, 0, 0};
  hsize_t idx = 0;
  herr_t st = H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, type_one, &c);
  H5Fclose(f);
  if (st < 0) {
    fail("%s: cannot list the root group", argv[0]);
    return 1;
  }
  if (c.want && (c.other || !c.floats)) {
    fail("%s: %d of %d float datasets are not %s", argv[0], c.other, c.floats, c.want);
    return 1;
  }
  return 0;
}

/* flip: damages one byte of a dataset's data where it lies in the file
 * (a checkpoint's tensor: the checksum must catch it). */
static int cmd_flip(int argc, char **argv) {
  long byte = 0;
  if ((argc != 2 && argc != 3) || (argc == 3 && parse_long(argv[2], 0, LONG_MAX, "BYTE", &byte))) {
    fail("usage: mkdata flip FILE.h5 DATASET [BYTE]");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = f < 0 ? -1 : H5Dopen2(f, argv[1], H5P_DEFAULT);
  haddr_t off = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
  hsize_t size = d < 0 ? 0 : H5Dget_storage_size(d);
  if (d >= 0) H5Dclose(d);
  if (f >= 0) H5Fclose(f);
  if (off == HADDR_UNDEF || (hsize_t)byte >= size) {
    fail("%s: %s is not a contiguous dataset with a byte %ld", argv[0], argv[1], byte);
    return 1;
  }
  int fd = open(argv[0], O_RDWR);
  unsigned char c;
  const off_t at = (off_t)off + (off_t)byte;
  int ok = fd >= 0 && pread(fd, &c, 1, at) == 1;
  c ^= 1;
  ok = ok && pwrite(fd, &c, 1, at) == 1;
  if (fd >= 0 && close(fd) != 0) ok = 0;
  if (!ok) {
    fail("%s: cannot rewrite byte %lld", argv[0], (long long)at);
    return 1;
  }
  printf("%s: flipped a bit of byte %ld of %s (file offset %lld)\n", argv[0], byte, argv[1],
         (long long)at);
  return 0;
}

/* unattr: removes a root attribute (a checkpoint as an older mpitrain wrote
 * it: no run_id). */
static int cmd_unattr(int argc, char **argv) {
  if (argc != 2) {
    fail("usage: mkdata unattr FILE.h5 NAME");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDWR, H5P_DEFAULT);
  int ok = f >= 0 && H5Adelete(f, argv[1]) >= 0;
  if (f >= 0 && H5Fclose(f) < 0) ok = 0;
  if (!ok) {
    fail("%s: cannot remove the attribute %s", argv[0], argv[1]);
    return 1;
  }
  return 0;
}

/* unlink: removes a root dataset (the file keeps its size: HDF5 does not
 * reclaim it, which does not matter to a reader). */
static int cmd_unlink(int argc, char **argv) {
  if (argc != 2) {
    fail("usage: mkdata unlink FILE.h5 NAME");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDWR, H5P_DEFAULT);
  int ok = f >= 0 && H5Ldelete(f, argv[1], H5P_DEFAULT) >= 0;
  if (f >= 0 && H5Fclose(f) < 0) ok = 0;
  if (!ok) {
    fail("%s: cannot remove the dataset %s", argv[0], argv[1]);
    return 1;
  }
  return 0;
}

/* outindex: the sample indices of an outputs file, one a line. */
static int cmd_outindex(int argc, char **argv) {
  if (argc != 1) {
    fail("usage: mkdata outindex FILE.h5");
    return 2;
  }
  outfile o;
  int rc = out_open(argv[0], &o) ? 1 : 0;
  for (hsize_t i = 0; !rc && i < o.rows; i++) printf("%lld\n", o.index[i]);
  out_close(&o);
  return rc;
}

int main(int argc, char **argv) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if (argc >= 2 && !strcmp(argv[1], "synth")) return cmd_synth(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "bad")) return cmd_bad(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "regress")) return cmd_regress(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "compare")) return cmd_compare(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "stats")) return cmd_stats(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "outstats")) return cmd_outstats(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "rows")) return cmd_rows(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "outindex")) return cmd_outindex(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "types")) return cmd_types(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "flip")) return cmd_flip(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "unattr")) return cmd_unattr(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "unlink")) return cmd_unlink(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: mkdata synth OUT.h5 N D C SEED [uint8|image]\n"
          "       mkdata regress OUT.h5 N D K SEED\n"
          "       mkdata bad KIND OUT.h5   (KIND: nox noy xdtype ydtype xrank nmismatch\n"
          "                                 label_high label_neg empty garbage noclasses noscale\n"
          "                                 hugeclasses)\n"
          "       mkdata compare A.h5 B.h5 RTOL [SKIP]\n"
          "       mkdata stats FILE.h5\n"
          "       mkdata outstats FILE.h5 [N]\n"
          "       mkdata rows A.h5 B.h5 RTOL [subset]\n"
          "       mkdata outindex FILE.h5\n"
          "       mkdata types FILE.h5 [float32|float64]\n"
          "       mkdata flip FILE.h5 DATASET [BYTE]\n"
          "       mkdata unattr FILE.h5 NAME\n"
          "       mkdata unlink FILE.h5 NAME\n");
  return 2;
}
