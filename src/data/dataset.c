/* HDF5 data sets: validated once at open, then reads of only the rows a
 * rank needs (straight from the file where /x is stored plainly, else
 * HDF5 hyperslabs). */
#include "data/data.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) return MT_ERR(MT_ERR_DATA, __VA_ARGS__)

static int pread_rows(const mt_dataset *d, const int64_t *idx, int n, void *buf);
static int read_rows_h5(mt_dataset *d, const int64_t *idx, int n, void *buf);

/* Reads the one-value attribute name of obj as mtype into *v: -1 when it
 * cannot be read or holds other than one value (H5Aread would write an
 * attribute of 2 values past *v: found by tests/fuzz). */
static herr_t read_attr1(hid_t obj, const char *name, hid_t mtype, void *v) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t sp = a < 0 ? -1 : H5Aget_space(a);
  herr_t st = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1 ? H5Aread(a, mtype, v) : -1;
  if (sp >= 0) H5Sclose(sp);
  if (a >= 0) H5Aclose(a);
  return st;
}

/* /tokens (M) integers: windows of T + 1 tokens. */
static int open_tokens(mt_dataset *d, const char *path, const mt_data_spec *like, const char *W,
                       int window) {
  MT_CHECK(!like || like->tokens, MT_ERR_DATA,
           "data file %s: holds /tokens but %s holds /x and /y", path, W);
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
    if (read_attr1(d->dx, "vocab_size", H5T_NATIVE_INT, &vocab) < 0 || vocab < 2)
      FAIL("data file %s: attribute vocab_size of /tokens is unreadable or < 2", path);
    if (vocab > MT_DATA_MAX_CLASSES)
      FAIL("data file %s: attribute vocab_size of /tokens is %d, above the %d tokens mpitrain takes",
           path, vocab, MT_DATA_MAX_CLASSES);
  }
  if (like) {
    if (vocab > like->nclasses)
      FAIL("data file %s: vocabulary of %d tokens, %s has %d", path, vocab, W, like->nclasses);
    vocab = like->nclasses;
  }
  if (m > (hsize_t)INT64_MAX) FAIL("data file %s: /tokens holds %llu tokens, too many to count", path,
                                   (unsigned long long)m);
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
static int open_targets(mt_dataset *d, hid_t dy, const char *path, const mt_data_spec *like, const char *W,
                        int ndy, const hsize_t *ydims) {
  if (ndy != 1 && ndy != 2)
    FAIL("data file %s: float /y has %d dimensions; expected (N) or (N,K) targets", path, ndy);
  if ((int64_t)ydims[0] != d->n)
    FAIL("data file %s: /x has %lld samples but /y has %lld targets", path, (long long)d->n,
         (long long)ydims[0]);
  if (ndy == 2 && ydims[1] > MT_DATA_MAX_CLASSES)
    FAIL("data file %s: /y dim 1 is %llu targets per sample, above the %d mpitrain takes", path,
         (unsigned long long)ydims[1], MT_DATA_MAX_CLASSES);
  int k = ndy == 2 ? (int)ydims[1] : 1;
  if (k < 1) FAIL("data file %s: /y has rows of 0 targets", path);
  if (like && like->ntargets != k)
    FAIL("data file %s: /y has %d targets per sample, %s has %s%d", path, k, W,
         like->ntargets ? "" : "class labels, not targets: ", like->ntargets);
  MT_CALL(mt_calloc(&d->targets, (size_t)d->n * (size_t)k, sizeof(float), "targets"));
  if (H5Dread(dy, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->targets) < 0)
    FAIL("data file %s: cannot read /y", path);
  for (int64_t i = 0; i < d->n * k; i++)
    if (!isfinite(d->targets[i]))
      FAIL("data file %s: /y row %lld holds %s (target %lld)", path, (long long)(i / k),
           isnan(d->targets[i]) ? "NaN" : "Inf", (long long)(i % k));
  d->spec.ntargets = k;
  d->spec.nclasses = 0;
  return 0;
}

/* HDF5 clips an integer that int32 cannot hold (an int64 label of 2^40)
 * to INT32_MAX without a word; a conversion exception aborts the read. */
static H5T_conv_ret_t label_overflow(H5T_conv_except_t ex, hid_t src, hid_t dst, void *sbuf,
                                     void *dbuf, void *flag) {
  (void)src, (void)dst, (void)sbuf, (void)dbuf;
  if (ex != H5T_CONV_EXCEPT_RANGE_HI && ex != H5T_CONV_EXCEPT_RANGE_LOW) return H5T_CONV_UNHANDLED;
  *(int *)flag = 1;
  return H5T_CONV_ABORT;
}

static int read_labels(hid_t dy, const char *path, int32_t *labels) {
  int overflow = 0;
  hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
  herr_t st = xfer < 0 ? -1 : H5Pset_type_conv_cb(xfer, label_overflow, &overflow);
  if (st >= 0) st = H5Dread(dy, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, xfer, labels);
  if (xfer >= 0) H5Pclose(xfer);
  if (overflow)
    FAIL("data file %s: /y holds a label outside the 32-bit integer range (at most %d classes)", path,
         MT_DATA_MAX_CLASSES);
  if (st < 0) FAIL("data file %s: cannot read /y", path);
  return 0;
}

/* "(28, 28)": a sample's shape. */
static void shape_text(const mt_data_spec *s, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < s->ndim && k < len; i++) {
    int w = snprintf(buf + k, len - k, "%s%lld", i ? ", " : "(", (long long)s->shape[i]);
    if (w > 0) k += (size_t)w;
  }
  if (k < len) snprintf(buf + k, len - k, ")");
}

/* A file without /y read for a model (-mode predict): like's kind, and
 * labels (or targets) of zeros, so a model's forward has what it reads;
 * the losses it computes from them are not reported. */
static int open_unlabelled(mt_dataset *d, const mt_data_spec *like) {
  d->unlabelled = 1;
  d->spec.nclasses = like->nclasses;
  d->spec.ntargets = like->ntargets;
  if (like->ntargets)
    return mt_calloc(&d->targets, (size_t)d->n * (size_t)like->ntargets, sizeof(float), "targets");
  return mt_calloc(&d->labels, (size_t)d->n, sizeof(int32_t), "labels");
}

static int open_local(mt_dataset *d, const char *path, const mt_dataset_how *how) {
  const mt_data_spec *like = how->like;
  const char *W = how->like_what ? how->like_what : "the training set";
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
  if (H5Lexists(d->file, "tokens", H5P_DEFAULT) > 0) return open_tokens(d, path, like, W, how->window);
  MT_CHECK(!like || !like->tokens, MT_ERR_DATA,
           "data file %s: holds /x and /y but %s holds /tokens", path, W);
  if (H5Lexists(d->file, "x", H5P_DEFAULT) <= 0)
    FAIL("data file %s: has no dataset /x (nor /tokens)", path);
  const int has_y = H5Lexists(d->file, "y", H5P_DEFAULT) > 0;
  /* -mode predict: the model (like) says what /y would hold */
  if (!has_y && !(how->unlabelled && like)) FAIL("data file %s: has no dataset /y (labels)", path);
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
  if (dims[0] < 1) FAIL("data file %s: /x holds no samples", path);
  d->spec.ndim = nd - 1;
  d->spec.sample_numel = 1;
  /* every product of the file's dimensions checked before it is formed */
  for (int i = 1; i < nd; i++) {
    if (dims[i] < 1 || dims[i] > (hsize_t)MT_DATA_MAX_SAMPLE_NUMEL / (hsize_t)d->spec.sample_numel)
      FAIL("data file %s: /x dim %d is %llu: a sample of /x would hold %s values (1 to %d)", path, i,
           (unsigned long long)dims[i], dims[i] < 1 ? "no" : "more than the most", MT_DATA_MAX_SAMPLE_NUMEL);
    d->spec.shape[i - 1] = (int64_t)dims[i];
    d->spec.sample_numel *= (int64_t)dims[i];
  }
  if (dims[0] > (hsize_t)INT64_MAX / (hsize_t)d->spec.sample_numel)
    FAIL("data file %s: /x dim 0 is %llu samples, too many to count", path,
         (unsigned long long)dims[0]);
  d->n = (int64_t)dims[0];
  d->scale = 1.0f;
  if (d->x_uint8) {
    double s = 1.0 / 255.0;
    if (H5Aexists(d->dx, "scale") > 0) {
      if (read_attr1(d->dx, "scale", H5T_NATIVE_DOUBLE, &s) < 0)
        FAIL("data file %s: cannot read attribute scale of /x (one number)", path);
    }
    /* a non-finite scale (or one whose 255 steps are not finite as floats)
     * makes every input non-finite: the run would train to NaN silently */
    if (!isfinite((float)s) || !isfinite((float)s * 255.0f))
      FAIL("data file %s: attribute scale of /x is %g, not a finite number", path, s);
    d->scale = (float)s;
  }
  if (like && (like->ndim != d->spec.ndim ||
               memcmp(like->shape, d->spec.shape, sizeof(like->shape)))) {
    char a[96], b[96];
    shape_text(&d->spec, a, sizeof(a));
    shape_text(like, b, sizeof(b));
    FAIL("data file %s: samples of /x are %s, those of %s %s", path, a, W, b);
  }
  if (!has_y) return open_unlabelled(d, like);

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
    err = open_targets(d, dy, path, like, W, ndy, ydims);
    H5Dclose(dy);
    return err;
  }
  MT_CHECK(!like || !like->ntargets, MT_ERR_DATA,
           "data file %s: /y holds class labels but %s has float targets", path, W);
  if (ndy != 1)
    err = MT_ERR(MT_ERR_DATA, "data file %s: /y has %d dimensions; expected (N) class labels", path, ndy);
  else if (cls != H5T_INTEGER)
    err = MT_ERR(MT_ERR_DATA, "data file %s: /y must hold integer class labels or float targets", path);
  else if ((int64_t)ydims[0] != d->n)
    err = MT_ERR(MT_ERR_DATA, "data file %s: /x has %lld samples but /y has %lld labels", path,
                 (long long)d->n, (long long)ydims[0]);
  if (!err) err = mt_calloc(&d->labels, (size_t)d->n, sizeof(int32_t), "labels");
  if (!err) err = read_labels(dy, path, d->labels);
  int nclasses = 0;
  if (!err && H5Aexists(dy, "nclasses") > 0) {
    if (read_attr1(dy, "nclasses", H5T_NATIVE_INT, &nclasses) < 0 || nclasses < 1)
      err = MT_ERR(MT_ERR_DATA, "data file %s: attribute nclasses of /y is unreadable or < 1", path);
    /* read as int, a larger value is clipped to INT_MAX: refused here too */
    if (!err && nclasses > MT_DATA_MAX_CLASSES)
      err = MT_ERR(MT_ERR_DATA,
                   "data file %s: attribute nclasses of /y is %d, above the %d classes mpitrain takes",
                   path, nclasses, MT_DATA_MAX_CLASSES);
  }
  H5Dclose(dy);
  if (err) return err;
  /* a model's file (the modes: like_what given) names its classes: a file
   * that declares others is not its data */
  if (like && how->like_what && nclasses && nclasses != like->nclasses)
    FAIL("data file %s: /y has %d classes (attribute nclasses), %s has %d", path, nclasses, W,
         like->nclasses);
  if (like) nclasses = like->nclasses;
  if (nclasses == 0) {
    int64_t mx = 0; /* + 1 in 64 bits: a label of INT32_MAX must not wrap */
    for (int64_t i = 0; i < d->n; i++) mx = d->labels[i] > mx ? d->labels[i] : mx;
    if (mx + 1 > MT_DATA_MAX_CLASSES)
      FAIL("data file %s: /y's largest label %lld makes %lld classes, above the %d mpitrain takes "
           "(without an nclasses attribute the classes are the largest label + 1)",
           path, (long long)mx, (long long)mx + 1, MT_DATA_MAX_CLASSES);
    nclasses = (int)(mx + 1);
  }
  for (int64_t i = 0; i < d->n; i++)
    if (d->labels[i] < 0 || d->labels[i] >= nclasses)
      FAIL("data file %s: label %d of sample %lld is out of range (0..%d)", path, d->labels[i],
           (long long)i, nclasses - 1);
  if (nclasses < 2) FAIL("data file %s: needs at least 2 classes (found %d)", path, nclasses);
  d->spec.nclasses = nclasses;
  return 0;
}

/* Rows [first, first + count) of a float /x into buf (count x numel). */
static int read_block(mt_dataset *d, int64_t first, int64_t count, float *buf) {
  hsize_t start[MT_MAX_DIMS + 1] = {0}, cnt[MT_MAX_DIMS + 1];
  start[0] = (hsize_t)first;
  cnt[0] = (hsize_t)count;
  for (int k = 0; k < d->spec.ndim; k++) cnt[k + 1] = (hsize_t)d->spec.shape[k];
  hsize_t m = (hsize_t)count * (hsize_t)d->spec.sample_numel;
  hid_t fs = H5Dget_space(d->dx), ms = H5Screate_simple(1, &m, NULL);
  herr_t st = fs < 0 || ms < 0 ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
  if (st >= 0) st = H5Dread(d->dx, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  if (st < 0)
    return MT_ERR(MT_ERR_FILE, "data file %s: reading rows %lld..%lld of /x failed", d->path,
                  (long long)first, (long long)(first + count - 1));
  return 0;
}

/* NaN or Inf in a float /x trains silently to NaN: found here, by row.
 * -data_check sample reads 8 blocks spread over the file (one hyperslab
 * read each), full every row in chunks of up to 1 Mi values; each rank
 * checks every world-th block, and mt_agree reports the lowest rank's. */
static int check_x(mt_dataset *d, mt_data_check check, int rank, int world) {
  if (check == MT_DATA_CHECK_NONE || d->x_uint8 || d->spec.tokens) return 0;
  const int64_t numel = d->spec.sample_numel, n = d->n;
  int64_t per = (1 << 20) / numel, rows = (4 << 20) / numel; /* rows a read, rows in a sample */
  if (per < 1) per = 1;
  if (rows < 8) rows = 8;
  if (rows > MT_DATA_CHECK_ROWS) rows = MT_DATA_CHECK_ROWS;
  const int full = check == MT_DATA_CHECK_FULL || rows >= n;
  const int64_t nblocks = full ? (n + per - 1) / per : 8, blk = full ? per : rows / 8;
  float *buf = NULL;
  MT_CALL(mt_calloc(&buf, (size_t)(blk * numel), sizeof(float), "the data check's rows"));
  int err = 0;
  for (int64_t b = rank; b < nblocks && !err; b += world) {
    /* a sample's blocks: evenly spaced from row 0 to the last row */
    int64_t first = full ? b * per : (int64_t)((double)(n - blk) * (double)b / 7.0);
    int64_t count = full && first + blk > n ? n - first : blk;
    err = read_block(d, first, count, buf);
    for (int64_t i = 0; !err && i < count * numel; i++) {
      if (isfinite(buf[i])) continue;
      const int64_t row = first + i / numel;
      if (full)
        err = MT_ERR(MT_ERR_DATA, "data file %s: /x row %lld holds %s (value %lld of the row)",
                     d->path, (long long)row, isnan(buf[i]) ? "NaN" : "Inf", (long long)(i % numel));
      else
        err = MT_ERR(MT_ERR_DATA,
                     "data file %s: /x row %lld holds %s (value %lld of the row; checked a sample "
                     "of %lld of the %lld rows; -data_check full scans every row)",
                     d->path, (long long)row, isnan(buf[i]) ? "NaN" : "Inf", (long long)(i % numel),
                     (long long)(8 * blk), (long long)n);
    }
  }
  mt_free(&buf);
  return err;
}

/* Whether /x can be read with pread_rows: stored contiguous (not chunked,
 * so no filters, not compact), not external, allocated, in the memory's
 * type and byte order; and the first and last rows read both ways agree
 * (what H5Dget_offset means, user block and all, checked, not assumed).
 * Otherwise d->direct stays 0 and rows go through HDF5. */
static int open_direct(mt_dataset *d) {
  hid_t dcpl = H5Dget_create_plist(d->dx), ty = H5Dget_type(d->dx);
  hid_t mem = d->x_uint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
  haddr_t at = H5Dget_offset(d->dx);
  int ok = dcpl >= 0 && ty >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
           H5Pget_external_count(dcpl) == 0 && H5Tequal(ty, mem) > 0 && at != HADDR_UNDEF;
  if (dcpl >= 0) H5Pclose(dcpl);
  if (ty >= 0) H5Tclose(ty);
  if (!ok) return 0;
  const size_t row = (size_t)d->spec.sample_numel * (d->x_uint8 ? 1 : sizeof(float));
  char *a = NULL, *b = NULL;
  int err = mt_calloc(&a, 2, row, "data row check");
  if (!err) err = mt_calloc(&b, 2, row, "data row check");
  d->fd = err ? -1 : open(d->path, O_RDONLY | O_CLOEXEC);
  if (d->fd >= 0) {
    const int64_t rows[2] = {0, d->n - 1};
    const int k = d->n > 1 ? 2 : 1;
    d->x_offset = (int64_t)at;
    ok = read_rows_h5(d, rows, k, a) == 0 && pread_rows(d, rows, k, b) == 0 &&
         memcmp(a, b, (size_t)k * row) == 0;
    mt_error_clear(); /* a failed try is no error: HDF5 reads instead */
    if (ok) d->direct = 1;
    else close(d->fd);
  }
  mt_free(&a);
  mt_free(&b);
  return err;
}

int mt_dataset_open(mt_dataset *d, const char *path, MPI_Comm comm, const mt_data_spec *like,
                    int window, mt_data_check check) {
  const mt_dataset_how how = {like, NULL, window, check, 0};
  return mt_dataset_open_as(d, path, comm, &how);
}

int mt_dataset_open_as(mt_dataset *d, const char *path, MPI_Comm comm, const mt_dataset_how *how) {
  memset(d, 0, sizeof(*d));
  d->file = d->dx = H5I_INVALID_HID;
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  mt_h5_lock();
  int err = open_local(d, path, how);
  if (!err && !d->spec.tokens) err = open_direct(d);
  if (!err) err = check_x(d, how->check, rank, world);
  mt_h5_unlock();
  if (err) mt_dataset_close(d);
  MT_CALL(mt_agree(comm, err));
  return 0;
}

void mt_dataset_close(mt_dataset *d) {
  mt_dataset_unhold(d);
  if (d->direct) close(d->fd);
  d->direct = 0;
  mt_h5_lock();
  if (d->dx >= 0) H5Dclose(d->dx);
  if (d->file >= 0) H5Fclose(d->file);
  mt_h5_unlock();
  d->dx = d->file = H5I_INVALID_HID;
  mt_free(&d->labels);
  mt_free(&d->targets);
}

/* Rows [first, first + count) of /x straight from the file into buf: pread
 * until done (a read may return less than asked). */
static int pread_span(const mt_dataset *d, int64_t first, int64_t count, void *buf) {
  const size_t row = (size_t)d->spec.sample_numel * (d->x_uint8 ? 1 : sizeof(float));
  char *dst = buf;
  size_t len = (size_t)count * row;
  off_t at = (off_t)(d->x_offset + first * (int64_t)row);
  while (len > 0) {
    ssize_t got = pread(d->fd, dst, len, at);
    if (got <= 0)
      return MT_ERR(MT_ERR_FILE, "data file %s: reading rows %lld.. failed (%s)", d->path,
                    (long long)first, got < 0 ? strerror(errno) : "the file is shorter than its /x");
    dst += got, len -= (size_t)got, at += got;
  }
  return 0;
}

int mt_dataset_hold(mt_dataset *d, double max_bytes) {
  if (!d->direct || d->x_mem || d->n <= 0) return 0;
  const size_t row = (size_t)d->spec.sample_numel * (d->x_uint8 ? 1 : sizeof(float));
  if ((double)row * (double)d->n > max_bytes) return 0;
  MT_CALL(mt_calloc(&d->x_mem, (size_t)d->n, row, "the data set in memory"));
  if (!d->x_mem) return 0; /* the memory forecast's dry run: counted */
  int err = pread_span(d, 0, d->n, d->x_mem);
  if (err) mt_free(&d->x_mem);
  return err;
}

void mt_dataset_unhold(mt_dataset *d) { mt_free(&d->x_mem); }

/* Rows idx[0..n) (sorted) of /x copied from memory when it is held
 * (mt_dataset_hold), else straight from the file: one pread_span per run of
 * consecutive rows. HDF5's reads of a union of 128 hyperslabs cost ~5 us
 * a row here (its selection, for 784 bytes), on the loader thread, which
 * at 2 ranks or 2 threads a core shares with compute; these cost the copy. */
static int pread_rows(const mt_dataset *d, const int64_t *idx, int n, void *buf) {
  const size_t row = (size_t)d->spec.sample_numel * (d->x_uint8 ? 1 : sizeof(float));
  if (d->x_mem) { /* mt_dataset_hold */
    for (int i = 0; i < n; i++)
      memcpy((char *)buf + (size_t)i * row, d->x_mem + (size_t)idx[i] * row, row);
    return 0;
  }
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && idx[j] == idx[j - 1] + 1) j++;
    MT_CALL(pread_span(d, idx[i], j - i, (char *)buf + (size_t)i * row));
    i = j;
  }
  return 0;
}

static int read_rows_h5(mt_dataset *d, const int64_t *idx, int n, void *buf) {
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
  void *raw = d->x_uint8 ? scratch : (void *)x;
  if (d->direct) {
    MT_CALL(pread_rows(d, idx, n, raw));
  } else {
    mt_h5_lock();
    int err = read_rows_h5(d, idx, n, raw);
    mt_h5_unlock();
    MT_CALL(err);
  }
  if (d->x_uint8) {
    const size_t m = (size_t)n * (size_t)d->spec.sample_numel;
    const float s = d->scale;
    const uint8_t *u = scratch;
#pragma omp simd
    for (size_t i = 0; i < m; i++) x[i] = (float)u[i] * s;
  }
  return 0;
}
