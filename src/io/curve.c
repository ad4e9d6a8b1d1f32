/* The learning curve, as CSV (easy to plot) and HDF5 (easy to load). */
#include "io/io.h"
#include "io/space.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

static int write_csv(const char *path, const mt_curve_row *r, int n, char names[][MT_PATH_MAX],
                     char mnames[][MT_METRIC_NAME_MAX], int nm) {
  char tmp[MT_PATH_MAX + 64];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  MT_CHECK(f, MT_ERR_FILE, "cannot write %s: %s", tmp, strerror(errno));
  fprintf(f, "epoch,step,train_loss,lr,train_samples_per_s,seconds,val_set,val_file,val_loss,val_acc");
  for (int k = 0; k < nm; k++) fprintf(f, ",metric.%s", mnames[k]);
  fputc('\n', f);
  for (int i = 0; i < n; i++) {
    fprintf(f, "%d,%ld,%.9g,%.9g,%.6g,%.6g,%d,%s,%.9g,%.9g", r[i].epoch, r[i].step,
            r[i].train_loss, r[i].lr, r[i].samples_per_s, r[i].seconds, r[i].set,
            r[i].set >= 0 ? names[r[i].set] : "", r[i].val_loss, r[i].val_acc);
    /* a row from before the model reported (a restart by another model): empty */
    for (int k = 0; k < nm; k++)
      if (isnan(r[i].metric[k])) fputc(',', f);
      else fprintf(f, ",%.17g", r[i].metric[k]);
    fputc('\n', f);
  }
  int bad = fflush(f) != 0 || ferror(f), e = errno;
  if (fclose(f) != 0 && !bad) bad = 1, e = errno;
  if (bad) {
    unlink(tmp);
    return MT_WRITE_FAILED("writing", tmp, e);
  }
  MT_CHECK(rename(tmp, path) == 0, MT_ERR_FILE, "cannot rename %s: %s", tmp, strerror(errno));
  return 0;
}

static int write_h5(const char *path, const mt_curve_row *r, int n,
                    char mnames[][MT_METRIC_NAME_MAX], int nm) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(mt_curve_row));
  H5Tinsert(t, "epoch", HOFFSET(mt_curve_row, epoch), H5T_NATIVE_INT);
  H5Tinsert(t, "step", HOFFSET(mt_curve_row, step), H5T_NATIVE_LONG);
  H5Tinsert(t, "train_loss", HOFFSET(mt_curve_row, train_loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "lr", HOFFSET(mt_curve_row, lr), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "train_samples_per_s", HOFFSET(mt_curve_row, samples_per_s), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "seconds", HOFFSET(mt_curve_row, seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "val_set", HOFFSET(mt_curve_row, set), H5T_NATIVE_INT);
  H5Tinsert(t, "val_loss", HOFFSET(mt_curve_row, val_loss), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "val_acc", HOFFSET(mt_curve_row, val_acc), H5T_NATIVE_DOUBLE);
  for (int k = 0; k < nm; k++) { /* the same field names as the CSV's columns */
    char field[MT_METRIC_NAME_MAX + 8];
    snprintf(field, sizeof(field), "metric.%s", mnames[k]);
    H5Tinsert(t, field, HOFFSET(mt_curve_row, metric) + (size_t)k * sizeof(double),
              H5T_NATIVE_DOUBLE);
  }
  char tmp[MT_PATH_MAX + 64];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  /* room first (io/space.h): the rows and the file's headers */
  const uint64_t bytes = (uint64_t)n * sizeof(mt_curve_row) + 65536;
  int err = mt_space_reserve(tmp, bytes);
  hid_t f = err ? H5I_INVALID_HID : H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f >= 0) err = mt_space_reserve(tmp, bytes);
  hsize_t dim = (hsize_t)n;
  hid_t sp = H5Screate_simple(1, &dim, NULL);
  hid_t ds = f < 0 || err ? -1
                         : H5Dcreate2(f, "curve", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = ds < 0 ? -1 : (n ? H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, r) : 0);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(sp);
  H5Tclose(t);
  if (f >= 0 && H5Fclose(f) < 0) st = -1;
  if (err || f < 0 || st < 0) {
    unlink(tmp);
    return err ? err : MT_ERR(MT_ERR_FILE, "writing %s failed", path);
  }
  mt_space_release(tmp);
  MT_CHECK(rename(tmp, path) == 0, MT_ERR_FILE, "cannot rename %s: %s", tmp, strerror(errno));
  return 0;
}

int mt_curve_write(const char *dir, const mt_curve_row *rows, int nrows,
                   char val_names[][MT_PATH_MAX], int nval,
                   char metric_names[][MT_METRIC_NAME_MAX], int nmetric) {
  (void)nval;
  char path[MT_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/curve.csv", dir);
  MT_CALL(write_csv(path, rows, nrows, val_names, metric_names, nmetric));
  snprintf(path, sizeof(path), "%s/curve.h5", dir);
  mt_h5_lock();
  int err = write_h5(path, rows, nrows, metric_names, nmetric);
  mt_h5_unlock();
  return err;
}
