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
 * in and once out. */
#define _GNU_SOURCE /* syscall */
#include "comm/shm_reduce.h"
#include "core/core.h"
#include "nn/precision.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HDR 128                      /* a rank's counter, alone on its lines */
#define ALIGN 64                     /* slices start on cache lines           */
#define DEFAULT_CHUNK ((size_t)1 << 20)

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the counters must be lock-free atomics: they are "
               "shared between processes");

struct mt_shm_reduce {
  MPI_Comm node;  /* the ranks sharing memory                            */
  MPI_Comm cross; /* local index j (< L) of every node; MPI_COMM_NULL past L */
  int lrank, lsize, L, nnodes, sync;
  int alone;      /* every node has one rank: no window, MPI across only */
  size_t chunk;   /* the most bytes per slot                              */
  size_t slot;    /* bytes per slot now (0: no window yet)                */
  MPI_Win win;
  int locked;     /* MPI_Win_lock_all held                               */
  char **seg;     /* each rank's segment in this process's address space */
  const void **src; /* the sources of a slice's sum (lsize)             */
  uint64_t seq;   /* chunks done since the window was made               */
  MPI_Op op_bf16, op_fp16;
};

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

static header *hdr(const mt_shm_reduce *s, int q) { return (header *)(void *)s->seg[q]; }
static char *slot_of(const mt_shm_reduce *s, int q, uint64_t chunk) {
  return s->seg[q] + HDR + (size_t)(chunk & 1) * s->slot;
}

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

/* Every rank of the node has reached phase v. */
static int arrive(mt_shm_reduce *s, uint32_t v) {
  if (s->sync == MT_SHM_SYNC_BARRIER) {
    MT_MPI(MPI_Win_sync(s->win));
    MT_MPI(MPI_Barrier(s->node));
    MT_MPI(MPI_Win_sync(s->win));
    return 0;
  }
  header *me = hdr(s, s->lrank);
  /* seq_cst store, then the sleepers' count: a sleeper counts itself
   * before it reads the phase, so one of the two sees the other */
  atomic_store_explicit(&me->phase, v, memory_order_seq_cst);
  if (atomic_load_explicit(&me->sleepers, memory_order_seq_cst))
    futex(&me->phase, FUTEX_WAKE, INT32_MAX, NULL);
  for (int q = 0; q < s->lsize; q++)
    if (q != s->lrank) wait_for(hdr(s, q), v);
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

static void free_window(mt_shm_reduce *s) {
  if (s->win == MPI_WIN_NULL) return;
  if (s->locked) MPI_Win_unlock_all(s->win);
  s->locked = 0;
  MPI_Win_free(&s->win);
  s->slot = 0;
}

/* Collective on the node: a window of slot bytes per slot, counters at 0. */
static int make_window(mt_shm_reduce *s, size_t slot) {
  free_window(s);
  MPI_Info info;
  MT_MPI(MPI_Info_create(&info));
  /* each rank's segment may lie in its own pages (near its core) */
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char *mine = NULL;
  /* + ALIGN: MPI places a segment where it likes; we align it ourselves
   * (its pages are mapped page-aligned in every process, so the same
   * offset is aligned in all) */
  int rc = MPI_Win_allocate_shared((MPI_Aint)(HDR + 2 * slot + ALIGN), 1, info, s->node, &mine,
                                   &s->win);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    s->win = MPI_WIN_NULL;
    return mt_mpi_error(__FILE__, __LINE__, __func__, rc, "MPI_Win_allocate_shared");
  }
  MT_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win));
  s->locked = 1;
  for (int q = 0; q < s->lsize; q++) {
    MPI_Aint size;
    int disp;
    char *p = NULL;
    MT_MPI(MPI_Win_shared_query(s->win, q, &size, &disp, &p));
    MT_CHECK((size_t)size >= HDR + 2 * slot + ALIGN, MT_ERR_STATE,
             "shared window: rank %d's segment is %ld bytes (want %zu)", q, (long)size,
             HDR + 2 * slot + ALIGN);
    s->seg[q] = p + (ALIGN - (uintptr_t)p % ALIGN) % ALIGN;
  }
  atomic_store_explicit(&hdr(s, s->lrank)->phase, 0, memory_order_relaxed);
  atomic_store_explicit(&hdr(s, s->lrank)->sleepers, 0, memory_order_relaxed);
  MT_MPI(MPI_Win_sync(s->win));
  MT_MPI(MPI_Barrier(s->node)); /* every counter is 0 before any is waited on */
  MT_MPI(MPI_Win_sync(s->win));
  s->slot = slot;
  s->seq = 0;
  return 0;
}

int mt_shm_create(mt_shm_reduce **out, MPI_Comm comm, size_t chunk_bytes, int sync) {
  *out = NULL;
  mt_shm_reduce *s = NULL;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "shared-memory all-reduce"));
  *out = s;
  s->node = s->cross = MPI_COMM_NULL;
  s->win = MPI_WIN_NULL;
  s->op_bf16 = s->op_fp16 = MPI_OP_NULL;
  s->sync = sync;
  size_t c = chunk_bytes ? chunk_bytes : DEFAULT_CHUNK;
  s->chunk = (c + ALIGN - 1) / ALIGN * ALIGN;
  int rank;
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
  MT_CALL(mt_calloc(&s->seg, (size_t)s->lsize, sizeof(char *), "shared window segments"));
  MT_CALL(mt_calloc(&s->src, (size_t)s->lsize, sizeof(void *), "shared window segments"));
  MT_MPI(MPI_Op_create(op_bf16, 1, &s->op_bf16));
  MT_MPI(MPI_Op_create(op_fp16, 1, &s->op_fp16));
  return 0;
}

void mt_shm_destroy(mt_shm_reduce **sp) {
  mt_shm_reduce *s = sp ? *sp : NULL;
  if (!s) return;
  free_window(s);
  if (s->op_bf16 != MPI_OP_NULL) MPI_Op_free(&s->op_bf16);
  if (s->op_fp16 != MPI_OP_NULL) MPI_Op_free(&s->op_fp16);
  if (s->cross != MPI_COMM_NULL) MPI_Comm_free(&s->cross);
  if (s->node != MPI_COMM_NULL) MPI_Comm_free(&s->node);
  mt_free(&s->seg);
  mt_free(&s->src);
  mt_free(sp);
}

size_t mt_shm_slot_bytes(const mt_shm_reduce *s) { return s->slot; }
int mt_shm_slices(const mt_shm_reduce *s) { return s->L; }

/* ------------------------------------------------------------ the reduce */

/* Slice q of a chunk of m elements: [*lo, *hi), ALIGN-byte boundaries. */
static void slice(const mt_shm_reduce *s, size_t m, size_t esz, int q, size_t *lo, size_t *hi) {
  size_t unit = ALIGN / esz, per = (m + (size_t)s->L - 1) / (size_t)s->L;
  per = (per + unit - 1) / unit * unit;
  *lo = (size_t)q * per < m ? (size_t)q * per : m;
  *hi = *lo + per < m ? *lo + per : m;
}

/* The nodes' sum of a reduced slice (x, k elements), in place. */
static int across(mt_shm_reduce *s, void *x, size_t k, mt_shm_type t) {
  if (s->nnodes == 1 || k == 0) return 0;
  MPI_Datatype dt = t == MT_SHM_F32 ? MPI_FLOAT : t == MT_SHM_F64 ? MPI_DOUBLE : MPI_UINT16_T;
  MPI_Op op = t == MT_SHM_BF16 ? s->op_bf16 : t == MT_SHM_FP16 ? s->op_fp16 : MPI_SUM;
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, x, (int)k, dt, op, s->cross));
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
  MT_CALL(arrive(s, (uint32_t)(2 * c + 1)));
  if (me < s->L && hi > lo) { /* 3 */
    for (int q = 0; q < s->lsize; q++) s->src[q] = (q == me ? x : slot_of(s, q, c)) + lo * esz;
    sum_any(my + lo * esz, s->src, s->lsize, hi - lo, t);
    MT_CALL(across(s, my + lo * esz, hi - lo, t));
  }
  MT_CALL(arrive(s, (uint32_t)(2 * c + 2)));
  for (int q = 0; q < s->L; q++) { /* 5 */
    size_t a, b;
    slice(s, m, esz, q, &a, &b);
    memcpy(x + a * esz, slot_of(s, q, c) + a * esz, (b - a) * esz);
  }
  return 0;
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
  if (s->alone) {
    for (size_t o = 0; o < n; o += (size_t)INT_MAX / 2)
      MT_CALL(across(s, (char *)buf + o * esz, n - o < (size_t)INT_MAX / 2 ? n - o : INT_MAX / 2, t));
    return 0;
  }
  /* every rank passes the same n: every rank grows the window alike */
  size_t want = n * esz < s->chunk ? (n * esz + ALIGN - 1) / ALIGN * ALIGN : s->chunk;
  if (want > s->slot) MT_CALL(make_window(s, want));
  const size_t per = s->slot / esz;
  for (size_t o = 0; o < n; o += per)
    MT_CALL(chunk(s, (char *)buf + o * esz, n - o < per ? n - o : per, t));
  return 0;
}
