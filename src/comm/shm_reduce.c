/* All-reduce through a shared-memory window (comm/shm_reduce.h).
 *
 * Why: OpenMPI's MPI_Allreduce inside a node moves the data by point-to-
 * point copies through its shared-memory transport, and at 16-64 MiB on 2
 * ranks reaches ~2-6 GB/s of bus bandwidth against a memory system that
 * streams ~40-60 GB/s (issue 21). Here each rank reads the others' data
 * where it lies, the way NCCL's and oneCCL's in-node algorithms do.
 *
 * The window: each rank's segment is a line of 128 bytes holding its
 * counter, then two slots of slot bytes (set 0 and set 1). Chunk c of a
 * buffer (slot bytes at most) goes through set c % 2:
 *   1. copy-in: the rank copies its chunk into its slot of the set, but
 *      for its own slice (a rank with a slice reads that from its buffer);
 *   2. arrive 2c+1, wait until every rank has;
 *   3. rank j < L sums slice j over the ranks in local rank order into
 *      its slot's slice j; with several nodes, MPI_Allreduce of that slice
 *      with the ranks of local index j on the other nodes;
 *   4. arrive 2c+2, wait until every rank has;
 *   5. copy-out: every rank copies the reduced slices into its buffer.
 * A rank writes set c % 2 again only at chunk c + 2, after step 2 of chunk
 * c + 1, which every rank reaches only when done reading chunk c: two sets
 * and two waits per chunk suffice. The counters are C11 atomics in the
 * shared memory: the release store of a counter publishes the stores before
 * it (the slot's data), the acquire loads of the waiting rank see them.
 * (MT_SHM_SYNC_BARRIER waits with MPI_Win_sync + MPI_Barrier instead, for
 * the measurement in bench/README.md.) Chunks of 1 MiB by default keep a
 * chunk's copies and sums in the caches, so the data crosses memory once
 * in and once out.
 *
 * A buffer already in a window (mt_shm_buffer: ddp's gradients, where the
 * backward writes them) needs no copy in, nor chunks: a second window holds
 * each rank's header line, then its buffer. For a call on [off, off + n) of
 * it:
 *   1. arrive 2c+1 (c counts these calls), wait until every rank has: every
 *      rank's range is final;
 *   2. rank j < L sums slice j of the range over the ranks' buffers in local
 *      rank order, a piece of 16 KiB at a time into a scratch piece (it stays
 *      in the cache), and writes it into every rank's buffer (with several
 *      nodes: into its own; once the slice is done and all-reduced with
 *      local index j of the other nodes, from there into the others');
 *   3. arrive 2c+2, wait until every rank has.
 * Slice j of any rank's buffer is read and written by rank j alone in step 2,
 * and rank j reads each piece of it before writing it, so the sums write in
 * place. After step 3 no rank reads or writes another's buffer: the range is
 * the caller's again (the next backward may write it) with no third wait.
 * Per rank that is the buffer read once and written once (pull by the others
 * and copy-out would be 2.5x; the copy-in path's 4.5x). The element sums are
 * the copy-in path's, in the same order: the same bits (across more than 2
 * nodes MPI_Allreduce's order, which may depend on the count, is its own). */
#define _GNU_SOURCE /* syscall */
#include "comm/shm_reduce.h"
#include "core/core.h"
#include "nn/precision.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HDR 128                      /* a rank's counter, alone on its lines */
#define ALIGN 64                     /* slices start on cache lines           */
#define DEFAULT_CHUNK ((size_t)1 << 20)
#define PIECE ((size_t)16384)         /* the in-place sum's scratch, in L1/L2  */
/* mt_shm_reduce_apply's scratch, in L2: its pieces go on to an optimizer
 * step of 4-5 streams, which ran 10% faster over 256 KiB pieces than over
 * 16 KiB ones (X1, 2 ranks, a 4096-wide MLP's 80 MB) */
#define APPLY_PIECE ((size_t)262144)

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the counters must be lock-free atomics: they are "
               "shared between processes");

/* A window: each rank's segment, in this process's address space, starts
 * with its header line (the counters). */
typedef struct {
  MPI_Win win;
  int locked;     /* MPI_Win_lock_all held                               */
  char **seg;     /* each rank's segment (lsize)                         */
} shwin;

struct mt_shm_reduce {
  MPI_Comm comm;  /* every rank (a duplicate of the caller's)            */
  MPI_Comm node;  /* the ranks sharing memory                            */
  MPI_Comm cross; /* local index j (< L) of every node; MPI_COMM_NULL past L */
  int lrank, lsize, L, nnodes, sync;
  int alone;      /* every node has one rank: no window, MPI across only */
  size_t chunk;   /* the most bytes per slot                              */
  size_t slot;    /* bytes per slot now (0: no window yet)                */
  shwin w;        /* the slots of the copy-in path                        */
  const void **src; /* the sources of a slice's sum (lsize)             */
  uint64_t seq;   /* chunks done since the window was made               */
  shwin b;        /* mt_shm_buffer's: the ranks' buffers                   */
  MPI_Win p;      /* mt_shm_shared's: one buffer of the node's, in local
                     rank 0's segment (MPI_WIN_NULL: none)               */
  size_t bbytes;  /* bytes of each rank's buffer (0: none)                */
  uint64_t bseq;  /* in-place calls since it was made                     */
  void *piece;    /* the in-place sum's scratch (PIECE bytes)             */
  void *apiece;   /* mt_shm_reduce_apply's (APPLY_PIECE bytes), at its first call */
  double bytes_in_place, bytes_copied; /* summed by each path so far     */
  MPI_Op op_bf16, op_fp16;
};

static void free_shared(mt_shm_reduce *s);

static const size_t esz_[] = {[MT_SHM_F32] = 4, [MT_SHM_F64] = 8, [MT_SHM_BF16] = 2,
                              [MT_SHM_FP16] = 2};

int mt_allreduce_option(int *method) {
  char s[16];
  MT_CALL(mt_option_string(MT_ALLREDUCE_OPTION,
                           "ddp: how gradient buckets are summed: auto (shm on the CPU, but mpi "
                           "under -ddp_comm_thread 0 with overlap, and on a GPU) | mpi "
                           "(MPI_Allreduce) | shm (the node's ranks reduce slices in a "
                           "shared-memory window; across nodes MPI_Allreduce of the slices)",
                           "auto", s, sizeof(s)));
  if (!strcmp(s, "auto"))
    *method = MT_ALLREDUCE_AUTO;
  else if (!strcmp(s, "mpi"))
    *method = MT_ALLREDUCE_MPI;
  else if (!strcmp(s, "shm"))
    *method = MT_ALLREDUCE_SHM;
  else
    return MT_ERR(MT_ERR_OPTION, "option %s: '%s' is not auto, mpi or shm", MT_ALLREDUCE_OPTION,
                  s);
  return 0;
}

/* Why shm by default on the CPU (bench/README.md): on 2 ranks of a nearly
 * free machine it summed 16-64 MiB at 2.1-2.4x MPI_Allreduce's bus
 * bandwidth in four of six medians (1.2-1.8x in the others), ddp's 4096-wide
 * MLP moved its gradient at 4.35 GB/s against 2.95, and its waits sleep
 * where OpenMPI's poll the core a rank computes on. */
int mt_allreduce_use(int asked, int device, int overlap, int comm_thread) {
  if (asked != MT_ALLREDUCE_AUTO) return asked;
  return device || (overlap && !comm_thread) ? MT_ALLREDUCE_MPI : MT_ALLREDUCE_SHM;
}

/* ------------------------------------------------------------- counters */

/* A rank's header: its phase counter and how many ranks sleep on it, on
 * lines of their own. 32-bit words: a futex is one. Phases are compared by
 * their difference, so the counter may wrap (ranks are at most 2 apart). */
typedef struct {
  _Atomic uint32_t phase;
  _Atomic uint32_t sleepers;
} header;
_Static_assert(sizeof(header) <= HDR, "the header fits its lines");

static header *hdr(const shwin *w, int q) { return (header *)(void *)w->seg[q]; }
static char *slot_of(const mt_shm_reduce *s, int q, uint64_t chunk) {
  return s->w.seg[q] + HDR + (size_t)(chunk & 1) * s->slot;
}
/* rank q's mt_shm_buffer */
static char *buf_of(const mt_shm_reduce *s, int q) { return s->b.seg[q] + HDR; }

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *t) {
  return syscall(SYS_futex, (uint32_t *)(void *)addr, op, val, t, NULL, 0);
}

static int reached(const header *h, uint32_t v, memory_order mo) {
  return (int32_t)(atomic_load_explicit(&h->phase, mo) - v) >= 0;
}

/* Waits until rank q's phase reaches v: polls a few microseconds (the other
 * ranks are usually close behind), then sleeps on the counter (a shared,
 * not process-private, futex) so that a rank still computing -- under
 * oversubscription, or beside ddp's communication thread -- gets the core.
 * The sleep has a time limit: a missed wake-up costs a millisecond, not a
 * hang. */
static void wait_for(header *h, uint32_t v) {
  for (int k = 0; k < 4000; k++) {
    if (reached(h, v, memory_order_acquire)) return;
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("pause");
#endif
  }
  const struct timespec ms = {0, 1000000};
  while (!reached(h, v, memory_order_acquire)) {
    atomic_fetch_add_explicit(&h->sleepers, 1, memory_order_seq_cst);
    uint32_t now = atomic_load_explicit(&h->phase, memory_order_seq_cst);
    if ((int32_t)(now - v) < 0) futex(&h->phase, FUTEX_WAIT, now, &ms);
    atomic_fetch_sub_explicit(&h->sleepers, 1, memory_order_relaxed);
  }
}

/* Every rank of the node has reached phase v (the counters of window w). */
static int arrive(mt_shm_reduce *s, shwin *w, uint32_t v) {
  if (s->sync == MT_SHM_SYNC_BARRIER) {
    MT_MPI(MPI_Win_sync(w->win));
    MT_MPI(MPI_Barrier(s->node));
    MT_MPI(MPI_Win_sync(w->win));
    return 0;
  }
  header *me = hdr(w, s->lrank);
  /* seq_cst store, then the sleepers' count: a sleeper counts itself
   * before it reads the phase, so one of the two sees the other */
  atomic_store_explicit(&me->phase, v, memory_order_seq_cst);
  if (atomic_load_explicit(&me->sleepers, memory_order_seq_cst))
    futex(&me->phase, FUTEX_WAKE, INT32_MAX, NULL);
  for (int q = 0; q < s->lsize; q++)
    if (q != s->lrank) wait_for(hdr(w, q), v);
  return 0;
}

/* -------------------------------------------------------------- sums */

/* out = (src[0] + src[1]) + ... + src[p-1], element by element, in that
 * order; out is none of the sources. */
static void sum_f32(float *restrict out, const void *const *src, int p, size_t n) {
  const float *a = src[0], *b = p > 1 ? src[1] : src[0];
  if (p == 1) {
    memcpy(out, a, n * sizeof(float));
    return;
  }
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  for (int q = 2; q < p; q++) {
    const float *c = src[q];
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] += c[i];
  }
}

static void sum_f64(double *restrict out, const void *const *src, int p, size_t n) {
  const double *a = src[0], *b = p > 1 ? src[1] : src[0];
  if (p == 1) {
    memcpy(out, a, n * sizeof(double));
    return;
  }
#pragma omp simd
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  for (int q = 2; q < p; q++) {
    const double *c = src[q];
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] += c[i];
  }
}

/* bf16 / fp16: the sum in fp32 rounded to the type after each addition */
static void sum_half(uint16_t *out, const void *const *src, int p, size_t n, int bf) {
  for (size_t i = 0; i < n; i++) {
    uint16_t acc = ((const uint16_t *)src[0])[i];
    for (int q = 1; q < p; q++) {
      uint16_t x = ((const uint16_t *)src[q])[i];
      acc = bf ? mt_bf16_from_float(mt_float_from_bf16(acc) + mt_float_from_bf16(x))
               : mt_fp16_from_float(mt_float_from_fp16(acc) + mt_float_from_fp16(x));
    }
    out[i] = acc;
  }
}

/* MPI user operations for the nodes' bf16 / fp16 sums: the same rounding */
static void op_half(void *in, void *inout, int len, int bf) {
  uint16_t *y = inout;
  for (int i = 0; i < len; i++) {
    const void *two[2] = {(const uint16_t *)in + i, y + i};
    sum_half(y + i, two, 2, 1, bf);
  }
}
static void op_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  op_half(in, inout, *len, 1);
}
static void op_fp16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  op_half(in, inout, *len, 0);
}

static void sum_any(void *out, const void *const *src, int p, size_t n, mt_shm_type t) {
  switch (t) {
  case MT_SHM_F32: sum_f32(out, src, p, n); break;
  case MT_SHM_F64: sum_f64(out, src, p, n); break;
  case MT_SHM_BF16: sum_half(out, src, p, n, 1); break;
  case MT_SHM_FP16: sum_half(out, src, p, n, 0); break;
  }
}

/* ------------------------------------------------------------- window */

static void free_window(shwin *w) {
  if (w->win == MPI_WIN_NULL) return;
  if (w->locked) MPI_Win_unlock_all(w->win);
  w->locked = 0;
  MPI_Win_free(&w->win);
}

/* Collective on the node: window w of a header line and bytes per rank,
 * counters at 0. */
static int alloc_window(mt_shm_reduce *s, shwin *w, size_t bytes) {
  free_window(w);
  MPI_Info info;
  MT_MPI(MPI_Info_create(&info));
  /* each rank's segment may lie in its own pages (near its core) */
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char *mine = NULL;
  /* + ALIGN: MPI places a segment where it likes; we align it ourselves
   * (its pages are mapped page-aligned in every process, so the same
   * offset is aligned in all) */
  const size_t want = HDR + bytes + ALIGN;
  int rc = MPI_Win_allocate_shared((MPI_Aint)want, 1, info, s->node, &mine, &w->win);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    w->win = MPI_WIN_NULL;
    return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Win_allocate_shared");
  }
  MT_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, w->win));
  w->locked = 1;
  for (int q = 0; q < s->lsize; q++) {
    MPI_Aint size;
    int disp;
    char *p = NULL;
    MT_MPI(MPI_Win_shared_query(w->win, q, &size, &disp, &p));
    MT_CHECK((size_t)size >= want, MT_ERR_STATE,
             "shared window: rank %d's segment is %ld bytes (want %zu)", q, (long)size, want);
    w->seg[q] = p + (ALIGN - (uintptr_t)p % ALIGN) % ALIGN;
  }
  atomic_store_explicit(&hdr(w, s->lrank)->phase, 0, memory_order_relaxed);
  atomic_store_explicit(&hdr(w, s->lrank)->sleepers, 0, memory_order_relaxed);
  MT_MPI(MPI_Win_sync(w->win));
  MT_MPI(MPI_Barrier(s->node)); /* every counter is 0 before any is waited on */
  MT_MPI(MPI_Win_sync(w->win));
  return 0;
}

/* The copy-in path's window: two slots of slot bytes per rank. */
static int make_window(mt_shm_reduce *s, size_t slot) {
  s->slot = 0;
  MT_CALL(alloc_window(s, &s->w, 2 * slot));
  s->slot = slot;
  s->seq = 0;
  return 0;
}

int mt_shm_create(mt_shm_reduce **out, MPI_Comm comm, size_t chunk_bytes, int sync) {
  *out = NULL;
  mt_shm_reduce *s = NULL;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "shared-memory all-reduce"));
  *out = s;
  s->comm = s->node = s->cross = MPI_COMM_NULL;
  s->w.win = s->b.win = s->p = MPI_WIN_NULL;
  s->op_bf16 = s->op_fp16 = MPI_OP_NULL;
  s->sync = sync;
  size_t c = chunk_bytes ? chunk_bytes : DEFAULT_CHUNK;
  s->chunk = (c + ALIGN - 1) / ALIGN * ALIGN;
  int rank;
  MT_MPI(MPI_Comm_dup(comm, &s->comm));
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &s->node));
  MT_MPI(MPI_Comm_rank(s->node, &s->lrank));
  MT_MPI(MPI_Comm_size(s->node, &s->lsize));
  int leader = s->lrank == 0;
  int most = 0;
  MT_MPI(MPI_Allreduce(&s->lsize, &s->L, 1, MPI_INT, MPI_MIN, comm));
  MT_MPI(MPI_Allreduce(&s->lsize, &most, 1, MPI_INT, MPI_MAX, comm));
  s->alone = most == 1;
  MT_MPI(MPI_Allreduce(&leader, &s->nnodes, 1, MPI_INT, MPI_SUM, comm));
  /* slice j of every node: the ranks of local index j, in node order
   * (their world rank orders the nodes alike for every j) */
  const int color = s->lrank < s->L ? s->lrank : MPI_UNDEFINED;
  MT_MPI(MPI_Comm_split(comm, color, rank, &s->cross));
  MT_CALL(mt_calloc(&s->w.seg, (size_t)s->lsize, sizeof(char *), "shared window segments"));
  MT_CALL(mt_calloc(&s->b.seg, (size_t)s->lsize, sizeof(char *), "shared window segments"));
  MT_CALL(mt_calloc(&s->src, (size_t)s->lsize, sizeof(void *), "shared window segments"));
  MT_CALL(mt_calloc(&s->piece, 1, PIECE, "shared-memory all-reduce scratch"));
  MT_MPI(MPI_Op_create(op_bf16, 1, &s->op_bf16));
  MT_MPI(MPI_Op_create(op_fp16, 1, &s->op_fp16));
  return 0;
}

void mt_shm_destroy(mt_shm_reduce **sp) {
  mt_shm_reduce *s = sp ? *sp : NULL;
  if (!s) return;
  free_window(&s->w);
  free_window(&s->b);
  free_shared(s);
  if (s->op_bf16 != MPI_OP_NULL) MPI_Op_free(&s->op_bf16);
  if (s->op_fp16 != MPI_OP_NULL) MPI_Op_free(&s->op_fp16);
  if (s->cross != MPI_COMM_NULL) MPI_Comm_free(&s->cross);
  if (s->node != MPI_COMM_NULL) MPI_Comm_free(&s->node);
  if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
  mt_free(&s->w.seg);
  mt_free(&s->b.seg);
  mt_free(&s->src);
  mt_free(&s->piece);
  mt_free(&s->apiece);
  mt_free(sp);
}

size_t mt_shm_slot_bytes(const mt_shm_reduce *s) { return s->slot; }
int mt_shm_slices(const mt_shm_reduce *s) { return s->L; }
void mt_shm_bytes(const mt_shm_reduce *s, double *in_place, double *copied) {
  *in_place = s->bytes_in_place;
  *copied = s->bytes_copied;
}

/* Room for need bytes in /dev/shm, where OpenMPI's shared windows keep
 * their pages (osc/sm's backing file): a tmpfs too small (a container's
 * 64 MiB) fails at the first touch of a page (SIGBUS), not at
 * MPI_Win_allocate_shared. No /dev/shm: nothing to check. */
static int room(double need) {
  struct statvfs v;
  if (statvfs("/dev/shm", &v)) return 1;
  return (double)v.f_bavail * (double)v.f_frsize >= need;
}

int mt_shm_buffer(mt_shm_reduce *s, size_t bytes, void **buf) {
  *buf = NULL;
  free_window(&s->b);
  s->bbytes = 0;
  if (s->alone || bytes == 0) return 0; /* nothing to read in place */
  /* the node's buffers, and a quarter more for what else lies there; every
   * rank alike, or the nodes' paths (and their MPI_Allreduce) would differ */
  int ok = room(1.25 * (double)s->lsize * (double)(HDR + bytes + ALIGN));
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, s->comm));
  if (!ok) {
    mt_print0("shared-memory all-reduce: /dev/shm has too little room for the buffers of %d "
              "ranks of %.1f MiB: copied into the window instead\n", s->lsize,
              (double)bytes / 1048576.0);
    return 0;
  }
  MT_CALL(alloc_window(s, &s->b, bytes));
  memset(buf_of(s, s->lrank), 0, bytes); /* the owner's pages, touched by it */
  s->bbytes = bytes;
  s->bseq = 0;
  *buf = buf_of(s, s->lrank);
  return 0;
}

/* ------------------------------------------------------------ the reduce */

void mt_shm_partition(size_t m, size_t esz, int L, int q, size_t *lo, size_t *hi) {
  size_t unit = ALIGN / esz, per = (m + (size_t)L - 1) / (size_t)L;
  per = (per + unit - 1) / unit * unit;
  *lo = (size_t)q * per < m ? (size_t)q * per : m;
  *hi = *lo + per < m ? *lo + per : m;
}

/* Slice q of a chunk of m elements: [*lo, *hi), ALIGN-byte boundaries. */
static void slice(const mt_shm_reduce *s, size_t m, size_t esz, int q, size_t *lo, size_t *hi) {
  mt_shm_partition(m, esz, s->L, q, lo, hi);
}

/* The nodes' sum of a reduced slice (x, k elements), in place: in pieces
 * of an int's count (an in-place slice is a whole bucket's share). */
static int across(mt_shm_reduce *s, void *x, size_t k, mt_shm_type t) {
  if (s->nnodes == 1 || k == 0) return 0;
  MPI_Datatype dt = t == MT_SHM_F32 ? MPI_FLOAT : t == MT_SHM_F64 ? MPI_DOUBLE : MPI_UINT16_T;
  MPI_Op op = t == MT_SHM_BF16 ? s->op_bf16 : t == MT_SHM_FP16 ? s->op_fp16 : MPI_SUM;
  const size_t most = (size_t)INT_MAX / 2; /* MPI's int count */
  for (size_t o = 0; o < k; o += most) {
    const int m = (int)(k - o < most ? k - o : most);
    MT_MPI(MPI_Allreduce(MPI_IN_PLACE, (char *)x + o * esz_[t], m, dt, op, s->cross));
  }
  return 0;
}

/* One chunk: m elements at x (see the top of the file). */
static int chunk(mt_shm_reduce *s, char *x, size_t m, mt_shm_type t) {
  const size_t esz = esz_[t];
  const uint64_t c = s->seq++;
  const int me = s->lrank;
  size_t lo, hi;
  slice(s, m, esz, me < s->L ? me : s->L, &lo, &hi); /* past L: empty (lo == hi == m) */
  char *my = slot_of(s, me, c);
  memcpy(my, x, lo * esz); /* 1: all but this rank's own slice */
  memcpy(my + hi * esz, x + hi * esz, (m - hi) * esz);
  MT_CALL(arrive(s, &s->w, (uint32_t)(2 * c + 1)));
  if (me < s->L && hi > lo) { /* 3 */
    for (int q = 0; q < s->lsize; q++) s->src[q] = (q == me ? x : slot_of(s, q, c)) + lo * esz;
    sum_any(my + lo * esz, s->src, s->lsize, hi - lo, t);
    MT_CALL(across(s, my + lo * esz, hi - lo, t));
  }
  MT_CALL(arrive(s, &s->w, (uint32_t)(2 * c + 2)));
  for (int q = 0; q < s->L; q++) { /* 5 */
    size_t a, b;
    slice(s, m, esz, q, &a, &b);
    memcpy(x + a * esz, slot_of(s, q, c) + a * esz, (b - a) * esz);
  }
  return 0;
}

/* Between the two waits of an in-place call: this rank's slice of n
 * elements at byte off of every rank's buffer, summed (in local rank order)
 * into scratch per elements at a time and handed to fn piece by piece;
 * across nodes summed into this rank's buffer, all-reduced among the nodes
 * and handed to fn whole. Ranks past L have no slice. */
static int slice_sums(mt_shm_reduce *s, size_t off, size_t n, mt_shm_type t, size_t per,
                      void *scratch, mt_shm_apply_fn fn, void *ctx) {
  const size_t esz = esz_[t];
  const int me = s->lrank;
  if (me >= s->L) return 0;
  size_t lo, hi;
  slice(s, n, esz, me, &lo, &hi);
  char *mine = buf_of(s, me) + off;
  for (size_t a = lo; a < hi; a += per) {
    const size_t k = hi - a < per ? hi - a : per;
    for (int q = 0; q < s->lsize; q++) s->src[q] = buf_of(s, q) + off + a * esz;
    sum_any(scratch, s->src, s->lsize, k, t);
    if (s->nnodes == 1)
      MT_CALL(fn(ctx, a, k, scratch));
    else
      memcpy(mine + a * esz, scratch, k * esz);
  }
  if (s->nnodes > 1 && hi > lo) {
    MT_CALL(across(s, mine + lo * esz, hi - lo, t));
    MT_CALL(fn(ctx, lo, hi - lo, mine + lo * esz));
  }
  return 0;
}

typedef struct {
  mt_shm_reduce *s;
  size_t off, esz;
} write_back;

/* in_place's fn: a summed piece into every rank's buffer (but where it
 * already lies: this rank's, across nodes) */
static int write_piece(void *ctx, size_t first, size_t k, const void *sum) {
  const write_back *w = ctx;
  for (int q = 0; q < w->s->lsize; q++) {
    char *dst = buf_of(w->s, q) + w->off + first * w->esz;
    if (dst != sum) memcpy(dst, sum, k * w->esz);
  }
  return 0;
}

/* n elements at byte off of every rank's mt_shm_buffer, in place (see the
 * top of the file). */
static int in_place(mt_shm_reduce *s, size_t off, size_t n, mt_shm_type t) {
  const uint64_t c = s->bseq++;
  write_back w = {s, off, esz_[t]};
  MT_CALL(arrive(s, &s->b, (uint32_t)(2 * c + 1))); /* 1 */
  const int rc = slice_sums(s, off, n, t, PIECE / esz_[t], s->piece, write_piece, &w); /* 2 */
  const int rc2 = arrive(s, &s->b, (uint32_t)(2 * c + 2)); /* 3 */
  return rc ? rc : rc2;
}

/* Whether n elements at buf lie in this rank's mt_shm_buffer; *off their
 * byte offset there. */
static int in_buffer(const mt_shm_reduce *s, const void *buf, size_t n, size_t esz, size_t *off) {
  const uintptr_t b0 = s->bbytes ? (uintptr_t)buf_of(s, s->lrank) : 0, p = (uintptr_t)buf;
  *off = p - b0;
  return s->bbytes && p >= b0 && p - b0 <= s->bbytes && n * esz <= s->bbytes - (p - b0);
}

int mt_shm_reduce_apply(mt_shm_reduce *s, void *buf, size_t n, mt_shm_type t, mt_shm_apply_fn fn,
                        void *ctx) {
  MT_CHECK(t >= MT_SHM_F32 && t <= MT_SHM_FP16, MT_ERR_ARG, "shared-memory reduce: type %d",
           (int)t);
  const size_t esz = esz_[t];
  size_t off;
  MT_CHECK(!s->alone && in_buffer(s, buf, n, esz, &off), MT_ERR_ARG,
           "shared-memory reduce of a slice: the buffer is not in the window");
  if (!s->apiece) MT_CALL(mt_calloc(&s->apiece, 1, APPLY_PIECE, "shared-memory reduce scratch"));
  const uint64_t c = s->bseq++;
  MT_CALL(arrive(s, &s->b, (uint32_t)(2 * c + 1))); /* every rank's buffer written */
  const int rc = slice_sums(s, off, n, t, APPLY_PIECE / esz, s->apiece, fn, ctx);
  /* nobody writes a buffer (the next backward) or reads the others' slices
   * of what fn wrote before every rank is past its slice */
  const int rc2 = arrive(s, &s->b, (uint32_t)(2 * c + 2));
  s->bytes_in_place += (double)(n * esz);
  return rc ? rc : rc2;
}

int mt_shm_allreduce(mt_shm_reduce *s, void *buf, size_t n, mt_shm_type t) {
  MT_CHECK(t >= MT_SHM_F32 && t <= MT_SHM_FP16, MT_ERR_ARG, "shared-memory all-reduce: type %d",
           (int)t);
  MT_CHECK(n == 0 || buf, MT_ERR_ARG, "shared-memory all-reduce of a NULL buffer");
  const size_t esz = esz_[t];
  if (n == 0) return 0;
  /* one rank on every node: the nodes' MPI_Allreduce only. (A node of one
   * rank among larger ones takes the window's path: the nodes' slices and
   * chunks must match for their all-reduces to pair up.) */
  if (s->alone) return across(s, buf, n, t);
  /* a range of this rank's mt_shm_buffer (every rank passes the same) */
  size_t off;
  if (in_buffer(s, buf, n, esz, &off)) {
    MT_CALL(in_place(s, off, n, t));
    s->bytes_in_place += (double)(n * esz);
    return 0;
  }
  s->bytes_copied += (double)(n * esz);
  /* every rank passes the same n: every rank grows the window alike */
  size_t want = n * esz < s->chunk ? (n * esz + ALIGN - 1) / ALIGN * ALIGN : s->chunk;
  if (want > s->slot) MT_CALL(make_window(s, want));
  const size_t per = s->slot / esz;
  for (size_t o = 0; o < n; o += per)
    MT_CALL(chunk(s, (char *)buf + o * esz, n - o < per ? n - o : per, t));
  return 0;
}

static void free_shared(mt_shm_reduce *s) {
  if (s->p == MPI_WIN_NULL) return;
  MPI_Win_unlock_all(s->p);
  MPI_Win_free(&s->p);
}

int mt_shm_shared(mt_shm_reduce *s, size_t bytes, void **buf) {
  *buf = NULL;
  free_shared(s);
  if (s->alone || bytes == 0) return 0;
  int ok = room(1.25 * (double)(bytes + ALIGN)); /* every node alike, as mt_shm_buffer */
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, s->comm));
  if (!ok) {
    mt_print0("shared-memory window: /dev/shm has too little room for a shared buffer of %.1f "
              "MiB\n", (double)bytes / 1048576.0);
    return 0;
  }
  char *mine = NULL, *p = NULL;
  const size_t want = bytes + ALIGN; /* aligned by us, as alloc_window */
  int rc = MPI_Win_allocate_shared(s->lrank == 0 ? (MPI_Aint)want : 0, 1, MPI_INFO_NULL, s->node,
                                   &mine, &s->p);
  if (rc != MPI_SUCCESS) {
    s->p = MPI_WIN_NULL;
    return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Win_allocate_shared");
  }
  MT_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->p));
  MPI_Aint size;
  int disp;
  MT_MPI(MPI_Win_shared_query(s->p, 0, &size, &disp, &p));
  MT_CHECK((size_t)size >= want, MT_ERR_STATE,
           "shared window: the shared buffer is %ld bytes (want %zu)", (long)size, want);
  *buf = p + (ALIGN - (uintptr_t)p % ALIGN) % ALIGN;
  return 0;
}

/* One wait on mt_shm_buffer's counters, in the sequence of the in-place
 * reductions (every rank of the node makes the same calls in order). */
int mt_shm_arrive(mt_shm_reduce *s) {
  MT_CHECK(s->bbytes, MT_ERR_STATE, "shared-memory window: no buffer to wait on");
  const uint64_t c = s->bseq++;
  return arrive(s, &s->b, (uint32_t)(2 * c + 2));
}
