/* Checkpoint files, the division of the work among ranks: the tensors a
 * caller writes or reads (mt_ckpt_tensors: a table, flat buffers and which
 * part of them this rank holds), the plan saying what each rank holds, owns
 * (writes, sums for the checksum) and reads, and the selection of flat
 * ranges in a tensor's HDF5 dataspace. The writer (ckpt_write.c) and the
 * reader (ckpt_read.c, ckpt_verify.c) sit on it; tests/test_checkpoint.c and
 * bench/ckpt_bench.c use the plan directly. Above ckpt_format. */
#ifndef MT_CKPT_PLAN_H
#define MT_CKPT_PLAN_H

#include "io/ckpt_format.h"

/* -------------------------------------------------------------- tensors */

/* One flat buffer laid out by the table: params, momentum_buffer, exp_avg,
 * exp_avg_sq, master weights. name is its group in the file (1 to
 * MT_NAME_MAX-1 characters, no '/', not "trainer_state"). */
typedef struct {
  const char *name;
  void *data; /* float or double (mt_ckpt_tensors.dtype). replicated:
                 element 0 of the flat buffer; sharded: element lo (may be
                 NULL when this rank holds nothing). Read only when
                 writing. */
} mt_ckpt_buf;

/* Which elements of every flat buffer this rank holds. */
typedef struct {
  int sharded;   /* 0: replicated, every rank holds all of [0, total)      */
  size_t lo, hi; /* sharded: this rank holds [lo, hi) of the flat layout   */
} mt_ckpt_part;

static inline mt_ckpt_part mt_ckpt_replicated(void) {
  mt_ckpt_part p = {0, 0, 0};
  return p;
}
static inline mt_ckpt_part mt_ckpt_shard(size_t lo, size_t hi) {
  mt_ckpt_part p = {1, lo, hi};
  return p;
}

/* What to write or read: the buffers (same table, same part) of one model.
 *  - replicated (as under ddp): every large tensor is split among ranks
 *    (mt_ckpt_seg below) and each rank writes its disjoint pieces, so every
 *    collective write keeps the ranks busy together; when reading, each
 *    rank reads its pieces collectively, checks them, and the pieces are
 *    all-gathered so every rank ends with every tensor.
 *  - sharded (fsdp): rank r holds [lo_r, hi_r). Together the parts must
 *    cover every tensor element; they may overlap (replicated shards, as
 *    hybrid_shard): an element held by several ranks is written once, by the
 *    lowest of them. Elements at or past table->total are ignored.
 * Every rank passes the same table, buffer names and kind of part. Padding
 * elements between tensors are not stored; a read sets them to zero. */
typedef struct {
  const mt_param_table *table;
  const mt_ckpt_buf *bufs;
  int nbufs;
  mt_ckpt_part part;
  mt_dtype dtype; /* MT_FP32 (zero): float buffers, float32 datasets;
                     MT_FP64: double buffers, float64 datasets. A read
                     refuses a file of the other type, naming the tensor. */
} mt_ckpt_tensors;

/* ------------------------------------- the plan (writer, reader, tests) */

typedef struct {
  size_t a, b; /* [a, b) */
} mt_ckpt_range;

/* Replicated buffers are divided into segments: runs of consecutive
 * tensors (with their padding) of at least mt_ckpt_min_piece elements, or
 * the tail. A segment is split evenly among k = clamp(length /
 * mt_ckpt_min_piece, 1, size) ranks, first, first+1, ... (mod size), and
 * the next segment starts at the rank after them. So every collective
 * write or read of a large tensor keeps several ranks busy with pieces of
 * at least mt_ckpt_min_piece elements, and the load rotates over ranks. */
typedef struct {
  size_t a, b;  /* flat range                                               */
  int first, k; /* ranks first .. first + k - 1 (mod size) hold its pieces  */
} mt_ckpt_seg;

/* Elements per piece at least (default 256 Ki = 1 MiB of floats). A tuning
 * knob; tests lower it to split small tables. Same value on every rank. */
extern size_t mt_ckpt_min_piece;

/* Piece j of segment s (16-element aligned when the segment is). */
void mt_ckpt_seg_piece(const mt_ckpt_seg *s, int j, mt_ckpt_range *out);

/* How the flat layout is divided: what this rank holds (reads or has) and
 * what it owns (writes, and sums for the checksum). Owned ranges of all
 * ranks are disjoint and cover every tensor. */
typedef struct {
  int rank, size;
  size_t base;          /* flat index of bufs[i].data[0]                    */
  mt_ckpt_range held;   /* clipped to [0, total)                            */
  mt_ckpt_range *own;   /* sorted, disjoint                                 */
  int nown;
  mt_ckpt_seg *segs;    /* replicated only                                  */
  int nsegs;
} mt_ckpt_plan;

/* Checks ts on every rank (names, ranks agreeing on the table, parts
 * covering every tensor) and makes the plan. Collective. p's ranges point
 * to memory it owns (mt_ckpt_plan_free); ts's buffers are not touched. On a
 * failure (MT_ERR_ARG naming the tensor or rank at fault, MT_ERR_MEM,
 * MT_ERR_MPI; the same on every rank) p holds nothing. */
int mt_ckpt_plan_make(MPI_Comm comm, const mt_ckpt_tensors *ts, mt_ckpt_plan *p);
/* Frees p's ranges and segments; p may be zero-filled. */
void mt_ckpt_plan_free(mt_ckpt_plan *p);
/* Rank r's part of [0, total) split evenly among size ranks in whole units
 * (the last rank takes the remainder). */
void mt_ckpt_split(size_t total, int size, int r, size_t unit, mt_ckpt_range *out);

/* Selects in the file dataspace fs of tensor q the elements of the flat
 * ranges r[0..nr) (sorted, disjoint) and makes *ms, the matching memory
 * dataspace; *first receives the flat index of the first element in memory
 * and *count the number selected (0: both selections empty, *ms valid).
 * The caller closes *ms (when >= 0, also after a failure: MT_ERR_HDF5
 * naming the tensor). */
int mt_ckpt_select(hid_t fs, const mt_param *q, const mt_ckpt_range *r, int nr, hid_t *ms,
                   size_t *first, size_t *count);

#endif
