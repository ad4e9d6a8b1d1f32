/* test_checkpoint's modes unit (selections of flat ranges, the checksum's
 * split invariance, the state API), write (a replicated and a sharded
 * file, read back at once) and read (both files at another rank count,
 * bit-exact; info and state). */
#include "test_checkpoint.h"

/* ---------------------------------------------------------------- unit */

void test_unit(void) {
  /* the checksum of a tensor does not depend on how it is split */
  enum { N = 100003 };
  float *x = tu_xmalloc(N * sizeof(float));
  for (size_t i = 0; i < N; i++) x[i] = val(7, 0, i);
  uint64_t whole[2] = {0, 0}, parts[2] = {0, 0};
  mt_ckpt_sum(x, N, 0, whole);
  size_t cuts[] = {0, 1, 17, 4096, 50000, 50001, 99999, N};
  for (size_t k = 0; k + 1 < sizeof(cuts) / sizeof(cuts[0]); k++)
    mt_ckpt_sum(x + cuts[k], cuts[k + 1] - cuts[k], cuts[k], parts);
  CHECK(whole[0] == parts[0] && whole[1] == parts[1], "checksum of the parts equals the whole");
  uint64_t slow[2] = {0, 0};
  for (size_t i = 0; i < N; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    slow[0] += u;
    slow[1] += (uint64_t)(i + 1) * u;
  }
  CHECK(slow[0] == whole[0] && slow[1] == whole[1], "checksum matches its definition");
  float t = x[500];
  x[500] = x[501], x[501] = t;
  uint64_t sw[2] = {0, 0};
  mt_ckpt_sum(x, N, 0, sw);
  CHECK(sw[0] == whole[0] && sw[1] != whole[1], "two swapped elements change the second sum");
  ((unsigned char *)x)[4 * 777 + 2] ^= 0x10;
  uint64_t fl[2] = {0, 0};
  mt_ckpt_sum(x, N, 0, fl);
  CHECK(fl[0] != sw[0], "a flipped bit changes the first sum");
  free(x);

  /* hyperslab selections of flat ranges match a linear walk */
  mt_param q;
  memset(&q, 0, sizeof(q));
  snprintf(q.name, sizeof(q.name), "t");
  int64_t shp[4] = {3, 4, 5, 6};
  q.ndim = 4;
  q.offset = 1000;
  q.numel = 360;
  memcpy(q.shape, shp, sizeof(shp));
  hsize_t dims[4] = {3, 4, 5, 6};
  int ok = 1;
  uint64_t st = 1;
  for (int trial = 0; trial < 300 && ok; trial++) {
    mt_ckpt_range r[3];
    int nr = 1 + trial % 3;
    size_t cur = 990;
    for (int i = 0; i < nr; i++) {
      r[i].a = cur + (size_t)((tu_uniform(&st) + 1) * 60);
      r[i].b = r[i].a + (size_t)((tu_uniform(&st) + 1) * 150);
      cur = r[i].b + 1;
    }
    hid_t fs = H5Screate_simple(4, dims, NULL), ms;
    size_t first, count;
    if (mt_ckpt_select(fs, &q, r, nr, &ms, &first, &count)) {
      ok = 0;
      break;
    }
    hssize_t nsel = H5Sget_select_npoints(fs), nm = H5Sget_select_npoints(ms);
    size_t want = 0;
    for (int i = 0; i < nr; i++) {
      size_t a = r[i].a > 1000 ? r[i].a : 1000, b = r[i].b < 1360 ? r[i].b : 1360;
      if (a < b) want += b - a;
    }
    if ((size_t)nsel != want || (size_t)nm != want || count != want) ok = 0;
    /* every element selected iff inside a range */
    for (size_t li = 0; li < 360 && ok && want; li++) {
      hsize_t c[4] = {li / 120, li / 30 % 4, li / 6 % 5, li % 6}, one[4] = {1, 1, 1, 1};
      int expect = 0;
      for (int i = 0; i < nr; i++) expect |= 1000 + li >= r[i].a && 1000 + li < r[i].b;
      /* the selection AND the point holds 1 element iff the point is in */
      hid_t both = H5Scopy(fs);
      H5Sselect_hyperslab(both, H5S_SELECT_AND, c, NULL, one, NULL);
      if ((H5Sget_select_npoints(both) == 1) != expect) ok = 0;
      H5Sclose(both);
    }
    H5Sclose(fs);
    H5Sclose(ms);
  }
  CHECK(ok, "selections of flat ranges in a (3,4,5,6) tensor are exact");

  /* state API */
  mt_ckpt_state s;
  make_state(&s, 5);
  int64_t iv;
  double dv;
  const char *sv;
  const int64_t *ia;
  const double *da;
  size_t n;
  CHECK(mt_ckpt_state_get_i64(&s, "global_step", &iv) == 0 && iv == 5, "state int64");
  CHECK(mt_ckpt_state_get_f64(&s, "lr", &dv) == 0 && dv == 0.1 / 3, "state double");
  CHECK(mt_ckpt_state_get_str(&s, "sampler", &sv) == 0 && !strcmp(sv, "global-permutation v1"),
        "state string");
  CHECK(mt_ckpt_state_get_i64s(&s, "curve.step", &ia, &n) == 0 && n == 4 && ia[3] == 400,
        "state int64 array");
  CHECK(mt_ckpt_state_get_f64s(&s, "accountant.rdp", &da, &n) == 0 && n == 0, "empty array");
  CHECK(mt_ckpt_state_set_i64(&s, "lr", 7) == 0 && mt_ckpt_state_get_i64(&s, "lr", &iv) == 0 &&
            iv == 7 && s.n == 11, "set replaces an entry and its type");
  int rc = mt_ckpt_state_get_f64(&s, "lr", &dv);
  CHECK(rc == MT_ERR_DATA && strstr(mt_error_message(), "lr"), "wrong type names the key: %s",
        mt_error_message());
  mt_error_clear();
  rc = mt_ckpt_state_get_i64(&s, "nope", &iv);
  CHECK(rc == MT_ERR_DATA && strstr(mt_error_message(), "nope"), "missing key named: %s",
        mt_error_message());
  mt_error_clear();
  CHECK(mt_ckpt_state_set_i64(&s, "a/b", 1) == MT_ERR_ARG, "key with '/' refused");
  mt_error_clear();
  mt_ckpt_state_free(&s);
  CHECK(s.n == 0 && s.e == NULL, "state freed");
}

/* ---------------------------------------------------------- write/read */

/* Uneven shards of [0, total) at np ranks: rank 1 holds nothing (np >= 3),
 * the others weighted (r+1)^2 with cuts inside tensors; at np >= 4 the last
 * rank holds a range that overlaps the others' (as a replica would). */
static void shard_range(int np, int r, size_t total, size_t *lo, size_t *hi) {
  int nparts = np >= 4 ? np - 1 : np;
  if (np >= 4 && r == np - 1) {
    *lo = total / 7;
    *hi = total * 5 / 7 + 3;
    return;
  }
  double w[64], sum = 0, acc = 0;
  for (int q = 0; q < nparts; q++) sum += w[q] = (np >= 3 && q == 1) ? 0 : (q + 1) * (q + 1);
  for (int q = 0; q < r; q++) acc += w[q];
  *lo = r == 0 ? 0 : (size_t)(total * (acc / sum)) | 1;
  *hi = r == nparts - 1 ? total + 5 : (size_t)(total * ((acc + w[r]) / sum)) | 1;
  if (w[r] == 0) *hi = *lo;
}

static int state_equal(const mt_ckpt_state *a, const mt_ckpt_state *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    const mt_ckpt_entry *x = &a->e[i], *y = mt_ckpt_state_find(b, x->key);
    if (!y || x->type != y->type || x->n != y->n) return 0;
    if (x->type == MT_CKPT_I64 && x->i != y->i) return 0;
    if (x->type == MT_CKPT_F64 && memcmp(&x->f, &y->f, sizeof(double))) return 0;
    size_t bytes = x->type == MT_CKPT_STR ? x->n : x->type >= MT_CKPT_I64S ? 8 * x->n : 0;
    if (bytes && memcmp(x->p, y->p, bytes)) return 0;
  }
  return 1;
}

/* The owned ranges of all ranks tile [0, total) exactly, and (each_owns)
 * every rank owns something. */
static void check_plan(const mt_ckpt_tensors *ts, const char *what, int each_owns) {
  mt_ckpt_plan pl;
  if (mt_ckpt_plan_make(MPI_COMM_WORLD, ts, &pl)) tu_fatal("plan", mt_error_message());
  size_t total = ts->table->total;
  int *cover = calloc(total, sizeof(int)), *all = calloc(total, sizeof(int));
  for (int k = 0; k < pl.nown; k++)
    for (size_t i = pl.own[k].a; i < pl.own[k].b; i++) cover[i]++;
  MPI_Allreduce(cover, all, (int)total, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int ok = 1;
  for (size_t i = 0; i < total; i++) ok &= all[i] == 1;
  CHECK(ok, "%s: the owned pieces of the %d ranks tile the flat layout", what, size_);
  if (each_owns)
    CHECK(all_ok(pl.nown > 0), "%s: every rank owns a piece (%d here)", what, pl.nown);
  free(cover);
  free(all);
  mt_ckpt_plan_free(&pl);
}

void test_write(void) {
  char rep[1024], shard[1024];
  path_in(rep, sizeof(rep), "rep.h5");
  path_in(shard, sizeof(shard), "shard.h5");
  mt_ckpt_state st;
  make_state(&st, 12345);
  mt_ckpt_meta meta = {"ddp", "-epochs 3 -lr 0.1", "0123456789abcdef", NULL};

  model m;
  model_make(&m, 0, 0, 0, 0);
  model_fill(&m, 1);
  check_plan(&m.ts, "replicated", 1);
  CHECK_OK(mt_ckpt_write(MPI_COMM_WORLD, rep, &m.ts, &meta, &st), "replicated write at %d ranks: %s",
           size_, mt_error_message());
  model r;
  model_make(&r, 0, 0, 0, 0);
  mt_ckpt_state got;
  memset(&got, 0, sizeof(got));
  CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, &got), "read back at %d ranks: %s",
           size_, mt_error_message());
  CHECK(all_ok(model_diffs(&r, 1) == 0), "replicated round trip bit-exact at %d ranks", size_);
  CHECK(all_ok(state_equal(&st, &got)), "state round trip at %d ranks", size_);
  model_free(&r);
  model_free(&m);
  mt_ckpt_state_free(&got);

  size_t lo, hi;
  model_make(&m, 0, 0, 0, 0);
  shard_range(size_, rank_, m.t.total, &lo, &hi);
  model_free(&m);
  model_make(&m, 0, 1, lo, hi);
  model_fill(&m, 2);
  check_plan(&m.ts, "sharded", 0);
  CHECK_OK(mt_ckpt_write(MPI_COMM_WORLD, shard, &m.ts, &meta, &st),
           "sharded write of [%zu, %zu) at %d ranks: %s", lo, hi, size_, mt_error_message());
  model_make(&r, 0, 1, lo, hi);
  CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, shard, &r.ts, NULL, NULL), "sharded read back: %s",
           mt_error_message());
  CHECK(all_ok(model_diffs(&r, 2) == 0), "sharded round trip bit-exact");
  model_free(&r);
  model_free(&m);
  mt_ckpt_state_free(&st);
}

void test_read(int nw) {
  char rep[1024], shard[1024];
  path_in(rep, sizeof(rep), "rep.h5");
  path_in(shard, sizeof(shard), "shard.h5");
  mt_ckpt_state want;
  make_state(&want, 12345);

  for (int f = 0; f < 2; f++) {
    const char *p = f ? shard : rep;
    model r;
    model_make(&r, 0, 0, 0, 0);
    mt_ckpt_info info;
    mt_ckpt_state st;
    memset(&info, 0, sizeof(info));
    memset(&st, 0, sizeof(st));
    CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, p, &r.ts, &info, &st), "read %.200s at %d ranks: %.200s", p,
             size_, mt_error_message());
    CHECK(all_ok(model_diffs(&r, (uint64_t)(f + 1)) == 0),
          "%s written at %d ranks reads bit-exact, replicated, at %d", f ? "sharded" : "replicated",
          nw, size_);
    CHECK(info.format == MT_CKPT_FORMAT && info.world_size == nw && !strcmp(info.backend, "ddp") &&
              !strcmp(info.options, "-epochs 3 -lr 0.1") && info.nbufs == NBUF &&
              strlen(info.created) == 20,
          "header: format %d, world size %d, backend %s, options '%s', %d buffers, created %s",
          info.format, info.world_size, info.backend, info.options, info.nbufs, info.created);
    CHECK(all_ok(state_equal(&want, &st)), "state entries read back (%d)", st.n);
    mt_ckpt_info_free(&info);
    mt_ckpt_state_free(&st);
    model_free(&r);

    size_t lo, hi;
    model_make(&r, 0, 0, 0, 0);
    size_t total = r.t.total;
    model_free(&r);
    shard_range(size_, rank_, total, &lo, &hi);
    model_make(&r, 0, 1, lo, hi);
    CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, p, &r.ts, NULL, NULL), "sharded read of %.200s: %.200s", p,
             mt_error_message());
    CHECK(all_ok(model_diffs(&r, (uint64_t)(f + 1)) == 0),
          "%s file read bit-exact as uneven shards [%zu, %zu) at %d ranks", f ? "sharded" : "replicated",
          lo, hi, size_);
    model_free(&r);

    CHECK_OK(mt_ckpt_verify(MPI_COMM_WORLD, p, MT_CKPT_CHECK_DATA), "%.200s verifies: %.200s", p,
             mt_error_message());
  }
  /* header and state only */
  mt_ckpt_state st;
  memset(&st, 0, sizeof(st));
  CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, rep, NULL, NULL, &st), "state-only read: %s",
           mt_error_message());
  int64_t gs = 0;
  CHECK(mt_ckpt_state_get_i64(&st, "global_step", &gs) == 0 && gs == 12345, "global step %lld",
        (long long)gs);
  mt_ckpt_state_free(&st);
  mt_ckpt_state_free(&want);
}
