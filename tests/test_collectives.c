/* The sharding collectives (src/comm/collectives.c) at any rank count (run
 * by test_collectives.sh at 2, 3 and 4 ranks, and alone by make check):
 * - mt_reduce_scatter, every method, equals a sum in ring order computed
 *   locally from every rank's inputs bit for bit where the method's order
 *   is known (the ring; every method at 2 ranks), and MPI_Allreduce's sum to
 *   float rounding; shard sizes 1, 7, 1000003 and segments that do not
 *   divide them;
 * - repeated calls give the same bits;
 * - mt_all_gather (every method, in place too) puts every rank's shard at
 *   its block, exactly;
 * - the non-blocking forms, tested to completion or only waited for, and
 *   two operations in flight at once, equal the blocking ones (MPI's
 *   non-blocking reduce-scatter at 3+ ranks: itself on every call, and
 *   MPI_Allreduce to rounding);
 * - the uneven reduce-scatter (fsdp's) equals the ring-order sum bit for
 *   bit with empty blocks, gaps and a single owner;
 * - bad arguments fail without a hang. */
#include "comm/comm.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static int rank_, size_;

static int all_ranks(int cond) {
  int v = cond ? 1 : 0, all = 0;
  MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* rank r's full input of size_ * n floats (any rank can make any rank's) */
static void input_of(float *x, int r, size_t n, uint64_t seed) {
  uint64_t st = seed * 1000003u + (uint64_t)r * 7919u + n;
  /* mixed magnitudes, so the order of the sum shows in the bits */
  for (size_t i = 0; i < n * (size_t)size_; i++)
    x[i] = (float)tu_uniform(&st) * (i % 3 == 0 ? 1e3f : i % 3 == 1 ? 1.0f : 1e-3f);
}

/* block `rank_` of the sum in the ring's order ((x[b+1] + x[b+2]) + ...) + x[b] */
static void ring_sum(float *want, size_t n, uint64_t seed, float *scratch) {
  int b = rank_;
  for (int k = 1; k <= size_; k++) {
    int r = (b + k) % size_;
    input_of(scratch, r, n, seed);
    const float *x = scratch + (size_t)b * n;
    for (size_t i = 0; i < n; i++) want[i] = k == 1 ? x[i] : want[i] + x[i];
  }
}

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

static const char *mname(int m) {
  switch (m) {
  case MT_COLL_AUTO: return "auto";
  case MT_COLL_RING: return "ring";
  case MT_COLL_MPI: return "MPI";
  case MT_COLL_MPI_CHUNKED: return "MPI chunked";
  default: return "allreduce";
  }
}

static void test_reduce_scatter(size_t n, uint64_t seed) {
  size_t full = n * (size_t)size_;
  float *in = malloc(full * sizeof(float)), *scratch = malloc(full * sizeof(float));
  float *ref = malloc(full * sizeof(float)), *want = malloc(n * sizeof(float));
  float *got = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
  input_of(in, rank_, n, seed);
  ring_sum(want, n, seed, scratch);
  MPI_Allreduce(in, ref, (int)full, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const float *ref_mine = ref + (size_t)rank_ * n;
  /* tolerance: a few roundings of the largest terms (|x| < 1e3 per rank) */
  double tol = 4.0 * size_ * 6e-8 * 1e3;
  for (int m = MT_COLL_AUTO; m <= MT_COLL_ALLREDUCE; m++) {
    memset(got, 0xff, n * sizeof(float));
    int err = mt_reduce_scatter_method(got, in, n, MPI_COMM_WORLD, m);
    double maxerr = 0;
    for (size_t i = 0; i < n; i++) {
      double d = fabs((double)got[i] - ref_mine[i]);
      if (!(d <= maxerr)) maxerr = d;
    }
    CHECK(all_ranks(!err && maxerr <= tol), "reduce-scatter %s, shard %zu: MPI_Allreduce's sum "
          "to rounding (max abs diff %.3g)", mname(m), n, maxerr);
    int ring = m == MT_COLL_RING || (m == MT_COLL_AUTO &&
                                     mt_coll_auto_method(0, n, size_) == MT_COLL_RING);
    if (ring || size_ <= 2)
      CHECK(all_ranks(same_bits(got, want, n)), "  and the sum in ring order, bit for bit");
    if (size_ <= 2)
      CHECK(all_ranks(same_bits(got, ref_mine, n)), "  and MPI_Allreduce's bits (2 ranks)");
    for (int rep = 0; rep < 2; rep++) {
      memset(again, 0, n * sizeof(float));
      err = mt_reduce_scatter_method(again, in, n, MPI_COMM_WORLD, m);
      CHECK(all_ranks(!err && same_bits(got, again, n)), "  call %d: the same bits", rep + 2);
    }
  }
  /* non-blocking: tested to completion, or waited for at once */
  int nb[3] = {MT_COLL_AUTO, MT_COLL_RING, MT_COLL_MPI};
  for (int k = 0; k < 3; k++) {
    /* the ring's blocking result; MPI's non-blocking reduce-scatter (libnbc
     * in OpenMPI) may sum in another order than its blocking one at 3+
     * ranks: compared with its own first result and MPI_Allreduce's sum */
    float *base = malloc(n * sizeof(float));
    int err = 0;
    if (nb[k] == MT_COLL_MPI && size_ > 2) {
      mt_coll *h = NULL;
      err = mt_coll_start_reduce_scatter(&h, base, in, n, MPI_COMM_WORLD, nb[k]);
      if (!err) err = mt_coll_wait(&h);
      double maxerr = 0;
      for (size_t i = 0; i < n; i++) {
        double d = fabs((double)base[i] - ref_mine[i]);
        if (!(d <= maxerr)) maxerr = d;
      }
      CHECK(all_ranks(!err && maxerr <= tol), "non-blocking reduce-scatter MPI, shard %zu: "
            "MPI_Allreduce's sum to rounding (max abs diff %.3g)", n, maxerr);
    } else {
      err = mt_reduce_scatter_method(base, in, n, MPI_COMM_WORLD, MT_COLL_RING);
    }
    for (int testing = 0; testing < 2; testing++) {
      mt_coll *h = NULL;
      memset(again, 0, n * sizeof(float));
      err = err ? err : mt_coll_start_reduce_scatter(&h, again, in, n, MPI_COMM_WORLD, nb[k]);
      int done = 0;
      while (testing && !err && !done) err = mt_coll_test(h, &done);
      if (!err) err = mt_coll_wait(&h);
      CHECK(all_ranks(!err && h == NULL && same_bits(again, base, n)), "non-blocking "
            "reduce-scatter %s, shard %zu, %s: the blocking result", mname(nb[k]), n,
            testing ? "tested to completion" : "waited for");
    }
    free(base);
  }
  free(in), free(scratch), free(ref), free(want), free(got), free(again);
}

static void test_all_gather(size_t n, uint64_t seed) {
  size_t full = n * (size_t)size_;
  float *shard = malloc(n * sizeof(float)), *want = malloc(full * sizeof(float));
  float *got = malloc(full * sizeof(float));
  for (int r = 0; r < size_; r++) {
    uint64_t st = seed + (uint64_t)r * 31u;
    tu_fill(want + (size_t)r * n, n, &st, 1.0f);
  }
  memcpy(shard, want + (size_t)rank_ * n, n * sizeof(float));
  int ms[3] = {MT_COLL_AUTO, MT_COLL_RING, MT_COLL_MPI};
  for (int k = 0; k < 3; k++) {
    memset(got, 0, full * sizeof(float));
    int err = mt_all_gather_method(got, shard, n, MPI_COMM_WORLD, ms[k]);
    CHECK(all_ranks(!err && same_bits(got, want, full)), "all-gather %s, shard %zu: every "
          "rank's shard at its block", mname(ms[k]), n);
    memset(got, 0, full * sizeof(float));
    memcpy(got + (size_t)rank_ * n, shard, n * sizeof(float));
    err = mt_all_gather_method(got, got + (size_t)rank_ * n, n, MPI_COMM_WORLD, ms[k]);
    CHECK(all_ranks(!err && same_bits(got, want, full)), "  in place");
    for (int testing = 0; testing < 2; testing++) {
      mt_coll *h = NULL;
      memset(got, 0, full * sizeof(float));
      err = mt_coll_start_all_gather(&h, got, shard, n, MPI_COMM_WORLD, ms[k]);
      int done = 0;
      while (testing && !err && !done) err = mt_coll_test(h, &done);
      if (!err) err = mt_coll_wait(&h);
      CHECK(all_ranks(!err && same_bits(got, want, full)), "  non-blocking, %s",
            testing ? "tested to completion" : "waited for");
    }
  }
  free(shard), free(want), free(got);
}

/* An all-gather and a reduce-scatter in flight together on one
 * communicator (FSDP's prefetch beside the gradient reduce-scatter). */
static void test_two_in_flight(size_t n) {
  size_t full = n * (size_t)size_;
  float *in = malloc(full * sizeof(float)), *rs = malloc(n * sizeof(float));
  float *rs0 = malloc(n * sizeof(float)), *ag = malloc(full * sizeof(float));
  float *ag0 = malloc(full * sizeof(float)), *shard = malloc(n * sizeof(float));
  input_of(in, rank_, n, 99);
  for (size_t i = 0; i < n; i++) shard[i] = (float)rank_ + (float)i * 0.5f;
  int err = mt_all_gather_method(ag0, shard, n, MPI_COMM_WORLD, MT_COLL_RING);
  for (int m = MT_COLL_RING; m <= MT_COLL_MPI; m++) {
    mt_coll *a = NULL, *b = NULL;
    /* the same method's result alone (see test_reduce_scatter for MPI's) */
    if (!err) err = mt_coll_start_reduce_scatter(&a, rs0, in, n, MPI_COMM_WORLD, m);
    if (!err) err = mt_coll_wait(&a);
    if (!err) err = mt_coll_start_reduce_scatter(&a, rs, in, n, MPI_COMM_WORLD, m);
    if (!err) err = mt_coll_start_all_gather(&b, ag, shard, n, MPI_COMM_WORLD, m);
    int da = 0, db = 0;
    while (!err && !(da && db)) {
      err = mt_coll_test(b, &db);
      if (!err) err = mt_coll_test(a, &da);
    }
    if (!err) err = mt_coll_wait(&b); /* the later one first */
    if (!err) err = mt_coll_wait(&a);
    CHECK(all_ranks(!err && same_bits(rs, rs0, n) && same_bits(ag, ag0, full)),
          "two operations in flight (%s), shard %zu: each the result alone", mname(m), n);
  }
  free(in), free(rs), free(rs0), free(ag), free(ag0), free(shard);
}

/* rank r's input of L floats for the uneven reduce-scatter */
static void input_v(float *x, int r, size_t L, uint64_t seed) {
  uint64_t st = seed * 7777u + (uint64_t)r * 104729u + L;
  for (size_t i = 0; i < L; i++)
    x[i] = (float)tu_uniform(&st) * (i % 3 == 0 ? 1e3f : i % 3 == 1 ? 1.0f : 1e-3f);
}

/* mt_coll_start_reduce_scatter_v (fsdp's unit gradients): uneven blocks
 * with gaps between them, empty blocks (also this rank's), one owner of
 * everything; the sum in ring order bit for bit, MPI_Allreduce's to
 * rounding, tested to completion or only waited for. pattern 0: sizes from
 * a seed with empty ones, 1: everything on the last rank, 2: rank 0 empty. */
static void test_reduce_scatter_v(int pattern, int scale, uint64_t seed) {
  int counts[64], displs[64];
  uint64_t st = seed;
  size_t L = 0;
  for (int b = 0; b < size_ && b < 64; b++) {
    /* tu_uniform is in [-1, 1) */
    size_t gap = (size_t)((tu_uniform(&st) + 1) * 2.5);
    int c = pattern == 1 ? (b == size_ - 1 ? 50 * scale + 3 : 0)
            : pattern == 2 && b == 0 ? 0
            : (int)((tu_uniform(&st) + 1) * 20 * scale) * (tu_uniform(&st) < -0.5 ? 0 : 1);
    displs[b] = (int)(L + gap);
    counts[b] = c;
    L += gap + (size_t)c;
  }
  float *in = malloc((L + 1) * sizeof(float)), *x = malloc((L + 1) * sizeof(float));
  float *ref = malloc((L + 1) * sizeof(float));
  int mine = counts[rank_];
  float *want = calloc((size_t)mine + 1, sizeof(float)), *got = calloc((size_t)mine + 1, sizeof(float));
  input_v(in, rank_, L, seed);
  MPI_Allreduce(in, ref, (int)L, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int k = 1; k <= size_; k++) { /* ((x[b+1] + x[b+2]) + ...) + x[b] */
    input_v(x, (rank_ + k) % size_, L, seed);
    for (int i = 0; i < mine; i++)
      want[i] = k == 1 ? x[displs[rank_] + i] : want[i] + x[displs[rank_] + i];
  }
  for (int testing = 0; testing < 2; testing++) {
    mt_coll *h = NULL;
    memset(got, 0xff, (size_t)mine * sizeof(float));
    int err = mt_coll_start_reduce_scatter_v(&h, got, in, counts, displs, MPI_COMM_WORLD);
    int done = 0;
    while (testing && !err && !done) err = mt_coll_test(h, &done);
    if (!err) err = mt_coll_wait(&h);
    double maxerr = 0, tol = 4.0 * size_ * 6e-8 * 1e3;
    for (int i = 0; i < mine; i++) {
      double d = fabs((double)got[i] - ref[displs[rank_] + i]);
      if (!(d <= maxerr)) maxerr = d;
    }
    CHECK(all_ranks(!err && h == NULL && same_bits(got, want, (size_t)mine) && maxerr <= tol),
          "reduce_scatter_v pattern %d (this rank %d of %zu floats), %s: the ring-order sum bit "
          "for bit, MPI_Allreduce's to rounding (%.3g)", pattern, mine, L,
          testing ? "tested to completion" : "waited for", maxerr);
  }
  free(in), free(x), free(ref), free(want), free(got);
}

static void test_errors(void) {
  float buf[64];
  mt_error_clear();
  int err = mt_reduce_scatter(buf, buf, 4, MPI_COMM_WORLD);
  CHECK(all_ranks(err == MT_ERR_ARG), "reduce-scatter into its own input: MT_ERR_ARG");
  mt_error_clear();
  err = mt_reduce_scatter_method(buf + 32, buf, 1, MPI_COMM_WORLD, 99);
  CHECK(all_ranks(err == MT_ERR_ARG), "unknown method: MT_ERR_ARG");
  mt_error_clear();
  err = mt_all_gather_method(buf, buf + 40, 1, MPI_COMM_WORLD, MT_COLL_ALLREDUCE);
  CHECK(all_ranks(err == MT_ERR_ARG), "all-gather by all-reduce: MT_ERR_ARG");
  mt_error_clear();
  mt_coll *h = (mt_coll *)buf;
  err = mt_coll_start_reduce_scatter(&h, buf + 32, buf, 1, MPI_COMM_WORLD, MT_COLL_ALLREDUCE);
  CHECK(all_ranks(err == MT_ERR_ARG && h == NULL), "non-blocking all-reduce method: MT_ERR_ARG");
  mt_error_clear();
  CHECK(all_ranks(mt_reduce_scatter(NULL, NULL, 0, MPI_COMM_WORLD) == 0 &&
                  mt_all_gather(NULL, NULL, 0, MPI_COMM_WORLD) == 0 && mt_coll_wait(NULL) == 0),
        "empty shards do nothing");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  if (rank_ != 0) { /* one rank's lines are enough; the checks agree */
    if (!freopen("/dev/null", "w", stdout)) return 1;
  }
  /* small segments: many segments per step and a last partial one */
  const size_t sizes[3] = {1, 7, 1000003};
  for (int seg = 0; seg < 2; seg++) {
    mt_coll_set_ring(seg ? 3 : (size_t)1 << 16, seg ? 2 : 4);
    printf("# ring segments of %s\n", seg ? "3 floats, 2 in flight" : "65536 floats, 4 in flight");
    for (int i = 0; i < 3; i++) {
      if (seg && sizes[i] > 100000) continue; /* 3-float segments: small shards only */
      test_reduce_scatter(sizes[i], 1 + (uint64_t)i);
      test_all_gather(sizes[i], 10 + (uint64_t)i);
      test_two_in_flight(sizes[i]);
    }
  }
  for (int seg = 0; seg < 2; seg++) {
    mt_coll_set_ring(seg ? 3 : (size_t)1 << 16, seg ? 2 : 4);
    for (int pattern = 0; pattern < 3; pattern++)
      for (int scale = 1; scale <= (seg ? 1 : 3000); scale *= 3000)
        test_reduce_scatter_v(pattern, scale, 100 + (uint64_t)(pattern * 7 + scale));
  }
  mt_coll_set_ring((size_t)1 << 16, 4);
  test_reduce_scatter(12345, 77); /* odd size with default segments */
  test_errors();
  int fails = tu_nfailed, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("test_collectives on %d ranks: %d checks per rank, %d failed on all ranks\n", size_,
         tu_nchecks, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
