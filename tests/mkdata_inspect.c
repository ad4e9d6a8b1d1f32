/* mkdata compare, stats and types: what any HDF5 file's root datasets
 * hold (values against another file, shapes and label histogram, types). */
#include "mkdata.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    mk_fail("%s: cannot read dataset /%s", file, name);
    goto out;
  }
  *n = 1;
  for (int i = 0; i < *rank; i++) *n *= dims[i];
  buf = malloc((*n ? *n : 1) * esize);
  if (!buf || (*n && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)) {
    mk_fail("%s: cannot read dataset /%s as %s", file, name,
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

int cmd_compare(int argc, char **argv) {
  char *end;
  double rtol = argc == 3 || argc == 4 ? strtod(argv[2], &end) : -1;
  if ((argc != 3 && argc != 4) || *end || !(rtol >= 0)) {
    mk_fail("usage: mkdata compare A.h5 B.h5 RTOL [SKIP] (RTOL >= 0)");
    return 2;
  }
  hid_t a = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t b = a < 0 ? -1 : H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (a < 0 || b < 0) {
    mk_fail("%s: cannot open as HDF5", a < 0 ? argv[0] : argv[1]);
    if (a >= 0) H5Fclose(a);
    return 1;
  }
  cmp_ctx c = {.b = b, .fa = argv[0], .fb = argv[1], .rtol = rtol, .skip = argc == 4 ? argv[3] : NULL};
  hsize_t idx = 0;
  herr_t st = H5Literate(a, H5_INDEX_NAME, H5_ITER_INC, &idx, cmp_one, &c);
  H5Fclose(a);
  H5Fclose(b);
  if (st < 0) {
    mk_fail("%s: cannot list the root group", argv[0]);
    return 1;
  }
  if (c.seen == 0) {
    mk_fail("%s: no float dataset at the root to compare", argv[0]);
    return 1;
  }
  printf("%d dataset%s compared, %d failed (rtol %g)\n", c.seen, c.seen == 1 ? "" : "s", c.bad,
         rtol);
  return c.bad ? 1 : 0;
}

/* Shapes, the mean/min/max of x (times scale), the label histogram. */
int cmd_stats(int argc, char **argv) {
  if (argc != 1) {
    mk_fail("usage: mkdata stats FILE.h5");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    mk_fail("%s: cannot open as HDF5", argv[0]);
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

int cmd_types(int argc, char **argv) {
  if (argc != 1 && argc != 2) {
    mk_fail("usage: mkdata types FILE.h5 [float32|float64]");
    return 2;
  }
  hid_t f = H5Fopen(argv[0], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    mk_fail("%s: cannot open as HDF5", argv[0]);
    return 1;
  }
  types_ctx c = {argc == 2 ? argv[1] : NULL, 0, 0};
  hsize_t idx = 0;
  herr_t st = H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, type_one, &c);
  H5Fclose(f);
  if (st < 0) {
    mk_fail("%s: cannot list the root group", argv[0]);
    return 1;
  }
  if (c.want && (c.other || !c.floats)) {
    mk_fail("%s: %d of %d float datasets are not %s", argv[0], c.other, c.floats, c.want);
    return 1;
  }
  return 0;
}
