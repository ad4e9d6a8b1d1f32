/* ddp's gradient buckets (src/comm/buckets.c), shared by the CPU backend
 * and the GPU trainer: sizes from the top of the buffer down, the whole
 * buffer covered once, and a bucket ready exactly when every unit that
 * overlaps it is done. */
#include "comm/buckets.h"
#include "core/core.h"
#include "testutil.h"

static int covers(const mt_buckets *p, size_t n) {
  size_t top = n;
  for (int k = 0; k < p->nb; k++) {
    if (p->hi[k] != top || p->lo[k] >= p->hi[k]) return 0;
    top = p->lo[k];
  }
  return top == 0;
}

int main(void) {
  mt_buckets p;
  /* 1 MiB floats = 262144; first 0.25 MiB = 65536 */
  const size_t n = 600000;
  CHECK(mt_buckets_plan(&p, n, sizeof(float), 1.0, 0.25, NULL) == 0, "plan without units");
  CHECK(p.nb == 4 && p.hi[0] == n && p.lo[0] == n - 65536 && p.hi[1] - p.lo[1] == 262144 &&
            p.lo[3] == 0 && covers(&p, n),
        "first bucket 0.25 MiB, then 1 MiB each, from the top down, covering the buffer (%d)",
        p.nb);
  CHECK(p.nunits == 0 && mt_buckets_ready(&p, 0), "without units every bucket is ready");
  mt_buckets_free(&p);
  CHECK(mt_buckets_plan(&p, n, sizeof(double), 1.0, 0.25, NULL) == 0 &&
            p.hi[0] - p.lo[0] == 32768 && covers(&p, n),
        "double elements: half as many per bucket");
  mt_buckets_free(&p);
  CHECK(mt_buckets_plan(&p, 5000, sizeof(float), 1e-6, 1e-7, NULL) == 0 &&
            p.hi[0] - p.lo[0] == 1024 && p.nb == 5 && covers(&p, 5000),
        "at least 1024 elements per bucket (%d buckets)", p.nb);
  mt_buckets_free(&p);
  CHECK(mt_buckets_plan(&p, 0, sizeof(float), 1.0, 1.0, NULL) == 0 && p.nb == 0,
        "an empty buffer has no bucket");
  mt_buckets_free(&p);
  CHECK(mt_buckets_plan(&p, 100, sizeof(float), 0, 1.0, NULL) == MT_ERR_OPTION,
        "bucket size 0 refused naming the option (%s)", mt_error_message());
  mt_error_clear();
  mt_buckets_free(&p);

  /* three units: unit 0 at the bottom, unit 2 at the top (the backward
   * finishes 2 first); buckets of 1024 floats cut across them */
  mt_param_table t = {0};
  int64_t a[1] = {1500}, b[1] = {700}, c[1] = {900};
  CHECK(mt_param_table_add(&t, "u0", 1, a, 0) == 0 && mt_param_table_add(&t, "u1", 1, b, 1) == 0 &&
            mt_param_table_add(&t, "u2", 1, c, 2) == 0,
        "a table of three units");
  CHECK(mt_buckets_plan(&p, t.total, sizeof(float), 1024 * 4 / 1048576.0, 0, &t) == 0 &&
            p.nunits == 3 && covers(&p, t.total),
        "plan with units (%d buckets over %zu)", p.nb, t.total);
  /* offsets: u0 [0,1500) pad 1504, u1 [1504,2204) pad 2208, u2 [2208,3108) -> total 3120;
   * buckets [2096,3120) [1072,2096) [48,1072) [0,48) */
  CHECK(p.nb == 4 && p.lo[0] == 2096 && p.lo[1] == 1072, "bucket bounds (%zu, %zu)", p.lo[0],
        p.lo[1]);
  CHECK(!mt_buckets_ready(&p, 0), "nothing done: the top bucket is not ready");
  CHECK(mt_buckets_done(&p, 2) == 0 && !mt_buckets_ready(&p, 0),
        "unit 2 done: the top bucket also holds the end of unit 1");
  CHECK(mt_buckets_done(&p, 1) == 0 && mt_buckets_ready(&p, 0) && !mt_buckets_ready(&p, 1),
        "units 2 and 1 done: the top bucket is ready, the next (with unit 0) is not");
  CHECK(mt_buckets_done(&p, 0) == 0 && mt_buckets_ready(&p, 1) && mt_buckets_ready(&p, 3),
        "all done: every bucket ready");
  mt_buckets_reset(&p);
  CHECK(!mt_buckets_ready(&p, 0) && !mt_buckets_ready(&p, 3), "reset: none ready again");
  CHECK(mt_buckets_done(&p, 3) == MT_ERR_ARG, "an unknown unit is an error");
  mt_error_clear();
  mt_buckets_free(&p);
  mt_param_table_free(&t);
  printf("test_buckets: %d checks, %d failed\n", tu_nchecks, tu_nfailed);
  return tu_nfailed ? 1 : 0;
}
