/* mkdata outstats, rows and outindex: the outputs files of -outputs
 * (src/io/outputs.h), read whole and checked for one row per sample in
 * ascending index order. */
#include "mkdata.h"

#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    mk_fail("%s: cannot read dataset /%s", file, name);
    goto out;
  }
  *rows = dims[0];
  *width = 1;
  for (int i = 1; i < rank; i++) *width *= dims[i];
  size_t n = (size_t)(*rows * *width);
  buf = malloc((n ? n : 1) * esize);
  if (!buf || (n && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)) {
    mk_fail("%s: cannot read dataset /%s", file, name);
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
    mk_fail("%s: cannot open as HDF5", file);
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
      mk_fail("%s: /logits has %llu rows, /index %llu", file, (unsigned long long)r[4],
           (unsigned long long)o->rows);
      return -1;
    }
  }
  for (int k = 1; k < 4; k++)
    if (r[k] != o->rows || w[k] != 1) {
      mk_fail("%s: the columns have different lengths", file);
      return -1;
    }
  for (hsize_t i = 1; i < o->rows; i++)
    if (o->index[i] <= o->index[i - 1]) {
      mk_fail("%s: row %llu has index %lld after %lld (not ascending, or twice)", file,
           (unsigned long long)i, o->index[i], o->index[i - 1]);
      return -1;
    }
  return 0;
}

/* outstats: rows, index range, mean loss, accuracy (pred == label, label
 * >= 0), and with logits that pred is their argmax and loss their
 * cross-entropy. With N: the index must be exactly 0..N-1. */
int cmd_outstats(int argc, char **argv) {
  long n = -1;
  if ((argc != 1 && argc != 2) || (argc == 2 && mk_parse_long(argv[1], 0, LONG_MAX, "N", &n))) {
    mk_fail("usage: mkdata outstats FILE.h5 [N]");
    return 2;
  }
  outfile o;
  if (out_open(argv[0], &o)) {
    out_close(&o);
    return 1;
  }
  int rc = 0;
  if (n >= 0 && (o.rows != (hsize_t)n || (n > 0 && (o.index[0] != 0 || o.index[n - 1] != n - 1)))) {
    mk_fail("%s: rows are not exactly the samples 0..%ld", argv[0], n - 1);
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
    mk_fail("%s: pred or loss disagree with the logits", argv[0]);
    rc = 1;
  }
  out_close(&o);
  return rc;
}

/* rows: every row of B equals the row of A with the same index (integers
 * exactly, floats to RTOL of the column's largest magnitude in A); B holds
 * the same indices as A, or with "subset" some of them. */
int cmd_rows(int argc, char **argv) {
  char *end = NULL;
  double rtol = argc >= 3 ? strtod(argv[2], &end) : -1;
  if (argc < 3 || argc > 4 || *end || !(rtol >= 0) || (argc == 4 && strcmp(argv[3], "subset"))) {
    mk_fail("usage: mkdata rows A.h5 B.h5 RTOL [subset]");
    return 2;
  }
  int subset = argc == 4, rc = 1;
  outfile a, b;
  memset(&b, 0, sizeof(b));
  b.f = -1;
  if (out_open(argv[0], &a) || out_open(argv[1], &b)) goto done;
  if (a.C != b.C) {
    mk_fail("logits: %llu per row in %s, %llu in %s", (unsigned long long)a.C, argv[0],
         (unsigned long long)b.C, argv[1]);
    goto done;
  }
  if (!subset && a.rows != b.rows) {
    mk_fail("%llu rows in %s, %llu in %s", (unsigned long long)a.rows, argv[0],
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
      mk_fail("%s: sample %lld (row %llu) is not in %s", argv[1], b.index[j], (unsigned long long)j,
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

/* outindex: the sample indices of an outputs file, one a line. */
int cmd_outindex(int argc, char **argv) {
  if (argc != 1) {
    mk_fail("usage: mkdata outindex FILE.h5");
    return 2;
  }
  outfile o;
  int rc = out_open(argv[0], &o) ? 1 : 0;
  for (hsize_t i = 0; !rc && i < o.rows; i++) printf("%lld\n", o.index[i]);
  out_close(&o);
  return rc;
}
