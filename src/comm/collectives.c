/* Reduce-scatter and all-gather of flat float buffers, blocking and
 * non-blocking: the collectives of sharded (FSDP/ZeRO) training.
 *
 * Methods (MT_COLL_*, see comm.h):
 *  - RING: p-1 steps of point-to-point exchanges with the neighbours
 *    (Irecv from rank-1, Isend to rank+1), each step's block cut into
 *    segments of ring_seg floats with up to ring_window of them in flight,
 *    so the sum of one segment overlaps the transfer of the next. Reduce-
 *    scatter: step s sends block (r-s-1) mod p (its own data at step 0, the
 *    partial sum received at step s-1 afterwards) and receives block
 *    (r-s-2) mod p, adding its own data; the last step's block is r. So
 *    block b is summed in the fixed order
 *        ((x[b+1] + x[b+2]) + ...) + x[b]      (rank indices mod p),
 *    the same on every call. At 2 ranks this is the single sum x0 + x1,
 *    bit-identical to MPI_Allreduce; at 3+ ranks it may differ from
 *    MPI_Allreduce in the last bits. All-gather: step s forwards block
 *    (r-s) mod p straight from/into the output.
 *    The non-blocking form is driven by mt_coll_test / mt_coll_wait: each
 *    call completes what has arrived, sums it and posts the next segments.
 *    Uneven blocks (mt_coll_start_reduce_scatter_v, fsdp's unit
 *    gradients): block b is cnt[b] floats at dsp[b]; each step moves the
 *    segments its send and receive blocks have (an empty step is skipped by
 *    both neighbours alike), and the partial sums travel through out, or
 *    through a buffer of the largest block when out is smaller. A block
 *    with one owner among p ranks thus travels p-1 hops in turn (a tree
 *    reduce would take log2 p).
 *  - MPI: MPI_Reduce_scatter_block / MPI_Allgather (MPI_Ireduce_scatter_block /
 *    MPI_Iallgather when non-blocking, progressed by MPI_Test).
 *  - MPI_CHUNKED (reduce-scatter): MPI_Reduce_scatter_block on pieces of
 *    ring_seg floats per block, each packed into a contiguous buffer.
 *  - ALLREDUCE (reduce-scatter): MPI_Allreduce into a full-size temporary,
 *    then a copy of this rank's block.
 *  - AUTO: the choice below (mt_coll_auto_method), from the measurements in
 *    bench/README.md ("Collectives for sharding"; bench/collectives, 2 ranks
 *    on this 2-core VM, OpenMPI 4.1.4, vader with CMA, a quiet minute,
 *    median of 11). Reduce-scatter, bus bandwidth in GB/s at 64 KiB /
 *    1 MiB / 16 MiB / 64 MiB of full buffer:
 *      MPI_Allreduce (same bytes)        5.0 / 7.4 / 1.6 / 1.8
 *      (a) chunked Reduce_scatter_block  3.3 / 2.5 / 1.8 / 2.2
 *      (b) RING                          4.7 / 6.3 / 2.5 / 3.8
 *      (c) MPI_Allreduce + copy          2.2 / 3.2 / 0.4 / 0.5
 *      (d) MPI_Reduce_scatter_block      4.2 / 2.9 / 0.8 / 0.7
 *          MPI_Ireduce_scatter_block     2.2 / 3.1 / 0.6 / 0.7
 *    The ring takes 0.53-0.75x an all-reduce's time up to 4 MiB and
 *    0.18-0.32x from 16 MiB (also with single-copy off), and beats every
 *    other method at every size: AUTO = RING for the reduce-scatter.
 *    All-gather: MPI_Allgather and the ring tie within ~10 % (the ring
 *    ahead at 2-4 MiB, MPI at 64 MiB): AUTO = MPI. Non-blocking, with a
 *    20 ms GEMM-like loop calling mt_coll_test between 96x96 blocks: on 2
 *    cores neither form overlaps much (both cores compute; shared-memory
 *    copies need them), so the shorter transfer wins: AUTO = RING for the
 *    reduce-scatter (22 vs 31 ms at 16 MiB), MPI_Iallgather (a tie) for
 *    the all-gather.
 *
 * Counts of MPI calls are int: the RING method cuts everything into segments
 * and takes any size; the MPI methods need shard_n * size <= INT_MAX. */
#include "comm/comm.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#define RING_MAXW 8
/* tags of the point-to-point messages: one per operation, cycling, so
 * several operations in flight on one communicator never match each other's
 * messages (operations are started in the same order on every rank) */
#define TAG_BASE 0x4d00
#define TAG_SPAN 1024

enum { KIND_RS = 1, KIND_AG = 2 };

static size_t ring_seg = (size_t)1 << 16; /* floats per segment (256 KiB) */
static int ring_window = 4;               /* segments in flight           */
/* what MT_COLL_AUTO means for the non-blocking forms (see above) */
#define NB_AUTO(kind) ((kind) == KIND_RS ? MT_COLL_RING : MT_COLL_MPI)

struct mt_coll {
  int kind, method;
  MPI_Comm comm;
  int rank, size, tag;
  float *out;
  const float *in;
  size_t n; /* shard_n (equal blocks); the largest block (reduce_scatter_v) */
  /* RING: block b is cnt[b] elements at dsp[b] of the full buffer */
  size_t *cnt, *dsp;
  float *work; /* the partial sums forwarded: out, or a buffer of n floats
                  when this rank's block is smaller than another's     */
  int step, window;
  size_t seg, nseg, kp, kc; /* segment size; the step's segment count;
                               next to post / complete                  */
  size_t nsend, nrecv;      /* the step's segments sent and received      */
  float *tmp;               /* window * seg floats (reduce-scatter)        */
  MPI_Request req[2 * RING_MAXW];
  /* MPI non-blocking */
  MPI_Request mreq;
  int done;
};

void mt_coll_set_ring(size_t segment_floats, int window) {
  if (segment_floats > 0) ring_seg = segment_floats < INT_MAX ? segment_floats : INT_MAX;
  if (window > 0) ring_window = window < RING_MAXW ? window : RING_MAXW;
}

static int tag_keyval = MPI_KEYVAL_INVALID;

/* The next operation's tag on comm: a counter cached on the communicator. */
static int next_tag(MPI_Comm comm, int *tag) {
  if (tag_keyval == MPI_KEYVAL_INVALID)
    MT_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &tag_keyval,
                                  NULL));
  void *v = NULL;
  int flag = 0;
  MT_MPI(MPI_Comm_get_attr(comm, tag_keyval, &v, &flag));
  uintptr_t seq = flag ? (uintptr_t)v : 0;
  *tag = TAG_BASE + (int)(seq % TAG_SPAN);
  MT_MPI(MPI_Comm_set_attr(comm, tag_keyval, (void *)(seq + 1)));
  return 0;
}

/* out[i] = a[i] + b[i]: one vectorised pass */
static void add_to(float *restrict out, const float *restrict a, const float *restrict b,
                   size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static int overlaps(const void *a, size_t abytes, const void *b, size_t bbytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bbytes && y < x + abytes;
}

int mt_coll_auto_method(int all_gather, size_t shard_n, int size) {
  if (shard_n * (size_t)size > INT_MAX) return MT_COLL_RING;
  return all_gather ? MT_COLL_MPI : MT_COLL_RING;
}

/* ------------------------------------------------------------------ ring */

static size_t nseg_of(const mt_coll *h, size_t count) { return (count + h->seg - 1) / h->seg; }

/* The blocks step s sends and receives (and, for the reduce-scatter, sums
 * into the partial sums or, at the last step, into out). */
static size_t send_block(const mt_coll *h) {
  int p = h->size, d = h->kind == KIND_RS ? 1 : 0;
  return (size_t)((h->rank - h->step - d + 2 * p) % p);
}
static size_t recv_block(const mt_coll *h) {
  int p = h->size, d = h->kind == KIND_RS ? 2 : 1;
  return (size_t)((h->rank - h->step - d + 2 * p) % p);
}

/* Posts segment k of the step: the send of block send_block's k-th piece
 * (if it has one) and the receive of recv_block's (if it has one). */
static int ring_post(mt_coll *h, size_t k) {
  int p = h->size, r = h->rank, slot = (int)(k % (size_t)h->window);
  size_t sb = send_block(h), rb = recv_block(h), off = k * h->seg;
  if (k < h->nrecv) {
    size_t len = h->cnt[rb] - off < h->seg ? h->cnt[rb] - off : h->seg;
    float *rbuf = h->kind == KIND_RS ? h->tmp + (size_t)slot * h->seg : h->out + h->dsp[rb] + off;
    MT_MPI(MPI_Irecv(rbuf, (int)len, MPI_FLOAT, (r - 1 + p) % p, h->tag, h->comm,
                     &h->req[2 * slot]));
  }
  if (k < h->nsend) {
    size_t len = h->cnt[sb] - off < h->seg ? h->cnt[sb] - off : h->seg;
    const float *sbuf;
    if (h->kind == KIND_RS)
      sbuf = (h->step == 0 ? h->in + h->dsp[sb] : h->work) + off;
    else
      sbuf = (h->step == 0 ? h->in : h->out + h->dsp[sb]) + off;
    MT_MPI(MPI_Isend(sbuf, (int)len, MPI_FLOAT, (r + 1) % p, h->tag, h->comm,
                     &h->req[2 * slot + 1]));
  }
  return 0;
}

/* Starts step h->step (and skips steps with nothing to move). */
static int ring_post_step(mt_coll *h) {
  for (; h->step < h->size - 1; h->step++) {
    h->nsend = nseg_of(h, h->cnt[send_block(h)]);
    h->nrecv = nseg_of(h, h->cnt[recv_block(h)]);
    h->nseg = h->nsend > h->nrecv ? h->nsend : h->nrecv;
    h->kc = h->kp = 0;
    if (h->nseg) break;
  }
  while (h->kp < h->nseg && h->kp < (size_t)h->window) MT_CALL(ring_post(h, h->kp++));
  return 0;
}

/* Completes what it can (all of it when block), posting further segments. */
static int ring_progress(mt_coll *h, int block) {
  int p = h->size;
  while (h->step < p - 1) {
    int slot = (int)(h->kc % (size_t)h->window), flag = 1;
    if (block)
      MT_MPI(MPI_Waitall(2, &h->req[2 * slot], MPI_STATUSES_IGNORE));
    else
      MT_MPI(MPI_Testall(2, &h->req[2 * slot], &flag, MPI_STATUSES_IGNORE));
    if (!flag) return 0;
    if (h->kind == KIND_RS && h->kc < h->nrecv) {
      size_t rb = recv_block(h), off = h->kc * h->seg;
      size_t len = h->cnt[rb] - off < h->seg ? h->cnt[rb] - off : h->seg;
      float *dst = (h->step == p - 2 ? h->out : h->work) + off;
      add_to(dst, h->tmp + (size_t)slot * h->seg, h->in + h->dsp[rb] + off, len);
    }
    h->kc++;
    if (h->kp < h->nseg) MT_CALL(ring_post(h, h->kp++));
    if (h->kc == h->nseg) {
      h->step++;
      MT_CALL(ring_post_step(h));
    }
  }
  h->done = 1;
  return 0;
}

/* ------------------------------------------------------ MPI-based methods */

static int rs_chunked(float *out, const float *in, size_t n, MPI_Comm comm, int p) {
  size_t c = n < ring_seg ? n : ring_seg;
  float *pack = NULL;
  MT_CALL(mt_calloc(&pack, c * (size_t)p, sizeof(float), "reduce-scatter pack buffer"));
  int rc = MPI_SUCCESS;
  for (size_t off = 0; off < n && rc == MPI_SUCCESS; off += c) {
    size_t len = n - off < c ? n - off : c;
    for (int b = 0; b < p; b++)
      memcpy(pack + (size_t)b * len, in + (size_t)b * n + off, len * sizeof(float));
    rc = MPI_Reduce_scatter_block(pack, out + off, (int)len, MPI_FLOAT, MPI_SUM, comm);
  }
  mt_free(&pack);
  if (rc != MPI_SUCCESS)
    return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Reduce_scatter_block");
  return 0;
}

static int rs_allreduce(float *out, const float *in, size_t n, MPI_Comm comm, int r, int p) {
  float *full = NULL;
  MT_CALL(mt_calloc(&full, n * (size_t)p, sizeof(float), "all-reduce buffer"));
  int rc = MPI_Allreduce(in, full, (int)(n * (size_t)p), MPI_FLOAT, MPI_SUM, comm);
  if (rc == MPI_SUCCESS) memcpy(out, full + (size_t)r * n, n * sizeof(float));
  mt_free(&full);
  if (rc != MPI_SUCCESS) return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Allreduce");
  return 0;
}

/* --------------------------------------------------------------- handles */

/* The ring's blocks: equal blocks of h->n (counts NULL), or counts[b]
 * elements at displs[b] (reduce_scatter_v; h->n becomes the largest). The
 * partial sums go through out when no block is larger than this rank's. */
static int ring_blocks(mt_coll *h, const int *counts, const int *displs) {
  const int p = h->size;
  h->window = ring_window;
  MT_CALL(mt_calloc(&h->cnt, (size_t)p, sizeof(size_t), "ring blocks"));
  MT_CALL(mt_calloc(&h->dsp, (size_t)p, sizeof(size_t), "ring blocks"));
  size_t most = 0;
  for (int b = 0; b < p; b++) {
    h->cnt[b] = counts ? (size_t)counts[b] : h->n;
    h->dsp[b] = counts ? (size_t)displs[b] : (size_t)b * h->n;
    if (h->cnt[b] > most) most = h->cnt[b];
  }
  h->n = most;
  h->seg = most < ring_seg ? (most ? most : 1) : ring_seg;
  h->work = h->out;
  if (h->kind == KIND_RS && p > 2 && most > h->cnt[h->rank])
    MT_CALL(mt_calloc(&h->work, most, sizeof(float), "ring partial sums"));
  return 0;
}


/* The fields every handle starts with (nothing allocated). */
static int handle_init(mt_coll *h, int kind, float *out, const float *in, size_t n,
                       MPI_Comm comm) {
  memset(h, 0, sizeof(*h));
  h->kind = kind;
  h->comm = comm;
  h->out = out;
  h->in = in;
  h->n = n;
  h->mreq = MPI_REQUEST_NULL;
  for (int i = 0; i < 2 * RING_MAXW; i++) h->req[i] = MPI_REQUEST_NULL;
  MT_MPI(MPI_Comm_rank(comm, &h->rank));
  MT_MPI(MPI_Comm_size(comm, &h->size));
  return 0;
}

static int coll_init(mt_coll *h, int kind, int method, float *out, const float *in, size_t n,
                     MPI_Comm comm) {
  MT_CALL(handle_init(h, kind, out, in, n, comm));
  MT_CHECK(n == 0 || (out && in), MT_ERR_ARG, "collective on a NULL buffer");
  int p = h->size;
  size_t full = n * (size_t)p;
  MT_CHECK(n <= SIZE_MAX / sizeof(float) / (size_t)p, MT_ERR_ARG, "collective of %zu x %d floats "
           "overflows", n, p);
  if (kind == KIND_RS)
    MT_CHECK(!overlaps(out, n * sizeof(float), in, full * sizeof(float)), MT_ERR_ARG,
             "reduce-scatter: the shard must not overlap the input");
  else
    MT_CHECK(in == out + (size_t)h->rank * n || !overlaps(out, full * sizeof(float), in,
             n * sizeof(float)), MT_ERR_ARG, "all-gather: the shard overlaps the output other "
             "than at this rank's block");
  if (method == MT_COLL_AUTO) method = mt_coll_auto_method(kind == KIND_AG, n, p);
  MT_CHECK(method >= MT_COLL_RING && method <= MT_COLL_ALLREDUCE, MT_ERR_ARG,
           "unknown collective method %d", method);
  MT_CHECK(kind == KIND_RS || method == MT_COLL_RING || method == MT_COLL_MPI, MT_ERR_ARG,
           "all-gather has no method %d", method);
  MT_CHECK(method == MT_COLL_RING || full <= INT_MAX, MT_ERR_ARG,
           "collective of %zu floats: too many for one MPI call (use the ring)", full);
  h->method = method;
  if (n == 0) return 0;
  /* this rank's own block: a copy when alone, the all-gather's own part */
  if (kind == KIND_RS && p == 1) memcpy(out, in, n * sizeof(float));
  if (kind == KIND_AG && in != out + (size_t)h->rank * n)
    memcpy(out + (size_t)h->rank * n, in, n * sizeof(float));
  if (method == MT_COLL_RING && p > 1) {
    MT_CALL(next_tag(comm, &h->tag));
    MT_CALL(ring_blocks(h, NULL, NULL));
  }
  return 0;
}

static void coll_free(mt_coll *h) {
  if (h->work != h->out) mt_free(&h->work);
  mt_free(&h->tmp);
  mt_free(&h->cnt);
  mt_free(&h->dsp);
}

/* Starts the work of an initialised handle (non-blocking methods). */
static int coll_begin(mt_coll *h) {
  if (h->n == 0 || h->size == 1) return 0;
  if (h->method == MT_COLL_RING) {
    if (h->kind == KIND_RS) {
      size_t ns = nseg_of(h, h->n), w = ns < (size_t)h->window ? ns : (size_t)h->window;
      MT_CALL(mt_calloc(&h->tmp, w * h->seg, sizeof(float), "ring reduce-scatter buffers"));
    }
    return ring_post_step(h);
  }
  int n = (int)h->n;
  if (h->kind == KIND_RS)
    MT_MPI(MPI_Ireduce_scatter_block(h->in, h->out, n, MPI_FLOAT, MPI_SUM, h->comm, &h->mreq));
  else
    MT_MPI(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h->out, n, MPI_FLOAT, h->comm,
                          &h->mreq));
  return 0;
}

static int coll_progress(mt_coll *h, int block) {
  if (h->done || h->n == 0 || h->size == 1) {
    h->done = 1;
    return 0;
  }
  if (h->method == MT_COLL_RING) return ring_progress(h, block);
  int flag = 1;
  if (block)
    MT_MPI(MPI_Wait(&h->mreq, MPI_STATUS_IGNORE));
  else
    MT_MPI(MPI_Test(&h->mreq, &flag, MPI_STATUS_IGNORE));
  h->done = flag;
  return 0;
}

/* Blocking operation: the MPI methods call their blocking collective; the
 * ring runs on a handle on the stack. */
static int coll_run(int kind, int method, float *out, const float *in, size_t n, MPI_Comm comm) {
  mt_coll h;
  int ierr = coll_init(&h, kind, method, out, in, n, comm);
  if (ierr) coll_free(&h);
  MT_CALL(ierr);
  if (n == 0 || h.size == 1) return 0;
  int p = h.size;
  if (h.method == MT_COLL_MPI && kind == KIND_RS)
    MT_MPI(MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, comm));
  else if (h.method == MT_COLL_MPI)
    MT_MPI(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, (int)n, MPI_FLOAT, comm));
  else if (h.method == MT_COLL_MPI_CHUNKED)
    MT_CALL(rs_chunked(out, in, n, comm, p));
  else if (h.method == MT_COLL_ALLREDUCE)
    MT_CALL(rs_allreduce(out, in, n, comm, h.rank, p));
  else {
    int err = coll_begin(&h);
    if (!err) err = ring_progress(&h, 1);
    coll_free(&h);
    MT_CALL(err);
  }
  return 0;
}

int mt_reduce_scatter_method(float *shard_out, const float *full_in, size_t shard_n,
                             MPI_Comm comm, int method) {
  MT_CALL(coll_run(KIND_RS, method, shard_out, full_in, shard_n, comm));
  return 0;
}

int mt_reduce_scatter(float *shard_out, const float *full_in, size_t shard_n, MPI_Comm comm) {
  MT_CALL(coll_run(KIND_RS, MT_COLL_AUTO, shard_out, full_in, shard_n, comm));
  return 0;
}

int mt_all_gather_method(float *full_out, const float *shard_in, size_t shard_n, MPI_Comm comm,
                         int method) {
  MT_CALL(coll_run(KIND_AG, method, full_out, shard_in, shard_n, comm));
  return 0;
}

int mt_all_gather(float *full_out, const float *shard_in, size_t shard_n, MPI_Comm comm) {
  MT_CALL(coll_run(KIND_AG, MT_COLL_AUTO, full_out, shard_in, shard_n, comm));
  return 0;
}

/* A started handle to the caller, or (err) freed and the error returned. */
static int hand_over(mt_coll **out, mt_coll *h, int err) {
  if (err) {
    coll_free(h);
    mt_free(&h);
    MT_CALL(err);
  }
  *out = h;
  return 0;
}

static int coll_start(mt_coll **out, int kind, int method, float *o, const float *in, size_t n,
                      MPI_Comm comm) {
  *out = NULL;
  if (method == MT_COLL_AUTO) {
    int p = 1;
    MT_MPI(MPI_Comm_size(comm, &p));
    method = n * (size_t)p > INT_MAX ? MT_COLL_RING : NB_AUTO(kind);
  }
  mt_coll *h = NULL;
  MT_CALL(mt_calloc(&h, 1, sizeof(*h), "collective handle"));
  int err = coll_init(h, kind, method, o, in, n, comm);
  if (!err && h->method != MT_COLL_RING && h->method != MT_COLL_MPI)
    err = MT_ERR(MT_ERR_ARG, "method %d has no non-blocking form", h->method);
  if (!err) err = coll_begin(h);
  MT_CALL(hand_over(out, h, err));
  return 0;
}

int mt_coll_start_reduce_scatter(mt_coll **h, float *shard_out, const float *full_in,
                                 size_t shard_n, MPI_Comm comm, int method) {
  MT_CALL(coll_start(h, KIND_RS, method, shard_out, full_in, shard_n, comm));
  return 0;
}

int mt_coll_start_reduce_scatter_v(mt_coll **out, float *shard_out, const float *full_in,
                                   const int *counts, const int *displs, MPI_Comm comm) {
  *out = NULL;
  mt_coll *h = NULL;
  MT_CALL(mt_calloc(&h, 1, sizeof(*h), "collective handle"));
  int err = handle_init(h, KIND_RS, shard_out, full_in, 0, comm);
  h->method = MT_COLL_RING;
  for (int b = 0; !err && b < h->size; b++)
    if (counts[b] < 0 || displs[b] < 0 || (counts[b] && !full_in) ||
        (b == h->rank && counts[b] &&
         (!shard_out || overlaps(shard_out, (size_t)counts[b] * sizeof(float),
                                 full_in + displs[b], (size_t)counts[b] * sizeof(float)))))
      err = MT_ERR(MT_ERR_ARG, "reduce_scatter_v: block %d (%d at %d) is invalid or overlaps the "
                   "output", b, counts[b], displs[b]);
  if (!err && h->size == 1 && counts[0])
    memcpy(shard_out, full_in + displs[0], (size_t)counts[0] * sizeof(float));
  if (!err && h->size > 1) err = next_tag(comm, &h->tag);
  if (!err && h->size > 1) err = ring_blocks(h, counts, displs);
  if (!err) err = coll_begin(h);
  MT_CALL(hand_over(out, h, err));
  return 0;
}

int mt_coll_start_all_gather(mt_coll **h, float *full_out, const float *shard_in, size_t shard_n,
                             MPI_Comm comm, int method) {
  MT_CALL(coll_start(h, KIND_AG, method, full_out, shard_in, shard_n, comm));
  return 0;
}

int mt_coll_test(mt_coll *h, int *done) {
  *done = 1;
  if (!h) return 0;
  MT_CALL(coll_progress(h, 0));
  *done = h->done;
  return 0;
}

int mt_coll_wait(mt_coll **h) {
  if (!h || !*h) return 0;
  int err = coll_progress(*h, 1);
  coll_free(*h);
  mt_free(h);
  MT_CALL(err);
  return 0;
}
