/* The exact sum (core.h, mt_xsum), at any rank count:
 * - known sums that naive double addition gets wrong (cancellation, ties
 *   rounded to even, a sticky bit below the tie, subnormals, negatives),
 *   and NaN and infinities kept apart;
 * - the same values (float losses, and doubles of exponents from 2^-1070
 *   to 2^1000) added in forward, backward and strided orders, in batches
 *   of different cuts, and split over the ranks (each rank a share,
 *   all-reduced) give the same bits. */
#include "core/core.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static int rank_, size_;

static double sum_of(const double *v, int n) {
  mt_xsum s;
  mt_xsum_zero(&s);
  for (int i = 0; i < n; i++) mt_xsum_add(&s, v[i]);
  return mt_xsum_value(&s);
}

static int same_bits(double a, double b) { return memcmp(&a, &b, sizeof(a)) == 0; }

static void test_known(void) {
  const double big = 0x1p53;
  double a[] = {1e16, 1.0, -1e16};
  CHECK(sum_of(a, 3) == 1.0, "1e16 + 1 - 1e16 = 1 (naive: %g)", 1e16 + 1.0 - 1e16);
  double b[] = {big, 1.0};
  CHECK(sum_of(b, 2) == big, "2^53 + 1 ties to even: 2^53");
  double c[] = {big, 1.0, 0x1p-60};
  CHECK(sum_of(c, 3) == big + 2, "2^53 + 1 + 2^-60 rounds up to 2^53 + 2 (a sticky bit)");
  double d[] = {big, 1.0, 1.0};
  CHECK(sum_of(d, 3) == big + 2, "2^53 + 1 + 1 = 2^53 + 2 (naive: 2^53)");
  double e[] = {-3.5, 1.25, -0.75};
  CHECK(sum_of(e, 3) == -3.0, "negative sums: -3.5 + 1.25 - 0.75 = -3");
  double f[] = {DBL_TRUE_MIN, DBL_TRUE_MIN, DBL_TRUE_MIN, -DBL_TRUE_MIN};
  CHECK(sum_of(f, 4) == 2 * DBL_TRUE_MIN, "subnormals: 3 - 1 smallest = 2 smallest");
  double g[] = {DBL_MAX, -DBL_MAX, 0.5, DBL_MIN};
  CHECK(sum_of(g, 4) == 0.5 + DBL_MIN, "DBL_MAX - DBL_MAX + 0.5 + DBL_MIN");
  double h[] = {1.0, INFINITY, 2.0};
  CHECK(isinf(sum_of(h, 3)) && sum_of(h, 3) > 0, "an infinity is the sum");
  double k[] = {1.0, NAN, 2.0};
  CHECK(isnan(sum_of(k, 3)), "a NaN is the sum");
  double z[] = {0.0, -0.0};
  CHECK(sum_of(z, 2) == 0.0 && sum_of(NULL, 0) == 0.0, "empty and zero sums are 0");
  double third = 1.0 / 3.0, t[3] = {third, third, third};
  CHECK(sum_of(t, 3) == (double)((long double)third * 3), "3 x 1/3 rounded once");
}

/* n values: float losses in [0, 8) (as an evaluation pass adds them) or
 * doubles of either sign and wide exponents. */
static void values(double *v, int n, int wide) {
  uint64_t st = 12345 + (uint64_t)wide;
  for (int i = 0; i < n; i++) {
    double u = tu_uniform(&st);
    if (!wide)
      v[i] = (double)(float)(4.0 + 4.0 * u);
    else
      v[i] = ldexp(u, (int)(2070 * (0.5 + 0.5 * tu_uniform(&st))) - 1070);
  }
}

static void test_orders(int wide) {
  enum { N = 5003 };
  static double v[N];
  values(v, N, wide);
  const double fwd = sum_of(v, N);
  mt_xsum s;
  mt_xsum_zero(&s);
  for (int i = N - 1; i >= 0; i--) mt_xsum_add(&s, v[i]);
  CHECK(same_bits(mt_xsum_value(&s), fwd), "%s: backward order, the same bits (%.17g)",
        wide ? "wide doubles" : "float losses", fwd);
  /* batches of 7, 500, 1: each summed apart, then merged */
  const int cuts[] = {7, 500, 1};
  for (int c = 0; c < 3; c++) {
    mt_xsum all;
    mt_xsum_zero(&all);
    for (int b = 0; b < N; b += cuts[c]) {
      mt_xsum part;
      mt_xsum_zero(&part);
      for (int i = b; i < N && i < b + cuts[c]; i++) mt_xsum_add(&part, v[i]);
      mt_xsum_merge(&all, &part);
    }
    CHECK(same_bits(mt_xsum_value(&all), fwd), "%s: batches of %d merged, the same bits",
          wide ? "wide doubles" : "float losses", cuts[c]);
  }
  /* the ranks' shares (every size-th value from the rank's, backward) */
  mt_xsum_zero(&s);
  for (int i = N - 1; i >= 0; i--)
    if (i % size_ == rank_) mt_xsum_add(&s, v[i]);
  int rc = mt_xsum_allreduce(&s, MPI_COMM_WORLD);
  CHECK(rc == 0 && same_bits(mt_xsum_value(&s), fwd), "%s: split over %d ranks, the same bits",
        wide ? "wide doubles" : "float losses", size_);
  /* and naive double sums do differ with the order here (so the test can fail) */
  double a = 0, b = 0;
  for (int i = 0; i < N; i++) a += v[i];
  for (int i = N - 1; i >= 0; i--) b += v[i];
  if (!wide) CHECK(a != b || a == fwd, "float losses: naive sums forward %.17g backward %.17g, exact %.17g", a, b, fwd);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  test_known();
  test_orders(0);
  test_orders(1);
  int fails = tu_nfailed, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("test_xsum on %d ranks: %d checks, %d failed\n", size_, tu_nchecks, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
