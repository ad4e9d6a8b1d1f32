/* Checkpoint files, the reading half: opening, the header, the structural
 * checks against the caller's table, the collective read of the slices each
 * rank needs with checksum verification, and resharding (the all-gather of
 * a replicated layout, zeroed padding). mt_ckpt_verify, which reuses the
 * opening and the header, is in ckpt_verify.c. Layout: ckpt_format.h;
 * contracts: ckpt_read.h. */
#include "io/ckpt_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ info */

void mt_ckpt_info_free(mt_ckpt_info *info) {
  if (!info) return;
  free(info->options);
  memset(info, 0, sizeof(*info));
}

/* ================================================== attribute reading */

/* A scalar numeric attribute of the file path converted to mtype; *found
 * = 0 when absent. Errors name the file and the attribute. */
static int read_num_attr(hid_t loc, const char *path, const char *name, hid_t mtype, void *v,
                         int *found) {
  htri_t ex = H5Aexists(loc, name);
  *found = ex > 0;
  if (ex <= 0)
    return ex < 0 ? MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot look up attribute %s", path, name)
                  : 0;
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  hid_t sp = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
  int ok = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1 && H5Aread(a, mtype, v) >= 0;
  if (sp >= 0) H5Sclose(sp);
  if (a >= 0) H5Aclose(a);
  MT_CHECK(ok, MT_ERR_DATA, "checkpoint %s: attribute %s is not a readable number", path, name);
  return 0;
}

/* An optional string attribute of the file path copied into buf
 * (truncated). Errors name the file and the attribute. */
static int read_str_fixed(hid_t loc, const char *path, const char *name, char *buf, size_t cap) {
  buf[0] = '\0';
  htri_t ex = H5Aexists(loc, name);
  if (ex == 0) return 0;
  char *s = NULL;
  if (ex < 0) return MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot look up attribute %s", path, name);
  if (mt_ckpt_attr_read_str(loc, name, &s)) {
    mt_error_clear();
    return MT_ERR(MT_ERR_DATA, "checkpoint %s: attribute %s is not a readable string", path, name);
  }
  snprintf(buf, cap, "%s", s);
  free(s);
  return 0;
}

/* ================================================== opening, header */

int mt_ckpt_open(MPI_Comm comm, const char *path, hid_t *fapl, hid_t *file) {
  *fapl = *file = H5I_INVALID_HID;
  int err = 0;
  if (!path || !path[0])
    err = MT_ERR(MT_ERR_ARG, "checkpoint: no file name");
  else if (access(path, R_OK) != 0)
    err = MT_ERR(MT_ERR_FILE, "checkpoint %s: no such file, or it cannot be read", path);
  else if ((*fapl = mt_ckpt_fapl(comm)) < 0)
    err = MT_ERR(MT_ERR_HDF5, "checkpoint %s: making the file access list failed", path);
  MT_CALL(mt_agree(comm, err));
  *file = H5Fopen(path, H5F_ACC_RDONLY, *fapl);
  if (*file < 0) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    err = MT_ERR(MT_ERR_FILE, "checkpoint %s: cannot be opened as HDF5 (truncated, damaged or "
                 "not an HDF5 file): %s", path, why);
  }
  return mt_agree(comm, err);
}

int mt_ckpt_read_header(hid_t f, const char *path, mt_ckpt_info *info) {
  int found = 0, fmt = 0, ws = 0;
  /* a model file (model_final.h5, model_best.h5) says what it is in a
   * string attribute format: point to -init_from rather than fail on it */
  char what[64] = "";
  hid_t fa = H5Aexists(f, "format") > 0 ? H5Aopen(f, "format", H5P_DEFAULT) : H5I_INVALID_HID;
  hid_t fty = fa >= 0 ? H5Aget_type(fa) : H5I_INVALID_HID;
  const int text = fty >= 0 && H5Tget_class(fty) == H5T_STRING;
  if (fty >= 0) H5Tclose(fty);
  if (fa >= 0) H5Aclose(fa);
  if (text) {
    MT_CALL(read_str_fixed(f, path, "format", what, sizeof(what)));
    MT_CHECK(strncmp(what, "mpitrain-params", 15), MT_ERR_DATA,
             "checkpoint %s: a model file (attribute format is '%s'), not a checkpoint: it holds "
             "parameters only; start from it with -init_from %s", path, what, path);
    return MT_ERR(MT_ERR_DATA, "checkpoint %s: attribute format is '%s', not a checkpoint's "
                  "format version (a number)", path, what);
  }
  MT_CALL(read_num_attr(f, path, "format", H5T_NATIVE_INT, &fmt, &found));
  MT_CHECK(found, MT_ERR_DATA, "checkpoint %s: not an mpitrain checkpoint (no attribute format)",
           path);
  MT_CHECK(fmt == MT_CKPT_FORMAT, MT_ERR_DATA,
           "checkpoint %s: format version %d; this mpitrain reads format version %d", path, fmt,
           MT_CKPT_FORMAT);
  info->format = fmt;
  MT_CALL(read_num_attr(f, path, "world_size", H5T_NATIVE_INT, &ws, &found));
  info->world_size = ws;
  char algo[64];
  MT_CALL(read_str_fixed(f, path, "checksum_algorithm", algo, sizeof(algo)));
  MT_CHECK(!strcmp(algo, MT_CKPT_CHECKSUM_NAME), MT_ERR_DATA,
           "checkpoint %s: unknown checksum algorithm '%s' (this mpitrain knows %s)", path, algo,
           MT_CKPT_CHECKSUM_NAME);
  MT_CALL(read_str_fixed(f, path, "mpitrain_version", info->version, sizeof(info->version)));
  MT_CALL(read_str_fixed(f, path, "backend", info->backend, sizeof(info->backend)));
  MT_CALL(read_str_fixed(f, path, "created", info->created, sizeof(info->created)));
  MT_CALL(read_str_fixed(f, path, "run_id", info->run_id, sizeof(info->run_id)));
  if (H5Aexists(f, "options") > 0) {
    if (mt_ckpt_attr_read_str(f, "options", &info->options)) {
      mt_error_clear();
      return MT_ERR(MT_ERR_DATA, "checkpoint %s: attribute options is not a readable string",
                    path);
    }
  } else {
    info->options = strdup("");
    MT_CHECK(info->options, MT_ERR_MEM, "checkpoint %s: no memory", path);
  }
  /* buffer groups: every group at the root but the state */
  H5G_info_t gi;
  MT_CHECK(H5Gget_info(f, &gi) >= 0, MT_ERR_DATA, "checkpoint %s: cannot list the root group",
           path);
  for (hsize_t i = 0; i < gi.nlinks && info->nbufs < MT_CKPT_MAX_BUFS; i++) {
    char nm[MT_NAME_MAX];
    ssize_t k = H5Lget_name_by_idx(f, ".", H5_INDEX_NAME, H5_ITER_INC, i, nm, sizeof(nm),
                                   H5P_DEFAULT);
    if (k < 0 || k >= MT_NAME_MAX || !strcmp(nm, MT_CKPT_STATE_GROUP)) continue;
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f, nm, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
        oi.type != H5O_TYPE_GROUP)
      continue;
    snprintf(info->bufs[info->nbufs++], MT_NAME_MAX, "%s", nm);
  }
  return 0;
}

/* ===================================================== read */

typedef struct {
  MPI_Comm comm;
  const char *path;
  const mt_ckpt_tensors *ts;
  const mt_ckpt_plan *pl;
  const mt_ckpt_info *info;
  hid_t dxpl, file;
  hid_t *grp, *ds;
  uint64_t *stored, *sums;
} reader;

static void buf_list(const mt_ckpt_info *info, char *buf, size_t cap) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < info->nbufs && k < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", info->bufs[i]);
  if (!info->nbufs) snprintf(buf, cap, "none");
}

/* Opens every tensor of every buffer and checks it against the table. */
static int check_structure(reader *r) {
  const mt_param_table *t = r->ts->table;
  for (int b = 0; b < r->ts->nbufs; b++) {
    const char *bn = r->ts->bufs[b].name;
    if (H5Lexists(r->file, bn, H5P_DEFAULT) <= 0) {
      char have[512];
      buf_list(r->info, have, sizeof(have));
      return MT_ERR(MT_ERR_DATA, "checkpoint %s: has no buffer /%s (it holds: %s)", r->path, bn,
                    have);
    }
    r->grp[b] = H5Gopen2(r->file, bn, H5P_DEFAULT);
    MT_CHECK(r->grp[b] >= 0, MT_ERR_DATA, "checkpoint %s: /%s is not a group", r->path, bn);
    for (int i = 0; i < t->n; i++) {
      const mt_param *q = &t->p[i];
      char ms[128], fs[128];
      mt_ckpt_shape_str(q->ndim, q->shape, ms, sizeof(ms));
      MT_CHECK(H5Lexists(r->grp[b], q->name, H5P_DEFAULT) > 0, MT_ERR_DATA,
               "checkpoint %s: has no tensor /%s/%s (shape %s in the model)", r->path, bn,
               q->name, ms);
      hid_t d = r->ds[b * t->n + i] = H5Dopen2(r->grp[b], q->name, H5P_DEFAULT);
      MT_CHECK(d >= 0, MT_ERR_DATA, "checkpoint %s: /%s/%s is not a dataset", r->path, bn, q->name);
      int nd, bits;
      int64_t shape[MT_MAX_DIMS] = {0};
      MT_CHECK(mt_ckpt_dataset_shape(d, &nd, shape, &bits) == 0, MT_ERR_DATA,
               "checkpoint %s: cannot read the shape of tensor /%s/%s", r->path, bn, q->name);
      const int want = r->ts->dtype == MT_FP64 ? 64 : 32;
      MT_CHECK(bits, MT_ERR_DATA, "checkpoint %s: tensor /%s/%s is not float32 or float64",
               r->path, bn, q->name);
      MT_CHECK(bits == want, MT_ERR_DATA,
               "checkpoint %s: tensor /%s/%s is float%d, this run (-precision fp%d) reads "
               "float%d", r->path, bn, q->name, bits, want, want);
      int same = nd == q->ndim;
      for (int k = 0; same && k < nd; k++) same = shape[k] == q->shape[k];
      if (!same) {
        if (nd > MT_MAX_DIMS) snprintf(fs, sizeof(fs), "(%d dimensions)", nd);
        else mt_ckpt_shape_str(nd, shape, fs, sizeof(fs));
        return MT_ERR(MT_ERR_DATA, "checkpoint %s: tensor /%s/%s has shape %s in the file but %s "
                      "in the model", r->path, bn, q->name, fs, ms);
      }
      MT_CHECK(mt_ckpt_checksum_read(d, r->stored + 2 * ((size_t)b * t->n + i)) == 0, MT_ERR_DATA,
               "checkpoint %s: tensor /%s/%s has no valid checksum attribute", r->path, bn,
               q->name);
    }
    H5G_info_t gi;
    MT_CHECK(H5Gget_info(r->grp[b], &gi) >= 0, MT_ERR_DATA, "checkpoint %s: cannot list /%s",
             r->path, bn);
    for (hsize_t i = 0; gi.nlinks > (hsize_t)t->n && i < gi.nlinks; i++) {
      char nm[256];
      ssize_t k = H5Lget_name_by_idx(r->grp[b], ".", H5_INDEX_NAME, H5_ITER_INC, i, nm,
                                     sizeof(nm), H5P_DEFAULT);
      MT_CHECK(k >= 0, MT_ERR_DATA, "checkpoint %s: cannot list /%s", r->path, bn);
      MT_CHECK(mt_param_table_find(t, nm), MT_ERR_DATA,
               "checkpoint %s: tensor /%s/%s is in the file but not in the model", r->path, bn,
               nm);
    }
  }
  return 0;
}

/* Reads this rank's slices of one tensor (nothing when skip) and adds the
 * checksum part of what it owns. Collective. */
static int read_tensor(reader *r, int b, int i, int skip) {
  const mt_param *q = &r->ts->table->p[i];
  const mt_ckpt_plan *pl = r->pl;
  char *data = r->ts->bufs[b].data;
  const mt_dtype dt = r->ts->dtype;
  const size_t esz = mt_ckpt_esz(dt);
  const mt_ckpt_range *rg = r->ts->part.sharded ? &pl->held : pl->own;
  int nr = skip ? 0 : r->ts->part.sharded ? 1 : pl->nown;
  hsize_t dims[MT_MAX_DIMS];
  for (int k = 0; k < q->ndim; k++) dims[k] = (hsize_t)q->shape[k];
  hid_t fs = H5Screate_simple(q->ndim, dims, NULL), ms = H5I_INVALID_HID;
  if (fs < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate_simple for tensor %s failed", q->name);
  size_t first = 0, count = 0;
  int err = mt_ckpt_select(fs, q, rg, nr, &ms, &first, &count);
  if (err) { /* still join the collective read, with nothing selected */
    if (ms >= 0) H5Sclose(ms);
    hsize_t one = 1;
    ms = H5Screate_simple(1, &one, NULL);
    if (ms >= 0) H5Sselect_none(ms);
    H5Sselect_none(fs);
    count = 0;
  }
  double dummy = 0;
  void *ptr = count ? data + (first - pl->base) * esz : (void *)&dummy;
  if (H5Dread(r->ds[b * r->ts->table->n + i], mt_ckpt_h5_mem_type(dt), ms, fs, r->dxpl, ptr) < 0 &&
      !err) {
    char why[256];
    mt_ckpt_h5_reason(why, sizeof(why));
    err = MT_ERR(MT_ERR_FILE, "checkpoint %s: reading tensor /%s/%s failed: %s", r->path,
                 r->ts->bufs[b].name, q->name, why);
  }
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  if (err || skip) return err;
  uint64_t *s = r->sums + 2 * ((size_t)b * r->ts->table->n + i);
  for (int k = 0; k < pl->nown; k++) {
    size_t a = pl->own[k].a > q->offset ? pl->own[k].a : q->offset;
    size_t e = pl->own[k].b < q->offset + q->numel ? pl->own[k].b : q->offset + q->numel;
    if (a >= e) continue;
    const char *x = data + (a - pl->base) * esz;
    mt_ckpt_sum_dt(dt, x, e - a, a - q->offset, s);
    /* a file written before the writer refused them (ckpt_write.c) */
    size_t j = mt_first_nonfinite(dt, x, e - a);
    if (j < e - a && !err)
      err = MT_ERR(MT_ERR_DATA, "checkpoint %s: tensor /%s/%s holds %s (element %zu): not "
                   "restarted from non-finite values; restart from an older checkpoint",
                   r->path, r->ts->bufs[b].name, q->name, mt_nonfinite_name(dt, x, j),
                   a - q->offset + j);
  }
  return err;
}

/* Zeroes the padding after each tensor inside z, in every buffer. */
static void zero_padding(const mt_ckpt_tensors *ts, const mt_ckpt_plan *pl, mt_ckpt_range z) {
  const mt_param_table *t = ts->table;
  const size_t esz = mt_ckpt_esz(ts->dtype);
  for (int i = 0; i < t->n; i++) {
    size_t a = t->p[i].offset + t->p[i].numel, e = i + 1 < t->n ? t->p[i + 1].offset : t->total;
    if (a < z.a) a = z.a;
    if (e > z.b) e = z.b;
    for (int b = 0; a < e && b < ts->nbufs; b++)
      memset((char *)ts->bufs[b].data + (a - pl->base) * esz, 0, (e - a) * esz);
  }
}

/* Replicated: every rank's pieces to every rank, in place, one collective
 * per segment and buffer: a broadcast from the one owner of a small
 * segment, an all-gather of the pieces of a split one. */
static int allgather(reader *r) {
  const mt_ckpt_plan *pl = r->pl;
  if (pl->size == 1) return 0;
  int *cnt = NULL, *dsp = NULL, err = 0, rc = MPI_SUCCESS;
  MPI_Datatype ty16 = MPI_DATATYPE_NULL;
  err = mt_calloc(&cnt, (size_t)pl->size, sizeof(int), "checkpoint gather counts");
  if (!err) err = mt_calloc(&dsp, (size_t)pl->size, sizeof(int), "checkpoint gather counts");
  for (int i = 0; !err && i < pl->nsegs; i++)
    if ((pl->segs[i].b - pl->segs[i].a) / 16 > (size_t)0x7fffffff)
      err = MT_ERR(MT_ERR_ARG, "checkpoint: a tensor of %zu elements is too large to all-gather",
                   pl->segs[i].b - pl->segs[i].a);
  err = mt_agree(r->comm, err);
  const MPI_Datatype ty1 = r->ts->dtype == MT_FP64 ? MPI_DOUBLE : MPI_FLOAT;
  const size_t esz = mt_ckpt_esz(r->ts->dtype);
  if (!err) rc = MPI_Type_contiguous(16, ty1, &ty16);
  if (!err && rc == MPI_SUCCESS) rc = MPI_Type_commit(&ty16);
  for (int i = 0; !err && rc == MPI_SUCCESS && i < pl->nsegs; i++) {
    const mt_ckpt_seg *sg = &pl->segs[i];
    const size_t len = sg->b - sg->a;
    const size_t unit = sg->a % 16 == 0 && len % 16 == 0 ? 16 : 1;
    memset(cnt, 0, (size_t)pl->size * sizeof(int));
    memset(dsp, 0, (size_t)pl->size * sizeof(int));
    for (int j = 0; j < sg->k; j++) {
      mt_ckpt_range g;
      mt_ckpt_seg_piece(sg, j, &g);
      int q = (sg->first + j) % pl->size;
      cnt[q] = (int)((g.b - g.a) / unit);
      dsp[q] = (int)((g.a - sg->a) / unit);
    }
    MPI_Datatype ty = unit == 16 ? ty16 : ty1;
    for (int b = 0; rc == MPI_SUCCESS && b < r->ts->nbufs; b++) {
      char *x = (char *)r->ts->bufs[b].data + sg->a * esz;
      if (sg->k == 1)
        rc = MPI_Bcast(x, (int)(len / unit), ty, sg->first, r->comm);
      else
        rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, cnt, dsp, ty, r->comm);
    }
  }
  if (!err && rc != MPI_SUCCESS)
    err = mt_mpi_error(__FILE__, __LINE__, __func__, rc, "all-gathering checkpoint tensors");
  if (ty16 != MPI_DATATYPE_NULL) MPI_Type_free(&ty16);
  mt_free(&cnt);
  mt_free(&dsp);
  return err;
}

static const char *reader_name(void *ctx, int k, char *buf, size_t cap) {
  const reader *r = ctx;
  int n = r->ts->table->n;
  snprintf(buf, cap, "/%s/%s", r->ts->bufs[k / n].name, r->ts->table->p[k % n].name);
  return buf;
}

static int read_data(reader *r) {
  const int nt = r->ts->table->n, nb = r->ts->nbufs, nds = nt * nb;
  int err = 0;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < nt; i++) {
      int e = read_tensor(r, b, i, err != 0);
      if (!err) err = e;
    }
  MT_CALL(mt_agree(r->comm, err));
  int rc = MPI_Allreduce(MPI_IN_PLACE, r->sums, 2 * nds, MPI_UINT64_T, MPI_SUM, r->comm);
  if (rc != MPI_SUCCESS) err = mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Allreduce");
  if (!err) err = mt_ckpt_checksum_compare(r->path, r->sums, r->stored, nds, reader_name, r);
  MT_CALL(mt_agree(r->comm, err));
  if (r->ts->part.sharded)
    zero_padding(r->ts, r->pl, r->pl->held);
  else
    for (int k = 0; k < r->pl->nown; k++) zero_padding(r->ts, r->pl, r->pl->own[k]);
  if (!r->ts->part.sharded) MT_CALL(allgather(r));
  return 0;
}

static int read_locked(reader *r, mt_ckpt_info *info, mt_ckpt_state *st) {
  hid_t fapl;
  int err = mt_ckpt_open(r->comm, r->path, &fapl, &r->file);
  if (fapl >= 0) H5Pclose(fapl);
  if (err) return err;
  err = mt_ckpt_read_header(r->file, r->path, info);
  if (!err) err = mt_ckpt_state_read(r->file, r->path, st);
  MT_CALL(mt_agree(r->comm, err));
  if (!r->ts) return 0;

  const int nds = r->ts->table->n * r->ts->nbufs;
  r->dxpl = mt_ckpt_dxpl();
  err = r->dxpl < 0 ? MT_ERR(MT_ERR_HDF5, "making the transfer list failed") : 0;
  if (!err) err = mt_calloc(&r->grp, (size_t)r->ts->nbufs, sizeof(hid_t), "checkpoint groups");
  for (int b = 0; !err && b < r->ts->nbufs; b++) r->grp[b] = H5I_INVALID_HID;
  if (!err) err = mt_calloc(&r->ds, (size_t)nds, sizeof(hid_t), "checkpoint datasets");
  for (int k = 0; !err && k < nds; k++) r->ds[k] = H5I_INVALID_HID;
  if (!err) err = mt_calloc(&r->stored, 2 * (size_t)nds, sizeof(uint64_t), "checkpoint sums");
  if (!err) err = mt_calloc(&r->sums, 2 * (size_t)nds, sizeof(uint64_t), "checkpoint sums");
  MT_CALL(mt_agree(r->comm, err));
  MT_CALL(mt_agree(r->comm, check_structure(r)));
  return read_data(r);
}

static int reader_close(reader *r) {
  int bad = 0;
  const int nds = r->ts ? r->ts->table->n * r->ts->nbufs : 0;
  for (int k = 0; r->ds && k < nds; k++)
    if (r->ds[k] >= 0) H5Dclose(r->ds[k]);
  for (int b = 0; r->grp && r->ts && b < r->ts->nbufs; b++)
    if (r->grp[b] >= 0) H5Gclose(r->grp[b]);
  if (r->dxpl >= 0) H5Pclose(r->dxpl);
  if (r->file >= 0 && H5Fclose(r->file) < 0) bad = 1;
  r->dxpl = r->file = H5I_INVALID_HID;
  mt_free(&r->grp);
  mt_free(&r->ds);
  mt_free(&r->stored);
  mt_free(&r->sums);
  MT_CHECK(!bad, MT_ERR_FILE, "checkpoint %s: closing the file failed", r->path);
  return 0;
}

int mt_ckpt_read(MPI_Comm comm, const char *path, const mt_ckpt_tensors *ts,
                 mt_ckpt_info *info, mt_ckpt_state *st) {
  mt_ckpt_plan pl;
  memset(&pl, 0, sizeof(pl));
  if (ts) MT_CALL(mt_ckpt_plan_make(comm, ts, &pl));
  mt_ckpt_info tinfo;
  mt_ckpt_state tst;
  memset(&tinfo, 0, sizeof(tinfo));
  memset(&tst, 0, sizeof(tst));
  reader r;
  memset(&r, 0, sizeof(r));
  r.comm = comm;
  r.path = path;
  r.ts = ts;
  r.pl = &pl;
  r.info = &tinfo;
  r.dxpl = r.file = H5I_INVALID_HID;

  mt_h5_lock();
  int err = read_locked(&r, &tinfo, &tst);
  int cerr = reader_close(&r);
  mt_h5_unlock();
  mt_ckpt_plan_free(&pl);
  if (!err) err = mt_agree(comm, cerr);
  if (err) {
    mt_ckpt_info_free(&tinfo);
    mt_ckpt_state_free(&tst);
    return err;
  }
  if (info) {
    mt_ckpt_info_free(info);
    *info = tinfo;
  } else {
    mt_ckpt_info_free(&tinfo);
  }
  if (st) {
    mt_ckpt_state_free(st);
    *st = tst;
  } else {
    mt_ckpt_state_free(&tst);
  }
  return 0;
}
