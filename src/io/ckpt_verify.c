/* Checkpoint files, verification: mt_ckpt_verify checks a checkpoint
 * without a table and without touching any buffer: it opens the file, reads
 * the header and the trainer state (ckpt_read.c's mt_ckpt_open and
 * mt_ckpt_read_header), checks every dataset of every buffer group, and at
 * MT_CKPT_CHECK_DATA reads each tensor once, split among the ranks like a
 * segment (ckpt_plan.h), and compares its checksum. Contracts: ckpt_read.h. */
#include "io/ckpt_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char (*names)[2 * MT_NAME_MAX + 2];
  uint64_t *stored, *sums;
  int n, cap;
  int next; /* the rank that reads the next tensor's first piece           */
} vlist;

static const char *vlist_name(void *ctx, int k, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", ((vlist *)ctx)->names[k]);
  return buf;
}

static int vlist_add(vlist *v, const char *g, const char *d) {
  if (v->n == v->cap) {
    int cap = v->cap ? 2 * v->cap : 64;
    void *a = realloc(v->names, (size_t)cap * sizeof(*v->names));
    if (a) v->names = a;
    void *b = a ? realloc(v->stored, 2 * (size_t)cap * sizeof(uint64_t)) : NULL;
    if (b) v->stored = b;
    void *c = b ? realloc(v->sums, 2 * (size_t)cap * sizeof(uint64_t)) : NULL;
    if (c) v->sums = c;
    MT_CHECK(c, MT_ERR_MEM, "checkpoint verification: no memory for %d tensors", cap);
    v->cap = cap;
  }
  snprintf(v->names[v->n], sizeof(v->names[0]), "/%s/%s", g, d);
  v->sums[2 * v->n] = v->sums[2 * v->n + 1] = 0;
  v->n++;
  return 0;
}

#define VERIFY_CHUNK ((size_t)4 << 20) /* elements read per call            */

/* Reads this rank's piece of dataset d in chunks and sums it: the tensor is
 * split like a segment (mt_ckpt_seg), among k ranks from *next on. Every
 * rank makes the same number of collective reads. */
static int verify_data(hid_t d, hid_t dxpl, int nd, const int64_t *shape, mt_dtype dt,
                       const mt_ckpt_plan *pl, int *next, void *scratch, const char *path,
                       const char *name,
                       uint64_t s[2]) {
  mt_param q;
  memset(&q, 0, sizeof(q));
  snprintf(q.name, sizeof(q.name), "%s", name);
  q.ndim = nd;
  q.numel = 1;
  for (int k = 0; k < nd; k++) {
    q.shape[k] = shape[k];
    q.numel *= (size_t)shape[k];
  }
  const size_t minp = mt_ckpt_min_piece ? mt_ckpt_min_piece : 1;
  mt_ckpt_seg sg = {0, q.numel, *next, 1};
  if (q.numel / minp > 1) sg.k = q.numel / minp < (size_t)pl->size ? (int)(q.numel / minp) : pl->size;
  *next = (sg.first + sg.k) % pl->size;
  mt_ckpt_range mine = {0, 0};
  int j = (pl->rank - sg.first + pl->size) % pl->size;
  if (j < sg.k) mt_ckpt_seg_piece(&sg, j, &mine);
  size_t most = 0; /* the longest piece: the number of reads */
  for (int i = 0; i < sg.k; i++) {
    mt_ckpt_range g;
    mt_ckpt_seg_piece(&sg, i, &g);
    if (g.b - g.a > most) most = g.b - g.a;
  }
  const size_t nchunks = (most + VERIFY_CHUNK - 1) / VERIFY_CHUNK;
  hsize_t dims[MT_MAX_DIMS];
  for (int k = 0; k < nd; k++) dims[k] = (hsize_t)shape[k];
  int err = 0;
  for (size_t c = 0; c < nchunks; c++) {
    mt_ckpt_range g = {mine.a + c * VERIFY_CHUNK, mine.a + (c + 1) * VERIFY_CHUNK};
    if (g.b > mine.b) g.b = mine.b;
    int have = !err && g.a < g.b;
    hid_t fs = H5Screate_simple(nd, dims, NULL), ms = H5I_INVALID_HID;
    size_t first = 0, count = 0;
    if (fs < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate_simple for %s failed", name);
    int e = mt_ckpt_select(fs, &q, &g, have, &ms, &first, &count);
    if (!e && H5Dread(d, mt_ckpt_h5_mem_type(dt), ms, fs, dxpl, scratch) < 0)
      e = MT_ERR(MT_ERR_FILE, "checkpoint %s: reading tensor %s failed", path, name);
    if (!e && count) mt_ckpt_sum_dt(dt, scratch, count, first, s);
    /* NaN or inf passes the checksum (it was written so): such a file is
     * skipped by -restart auto like a damaged one */
    size_t bad = !e && count ? mt_first_nonfinite(dt, scratch, count) : count;
    if (bad < count)
      e = MT_ERR(MT_ERR_DATA, "checkpoint %s: tensor %s holds %s (element %zu)", path, name,
                 mt_nonfinite_name(dt, scratch, bad), first + bad);
    if (ms >= 0) H5Sclose(ms);
    H5Sclose(fs);
    if (!err) err = e;
  }
  return err;
}

/* Checks every dataset of one buffer group; data errors (local) go to
 * *derr and the collective reads go on. */
static int verify_group(hid_t f, const char *path, const char *gname, mt_ckpt_check level,
                        const mt_ckpt_plan *pl, hid_t dxpl, void *scratch, vlist *v,
                        int *derr) {
  hid_t g = H5Gopen2(f, gname, H5P_DEFAULT);
  MT_CHECK(g >= 0, MT_ERR_DATA, "checkpoint %s: cannot open /%s", path, gname);
  H5G_info_t gi;
  int err = H5Gget_info(g, &gi) < 0 ? MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot list /%s",
                                             path, gname) : 0;
  for (hsize_t i = 0; !err && i < gi.nlinks; i++) {
    char nm[MT_NAME_MAX];
    ssize_t k = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nm, sizeof(nm),
                                   H5P_DEFAULT);
    if (k < 0 || k >= MT_NAME_MAX) {
      err = MT_ERR(MT_ERR_DATA, "checkpoint %s: cannot list /%s", path, gname);
      break;
    }
    if ((err = vlist_add(v, gname, nm))) break;
    const char *full = v->names[v->n - 1];
    hid_t d = H5Dopen2(g, nm, H5P_DEFAULT);
    if (d < 0) {
      err = MT_ERR(MT_ERR_DATA, "checkpoint %s: %s is not a dataset", path, full);
      break;
    }
    int nd = 0, bits = 0;
    int64_t shape[MT_MAX_DIMS] = {0};
    if (mt_ckpt_dataset_shape(d, &nd, shape, &bits) || !bits || nd < 1 || nd > MT_MAX_DIMS)
      err = MT_ERR(MT_ERR_DATA, "checkpoint %s: tensor %s is not a float32 or float64 array of 1 "
                   "to %d dimensions", path, full, MT_MAX_DIMS);
    else if (mt_ckpt_checksum_read(d, v->stored + 2 * (v->n - 1)))
      err = MT_ERR(MT_ERR_DATA, "checkpoint %s: tensor %s has no valid checksum attribute", path,
                   full);
    else if (level == MT_CKPT_CHECK_DATA) {
      int e = verify_data(d, dxpl, nd, shape, bits == 64 ? MT_FP64 : MT_FP32, pl, &v->next,
                          scratch, path, full, v->sums + 2 * (v->n - 1));
      if (!*derr) *derr = e;
    }
    H5Dclose(d);
  }
  H5Gclose(g);
  return err;
}

static int verify_locked(MPI_Comm comm, const char *path, mt_ckpt_check level,
                         const mt_ckpt_plan *pl, void *scratch) {
  hid_t fapl, f, dxpl = H5I_INVALID_HID;
  int err = mt_ckpt_open(comm, path, &fapl, &f);
  if (fapl >= 0) H5Pclose(fapl);
  if (err) return err;
  mt_ckpt_info info;
  mt_ckpt_state st;
  memset(&info, 0, sizeof(info));
  memset(&st, 0, sizeof(st));
  vlist v;
  memset(&v, 0, sizeof(v));
  err = mt_ckpt_read_header(f, path, &info);
  if (!err) err = mt_ckpt_state_read(f, path, &st);
  if (!err && (dxpl = mt_ckpt_dxpl()) < 0)
    err = MT_ERR(MT_ERR_HDF5, "making the transfer list failed");
  err = mt_agree(comm, err);
  int derr = 0;
  for (int b = 0; !err && b < info.nbufs; b++)
    err = verify_group(f, path, info.bufs[b], level, pl, dxpl, scratch, &v, &derr);
  if (!err) err = derr;
  err = mt_agree(comm, err);
  if (!err && level == MT_CKPT_CHECK_DATA && v.n) {
    int rc = MPI_Allreduce(MPI_IN_PLACE, v.sums, 2 * v.n, MPI_UINT64_T, MPI_SUM, comm);
    if (rc != MPI_SUCCESS) err = mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Allreduce");
    if (!err) err = mt_ckpt_checksum_compare(path, v.sums, v.stored, v.n, vlist_name, &v);
    err = mt_agree(comm, err);
  }
  if (dxpl >= 0) H5Pclose(dxpl);
  if (H5Fclose(f) < 0 && !err) err = MT_ERR(MT_ERR_FILE, "checkpoint %s: closing failed", path);
  free(v.names);
  free(v.stored);
  free(v.sums);
  mt_ckpt_info_free(&info);
  mt_ckpt_state_free(&st);
  return err;
}

int mt_ckpt_verify(MPI_Comm comm, const char *path, mt_ckpt_check level) {
  mt_ckpt_plan pl;
  memset(&pl, 0, sizeof(pl));
  MT_MPI(MPI_Comm_rank(comm, &pl.rank));
  MT_MPI(MPI_Comm_size(comm, &pl.size));
  double *scratch = NULL; /* room for float64 chunks */
  int err = 0;
  if (level == MT_CKPT_CHECK_DATA)
    err = mt_calloc(&scratch, VERIFY_CHUNK, sizeof(double), "checkpoint verification buffer");
  MT_CALL(mt_agree(comm, err));
  mt_h5_lock();
  err = verify_locked(comm, path, level, &pl, scratch);
  mt_h5_unlock();
  mt_free(&scratch);
  return err;
}

/* ================================================ the newest good one */
