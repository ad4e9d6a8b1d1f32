/* Checkpoint files, writing: the collective parallel-HDF5 write of one
 * file (mt_ckpt_write: the header, the trainer state, every tensor's owned
 * slices and checksums, each rank its own hyperslabs) and the crash-safe
 * save into a directory (mt_ckpt_save: a temporary name, fsync, the rename,
 * DIR/latest and pruning through ckpt_dir). The division of the flat layout
 * among ranks is in ckpt_plan.c, trainer state entries in ckpt_state.c;
 * names, the checksum and the HDF5 helpers in ckpt_format.c. Contracts:
 * ckpt_write.h. */
#include "io/ckpt_write.h"
#include "io/modelfile.h"
#include "io/ckpt_dir.h"
#include "io/space.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t state_hash(const mt_ckpt_state *s, const mt_ckpt_meta *meta) {
  uint64_t h = mt_hash_bytes("state", 5, 0);
  for (int i = 0; s && i < s->n; i++) {
    const mt_ckpt_entry *e = &s->e[i];
    uint64_t n = e->n, ty = (uint64_t)e->type;
    h = mt_hash_bytes(e->key, strlen(e->key) + 1, h);
    h = mt_hash_bytes(&ty, sizeof(ty), h);
    h = mt_hash_bytes(&n, sizeof(n), h);
    h = mt_hash_bytes(&e->i, sizeof(e->i), h);
    h = mt_hash_bytes(&e->f, sizeof(e->f), h);
    size_t bytes = e->type == MT_CKPT_STR ? e->n : e->n * 8;
    if (e->type == MT_CKPT_STR || e->type == MT_CKPT_I64S || e->type == MT_CKPT_F64S)
      h = mt_hash_bytes(e->p, bytes, h);
  }
  const char *b = meta && meta->backend ? meta->backend : "";
  const char *o = meta && meta->options ? meta->options : "";
  const char *r = meta && meta->run_id ? meta->run_id : "";
  h = mt_hash_bytes(b, strlen(b) + 1, h);
  h = mt_hash_bytes(r, strlen(r) + 1, h);
  return mt_hash_bytes(o, strlen(o) + 1, h);
}

/* ======================================================= before writing */

/* This rank's first non-finite owned element: *buf, *tensor and *at (in
 * the tensor) set, 1; or 0. A checkpoint of NaN parameters or optimizer
 * state would pass its checksums and poison every restart. */
static int find_nonfinite(const mt_ckpt_tensors *ts, const mt_ckpt_plan *pl, int *buf,
                          int *tensor, size_t *at, const char **what) {
  const mt_param_table *t = ts->table;
  const size_t esz = mt_ckpt_esz(ts->dtype);
  for (int b = 0; b < ts->nbufs; b++) {
    const char *data = ts->bufs[b].data;
    for (int i = 0; data && i < t->n; i++) {
      const mt_param *q = &t->p[i];
      for (int k = 0; k < pl->nown; k++) {
        size_t a = pl->own[k].a > q->offset ? pl->own[k].a : q->offset;
        size_t e = pl->own[k].b < q->offset + q->numel ? pl->own[k].b : q->offset + q->numel;
        if (a >= e) continue;
        const char *x = data + (a - pl->base) * esz;
        size_t j = mt_first_nonfinite(ts->dtype, x, e - a);
        if (j == e - a) continue;
        *buf = b;
        *tensor = i;
        *at = a - q->offset + j;
        *what = mt_nonfinite_name(ts->dtype, x, j);
        return 1;
      }
    }
  }
  return 0;
}

uint64_t mt_ckpt_file_bytes(const mt_ckpt_tensors *ts, const mt_ckpt_meta *meta,
                           const mt_ckpt_state *st) {
  const mt_param_table *t = ts->table;
  uint64_t data = 0, meta_b = 256 * 1024;
  for (int i = 0; i < t->n; i++) {
    const uint64_t b = (uint64_t)t->p[i].numel * mt_ckpt_esz(ts->dtype);
    /* an object of MT_CKPT_ALIGN bytes or more starts on such a boundary:
     * up to that much room before it (mt_ckpt_fapl) */
    data += b >= MT_CKPT_ALIGN ? b + MT_CKPT_ALIGN : b;
  }
  data *= (uint64_t)ts->nbufs;
  meta_b += (uint64_t)ts->nbufs * (uint64_t)t->n * 4096;
  for (int i = 0; st && i < st->n; i++)
    meta_b += 1024 + 2 * (st->e[i].type == MT_CKPT_STR ? st->e[i].n : st->e[i].n * 8);
  if (meta && meta->options) meta_b += 2 * strlen(meta->options);
  if (meta && meta->model) meta_b += 64 * 1024; /* its description: ~40 small attributes */
  return data + data / 256 + meta_b;
}

/* ============================================================= write */

typedef struct {
  MPI_Comm comm;
  const char *path;
  const mt_ckpt_tensors *ts;
  const mt_ckpt_plan *pl;
  const mt_ckpt_meta *meta;
  const mt_ckpt_state *st;
  char created[32];
  hid_t fapl, dxpl, dcpl, gcpl, file;
  hid_t *grp, *ds; /* nbufs, nbufs * ntensors                              */
  uint64_t *sums;  /* 2 per dataset                                        */
  uint64_t bytes;  /* reserved for the file (rank 0)                       */
  int created_file;
} writer;

static int write_header(writer *w) {
  const int fmt = MT_CKPT_FORMAT, ws = w->pl->size;
  const char *b = w->meta && w->meta->backend ? w->meta->backend : "";
  const char *o = w->meta && w->meta->options ? w->meta->options : "";
  MT_CALL(mt_ckpt_attr_int(w->file, "format", H5T_STD_I32LE, H5T_NATIVE_INT, &fmt));
  MT_CALL(mt_ckpt_attr_str(w->file, "mpitrain_version", MPITRAIN_VERSION));
  MT_CALL(mt_ckpt_attr_int(w->file, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT, &ws));
  MT_CALL(mt_ckpt_attr_str(w->file, "backend", b));
  MT_CALL(mt_ckpt_attr_str(w->file, "options", o));
  MT_CALL(mt_ckpt_attr_str(w->file, "created", w->created));
  MT_CALL(mt_ckpt_attr_str(w->file, "checksum_algorithm", MT_CKPT_CHECKSUM_NAME));
  if (w->meta && w->meta->run_id && w->meta->run_id[0])
    MT_CALL(mt_ckpt_attr_str(w->file, "run_id", w->meta->run_id));
  if (w->meta && w->meta->model) MT_CALL(mt_model_desc_write(w->file, w->meta->model));
  return 0;
}

static int create_datasets(writer *w) {
  const mt_param_table *t = w->ts->table;
  for (int b = 0; b < w->ts->nbufs; b++) {
    const char *bn = w->ts->bufs[b].name;
    w->grp[b] = H5Gcreate2(w->file, bn, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (w->grp[b] < 0) return MT_ERR(MT_ERR_HDF5, "checkpoint %s: cannot create /%s", w->path, bn);
    for (int i = 0; i < t->n; i++) {
      const mt_param *q = &t->p[i];
      hsize_t dims[MT_MAX_DIMS];
      for (int k = 0; k < q->ndim; k++) dims[k] = (hsize_t)q->shape[k];
      hid_t sp = H5Screate_simple(q->ndim, dims, NULL);
      hid_t d = sp < 0 ? H5I_INVALID_HID
                       : H5Dcreate2(w->grp[b], q->name, mt_ckpt_h5_file_type(w->ts->dtype), sp,
                                    H5P_DEFAULT, w->dcpl, H5P_DEFAULT);
      if (sp >= 0) H5Sclose(sp);
      w->ds[b * t->n + i] = d;
      if (d < 0) {
        char why[256];
        mt_ckpt_h5_reason(why, sizeof(why));
        return MT_ERR(MT_ERR_HDF5, "checkpoint %s: cannot create tensor /%s/%s: %s", w->path, bn,
                      q->name, why);
      }
    }
  }
  return 0;
}

/* Writes this rank's owned part of one tensor (nothing when skip), and adds
 * its checksum part. Collective. */
static int write_tensor(writer *w, int b, int i, int skip) {
  const mt_param *q = &w->ts->table->p[i];
  const char *data = w->ts->bufs[b].data;
  const mt_dtype dt = w->ts->dtype;
  const size_t esz = mt_ckpt_esz(dt);
  hid_t d = w->ds[b * w->ts->table->n + i];
  hsize_t dims[MT_MAX_DIMS];
  for (int k = 0; k < q->ndim; k++) dims[k] = (hsize_t)q->shape[k];
  hid_t fs = H5Screate_simple(q->ndim, dims, NULL), ms = H5I_INVALID_HID;
  if (fs < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate_simple for tensor %s failed", q->name);
  size_t first = 0, count = 0;
  int err = mt_ckpt_select(fs, q, w->pl->own, skip ? 0 : w->pl->nown, &ms, &first, &count);
  if (err) { /* still join the collective write, with nothing selected */
    if (ms >= 0) H5Sclose(ms);
    hsize_t one = 1;
    ms = H5Screate_simple(1, &one, NULL);
    if (ms >= 0) H5Sselect_none(ms);
    H5Sselect_none(fs);
    count = 0;
  }
  static const double dummy = 0;
  const void *ptr = count ? data + (first - w->pl->base) * esz : (const void *)&dummy;
  if (H5Dwrite(d, mt_ckpt_h5_mem_type(dt), ms, fs, w->dxpl, ptr) < 0 && !err) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    err = MT_ERR(MT_ERR_FILE, "checkpoint %s: writing tensor /%s/%s failed: %s", w->path,
                 w->ts->bufs[b].name, q->name, why);
  }
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  if (err || skip) return err;
  uint64_t *s = w->sums + 2 * ((size_t)b * (size_t)w->ts->table->n + (size_t)i);
  for (int k = 0; k < w->pl->nown; k++) {
    size_t a = w->pl->own[k].a > q->offset ? w->pl->own[k].a : q->offset;
    size_t e = w->pl->own[k].b < q->offset + q->numel ? w->pl->own[k].b : q->offset + q->numel;
    if (a < e) mt_ckpt_sum_dt(dt, data + (a - w->pl->base) * esz, e - a, a - q->offset, s);
  }
  return 0;
}

static int write_locked(writer *w) {
  const int nt = w->ts->table->n, nb = w->ts->nbufs, nds = nt * nb;
  int err = mt_calloc(&w->grp, (size_t)nb, sizeof(hid_t), "checkpoint groups");
  for (int i = 0; !err && i < nb; i++) w->grp[i] = H5I_INVALID_HID;
  if (!err) err = mt_calloc(&w->ds, (size_t)nds, sizeof(hid_t), "checkpoint datasets");
  for (int i = 0; !err && i < nds; i++) w->ds[i] = H5I_INVALID_HID;
  if (!err) err = mt_calloc(&w->sums, 2 * (size_t)nds, sizeof(uint64_t), "checkpoint sums");
  if (!err) {
    w->fapl = mt_ckpt_fapl(w->comm);
    w->dxpl = mt_ckpt_dxpl();
    w->dcpl = H5Pcreate(H5P_DATASET_CREATE);
    w->gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (w->fapl < 0 || w->dxpl < 0 || w->dcpl < 0 || w->gcpl < 0 ||
        H5Pset_fill_time(w->dcpl, H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_alloc_time(w->dcpl, H5D_ALLOC_TIME_EARLY) < 0 ||
        H5Pset_attr_creation_order(w->gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0)
      err = MT_ERR(MT_ERR_HDF5, "checkpoint %s: making HDF5 property lists failed", w->path);
  }
  /* the file system has room for the whole file: checked before it
   * exists, then its blocks allocated, so that no write below runs out of
   * room on one rank while the others go on into a collective (space.h) */
  if (!err && w->pl->rank == 0) err = mt_space_reserve(w->path, w->bytes);
  err = mt_agree(w->comm, err);
  if (err) return err;

  w->file = H5Fcreate(w->path, H5F_ACC_TRUNC, H5P_DEFAULT, w->fapl);
  if (w->file < 0) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    err = MT_ERR(MT_ERR_FILE, "checkpoint %s: cannot create the file: %s", w->path, why);
  }
  err = mt_agree(w->comm, err);
  if (err) return err;
  w->created_file = 1;
  if (w->pl->rank == 0) err = mt_space_reserve(w->path, w->bytes);
  err = mt_agree(w->comm, err);
  if (err) return err;

  /* metadata: the same calls with the same values on every rank */
  err = write_header(w);
  if (!err) err = mt_ckpt_state_write(w->file, w->gcpl, w->path, w->st);
  if (!err) err = create_datasets(w);
  err = mt_agree(w->comm, err);
  if (err) return err;

  /* data: after a local failure keep joining the collective writes */
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < nt; i++) {
      int e = write_tensor(w, b, i, err != 0);
      if (!err) err = e;
    }
  err = mt_agree(w->comm, err);
  if (err) return err;

  int rc = MPI_Allreduce(MPI_IN_PLACE, w->sums, 2 * nds, MPI_UINT64_T, MPI_SUM, w->comm);
  if (rc != MPI_SUCCESS) err = mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Allreduce");
  for (int k = 0; k < nds && !err; k++)
    err = mt_ckpt_attr_array(w->ds[k], "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, 2,
                             w->sums + 2 * k);
  return mt_agree(w->comm, err);
}

/* Closes everything writer holds; returns a close failure (collective). */
static int writer_close(writer *w) {
  int err = 0;
  const int nds = w->ts->table->n * w->ts->nbufs;
  for (int k = 0; w->ds && k < nds; k++)
    if (w->ds[k] >= 0 && H5Dclose(w->ds[k]) < 0) err = 1;
  for (int b = 0; w->grp && b < w->ts->nbufs; b++)
    if (w->grp[b] >= 0 && H5Gclose(w->grp[b]) < 0) err = 1;
  if (w->file >= 0 && H5Fclose(w->file) < 0) err = 1;
  if (w->fapl >= 0) H5Pclose(w->fapl);
  if (w->dxpl >= 0) H5Pclose(w->dxpl);
  if (w->dcpl >= 0) H5Pclose(w->dcpl);
  if (w->gcpl >= 0) H5Pclose(w->gcpl);
  w->file = w->fapl = w->dxpl = w->dcpl = w->gcpl = H5I_INVALID_HID;
  mt_free(&w->grp);
  mt_free(&w->ds);
  mt_free(&w->sums);
  if (err) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    return MT_ERR(MT_ERR_FILE, "checkpoint %s: closing the file failed: %s", w->path, why);
  }
  return 0;
}

int mt_ckpt_write(MPI_Comm comm, const char *path, const mt_ckpt_tensors *ts,
                  const mt_ckpt_meta *meta, const mt_ckpt_state *st) {
  MT_CALL(mt_agree(comm, path && path[0] ? 0 : MT_ERR(MT_ERR_ARG, "checkpoint: no file name")));
  mt_ckpt_plan pl;
  MT_CALL(mt_ckpt_plan_make(comm, ts, &pl));
  writer w;
  memset(&w, 0, sizeof(w));
  w.comm = comm;
  w.path = path;
  w.ts = ts;
  w.pl = &pl;
  w.meta = meta;
  w.st = st;
  w.fapl = w.dxpl = w.dcpl = w.gcpl = w.file = H5I_INVALID_HID;
  w.bytes = mt_ckpt_file_bytes(ts, meta, st);

  /* never from non-finite values: named, and nothing written */
  int b = 0, i = 0;
  size_t at = 0;
  const char *what = "";
  int nf = find_nonfinite(ts, &pl, &b, &i, &at, &what)
               ? MT_ERR(MT_ERR_NUMERIC, "checkpoint %s not written: /%s/%s holds %s (element %zu)",
                        path, ts->bufs[b].name, ts->table->p[i].name, what, at)
               : 0;
  nf = mt_agree(comm, nf);
  if (nf) {
    mt_ckpt_plan_free(&pl);
    return nf;
  }

  /* every rank writes the same header: check state and meta agree, and
   * take rank 0's clock */
  uint64_t h = state_hash(st, meta), hv[2] = {h, ~h};
  int err = 0, rc = MPI_Allreduce(MPI_IN_PLACE, hv, 2, MPI_UINT64_T, MPI_MAX, comm);
  if (rc == MPI_SUCCESS && pl.rank == 0) {
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(w.created, sizeof(w.created), "%Y-%m-%dT%H:%M:%SZ", &tmv);
  }
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(w.created, sizeof(w.created), MPI_CHAR, 0, comm);
  if (rc != MPI_SUCCESS)
    err = mt_mpi_error(__FILE__, __LINE__, __func__, rc, "agreeing on the checkpoint header");
  else if (hv[0] != h || ~hv[1] != h)
    err = MT_ERR(MT_ERR_ARG, "checkpoint %s: the ranks pass different trainer state or meta "
                 "(backend, options)", path);
  if (err) {
    mt_ckpt_plan_free(&pl);
    return mt_agree(comm, err);
  }

  mt_h5_lock();
  err = write_locked(&w);
  int cerr = writer_close(&w);
  mt_h5_unlock();
  mt_ckpt_plan_free(&pl);
  if (!err) err = mt_agree(comm, cerr);
  if (err && w.created_file && pl.rank == 0) unlink(path);
  if (!err && pl.rank == 0) {
    struct stat sb;
    if (stat(path, &sb) == 0 && (uint64_t)sb.st_size > w.bytes)
      fprintf(stderr, "mpitrain: warning: checkpoint %s is %lld bytes, more than the %llu "
              "reserved for it: a full disk could have stopped its write\n", path,
              (long long)sb.st_size, (unsigned long long)w.bytes);
    mt_space_release(path);
  }
  return err;
}

int mt_ckpt_save(MPI_Comm comm, const char *dir, int64_t step, int keep,
                 const mt_ckpt_tensors *ts, const mt_ckpt_meta *meta,
                 const mt_ckpt_state *st, char *path, size_t cap) {
  int rank;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  char fin[MT_PATH_MAX], tmp[MT_PATH_MAX + 8];
  int err = step >= 0 ? 0 : MT_ERR(MT_ERR_ARG, "checkpoint step %lld < 0", (long long)step);
  if (!err) err = mt_ckpt_path(dir, step, fin, sizeof(fin));
  snprintf(tmp, sizeof(tmp), "%s.tmp", fin);
  if (!err && rank == 0) {
    err = mt_ckpt_mkdir_p(dir);
    if (!err && unlink(tmp) != 0 && errno != ENOENT)
      err = MT_ERR(MT_ERR_FILE, "cannot remove the stale %s: %s", tmp, strerror(errno));
  }
  MT_CALL(mt_agree(comm, err));

  MT_CALL(mt_ckpt_write(comm, tmp, ts, meta, st));

  /* each rank flushes what its node wrote; then rank 0 publishes */
  err = mt_ckpt_sync_path(tmp, 0);
  /* TEST HOOK (tests/test_slurm.sh only): MT_TEST_CHECKPOINT_DELAY=S makes
   * every checkpoint take S seconds more, between its write and its rename,
   * to stand for a write longer than the launcher's grace */
  const char *delay = getenv("MT_TEST_CHECKPOINT_DELAY");
  if (delay && atof(delay) > 0) {
    struct timespec ts = {(time_t)atof(delay), (long)((atof(delay) - (double)(time_t)atof(delay)) * 1e9)};
    nanosleep(&ts, NULL);
  }
  err = mt_agree(comm, err);
  if (!err && rank == 0) {
    const char *base = strrchr(fin, '/') ? strrchr(fin, '/') + 1 : fin;
    if (rename(tmp, fin) != 0)
      err = MT_ERR(MT_ERR_FILE, "cannot rename %s to %s: %s", tmp, fin, strerror(errno));
    if (!err) err = mt_ckpt_sync_path(dir, 1);
    if (!err) err = mt_ckpt_write_latest(dir, base);
    if (!err) mt_ckpt_prune(dir, keep, meta ? meta->run_id : NULL, step);
  }
  err = mt_agree(comm, err);
  if (err) {
    if (rank == 0) unlink(tmp);
    return err;
  }
  if (path) {
    MT_CHECK(strlen(fin) < cap, MT_ERR_ARG, "checkpoint path %s does not fit", fin);
    snprintf(path, cap, "%s", fin);
  }
  return 0;
}
