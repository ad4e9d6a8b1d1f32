/* Per-sample outputs in one collective HDF5 file (format in outputs.h). */
#include "io/outputs.h"
#include "io/space.h"
#include "io/ckpt_format.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int64_t mt_outputs_chunk_bytes = (int64_t)64 << 20;

enum { D_INDEX, D_LABEL, D_PRED, D_LOSS, D_LOGITS, D_PROBS, ND };
static const char *const dnames_[ND] = {"index", "label", "pred", "loss", "logits", "probs"};

/* Dataset k's name: a regression's outputs are its predicted values. */
static const char *dname(const mt_outputs_rows *r, int k) {
  return k == D_LOGITS && r->values ? "values" : dnames_[k];
}

/* Whether dataset k is written (C: the logits' row length). */
static int written(const mt_outputs_rows *r, int k, int C) {
  if (k == D_LABEL || k == D_LOSS) return !r->unlabelled;
  if (k == D_LOGITS) return C > 0;
  if (k == D_PROBS) return C > 0 && r->with_probs;
  return 1;
}

typedef struct {
  MPI_Comm comm;
  const char *path; /* the .tmp being written                              */
  const mt_outputs_meta *meta;
  const mt_outputs_rows *r;
  int rank, size, C;
  int64_t total, offset, max_rows;
  hid_t fapl, dxpl, dcpl, file, ds[ND];
  int created_file;
} writer;

/* Local checks of this rank's rows (no communication). */
static int check_rows(const mt_outputs_rows *r) {
  MT_CHECK(r->rows >= 0 && r->logits_len >= 0, MT_ERR_ARG, "outputs: %lld rows, logits of %d",
           (long long)r->rows, r->logits_len);
  MT_CHECK(!r->rows || (r->index && r->pred && (r->unlabelled || (r->label && r->loss))),
           MT_ERR_ARG, "outputs: %lld rows without their columns", (long long)r->rows);
  MT_CHECK(!r->rows || !r->logits_len || r->logits, MT_ERR_ARG, "outputs: logits missing");
  MT_CHECK(!r->rows || !r->logits_len || !r->with_probs || r->probs, MT_ERR_ARG,
           "outputs: probabilities missing");
  for (int64_t i = 1; i < r->rows; i++)
    MT_CHECK(r->index[i] > r->index[i - 1], MT_ERR_ARG,
             "outputs: sample index %lld follows %lld (not in data-set order)",
             (long long)r->index[i], (long long)r->index[i - 1]);
  return 0;
}

/* Offsets, totals and the order across ranks; agreed. */
static int plan(writer *w) {
  const mt_outputs_rows *r = w->r;
  int err = check_rows(r);
  int64_t rows = err ? 0 : r->rows, last = rows ? r->index[rows - 1] : -1, prev = -1, off = 0;
  MT_MPI(MPI_Exscan(&rows, &off, 1, MPI_INT64_T, MPI_SUM, w->comm));
  MT_MPI(MPI_Exscan(&last, &prev, 1, MPI_INT64_T, MPI_MAX, w->comm));
  if (w->rank == 0) off = 0, prev = -1; /* Exscan leaves rank 0's undefined */
  int64_t v[3] = {rows, r->logits_len, -(int64_t)r->logits_len}, tot = 0;
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_MAX, w->comm));
  MT_MPI(MPI_Allreduce(&rows, &tot, 1, MPI_INT64_T, MPI_SUM, w->comm));
  if (!err && rows && r->index[0] <= prev)
    err = MT_ERR(MT_ERR_ARG, "outputs %s: rank %d starts at sample %lld, a rank before it "
                 "reached %lld (not in data-set order)", w->path, w->rank,
                 (long long)r->index[0], (long long)prev);
  if (!err && v[1] != -v[2])
    err = MT_ERR(MT_ERR_ARG, "outputs %s: the ranks pass logits rows of %lld to %lld values",
                 w->path, (long long)-v[2], (long long)v[1]);
  w->offset = off;
  w->total = tot;
  w->max_rows = v[0];
  w->C = (int)v[1];
  return mt_agree(w->comm, err);
}

static int write_attrs(writer *w) {
  const mt_outputs_meta *m = w->meta;
  const int64_t n = m->samples_in_file, rows = w->total, step = m->global_step;
  const int set = m->set_index, epoch = m->epoch, ws = w->size;
  hid_t f = w->file;
  MT_CALL(mt_ckpt_attr_str(f, "format", MT_OUTPUTS_FORMAT));
  MT_CALL(mt_ckpt_attr_str(f, "set", m->set ? m->set : ""));
  MT_CALL(mt_ckpt_attr_int(f, "set_index", H5T_STD_I32LE, H5T_NATIVE_INT, &set));
  MT_CALL(mt_ckpt_attr_str(f, "data_file", m->data_file ? m->data_file : ""));
  MT_CALL(mt_ckpt_attr_int(f, "samples_in_file", H5T_STD_I64LE, H5T_NATIVE_INT64, &n));
  MT_CALL(mt_ckpt_attr_int(f, "rows", H5T_STD_I64LE, H5T_NATIVE_INT64, &rows));
  MT_CALL(mt_ckpt_attr_int(f, "epoch", H5T_STD_I32LE, H5T_NATIVE_INT, &epoch));
  MT_CALL(mt_ckpt_attr_int(f, "global_step", H5T_STD_I64LE, H5T_NATIVE_INT64, &step));
  MT_CALL(mt_ckpt_attr_str(f, "model", m->model ? m->model : ""));
  MT_CALL(mt_ckpt_attr_int(f, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT, &ws));
  MT_CALL(mt_ckpt_attr_str(f, "mpitrain_version", MPITRAIN_VERSION));
  return 0;
}

/* File and memory types of dataset k; loss and logits in the rows' type. */
static hid_t file_type(const writer *w, int k) {
  return k == D_INDEX ? H5T_STD_I64LE : k <= D_PRED ? H5T_STD_I32LE : mt_ckpt_h5_file_type(w->r->dtype);
}
static hid_t mem_type(const writer *w, int k) {
  return k == D_INDEX ? H5T_NATIVE_INT64 : k <= D_PRED ? H5T_NATIVE_INT32 : mt_ckpt_h5_mem_type(w->r->dtype);
}

static int create_datasets(writer *w) {
  for (int k = 0; k < ND; k++) {
    if (!written(w->r, k, w->C)) continue;
    hsize_t dims[2] = {(hsize_t)w->total, (hsize_t)w->C};
    hid_t sp = H5Screate_simple(k >= D_LOGITS ? 2 : 1, dims, NULL);
    w->ds[k] = sp < 0 ? H5I_INVALID_HID
                      : H5Dcreate2(w->file, dname(w->r, k), file_type(w, k), sp, H5P_DEFAULT,
                                   w->dcpl, H5P_DEFAULT);
    if (sp >= 0) H5Sclose(sp);
    if (w->ds[k] < 0) {
      char why[256];
      mt_ckpt_h5_reason(why, sizeof(why));
      return MT_ERR(MT_ERR_HDF5, "outputs %s: cannot create /%s: %s", w->path, dname(w->r, k), why);
    }
  }
  return 0;
}

/* One round of the collective writes: this rank's rows [a, b) (none when
 * a >= b, still joining) into every dataset. */
static int write_round(writer *w, int64_t a, int64_t b) {
  const mt_outputs_rows *r = w->r;
  const void *cols[ND] = {r->index, r->label, r->pred, r->loss, r->logits, r->probs};
  const size_t f = mt_ckpt_esz(r->dtype); /* loss and logits: float or double */
  const size_t width[ND] = {8, 4, 4, f, f * (size_t)w->C, f * (size_t)w->C};
  int err = 0;
  for (int k = 0; k < ND; k++) {
    if (w->ds[k] < 0) continue;
    int nd = k >= D_LOGITS ? 2 : 1;
    hsize_t fdims[2] = {(hsize_t)w->total, (hsize_t)w->C};
    hsize_t start[2] = {(hsize_t)(w->offset + a), 0}, cnt[2] = {(hsize_t)(b - a), (hsize_t)w->C};
    hsize_t one[2] = {1, 1};
    hid_t fs = H5Screate_simple(nd, fdims, NULL);
    hid_t ms = H5Screate_simple(nd, a < b ? cnt : one, NULL);
    herr_t st = fs < 0 || ms < 0 ? -1 : 0;
    if (st >= 0 && a < b)
      st = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    else if (st >= 0)
      st = H5Sselect_none(fs) < 0 || H5Sselect_none(ms) < 0 ? -1 : 0;
    static const int64_t dummy[2] = {0, 0};
    const void *ptr = a < b ? (const char *)cols[k] + (size_t)a * width[k] : (const void *)dummy;
    if (st >= 0) st = H5Dwrite(w->ds[k], mem_type(w, k), ms, fs, w->dxpl, ptr);
    if (st < 0 && !err) {
      char why[256];
      mt_ckpt_h5_reason(why, sizeof(why));
      err = MT_ERR(MT_ERR_FILE, "outputs %s: writing /%s failed: %s", w->path, dname(r, k), why);
    }
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
  }
  return err;
}

static int write_locked(writer *w) {
  w->fapl = mt_ckpt_fapl(w->comm);
  w->dxpl = mt_ckpt_dxpl();
  w->dcpl = H5Pcreate(H5P_DATASET_CREATE);
  int err = 0;
  if (w->fapl < 0 || w->dxpl < 0 || w->dcpl < 0 ||
      H5Pset_fill_time(w->dcpl, H5D_FILL_TIME_NEVER) < 0 ||
      H5Pset_alloc_time(w->dcpl, H5D_ALLOC_TIME_EARLY) < 0)
    err = MT_ERR(MT_ERR_HDF5, "outputs %s: making HDF5 property lists failed", w->path);
  MT_CALL(mt_agree(w->comm, err));

  w->file = H5Fcreate(w->path, H5F_ACC_TRUNC, H5P_DEFAULT, w->fapl);
  if (w->file < 0) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    err = MT_ERR(MT_ERR_FILE, "outputs %s: cannot create the file: %s", w->path, why);
  }
  MT_CALL(mt_agree(w->comm, err));
  w->created_file = 1;
  /* room for all of it before any collective write (io/space.h): the
   * columns, the attributes and headers */
  if (w->rank == 0) {
    const int64_t f = (int64_t)mt_ckpt_esz(w->r->dtype);
    err = mt_space_reserve(w->path, (uint64_t)(w->total * (16 + f + 2 * f * (int64_t)w->C)) + 262144 +
                                         ND * (uint64_t)MT_CKPT_ALIGN);
  }
  MT_CALL(mt_agree(w->comm, err));

  /* metadata: the same calls with the same values on every rank */
  err = write_attrs(w);
  if (!err) err = create_datasets(w);
  MT_CALL(mt_agree(w->comm, err));

  /* data: rounds of at most mt_outputs_chunk_bytes per rank; every rank
   * joins every round, after a local failure too */
  const int64_t f = (int64_t)mt_ckpt_esz(w->r->dtype);
  int64_t row_bytes = 16 + f + 2 * f * (int64_t)w->C;
  int64_t chunk = mt_outputs_chunk_bytes / row_bytes > 0 ? mt_outputs_chunk_bytes / row_bytes : 1;
  int64_t rounds = (w->max_rows + chunk - 1) / chunk, rows = w->r->rows;
  for (int64_t k = 0; k < rounds; k++) {
    int64_t a = k * chunk < rows ? k * chunk : rows, b = a + chunk < rows ? a + chunk : rows;
    int e = write_round(w, a, err ? a : b);
    if (!err) err = e;
  }
  return mt_agree(w->comm, err);
}

/* Closes everything; a failure of the close is a failure (collective). */
static int writer_close(writer *w) {
  int bad = 0;
  for (int k = 0; k < ND; k++)
    if (w->ds[k] >= 0 && H5Dclose(w->ds[k]) < 0) bad = 1;
  if (w->file >= 0 && H5Fclose(w->file) < 0) bad = 1;
  if (w->fapl >= 0) H5Pclose(w->fapl);
  if (w->dxpl >= 0) H5Pclose(w->dxpl);
  if (w->dcpl >= 0) H5Pclose(w->dcpl);
  w->file = w->fapl = w->dxpl = w->dcpl = H5I_INVALID_HID;
  for (int k = 0; k < ND; k++) w->ds[k] = H5I_INVALID_HID;
  if (!bad) return 0;
  char why[256];
  mt_ckpt_h5_reason(why, sizeof(why));
  return MT_ERR(MT_ERR_FILE, "outputs %s: closing the file failed: %s", w->path, why);
}

int mt_outputs_write(MPI_Comm comm, const char *path, const mt_outputs_meta *meta,
                     const mt_outputs_rows *r) {
  char tmp[MT_PATH_MAX + 8], dir[MT_PATH_MAX];
  int rank, size;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_MPI(MPI_Comm_size(comm, &size));
  int len = snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int err = len > 0 && (size_t)len < sizeof(dir) ? 0
                                                 : MT_ERR(MT_ERR_ARG, "outputs: path too long: %s", path);
  writer w;
  memset(&w, 0, sizeof(w));
  w.comm = comm;
  w.path = tmp;
  w.meta = meta;
  w.r = r;
  w.rank = rank;
  w.size = size;
  w.fapl = w.dxpl = w.dcpl = w.file = H5I_INVALID_HID;
  for (int k = 0; k < ND; k++) w.ds[k] = H5I_INVALID_HID;
  MT_CALL(mt_agree(comm, err));
  MT_CALL(plan(&w));

  /* rank 0 makes the folder and removes a stale .tmp */
  if (rank == 0) {
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
      *slash = '\0';
      err = mt_mkdir_p(dir);
    }
    if (!err && unlink(tmp) != 0 && errno != ENOENT)
      err = MT_ERR(MT_ERR_FILE, "outputs: cannot remove the stale %s: %s", tmp, strerror(errno));
  }
  MT_CALL(mt_agree(comm, err));

  mt_h5_lock();
  err = write_locked(&w);
  int cerr = writer_close(&w);
  mt_h5_unlock();
  if (!err) err = mt_agree(comm, cerr);
  if (!err && rank == 0 && rename(tmp, path) != 0)
    err = MT_ERR(MT_ERR_FILE, "outputs: cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (w.created_file) err = mt_agree(comm, err);
  if (err && w.created_file && rank == 0) unlink(tmp);
  return err;
}

int mt_test_csv_write(const char *dir, const mt_test_row *rows, int n) {
  char path[MT_PATH_MAX + 16], tmp[MT_PATH_MAX + 24];
  snprintf(path, sizeof(path), "%s/test.csv", dir);
  FILE *f;
  MT_CALL(mt_replace_open(path, tmp, sizeof(tmp), &f));
  fprintf(f, "set,file,epoch,step,loss,accuracy,samples\n");
  for (int i = 0; i < n; i++)
    fprintf(f, "%d,%s,%d,%ld,%.9g,%.9g,%lld\n", rows[i].set, rows[i].file, rows[i].epoch,
            rows[i].global_step, rows[i].loss, rows[i].acc, (long long)rows[i].samples);
  return mt_replace_commit(f, tmp, path);
}
