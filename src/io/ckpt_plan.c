/* Checkpoint files, the division of the work among ranks: which part of
 * the flat layout each rank holds, owns (writes, sums) and reads, the
 * segments of a replicated layout, the checks of the caller's tensors, and
 * the hyperslab selection of flat ranges in a tensor's dataspace. Used by
 * the writer and the reader; calls only ckpt_format. Contracts: ckpt_plan.h. */
#include "io/ckpt_plan.h"

#include <stdlib.h>
#include <string.h>

/* ============================================ division of the flat layout */

size_t mt_ckpt_min_piece = (size_t)1 << 18;

void mt_ckpt_split(size_t total, int size, int r, size_t unit, mt_ckpt_range *out) {
  /* even split of [0, total) in whole units; the last rank takes the tail */
  size_t nu = total / unit;
  out->a = nu * (size_t)r / (size_t)size * unit;
  out->b = r + 1 == size ? total : nu * (size_t)(r + 1) / (size_t)size * unit;
}

void mt_ckpt_seg_piece(const mt_ckpt_seg *s, int j, mt_ckpt_range *out) {
  size_t unit = s->a % 16 == 0 && (s->b - s->a) % 16 == 0 ? 16 : 1;
  mt_ckpt_split(s->b - s->a, s->k, j, unit, out);
  out->a += s->a;
  out->b += s->a;
}

/* The segments of a replicated layout (see mt_ckpt_seg) and this rank's
 * pieces of them, into p->segs and p->own (allocated). */
static void make_segments(const mt_param_table *t, mt_ckpt_plan *p) {
  const size_t minp = mt_ckpt_min_piece ? mt_ckpt_min_piece : 1;
  size_t a = 0;
  int first = 0;
  for (int i = 0; i < t->n; i++) {
    size_t end = i + 1 < t->n ? t->p[i + 1].offset : t->total;
    if (end - a < minp && i + 1 < t->n) continue;
    size_t k = (end - a) / minp;
    if (k < 1) k = 1;
    if (k > (size_t)p->size) k = (size_t)p->size;
    mt_ckpt_seg *sg = &p->segs[p->nsegs++];
    sg->a = a;
    sg->b = end;
    sg->first = first;
    sg->k = (int)k;
    first = (int)(((size_t)first + k) % (size_t)p->size);
    a = end;
    int j = (p->rank - sg->first + p->size) % p->size;
    if (j < sg->k) {
      mt_ckpt_range g;
      mt_ckpt_seg_piece(sg, j, &g);
      if (g.a < g.b) p->own[p->nown++] = g;
    }
  }
}

static int range_cmp(const void *x, const void *y) {
  const mt_ckpt_range *a = x, *b = y;
  return a->a < b->a ? -1 : a->a > b->a ? 1 : 0;
}

/* Sorts and merges r[0..n) in place (empty ranges dropped); returns the
 * new count. */
static int merge_ranges(mt_ckpt_range *r, int n) {
  int m = 0;
  for (int i = 0; i < n; i++)
    if (r[i].a < r[i].b) r[m++] = r[i];
  if (m > 1) qsort(r, (size_t)m, sizeof(*r), range_cmp);
  int k = 0;
  for (int i = 0; i < m; i++) {
    if (k && r[i].a <= r[k - 1].b) {
      if (r[i].b > r[k - 1].b) r[k - 1].b = r[i].b;
    } else {
      r[k++] = r[i];
    }
  }
  return k;
}

static uint64_t table_hash(const mt_ckpt_tensors *ts) {
  const mt_param_table *t = ts->table;
  uint64_t h = mt_hash_bytes("table", 5, 0);
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    uint64_t v[3] = {(uint64_t)q->ndim, q->offset, q->numel};
    h = mt_hash_bytes(q->name, strlen(q->name) + 1, h);
    h = mt_hash_bytes(v, sizeof(v), h);
    h = mt_hash_bytes(q->shape, (size_t)q->ndim * sizeof(int64_t), h);
  }
  uint64_t v[3] = {(uint64_t)t->total, (uint64_t)ts->nbufs, (uint64_t)ts->part.sharded};
  h = mt_hash_bytes(v, sizeof(v), h);
  for (int b = 0; b < ts->nbufs; b++)
    h = mt_hash_bytes(ts->bufs[b].name, strlen(ts->bufs[b].name) + 1, h);
  return h;
}

static int check_tensors(const mt_ckpt_tensors *ts) {
  MT_CHECK(ts && ts->table && ts->bufs, MT_ERR_ARG, "checkpoint: no table or no buffers");
  const mt_param_table *t = ts->table;
  MT_CHECK(t->n >= 1, MT_ERR_ARG, "checkpoint: the parameter table is empty");
  MT_CHECK(ts->nbufs >= 1 && ts->nbufs <= MT_CKPT_MAX_BUFS, MT_ERR_ARG,
           "checkpoint: %d buffers (1 to %d)", ts->nbufs, MT_CKPT_MAX_BUFS);
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    MT_CHECK(mt_ckpt_name_ok(q->name), MT_ERR_ARG,
             "checkpoint: tensor name '%s' cannot be a dataset name", q->name);
    MT_CHECK(q->ndim >= 1 && q->ndim <= MT_MAX_DIMS && q->numel >= 1 &&
                 q->offset + q->numel <= t->total &&
                 (i == 0 || q->offset >= t->p[i - 1].offset + t->p[i - 1].numel),
             MT_ERR_ARG, "checkpoint: tensor %s is out of the table's layout", q->name);
  }
  const mt_ckpt_part *pt = &ts->part;
  MT_CHECK(!pt->sharded || pt->lo <= pt->hi, MT_ERR_ARG,
           "checkpoint: sharded part [%zu, %zu) is reversed", pt->lo, pt->hi);
  int holds = pt->sharded ? pt->lo < pt->hi && pt->lo < t->total : 1;
  for (int b = 0; b < ts->nbufs; b++) {
    const char *nm = ts->bufs[b].name;
    MT_CHECK(mt_ckpt_name_ok(nm) && strcmp(nm, MT_CKPT_STATE_GROUP), MT_ERR_ARG,
             "checkpoint: invalid buffer name '%s'", nm ? nm : "(null)");
    for (int c = 0; c < b; c++)
      MT_CHECK(strcmp(nm, ts->bufs[c].name), MT_ERR_ARG, "checkpoint: buffer %s given twice", nm);
    MT_CHECK(!holds || ts->bufs[b].data, MT_ERR_ARG, "checkpoint: buffer %s has no data", nm);
  }
  return 0;
}

int mt_ckpt_plan_make(MPI_Comm comm, const mt_ckpt_tensors *ts, mt_ckpt_plan *p) {
  memset(p, 0, sizeof(*p));
  MT_MPI(MPI_Comm_rank(comm, &p->rank));
  MT_MPI(MPI_Comm_size(comm, &p->size));
  int err = check_tensors(ts);
  uint64_t *all = NULL;
  mt_ckpt_range *r = NULL;
  if (!err) err = mt_calloc(&all, 4 * (size_t)p->size, sizeof(uint64_t), "checkpoint parts");
  if (!err) err = mt_calloc(&r, (size_t)p->size + 1, sizeof(*r), "checkpoint ranges");
  if (!err)
    err = mt_calloc(&p->own, (size_t)p->size + (size_t)ts->table->n + 1, sizeof(*p->own),
                    "checkpoint ranges");
  if (!err) err = mt_calloc(&p->segs, (size_t)ts->table->n, sizeof(*p->segs), "checkpoint segments");
  err = mt_agree(comm, err);
  if (err) goto fail;

  const size_t total = ts->table->total;
  uint64_t mine[4] = {table_hash(ts), (uint64_t)ts->part.sharded, ts->part.lo, ts->part.hi};
  if ((err = MPI_Allgather(mine, 4, MPI_UINT64_T, all, 4, MPI_UINT64_T, comm)) != MPI_SUCCESS) {
    err = mt_mpi_error(__FILE__, __LINE__, __func__, err, "MPI_Allgather");
    goto fail;
  }
  for (int q = 0; q < p->size && !err; q++)
    if (all[4 * q] != all[0])
      err = MT_ERR(MT_ERR_ARG, "checkpoint: rank %d has another parameter table, buffer list "
                   "or kind of part than rank 0", q);
  if (err) goto fail;

  if (!ts->part.sharded) {
    p->base = 0;
    p->held.a = 0;
    p->held.b = total;
    make_segments(ts->table, p);
  } else {
    p->base = ts->part.lo;
    p->held.a = ts->part.lo < total ? ts->part.lo : total;
    p->held.b = ts->part.hi < total ? ts->part.hi : total;
    /* every tensor must lie inside the union of all parts */
    for (int q = 0; q < p->size; q++) {
      r[q].a = all[4 * q + 2] < total ? all[4 * q + 2] : total;
      r[q].b = all[4 * q + 3] < total ? all[4 * q + 3] : total;
    }
    int nm = merge_ranges(r, p->size);
    for (int i = 0; i < ts->table->n && !err; i++) {
      const mt_param *t = &ts->table->p[i];
      int ok = 0;
      for (int k = 0; k < nm && !ok; k++)
        ok = r[k].a <= t->offset && t->offset + t->numel <= r[k].b;
      if (!ok)
        err = MT_ERR(MT_ERR_ARG, "checkpoint: the sharded parts of the %d ranks leave part of "
                     "tensor %s (flat elements %zu to %zu) on no rank", p->size, t->name,
                     t->offset, t->offset + t->numel);
    }
    if (err) goto fail;
    /* own = held minus what lower ranks hold */
    for (int q = 0; q < p->rank; q++) {
      r[q].a = all[4 * q + 2] < total ? all[4 * q + 2] : total;
      r[q].b = all[4 * q + 3] < total ? all[4 * q + 3] : total;
    }
    nm = merge_ranges(r, p->rank);
    size_t cur = p->held.a;
    for (int k = 0; k < nm && cur < p->held.b; k++) {
      if (r[k].b <= cur) continue;
      if (r[k].a >= p->held.b) break;
      if (r[k].a > cur) p->own[p->nown++] = (mt_ckpt_range){cur, r[k].a};
      cur = r[k].b;
    }
    if (cur < p->held.b) p->own[p->nown++] = (mt_ckpt_range){cur, p->held.b};
  }
  mt_free(&all);
  mt_free(&r);
  return 0;
fail:
  mt_free(&all);
  mt_free(&r);
  mt_ckpt_plan_free(p);
  return err;
}

void mt_ckpt_plan_free(mt_ckpt_plan *p) {
  mt_free(&p->own);
  mt_free(&p->segs);
  p->nown = p->nsegs = 0;
}

/* ====================================================== hyperslabs */

typedef struct {
  hid_t fs;
  int nd, first;
  hsize_t dims[MT_MAX_DIMS], stride[MT_MAX_DIMS], prefix[MT_MAX_DIMS];
} linsel;

/* Selects indices [i0, i0 + n) of dimension k under the fixed leading
 * indices prefix[0..k), and everything of the dimensions after k. */
static herr_t sel_block(linsel *s, int k, hsize_t i0, hsize_t n) {
  hsize_t start[MT_MAX_DIMS], count[MT_MAX_DIMS];
  for (int j = 0; j < s->nd; j++) {
    start[j] = j < k ? s->prefix[j] : j == k ? i0 : 0;
    count[j] = j < k ? 1 : j == k ? n : s->dims[j];
  }
  H5S_seloper_t op = s->first ? H5S_SELECT_SET : H5S_SELECT_OR;
  s->first = 0;
  return H5Sselect_hyperslab(s->fs, op, start, NULL, count, NULL);
}

/* Selects the row-major linear range [a, b) of the sub-array at depth k
 * (leading indices prefix[0..k)) as at most 2 (nd - k) - 1 blocks. */
static herr_t sel_linear(linsel *s, int k, hsize_t a, hsize_t b) {
  if (a >= b) return 0;
  const hsize_t st = s->stride[k];
  hsize_t ia = a / st, ra = a % st, ib = b / st, rb = b % st;
  if (ia == ib) {
    s->prefix[k] = ia;
    return sel_linear(s, k + 1, ra, rb);
  }
  if (ra) {
    s->prefix[k] = ia;
    if (sel_linear(s, k + 1, ra, st) < 0) return -1;
    ia++;
  }
  if (ib > ia && sel_block(s, k, ia, ib - ia) < 0) return -1;
  if (rb) {
    s->prefix[k] = ib;
    if (sel_linear(s, k + 1, 0, rb) < 0) return -1;
  }
  return 0;
}

int mt_ckpt_select(hid_t fs, const mt_param *q, const mt_ckpt_range *r, int nr, hid_t *ms,
                   size_t *first, size_t *count) {
  linsel s;
  memset(&s, 0, sizeof(s));
  s.fs = fs;
  s.nd = q->ndim;
  s.first = 1;
  for (int k = q->ndim - 1; k >= 0; k--) {
    s.dims[k] = (hsize_t)q->shape[k];
    s.stride[k] = k == q->ndim - 1 ? 1 : s.stride[k + 1] * s.dims[k + 1];
  }
  const size_t off = q->offset, end = q->offset + q->numel;
  size_t lo = 0, hi = 0;
  int npieces = 0;
  herr_t st = 0;
  *ms = H5I_INVALID_HID;
  *first = *count = 0;
  for (int i = 0; i < nr && st >= 0; i++) {
    size_t a = r[i].a > off ? r[i].a : off, b = r[i].b < end ? r[i].b : end;
    if (a >= b) continue;
    if (!npieces) lo = a;
    hi = b;
    npieces++;
    *count += b - a;
    st = sel_linear(&s, 0, (hsize_t)(a - off), (hsize_t)(b - off));
  }
  if (st < 0) return MT_ERR(MT_ERR_HDF5, "selecting a part of tensor %s failed", q->name);
  if (!npieces) {
    hsize_t one = 1;
    *ms = H5Screate_simple(1, &one, NULL);
    if (*ms < 0 || H5Sselect_none(*ms) < 0 || H5Sselect_none(fs) < 0)
      return MT_ERR(MT_ERR_HDF5, "making an empty selection for tensor %s failed", q->name);
    return 0;
  }
  hsize_t mlen = (hsize_t)(hi - lo);
  *ms = H5Screate_simple(1, &mlen, NULL);
  if (*ms < 0) return MT_ERR(MT_ERR_HDF5, "H5Screate_simple for tensor %s failed", q->name);
  *first = lo;
  if (npieces > 1) {
    int f1 = 1;
    for (int i = 0; i < nr && st >= 0; i++) {
      size_t a = r[i].a > off ? r[i].a : off, b = r[i].b < end ? r[i].b : end;
      if (a >= b) continue;
      hsize_t start = (hsize_t)(a - lo), cnt = (hsize_t)(b - a);
      st = H5Sselect_hyperslab(*ms, f1 ? H5S_SELECT_SET : H5S_SELECT_OR, &start, NULL, &cnt, NULL);
      f1 = 0;
    }
    if (st < 0) return MT_ERR(MT_ERR_HDF5, "selecting memory for tensor %s failed", q->name);
  }
  return 0;
}
