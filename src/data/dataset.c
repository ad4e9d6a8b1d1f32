/* HDF5 data sets: validated once at open, then hyperslab reads of only the
 * rows a rank needs. */
#include "data/data.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) return MT_ERR(MT_ERR_DATA, __VA_ARGS__)

/* /tokens (M) integers: windows of T + 1 tokens. */
static int open_tokens(mt_dataset *d, const char *path, const mt_data_spec *like, int window) {
  MT_CHECK(!like || like->tokens, MT_ERR_DATA,
           "data file %s: holds /tokens but the training set holds /x and /y", path);
  MT_CHECK(window >= 1, MT_ERR_OPTION, "data file %s: token windows need -gpt_block >= 1", path);
  d->dx = H5Dopen2(d->file, "tokens", H5P_DEFAULT);
  if (d->dx < 0) FAIL("data file %s: /tokens is not a dataset", path);
  hid_t sp = H5Dget_space(d->dx), ty = H5Dget_type(d->dx);
  int nd = H5Sget_simple_extent_ndims(sp);
  hsize_t m = 0;
  if (nd == 1) H5Sget_simple_extent_dims(sp, &m, NULL);
  H5T_class_t cls = H5Tget_class(ty);
  H5Sclose(sp);
  H5Tclose(ty);
  if (nd != 1) FAIL("data file %s: /tokens has %d dimensions; expected (M)", path, nd);
  if (cls != H5T_INTEGER) FAIL("data file %s: /tokens must hold integers", path);
  int vocab = 256;
  if (H5Aexists(d->dx, "vocab_size") > 0) {
    hid_t a = H5Aopen(d->dx, "vocab_size", H5P_DEFAULT);
    herr_t st = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_INT, &vocab);
    if (a >= 0) H5Aclose(a);
    if (st < 0 || vocab < 2) FAIL("data file %s: attribute vocab_size of /tokens is unreadable or < 2", path);
  }
  if (like) {
    if (vocab > like->nclasses)
      FAIL("data file %s: vocabulary of %d tokens, the training set's has %d", path, vocab,
           like->nclasses);
    vocab = like->nclasses;
  }
  d->window = window;
  d->n = m > 1 ? (int64_t)(m - 1) / window : 0;
  if (d->n < 1)
    FAIL("data file %s: %llu tokens make no window of %d + 1 (lower -gpt_block)", path,
         (unsigned long long)m, window);
  d->spec.ndim = 1;
  d->spec.shape[0] = window;
  d->spec.sample_numel = window;
  d->spec.nclasses = vocab;
  d->spec.tokens = 1;
  return 0;
}

/* /y float (N) or (N,K): regression targets, read whole (like labels). */
static int open_targets(mt_dataset *d, hid_t dy, const char *path, const mt_data_spec *like,
                        int ndy, const hsize_t *ydims) {
  if (ndy != 1 && ndy != 2)
    FAIL("data file %s: float /y has %d dimensions; expected (N) or (N,K) targets", path, ndy);
  if ((int64_t)ydims[0] != d->n)
    FAIL("data file %s: /x has %lld samples but /y has %lld targets", path, (long long)d->n,
         (long long)ydims[0]);
  int k = ndy == 2 ? (int)ydims[1] : 1;
  if (k < 1) FAIL("data file %s: /y has rows of 0 targets", path);
  if (like && like->ntargets != k)
    FAIL("data file %s: /y has %d targets per sample, the training set's has %s%d", path, k,
         like->ntargets ? "" : "class labels, not targets: ", like->ntargets);
  MT_CALL(mt_calloc(&d->targets, (size_t)d->n * (size_t)k, sizeof(float), "targets"));
  if (H5Dread(dy, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->targets) < 0)
    FAIL("data file %s: cannot read /y", path);
  for (int64_t i = 0; i < d->n * k; i++)
    if (!isfinite(d->targets[i]))
      FAIL("data file %s: target %lld of sample %lld is not finite", path, (long long)(i % k),
           (long long)(i / k));
  d->spec.ntargets = k;
  d->spec.nclasses = 0;
  return 0;
}

static int open_local(mt_dataset *d, const char *path, const mt_data_spec *like, int window) {
  snprintf(d->path, sizeof(d->path), "%s", path);
  if (access(path, R_OK) != 0) return MT_ERR(MT_ERR_FILE, "data file %s: cannot be read (no such file or no permission)", path);
  /* Rows are read one hyperslab block each; HDF5's default 64 KiB sieve
   * buffer would read 64 KiB around every 784-byte row. */
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0 || H5Pset_sieve_buf_size(fapl, 0) < 0) {
    if (fapl >= 0) H5Pclose(fapl);
    return MT_ERR(MT_ERR_HDF5, "data file %s: cannot make a file access property list", path);
  }
  d->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (d->file < 0) return MT_ERR(MT_ERR_FILE, "data file %s: not an HDF5 file, or damaged", path);
  if (H5Lexists(d->file, "tokens", H5P_DEFAULT) > 0) return open_tokens(d, path, like, window);
  MT_CHECK(!like || !like->tokens, MT_ERR_DATA,
           "data file %s: holds /x and /y but the training set holds /tokens", path);
  if (H5Lexists(d->file, "x", H5P_DEFAULT) <= 0)
    FAIL("data file %s: has no dataset /x (nor /tokens)", path);
  if (H5Lexists(d->file, "y", H5P_DEFAULT) <= 0) FAIL("data file %s: has no dataset /y (labels)", path);
  d->dx = H5Dopen2(d->file, "x", H5P_DEFAULT);
  if (d->dx < 0) FAIL("data file %s: /x is not a dataset", path);

  /* /x: rank >= 2, float32 or uint8 */
  hid_t sp = H5Dget_space(d->dx), ty = H5Dget_type(d->dx);
  int nd = H5Sget_simple_extent_ndims(sp);
  hsize_t dims[8] = {0};
  if (nd >= 1 && nd <= 8) H5Sget_simple_extent_dims(sp, dims, NULL);
  H5T_class_t cls = H5Tget_class(ty);
  size_t tsize = H5Tget_size(ty);
  H5T_sign_t sign = cls == H5T_INTEGER ? H5Tget_sign(ty) : H5T_SGN_ERROR;
  H5Sclose(sp);
  H5Tclose(ty);
  if (nd < 2 || nd > MT_MAX_DIMS + 1)
    FAIL("data file %s: /x has %d dimensions; expected (N, features...) with 2 to %d", path, nd,
         MT_MAX_DIMS + 1);
  if (cls == H5T_FLOAT && tsize == 4)
    d->x_uint8 = 0;
  else if (cls == H5T_INTEGER && tsize == 1 && sign == H5T_SGN_NONE)
    d->x_uint8 = 1;
  else
    FAIL("data file %s: /x must be float32 or uint8 (found a %s of %zu bytes)", path,
         cls == H5T_FLOAT ? "float" : cls == H5T_INTEGER ? "integer" : "non-numeric type", tsize);
  d->n = (int64_t)dims[0];
  if (d->n < 1) FAIL("data file %s: /x holds no samples", path);
  d->spec.ndim = nd - 1;
  d->spec.sample_numel = 1;
  for (int i = 1; i < nd; i++) {
    d->spec.shape[i - 1] = (int64_t)dims[i];
    d->spec.sample_numel *= (int64_t)dims[i];
  }
  d->scale = 1.0f;
  if (d->x_uint8) {
    double s = 1.0 / 255.0;
    if (H5Aexists(d->dx, "scale") > 0) {
      hid_t a = H5Aopen(d->dx, "scale", H5P_DEFAULT);
      herr_t st = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_DOUBLE, &s);
      if (a >= 0) H5Aclose(a);
      if (st < 0) FAIL("data file %s: cannot read attribute scale of /x", path);
    }
    d->scale = (float)s;
  }
  if (like && (like->ndim != d->spec.ndim ||
               memcmp(like->shape, d->spec.shape, sizeof(like->shape))))
    FAIL("data file %s: samples of /x have another shape than the training set's", path);

  /* /y: (N) integers */
  hid_t dy = H5Dopen2(d->file, "y", H5P_DEFAULT);
  if (dy < 0) FAIL("data file %s: /y is not a dataset", path);
  sp = H5Dget_space(dy);
  ty = H5Dget_type(dy);
  int ndy = H5Sget_simple_extent_ndims(sp);
  hsize_t ydims[8] = {0};
  if (ndy >= 1 && ndy <= 8) H5Sget_simple_extent_dims(sp, ydims, NULL);
  cls = H5Tget_class(ty);
  H5Sclose(sp);
  H5Tclose(ty);
  int err = 0;
  if (cls == H5T_FLOAT) {
    err = open_targets(d, dy, path, like, ndy, ydims);
    H5Dclose(dy);
    return err;
  }
  MT_CHECK(!like || !like->ntargets, MT_ERR_DATA,
           "data file %s: /y holds class labels but the training set's /y holds float targets", path);
  if (ndy != 1)
    err = MT_ERR(MT_ERR_DATA, "data file %s: /y has %d dimensions; expected (N) class labels", path, ndy);
  else if (cls != H5T_INTEGER)
    err = MT_ERR(MT_ERR_DATA, "data file %s: /y must hold integer class labels or float targets", path);
  else if ((int64_t)ydims[0] != d->n)
    err = MT_ERR(MT_ERR_DATA, "data file %s: /x has %lld samples but /y has %lld labels", path,
                 (long long)d->n, (long long)ydims[0]);
  if (!err) err = mt_calloc(&d->labels, (size_t)d->n, sizeof(int32_t), "labels");
  if (!err && H5Dread(dy, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->labels) < 0)
    err = MT_ERR(MT_ERR_DATA, "data file %s: cannot read /y", path);
  int nclasses = 0;
  if (!err && H5Aexists(dy, "nclasses") > 0) {
    hid_t a = H5Aopen(dy, "nclasses", H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_INT, &nclasses) < 0 || nclasses < 1)
      err = MT_ERR(MT_ERR_DATA, "data file %s: attribute nclasses of /y is unreadable or < 1", path);
    if (a >= 0) H5Aclose(a);
  }
  H5Dclose(dy);
  if (err) return err;
  if (like) nclasses = like->nclasses;
  if (nclasses == 0) {
    int32_t mx = 0;
    for (int64_t i = 0; i < d->n; i++) mx = d->labels[i] > mx ? d->labels[i] : mx;
    nclasses = mx + 1;
  }
  for (int64_t i = 0; i < d->n; i++)
    if (d->labels[i] < 0 || d->labels[i] >= nclasses)
      FAIL("data file %s: label %d of sample %lld is out of range (0..%d)", path, d->labels[i],
           (long long)i, nclasses - 1);
  if (nclasses < 2) FAIL("data file %s: needs at least 2 classes (found %d)", path, nclasses);
  d->spec.nclasses = nclasses;
  return 0;
}

int mt_dataset_open(mt_dataset *d, const char *path, MPI_Comm comm, const mt_data_spec *like,
                    int window) {
  memset(d, 0, sizeof(*d));
  d->file = d->dx = H5I_INVALID_HID;
  mt_h5_lock();
  int err = open_local(d, path, like, window);
  mt_h5_unlock();
  if (err) mt_dataset_close(d);
  MT_CALL(mt_agree(comm, err));
  return 0;
}

void mt_dataset_close(mt_dataset *d) {
  mt_h5_lock();
  if (d->dx >= 0) H5Dclose(d->dx);
  if (d->file >= 0) H5Fclose(d->file);
  mt_h5_unlock();
  d->dx = d->file = H5I_INVALID_HID;
  mt_free(&d->labels);
  mt_free(&d->targets);
}

static int read_rows(mt_dataset *d, const int64_t *idx, int n, void *buf) {
  hid_t fs = H5Dget_space(d->dx);
  if (fs < 0) return MT_ERR(MT_ERR_HDF5, "data file %s: H5Dget_space failed", d->path);
  hsize_t start[MT_MAX_DIMS + 1] = {0}, count[MT_MAX_DIMS + 1];
  for (int k = 0; k < d->spec.ndim; k++) count[k + 1] = (hsize_t)d->spec.shape[k];
  herr_t st = 0;
  int first = 1;
  for (int i = 0; i < n && st >= 0;) {
    int j = i + 1;
    while (j < n && idx[j] == idx[j - 1] + 1) j++;
    start[0] = (hsize_t)idx[i];
    count[0] = (hsize_t)(j - i);
    st = H5Sselect_hyperslab(fs, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count, NULL);
    first = 0;
    i = j;
  }
  hsize_t mdim = (hsize_t)n * (hsize_t)d->spec.sample_numel;
  hid_t ms = H5Screate_simple(1, &mdim, NULL);
  if (st >= 0 && ms >= 0)
    st = H5Dread(d->dx, d->x_uint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  if (st < 0 || ms < 0) return MT_ERR(MT_ERR_FILE, "data file %s: reading %d samples failed", d->path, n);
  return 0;
}

size_t mt_dataset_scratch_size(const mt_dataset *d, int n) {
  if (d->spec.tokens) return ((size_t)n * (size_t)d->window + 1) * sizeof(int32_t);
  return d->x_uint8 ? (size_t)n * (size_t)d->spec.sample_numel : 0;
}

/* Token windows: one read per run of consecutive windows (they share their
 * end tokens), then each window copied into its row of T + 1. */
static int read_windows(mt_dataset *d, const int64_t *idx, int n, int32_t *tokens, int32_t *buf) {
  const int64_t T = d->window;
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && idx[j] == idx[j - 1] + 1) j++;
    hsize_t start = (hsize_t)(idx[i] * T), count = (hsize_t)((j - i) * T + 1);
    hid_t fs = H5Dget_space(d->dx), ms = H5Screate_simple(1, &count, NULL);
    herr_t st = (fs < 0 || ms < 0) ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (st >= 0) st = H5Dread(d->dx, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (st < 0) return MT_ERR(MT_ERR_FILE, "data file %s: reading tokens failed", d->path);
    for (int k = i; k < j; k++) {
      const int32_t *src = buf + (k - i) * T;
      int32_t *dst = tokens + (int64_t)k * (T + 1);
      for (int64_t t = 0; t <= T; t++) {
        if (src[t] < 0 || src[t] >= d->spec.nclasses)
          return MT_ERR(MT_ERR_DATA, "data file %s: token %d at position %lld is outside the vocabulary (0..%d)",
                        d->path, src[t], (long long)(idx[k] * T + t), d->spec.nclasses - 1);
        dst[t] = src[t];
      }
    }
    i = j;
  }
  return 0;
}

int mt_dataset_read(mt_dataset *d, const int64_t *idx, int n, float *x, int32_t *y,
                    float *targets, int32_t *tokens, void *scratch) {
  if (n == 0) return 0;
  if (d->spec.tokens) {
    for (int i = 0; i < n; i++)
      MT_CHECK(idx[i] >= 0 && idx[i] < d->n && (i == 0 || idx[i] > idx[i - 1]), MT_ERR_ARG,
               "sample index %lld invalid or unsorted for %s", (long long)idx[i], d->path);
    mt_h5_lock();
    int err = read_windows(d, idx, n, tokens, scratch);
    mt_h5_unlock();
    return err;
  }
  for (int i = 0; i < n; i++) {
    MT_CHECK(idx[i] >= 0 && idx[i] < d->n && (i == 0 || idx[i] > idx[i - 1]), MT_ERR_ARG,
             "sample index %lld invalid or unsorted for %s", (long long)idx[i], d->path);
    if (d->labels) y[i] = d->labels[idx[i]];
  }
  const int k = d->spec.ntargets;
  for (int i = 0; i < n && k > 0; i++)
    memcpy(targets + (size_t)i * k, d->targets + (size_t)idx[i] * k, (size_t)k * sizeof(float));
  mt_h5_lock();
  int err = read_rows(d, idx, n, d->x_uint8 ? scratch : (void *)x);
  mt_h5_unlock();
  MT_CALL(err);
  if (d->x_uint8) {
    const size_t m = (size_t)n * (size_t)d->spec.sample_numel;
    const float s = d->scale;
    const uint8_t *u = scratch;
#pragma omp simd
    for (size_t i = 0; i < m; i++) x[i] = (float)u[i] * s;
  }
  return 0;
}
