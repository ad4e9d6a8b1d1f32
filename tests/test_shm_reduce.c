/* The shared-memory all-reduce (src/comm/shm_reduce.c), run by
 * test_shm_reduce.sh at 1-4 ranks on this machine and at 2 simulated hosts
 * x 2 ranks by test_multihost.sh:
 * - for float, double, bf16 and fp16, sizes 1, 7, 1023, 2^20 + 3 and the
 *   sizes around every chunk boundary of a small chunk (one element short
 *   of a chunk, a chunk, one past it, two chunks and one): the result
 *   equals, bit for bit, a sum computed here in the order the contract
 *   states (a node's ranks in local rank order; with 2 nodes, the two
 *   nodes' sums added) from every rank's inputs, which any rank can make;
 * - every rank holds the same bits, and a second call gives them again;
 * - the waits by counters and by MPI_Barrier give the same bits;
 * - the window grows with the largest buffer and no further than a chunk;
 * - n == 0 does nothing; a bad type is refused;
 * - a buffer in the window (mt_shm_buffer, ddp's gradients): whole and in
 *   sub-ranges at odd offsets (buckets), every type and the sizes above,
 *   both waits: the same bits as the copy-in path's (the reference) on every
 *   rank, the data outside the range untouched, and the bytes counted as
 *   summed in place (the path was taken) -- or, with one rank per node, no
 *   window (NULL) and the copy-in path's MPI sums;
 * - mt_shm_reduce_apply on that buffer (ZeRO-1's sum in its step): each
 *   rank is handed its slice of the partition (none past the node's
 *   slices), in pieces that follow one another, holding the copy-in path's
 *   bits, across 16 pieces and more; fn's error comes back on its rank
 *   alone, without a hang; a buffer outside the window is refused. */
#include "comm/shm_reduce.h"
#include "nn/precision.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int rank_, size_, lsize_; /* lsize_: ranks on this one's node */
static int *node_of_, *local_of_, nnodes_; /* each world rank's node, local index */

static const size_t esz_[] = {4, 8, 2, 2};
static const char *tname_[] = {"float", "double", "bf16", "fp16"};

/* rank r's input element i, mixed magnitudes (the order of the sum shows) */
static double value(int r, size_t i, uint64_t seed) {
  uint64_t st = seed * 1000003u + (uint64_t)r * 7919u + i * 31u;
  double u = tu_uniform(&st);
  return u * (i % 3 == 0 ? 100.0 : i % 3 == 1 ? 1.0 : 1e-3);
}

static void put(void *x, size_t i, mt_shm_type t, double v) {
  switch (t) {
  case MT_SHM_F32: ((float *)x)[i] = (float)v; break;
  case MT_SHM_F64: ((double *)x)[i] = v; break;
  case MT_SHM_BF16: ((uint16_t *)x)[i] = mt_bf16_from_float((float)v); break;
  case MT_SHM_FP16: ((uint16_t *)x)[i] = mt_fp16_from_float((float)v); break;
  }
}

/* a + b in the type (bf16 / fp16: in fp32, rounded), a, b element i of x */
static void add(void *acc, const void *x, size_t i, mt_shm_type t) {
  switch (t) {
  case MT_SHM_F32: ((float *)acc)[i] += ((const float *)x)[i]; break;
  case MT_SHM_F64: ((double *)acc)[i] += ((const double *)x)[i]; break;
  case MT_SHM_BF16: {
    uint16_t *a = acc;
    a[i] = mt_bf16_from_float(mt_float_from_bf16(a[i]) +
                              mt_float_from_bf16(((const uint16_t *)x)[i]));
    break;
  }
  case MT_SHM_FP16: {
    uint16_t *a = acc;
    a[i] = mt_fp16_from_float(mt_float_from_fp16(a[i]) +
                              mt_float_from_fp16(((const uint16_t *)x)[i]));
    break;
  }
  }
}

/* The contract's sum: each node's ranks in local order, then the nodes'
 * sums in node order (MPI_Allreduce's order is its own: exact at 2 nodes,
 * where a + b == b + a; more nodes are not run here). */
static void reference(void *want, size_t n, mt_shm_type t, uint64_t seed) {
  const size_t e = esz_[t];
  char *node = tu_xmalloc(n * e), *one = tu_xmalloc(n * e);
  for (int nd = 0; nd < nnodes_; nd++) {
    int first = 1;
    for (int l = 0; l < size_; l++)
      for (int r = 0; r < size_; r++) {
        if (node_of_[r] != nd || local_of_[r] != l) continue;
        for (size_t i = 0; i < n; i++) put(first ? node : one, i, t, value(r, i, seed));
        if (!first)
          for (size_t i = 0; i < n; i++) add(node, one, i, t);
        first = 0;
      }
    if (nd == 0)
      memcpy(want, node, n * e);
    else
      for (size_t i = 0; i < n; i++) add(want, node, i, t);
  }
  free(node);
  free(one);
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *c = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* 1 on every rank when cond holds on every rank */
static int all_ranks(int cond) {
  int v = cond ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

static int same_everywhere(const void *x, size_t bytes) {
  unsigned long long h = fnv(x, bytes), lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

static void one_size(mt_shm_reduce *s, size_t n, mt_shm_type t, const char *how) {
  const size_t e = esz_[t];
  const uint64_t seed = n * 13u + (uint64_t)t;
  char *x = tu_xmalloc(n * e), *want = tu_xmalloc(n * e), *again = tu_xmalloc(n * e);
  for (size_t i = 0; i < n; i++) put(x, i, t, value(rank_, i, seed));
  memcpy(again, x, n * e);
  reference(want, n, t, seed);
  int rc = mt_shm_allreduce(s, x, n, t);
  int rc2 = mt_shm_allreduce(s, again, n, t);
  CHECK(all_ranks(rc == 0 && rc2 == 0), "%s, %zu %s: all-reduce returns 0%s%s", how, n, tname_[t],
        rc ? ": " : "", rc ? mt_error_message() : "");
  int eq = memcmp(x, want, n * e) == 0;
  size_t bad = 0;
  while (!eq && bad < n && !memcmp(x + bad * e, want + bad * e, e)) bad++;
  CHECK(all_ranks(eq), "%s, %zu %s: the sum in local rank order, bit for bit%s", how, n,
        tname_[t], eq ? "" : " (differs on some rank)");
  if (!eq) printf("#   rank %d: first difference at element %zu\n", rank_, bad);
  CHECK(same_everywhere(x, n * e), "%s, %zu %s: the same bits on every rank", how, n, tname_[t]);
  CHECK(all_ranks(!memcmp(x, again, n * e)), "%s, %zu %s: a second call gives the same bits", how,
        n, tname_[t]);
  free(x);
  free(want);
  free(again);
}

/* The buffer in the window: n elements at element off of a buffer of cap
 * elements, around them values that must stay; the bits of the copy-in
 * path's sum (reference) on every rank, counted as summed in place. */
static void in_window(mt_shm_reduce *s, char *buf, size_t cap, size_t off, size_t n,
                      mt_shm_type t, const char *how) {
  const size_t e = esz_[t];
  const uint64_t seed = n * 17u + off + (uint64_t)t;
  char *want = tu_xmalloc(n * e), *out = tu_xmalloc(cap * e);
  for (size_t i = 0; i < cap; i++) put(buf, i, t, value(rank_, i + 5, seed + 1));
  memcpy(out, buf, cap * e); /* what lies outside the range */
  for (size_t i = 0; i < n; i++) put(buf + off * e, i, t, value(rank_, i, seed));
  reference(want, n, t, seed);
  double ip0, cp0, ip1, cp1;
  mt_shm_bytes(s, &ip0, &cp0);
  int rc = mt_shm_allreduce(s, buf + off * e, n, t);
  mt_shm_bytes(s, &ip1, &cp1);
  CHECK(all_ranks(rc == 0), "%s, %zu %s at %zu: all-reduce returns 0", how, n, tname_[t], off);
  CHECK(all_ranks(!memcmp(buf + off * e, want, n * e)),
        "%s, %zu %s at %zu: the copy-in path's bits (local rank order)", how, n, tname_[t], off);
  CHECK(same_everywhere(buf + off * e, n * e), "%s, %zu %s at %zu: the same bits on every rank",
        how, n, tname_[t], off);
  CHECK(all_ranks(!memcmp(buf, out, off * e) &&
                  !memcmp(buf + (off + n) * e, out + (off + n) * e, (cap - off - n) * e)),
        "%s, %zu %s at %zu: nothing outside the range changes", how, n, tname_[t], off);
  CHECK(all_ranks(ip1 - ip0 == (double)(n * e) && cp1 == cp0),
        "%s, %zu %s at %zu: summed in place, not copied in (%.0f / %.0f bytes)", how, n,
        tname_[t], off, ip1 - ip0, cp1 - cp0);
  free(want);
  free(out);
}

/* mt_shm_reduce_apply's pieces gathered: each must follow the last */
typedef struct {
  char *got;
  size_t e, lo, next, calls;
  int in_order, fail_with;
} pieces;

static int gather(void *ctx, size_t first, size_t k, const void *sum) {
  pieces *p = ctx;
  if (p->calls++ == 0) p->lo = p->next = first;
  p->in_order &= first == p->next;
  memcpy(p->got + first * p->e, sum, k * p->e);
  p->next = first + k;
  return p->fail_with;
}

/* The sum handed over slice by slice: this rank's slice of the node's
 * partition, in order, with the copy-in path's bits (the reference). */
static void applied(mt_shm_reduce *s, char *buf, size_t n, mt_shm_type t, const char *how) {
  const size_t e = esz_[t];
  const uint64_t seed = n * 19u + (uint64_t)t;
  char *want = tu_xmalloc(n * e);
  for (size_t i = 0; i < n; i++) put(buf, i, t, value(rank_, i, seed));
  reference(want, n, t, seed);
  pieces p = {tu_xmalloc(n * e), e, 0, 0, 0, 1, 0};
  const int rc = mt_shm_reduce_apply(s, buf, n, t, gather, &p);
  size_t lo = 0, hi = 0;
  const int L = mt_shm_slices(s), me = local_of_[rank_];
  if (me < L) mt_shm_partition(n, e, L, me, &lo, &hi);
  const int slice_ok = hi == lo ? p.calls == 0 : p.lo == lo && p.next == hi && p.in_order;
  CHECK(all_ranks(rc == 0 && slice_ok),
        "%s, %zu %s: apply hands over this rank's slice of the partition, piece after piece", how,
        n, tname_[t]);
  CHECK(all_ranks(!memcmp(p.got + lo * e, want + lo * e, (hi - lo) * e)),
        "%s, %zu %s: each piece holds the copy-in path's bits", how, n, tname_[t]);
  free(p.got);
  free(want);
}

static void apply_checks(mt_shm_reduce *s, char *b, size_t cap, const char *how) {
  for (int t = 0; t < 4; t++) {
    const size_t n[] = {1, 7, 1023, 3 * 65536 + 5, ((size_t)1 << 20) + 3};
    for (int i = 0; i < 5; i++)
      if (n[i] <= cap * 8 / esz_[t]) applied(s, b, n[i], (mt_shm_type)t, how);
  }
  /* fn's error on one rank: returned there, the others pass, nobody hangs */
  pieces p = {tu_xmalloc(4096 * 4), 4, 0, 0, 0, 1, rank_ == 0 ? MT_ERR_ARG : 0};
  int rc = mt_shm_reduce_apply(s, b, 4096, MT_SHM_F32, gather, &p);
  mt_error_clear();
  CHECK(all_ranks(rank_ == 0 ? rc == MT_ERR_ARG : rc == 0),
        "%s: apply returns fn's error where fn failed, and the other ranks go on", how);
  float x[4] = {0};
  rc = mt_shm_reduce_apply(s, x, 4, MT_SHM_F32, gather, &p);
  mt_error_clear();
  CHECK(all_ranks(rc == MT_ERR_ARG), "%s: apply refuses a buffer outside the window", how);
  free(p.got);
}

/* mt_shm_buffer's path for every type, whole and at odd offsets. */
static void buffer_checks(size_t chunk, int sync, const char *how) {
  mt_shm_reduce *s = NULL;
  CHECK(all_ranks(mt_shm_create(&s, MPI_COMM_WORLD, chunk, sync) == 0), "create (%s)", how);
  void *b = NULL;
  const size_t cap = ((size_t)1 << 20) + 64; /* elements of 8 bytes at most */
  int rc = mt_shm_buffer(s, cap * 8, &b);
  int alone = lsize_ == 1; /* on every node: no window to read in place */
  MPI_Allreduce(MPI_IN_PLACE, &alone, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  CHECK(all_ranks(rc == 0 && (alone ? b == NULL : b != NULL && (uintptr_t)b % 64 == 0)),
        "%s: a buffer in the window (64-byte aligned), none with one rank per node", how);
  if (b) {
    int zero = 1;
    for (size_t i = 0; i < cap * 8 && zero; i++) zero = ((char *)b)[i] == 0;
    CHECK(all_ranks(zero), "%s: the buffer starts zeroed", how);
    for (int t = 0; t < 4; t++) {
      const size_t c = cap * 8 / esz_[t];
      const size_t n[] = {1, 7, 1023, 3 * 4096 + 5, ((size_t)1 << 20) + 3};
      const size_t off[] = {0, 3, 1, 4096 + 1, 17};
      for (int i = 0; i < 5; i++)
        if (off[i] + n[i] <= c) in_window(s, b, c, off[i], n[i], (mt_shm_type)t, how);
      in_window(s, b, c, 0, c, (mt_shm_type)t, how); /* the whole buffer */
    }
    apply_checks(s, b, cap, how);
    /* a buffer outside the window still takes the copy in */
    float *x = tu_xmalloc(1000 * sizeof(float));
    for (size_t i = 0; i < 1000; i++) x[i] = 1.0f;
    double ip0, cp0, ip1, cp1;
    mt_shm_bytes(s, &ip0, &cp0);
    rc = mt_shm_allreduce(s, x, 1000, MT_SHM_F32);
    mt_shm_bytes(s, &ip1, &cp1);
    CHECK(all_ranks(rc == 0 && x[999] == (float)size_ && ip1 == ip0 && cp1 - cp0 == 4000.0),
          "%s: a buffer outside the window is copied in", how);
    free(x);
  }
  mt_shm_destroy(&s);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (rank_ != 0 && !freopen("/dev/null", "w", stdout)) return 1;
  /* where every rank is: node = index of its node leader among leaders */
  MPI_Comm node;
  int lr, leader, nid = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &lr);
  MPI_Comm_size(node, &lsize_);
  leader = lr == 0;
  MPI_Exscan(&leader, &nid, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) nid = 0;
  MPI_Bcast(&nid, 1, MPI_INT, 0, node);
  MPI_Allreduce(&leader, &nnodes_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_free(&node);
  node_of_ = tu_xmalloc((size_t)size_ * sizeof(int));
  local_of_ = tu_xmalloc((size_t)size_ * sizeof(int));
  MPI_Allgather(&nid, 1, MPI_INT, node_of_, 1, MPI_INT, MPI_COMM_WORLD);
  MPI_Allgather(&lr, 1, MPI_INT, local_of_, 1, MPI_INT, MPI_COMM_WORLD);
  printf("# %d ranks on %d node(s)\n", size_, nnodes_);
  if (nnodes_ > 2) { /* the reference's node order is MPI's own beyond 2 */
    printf("# more than 2 nodes: not a case of this test\n");
    MPI_Finalize();
    return 77;
  }

  /* the default chunk (1 MiB), waits by counters */
  mt_shm_reduce *s = NULL;
  int rc = mt_shm_create(&s, MPI_COMM_WORLD, 0, MT_SHM_SYNC_FLAGS);
  CHECK(all_ranks(rc == 0), "create (1 MiB chunks, counters)");
  CHECK(all_ranks(mt_shm_slot_bytes(s) == 0), "no window before the first all-reduce");
  CHECK(all_ranks(mt_shm_allreduce(s, NULL, 0, MT_SHM_F32) == 0), "n == 0 does nothing");
  rc = mt_shm_allreduce(s, (float[1]){0}, 1, (mt_shm_type)9);
  mt_error_clear();
  CHECK(all_ranks(rc == MT_ERR_ARG), "an unknown type is refused");
  const size_t sizes[] = {1, 7, 1023, ((size_t)1 << 20) + 3};
  for (int t = 0; t < 4; t++)
    for (int i = 0; i < 4; i++) {
      one_size(s, sizes[i], (mt_shm_type)t, "1 MiB chunks");
      if (t == MT_SHM_F32 && i == 1) /* every rank: all_ranks is collective */
        CHECK(all_ranks(lsize_ == 1 || mt_shm_slot_bytes(s) == 64),
              "7 floats: a window of one line per slot");
    }
  CHECK(all_ranks(lsize_ == 1 || mt_shm_slot_bytes(s) == ((size_t)1 << 20)),
        "the window grew to the chunk, no further (%zu bytes per slot)", mt_shm_slot_bytes(s));
  mt_shm_destroy(&s);
  CHECK(s == NULL, "destroy clears the handle");

  /* a small chunk of 3 lines (48 floats, 24 doubles, 96 halves): many
   * chunks, and sizes around each kind of chunk boundary; both waits */
  for (int sync = 0; sync < 2; sync++) {
    const char *how = sync ? "192-byte chunks, barrier" : "192-byte chunks, counters";
    rc = mt_shm_create(&s, MPI_COMM_WORLD, 192, sync);
    CHECK(all_ranks(rc == 0), "create (%s)", how);
    for (int t = 0; t < 4; t++) {
      const size_t m = 192 / esz_[t];
      const size_t around[] = {m - 1, m, m + 1, 2 * m + 1, 7 * m + 5, 1023};
      for (int i = 0; i < 6; i++) one_size(s, around[i], (mt_shm_type)t, how);
    }
    CHECK(all_ranks(lsize_ == 1 || mt_shm_slot_bytes(s) == 192), "%s: the slot stays at the chunk",
          how);
    mt_shm_destroy(&s);
  }
  buffer_checks(0, MT_SHM_SYNC_FLAGS, "in the window, counters");
  buffer_checks(192, MT_SHM_SYNC_BARRIER, "in the window, barrier");
  free(node_of_);
  free(local_of_);
  int status = tu_finish("test_shm_reduce");
  MPI_Finalize();
  return status;
}
