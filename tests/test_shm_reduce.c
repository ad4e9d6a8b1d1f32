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
 * - n == 0 does nothing; a bad type is refused. */
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
  free(node_of_);
  free(local_of_);
  int status = tu_finish("test_shm_reduce");
  MPI_Finalize();
  return status;
}
