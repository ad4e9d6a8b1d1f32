/* Small HDF5 helpers and the process-wide HDF5 lock. */
#include "io/io.h"
#include "io/modelfile.h"
#include "io/space.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t h5mu_ = PTHREAD_MUTEX_INITIALIZER;
void mt_h5_lock(void) { pthread_mutex_lock(&h5mu_); }
void mt_h5_unlock(void) { pthread_mutex_unlock(&h5mu_); }
void mt_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

int mt_h5_write_floats(hid_t loc, const char *name, int ndim, const int64_t *shape,
                       const float *data) {
  return mt_h5_write_tensor(loc, name, ndim, shape, data, MT_FP32);
}

int mt_h5_write_tensor(hid_t loc, const char *name, int ndim, const int64_t *shape,
                       const void *data, mt_dtype dtype) {
  hsize_t dims[MT_MAX_DIMS + 1];
  for (int i = 0; i < ndim; i++) dims[i] = (hsize_t)shape[i];
  hid_t sp = H5Screate_simple(ndim, dims, NULL);
  if (sp < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate_simple for %s failed", name);
  const int f64 = dtype == MT_FP64;
  hid_t ds = H5Dcreate2(loc, name, f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                        H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = ds < 0 ? -1
                     : H5Dwrite(ds, f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                                H5P_DEFAULT, data);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(sp);
  if (st < 0) return MT_ERR(MT_ERR_HDF5, "writing dataset %s failed", name);
  return 0;
}

int mt_h5_attr_double(hid_t loc, const char *name, double v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  if (st < 0) return MT_ERR(MT_ERR_HDF5, "writing attribute %s failed", name);
  return 0;
}

int mt_h5_attr_string(hid_t loc, const char *name, const char *v) {
  hid_t ty = H5Tcopy(H5T_C_S1);
  H5Tset_size(ty, strlen(v) + 1);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(loc, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t st = a < 0 ? -1 : H5Awrite(a, ty, v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(ty);
  if (st < 0) return MT_ERR(MT_ERR_HDF5, "writing attribute %s failed", name);
  return 0;
}

/* The first non-finite element of the model's tensors: 1 and *name, *at
 * and *what set; or 0. */
static int model_nonfinite(const mt_model *m, const void *params, const char **name, size_t *at,
                           const char **what) {
  const size_t esz = m->dtype == MT_FP64 ? sizeof(double) : sizeof(float);
  const char *buf = m->dtype == MT_FP64 ? (const char *)m->buf64 : (const char *)m->buf;
  for (int k = 0; k < 2; k++) {
    const mt_param_table *t = k ? &m->buffers : &m->params;
    const char *base = k ? buf : params;
    for (int i = 0; base && i < t->n; i++) {
      const char *x = base + t->p[i].offset * esz;
      size_t j = mt_first_nonfinite(m->dtype, x, t->p[i].numel);
      if (j == t->p[i].numel) continue;
      *name = t->p[i].name;
      *at = j;
      *what = mt_nonfinite_name(m->dtype, x, j);
      return 1;
    }
  }
  return 0;
}

static int save_params_locked(const char *tmp, const mt_model *m, const void *params) {
  const mt_param_table *t = &m->params, *b = &m->buffers;
  const size_t esz = m->dtype == MT_FP64 ? sizeof(double) : sizeof(float);
  /* the file's bytes at most: the tensors and their headers (space.h) */
  const uint64_t bytes = (uint64_t)(t->total + b->total) * esz + 65536 +
                         4096 * (uint64_t)(t->n + b->n);
  MT_CALL(mt_space_reserve(tmp, bytes));
  hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return MT_ERR(MT_ERR_FILE, "cannot create %s", tmp);
  int err = mt_space_reserve(tmp, bytes);
  const char *p = params, *buf = m->dtype == MT_FP64 ? (const char *)m->buf64 : (const char *)m->buf;
  for (int i = 0; i < t->n && !err; i++)
    err = mt_h5_write_tensor(f, t->p[i].name, t->p[i].ndim, t->p[i].shape,
                             p + t->p[i].offset * esz, m->dtype);
  for (int i = 0; i < b->n && !err; i++)
    err = mt_h5_write_tensor(f, b->p[i].name, b->p[i].ndim, b->p[i].shape,
                             buf + b->p[i].offset * esz, m->dtype);
  if (!err) err = mt_h5_attr_string(f, "format", "mpitrain-params-1");
  if (!err) err = mt_model_desc_write(f, m); /* what the file holds (io/modelfile.h) */
  if (H5Fclose(f) < 0 && !err) err = MT_ERR(MT_ERR_FILE, "closing %s failed", tmp);
  if (!err) mt_space_release(tmp);
  return err;
}

int mt_h5_save_model(const char *path, const mt_model *m, const void *params) {
  const char *name = "", *what = "";
  size_t at = 0;
  /* a model file of NaN would be picked up by -init_from or a user as if
   * it were trained */
  if (model_nonfinite(m, params, &name, &at, &what))
    return MT_ERR(MT_ERR_NUMERIC, "%s not written: tensor %s holds %s (element %zu)", path, name,
                  what, at);
  char tmp[MT_PATH_MAX + 64];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  mt_h5_lock();
  int err = save_params_locked(tmp, m, params);
  mt_h5_unlock();
  if (err) {
    unlink(tmp);
    if (err == MT_ERR_WRITE) return err; /* names the file, the bytes, errno */
    char why[1024];
    snprintf(why, sizeof(why), "%s", mt_error_message());
    mt_error_clear();
    return MT_ERR(err, "writing %s failed (%s); %s is as it was", path, why, path);
  }
  if (rename(tmp, path) != 0) {
    const int e = errno;
    unlink(tmp);
    return MT_WRITE_FAILED("cannot rename the finished file to", path, e);
  }
  return 0;
}

int mt_replace_open(const char *path, char *tmp, size_t len, FILE **f) {
  *f = NULL;
  const int w = snprintf(tmp, len, "%s.tmp", path);
  MT_CHECK(w > 0 && (size_t)w < len, MT_ERR_FILE, "%s: path too long", path);
  *f = fopen(tmp, "w");
  MT_CHECK(*f, MT_ERR_FILE, "cannot write %s: %s", tmp, strerror(errno));
  return 0;
}

int mt_replace_commit(FILE *f, const char *tmp, const char *path) {
  int bad = fflush(f) != 0 || ferror(f), e = errno;
  if (fclose(f) != 0 && !bad) bad = 1, e = errno;
  if (bad) {
    unlink(tmp);
    return MT_WRITE_FAILED("writing", tmp, e);
  }
  if (rename(tmp, path) != 0) {
    e = errno;
    unlink(tmp);
    return MT_ERR(MT_ERR_FILE, "cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  return 0;
}

int mt_mkdir_p(const char *dir) {
  char buf[MT_PATH_MAX];
  snprintf(buf, sizeof(buf), "%s", dir);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return MT_ERR(MT_ERR_FILE, "option -output_dir: cannot create %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  struct stat st;
  MT_CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode), MT_ERR_FILE,
           "option -output_dir: %s is not a directory", dir);
  return 0;
}

static int load_params_locked(hid_t f, const char *path, const char *option,
                              const mt_param_table *t, void *params, mt_dtype dtype) {
  const size_t esz = dtype == MT_FP64 ? sizeof(double) : sizeof(float);
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    if (H5Lexists(f, q->name, H5P_DEFAULT) <= 0)
      return MT_ERR(MT_ERR_DATA, "option %s: %s has no tensor %s", option, path, q->name);
    hid_t d = H5Dopen2(f, q->name, H5P_DEFAULT);
    if (d < 0) return MT_ERR(MT_ERR_DATA, "option %s: %s: %s is not a dataset", option, path, q->name);
    hid_t sp = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[8] = {0};
    if (nd >= 1 && nd <= 8) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    int same = nd == q->ndim;
    for (int k = 0; same && k < nd; k++) same = (int64_t)dims[k] == q->shape[k];
    if (!same) {
      char have[128] = "", want[128] = "";
      for (int k = 0; k < nd && k < 8; k++)
        snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%llu", k ? "," : "",
                 (unsigned long long)dims[k]);
      for (int k = 0; k < q->ndim; k++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld", k ? "," : "",
                 (long long)q->shape[k]);
      H5Dclose(d);
      return MT_ERR(MT_ERR_DATA, "option %s: %s: tensor %s is (%s), the model's is (%s)",
                    option, path, q->name, have, want);
    }
    /* HDF5 converts: a float64 file into a float run rounds, float32 into
     * a double run widens exactly */
    herr_t st = H5Dread(d, dtype == MT_FP64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, H5S_ALL,
                        H5S_ALL, H5P_DEFAULT, (char *)params + q->offset * esz);
    H5Dclose(d);
    if (st < 0) return MT_ERR(MT_ERR_DATA, "option %s: %s: cannot read %s", option, path, q->name);
  }
  return 0;
}

int mt_h5_load_model(const char *path, const char *option, mt_model *m, void *params) {
  MT_CHECK(access(path, R_OK) == 0, MT_ERR_FILE, "option %s: cannot read %s: %s", option, path,
           strerror(errno));
  mt_h5_lock();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  int err = f < 0 ? MT_ERR(MT_ERR_FILE, "option %s: cannot open %s as HDF5 (truncated, "
                           "damaged or not an HDF5 file)", option, path)
                  : load_params_locked(f, path, option, &m->params, params, m->dtype);
  if (!err && m->buffers.n)
    err = load_params_locked(f, path, option, &m->buffers,
                             m->dtype == MT_FP64 ? (void *)m->buf64 : (void *)m->buf, m->dtype);
  if (f >= 0) H5Fclose(f);
  mt_h5_unlock();
  return err;
}
