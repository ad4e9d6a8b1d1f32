/* Checkpoint files under MPI (run by tests/test_checkpoint.sh at 1 to 4
 * ranks). One program, several modes, each on the folder DIR:
 *
 *   unit DIR          selections of flat ranges, the checksum's split
 *                     invariance, the state API
 *   write DIR         DIR/rep.h5 (replicated) and DIR/shard.h5 (uneven,
 *                     overlapping and empty shards), read back at once
 *   read DIR NW       both files at this rank count (written at NW ranks),
 *                     replicated and sharded, bit-exact; info and state
 *   errors DIR        truncated, flipped byte, missing tensor, shape and
 *                     format mismatches, bad parts, disagreeing ranks
 *   dir DIR           mt_ckpt_save: latest, keep K, fallback past damaged
 *                     checkpoints, stale .tmp files
 *   kill DIR N        saves step 1, then rank 1 SIGKILLs itself while step 2
 *                     is being written (N floats per buffer)
 *   afterkill DIR N [save]  the newest checkpoint that verifies loads
 *                     bit-exact; with save, the next save cleans up
 *
 * Tensor values are random finite 32-bit patterns (denormals and -0
 * included), a pure function of (seed, buffer, flat index), so any mode
 * at any rank count knows what a file must hold. */
#include "io/checkpoint.h"
#include "testutil.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int rank_, size_;
static const char *dir_;

#define CHECK_OK(expr, ...) CHECK((expr) == 0, __VA_ARGS__)
#define NBUF 3
static const char *bufnames_[NBUF] = {"params", "momentum_buffer", "exp_avg"};

/* ------------------------------------------------------------ helpers */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static float val(uint64_t seed, int b, size_t i) {
  uint32_t u = (uint32_t)mix(mix(seed * 1000003u + (uint64_t)b) ^ (uint64_t)i);
  /* finite only: a checkpoint is never written from NaN or inf
   * (test_nonfinite.c) */
  if ((u & 0x7f800000u) == 0x7f800000u) u &= ~0x00800000u;
  if (i % 97 == 5) u = 0x80000000u; /* -0 */
  if (i % 89 == 7) u = 0x00000003u; /* a denormal */
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* variant 0: the reference table; 1: an extra tensor; 2: head.weight of
 * another shape; 3: without "scalar" */
static void make_table(mt_param_table *t, int variant) {
  memset(t, 0, sizeof(*t));
  struct {
    const char *name;
    int nd;
    int64_t s[4];
  } ts[] = {{"embed.weight", 2, {37, 29}},   {"layers.0.weight", 3, {13, 7, 3}},
            {"layers.0.bias", 1, {13}},      {"layers.1.weight", 4, {2, 3, 5, 7}},
            {"scalar", 1, {1}},              {"layers.1.bias", 1, {17}},
            {"head.weight", 2, {101, 41}},   {"head.bias", 1, {5}}};
  for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
    if (variant == 3 && !strcmp(ts[i].name, "scalar")) continue;
    if (variant == 2 && !strcmp(ts[i].name, "head.weight")) ts[i].s[1] = 42;
    if (mt_param_table_add(t, ts[i].name, ts[i].nd, ts[i].s, (int)i)) tu_fatal("table", "");
  }
  if (variant == 1) {
    int64_t s[2] = {3, 3};
    if (mt_param_table_add(t, "extra.weight", 2, s, 9)) tu_fatal("table", "");
  }
}

/* Expected contents of flat elements [lo, hi) of buffer b: tensor values,
 * zero padding. */
static void fill(const mt_param_table *t, uint64_t seed, int b, float *x, size_t lo, size_t hi) {
  memset(x, 0, (hi - lo) * sizeof(float));
  for (int k = 0; k < t->n; k++)
    for (size_t i = t->p[k].offset; i < t->p[k].offset + t->p[k].numel; i++)
      if (i >= lo && i < hi) x[i - lo] = val(seed, b, i);
}

static size_t bit_diffs(const float *x, const float *y, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++) d += memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return d;
}

static int all_ok(int ok) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

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

static void path_in(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", dir_, name);
}

/* A fresh table-sized set of buffers (replicated) or shards. */
typedef struct {
  mt_param_table t;
  float *x[NBUF];
  mt_ckpt_buf bufs[NBUF];
  mt_ckpt_tensors ts;
} model;

static void model_make(model *m, int variant, int sharded, size_t lo, size_t hi) {
  memset(m, 0, sizeof(*m));
  make_table(&m->t, variant);
  size_t n = sharded ? hi - lo : m->t.total;
  for (int b = 0; b < NBUF; b++) {
    m->x[b] = tu_xmalloc((n ? n : 1) * sizeof(float));
    memset(m->x[b], 0xff, (n ? n : 1) * sizeof(float)); /* NaN garbage */
    m->bufs[b].name = bufnames_[b];
    m->bufs[b].data = m->x[b];
  }
  m->ts.table = &m->t;
  m->ts.bufs = m->bufs;
  m->ts.nbufs = NBUF;
  m->ts.part = sharded ? mt_ckpt_shard(lo, hi) : mt_ckpt_replicated();
}

static void model_fill(model *m, uint64_t seed) {
  size_t lo = m->ts.part.sharded ? m->ts.part.lo : 0;
  size_t hi = m->ts.part.sharded ? m->ts.part.hi : m->t.total;
  for (int b = 0; b < NBUF; b++) fill(&m->t, seed, b, m->x[b], lo, hi);
}

/* Number of bits that differ from the expected values (elements past the
 * table are not compared). */
static size_t model_diffs(const model *m, uint64_t seed) {
  size_t lo = m->ts.part.sharded ? m->ts.part.lo : 0;
  size_t hi = m->ts.part.sharded ? m->ts.part.hi : m->t.total;
  if (hi > m->t.total) hi = m->t.total;
  if (lo > hi) lo = hi;
  size_t d = 0;
  float *e = tu_xmalloc((hi - lo + 1) * sizeof(float));
  for (int b = 0; b < NBUF; b++) {
    fill(&m->t, seed, b, e, lo, hi);
    d += bit_diffs(m->x[b], e, hi - lo);
  }
  free(e);
  return d;
}

static void model_free(model *m) {
  for (int b = 0; b < NBUF; b++) free(m->x[b]);
  mt_param_table_free(&m->t);
}

static void make_state(mt_ckpt_state *st, int64_t step) {
  memset(st, 0, sizeof(*st));
  const int64_t curve_step[4] = {100, 200, 300, 400};
  const double curve_loss[4] = {2.5, 1.25, 0.625, 0.3125};
  int e = mt_ckpt_state_set_i64(st, "epoch", 3);
  e |= mt_ckpt_state_set_i64(st, "step_in_epoch", 17);
  e |= mt_ckpt_state_set_i64(st, "global_step", step);
  e |= mt_ckpt_state_set_i64(st, "rng_key", (int64_t)0xfedcba9876543210ULL);
  e |= mt_ckpt_state_set_f64(st, "lr", 0.1 / 3);
  e |= mt_ckpt_state_set_f64(st, "loss_scale", 65536.0);
  e |= mt_ckpt_state_set_str(st, "sampler", "global-permutation v1");
  e |= mt_ckpt_state_set_str(st, "empty_string", "");
  e |= mt_ckpt_state_set_i64s(st, "curve.step", curve_step, 4);
  e |= mt_ckpt_state_set_f64s(st, "curve.val_loss", curve_loss, 4);
  e |= mt_ckpt_state_set_f64s(st, "accountant.rdp", NULL, 0);
  if (e) tu_fatal("state set", mt_error_message());
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

/* Runs a call that must fail on every rank with code, and (rank 0, which
 * holds the agreed message) a message containing each of the texts. */
static void expect_err(int rc, int code, const char *what, const char *t1, const char *t2,
                       const char *t3) {
  const char *msg = mt_error_message();
  int ok = rc == code;
  if (rank_ == 0) {
    if (t1 && !strstr(msg, t1)) ok = 0;
    if (t2 && !strstr(msg, t2)) ok = 0;
    if (t3 && !strstr(msg, t3)) ok = 0;
  }
  CHECK(all_ok(ok), "%s fails on all ranks with the right message (rc %d: %s)", what, rc, msg);
  mt_error_clear();
}

/* ---------------------------------------------------------------- unit */

static void test_unit(void) {
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

static void test_write(void) {
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

static void test_read(int nw) {
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

/* ------------------------------------------------------------- errors */

static void copy_file(const char *from, const char *to, double keep_fraction) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  if (!a || !b) tu_fatal("cannot copy", from);
  fseek(a, 0, SEEK_END);
  long n = ftell(a);
  fseek(a, 0, SEEK_SET);
  long keep = (long)(n * keep_fraction);
  char *buf = tu_xmalloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, a) != (size_t)n) tu_fatal("cannot read", from);
  if (fwrite(buf, 1, (size_t)keep, b) != (size_t)keep) tu_fatal("cannot write", to);
  free(buf);
  fclose(a);
  fclose(b);
}

/* Flips one byte in the middle of dataset name's data (serial HDF5 finds
 * the data's address; contiguous layout). */
static void flip_byte(const char *path, const char *name, size_t elem) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = f < 0 ? -1 : H5Dopen2(f, name, H5P_DEFAULT);
  haddr_t at = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
  if (d >= 0) H5Dclose(d);
  if (f >= 0) H5Fclose(f);
  if (at == HADDR_UNDEF) tu_fatal("cannot find the data of", name);
  int fd = open(path, O_RDWR);
  unsigned char c;
  off_t pos = (off_t)(at + 4 * elem + 1);
  if (fd < 0 || pread(fd, &c, 1, pos) != 1) tu_fatal("cannot read", path);
  c ^= 0x5a;
  if (pwrite(fd, &c, 1, pos) != 1 || close(fd)) tu_fatal("cannot write", path);
}

static void set_format(const char *path, int v) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = f < 0 ? -1 : H5Aopen(f, "format", H5P_DEFAULT);
  if (a < 0 || H5Awrite(a, H5T_NATIVE_INT, &v) < 0) tu_fatal("cannot rewrite format of", path);
  H5Aclose(a);
  H5Fclose(f);
}

static void test_errors(void) {
  char rep[1024], trunc[1024], flip[1024], fmt[1024], gap[1024];
  path_in(rep, sizeof(rep), "rep.h5");
  path_in(trunc, sizeof(trunc), "trunc.h5");
  path_in(flip, sizeof(flip), "flip.h5");
  path_in(fmt, sizeof(fmt), "fmt.h5");
  path_in(gap, sizeof(gap), "gap.h5");
  if (rank_ == 0) {
    copy_file(rep, trunc, 0.6);
    copy_file(rep, flip, 1.0);
    flip_byte(flip, "/exp_avg/head.weight", 1234);
    copy_file(rep, fmt, 1.0);
    set_format(fmt, 99);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  model r;
  model_make(&r, 0, 0, 0, 0);
  int rc = mt_ckpt_read(MPI_COMM_WORLD, trunc, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_FILE, "truncated file", "trunc.h5", "truncated", NULL);
  rc = mt_ckpt_verify(MPI_COMM_WORLD, trunc, MT_CKPT_CHECK_OPEN);
  expect_err(rc, MT_ERR_FILE, "verify of a truncated file", "trunc.h5", "truncated", NULL);

  rc = mt_ckpt_read(MPI_COMM_WORLD, flip, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_DATA, "flipped byte", "flip.h5", "/exp_avg/head.weight", "checksum");
  rc = mt_ckpt_verify(MPI_COMM_WORLD, flip, MT_CKPT_CHECK_DATA);
  expect_err(rc, MT_ERR_DATA, "verify of a flipped byte", "flip.h5", "/exp_avg/head.weight",
             "checksum");
  CHECK_OK(mt_ckpt_verify(MPI_COMM_WORLD, flip, MT_CKPT_CHECK_OPEN),
           "the flipped file's structure is intact (only data verification finds it)");

  rc = mt_ckpt_read(MPI_COMM_WORLD, fmt, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_DATA, "format version 99", "fmt.h5", "format version 99", NULL);
  model_free(&r);

  /* structural mismatches leave buffers and state untouched */
  const char *miss[4][3] = {{NULL, NULL, NULL},
                            {"/params/extra.weight", "no tensor", "(3, 3)"},
                            {"/params/head.weight", "(101, 41)", "(101, 42)"},
                            {"/params/scalar", "in the file but not in the model", NULL}};
  for (int v = 1; v <= 3; v++) {
    model_make(&r, v, 0, 0, 0);
    mt_ckpt_state st;
    memset(&st, 0, sizeof(st));
    mt_ckpt_state_set_i64(&st, "sentinel", 1);
    rc = mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, &st);
    expect_err(rc, MT_ERR_DATA, miss[v][0], miss[v][0], miss[v][1], miss[v][2]);
    int untouched = st.n == 1 && mt_ckpt_state_find(&st, "sentinel");
    for (int b = 0; b < NBUF; b++)
      for (size_t i = 0; i < r.t.total; i++) {
        uint32_t u;
        memcpy(&u, &r.x[b][i], 4);
        untouched &= u == 0xffffffffu;
      }
    CHECK(all_ok(untouched), "buffers and state untouched after the %s error", miss[v][0]);
    mt_ckpt_state_free(&st);
    model_free(&r);
  }
  /* a buffer the file does not hold */
  model_make(&r, 0, 0, 0, 0);
  r.bufs[2].name = "exp_avg_sq";
  rc = mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_DATA, "missing buffer", "/exp_avg_sq", "params", NULL);
  model_free(&r);

  /* sharded parts with a gap: refused on all ranks, no file left */
  model_make(&r, 0, 0, 0, 0);
  size_t total = r.t.total, lo, hi;
  model_free(&r);
  {
    mt_ckpt_range g;
    mt_ckpt_split(total, size_, rank_, 1, &g);
    lo = g.a;
    hi = g.b;
    if (rank_ == size_ - 1) hi = lo + (hi - lo) / 2; /* the end of head.weight on no rank */
  }
  model_make(&r, 0, 1, lo, hi);
  model_fill(&r, 3);
  rc = mt_ckpt_write(MPI_COMM_WORLD, gap, &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_ARG, "sharded parts with a gap", "head.weight", "on no rank", NULL);
  CHECK(all_ok(access(gap, F_OK) != 0), "no file left by the refused write");
  model_free(&r);

  /* ranks passing different state */
  if (size_ > 1) {
    model_make(&r, 0, 0, 0, 0);
    model_fill(&r, 3);
    mt_ckpt_state st;
    make_state(&st, rank_ == 1 ? 2 : 1);
    rc = mt_ckpt_write(MPI_COMM_WORLD, gap, &r.ts, NULL, &st);
    expect_err(rc, MT_ERR_ARG, "ranks with different state", "different trainer state", NULL, NULL);
    CHECK(all_ok(access(gap, F_OK) != 0), "no file left by the refused write");
    mt_ckpt_state_free(&st);
    model_free(&r);
  }
  /* a failure on one rank only (rank 1 passes no data): the same error on
   * every rank, rank 0 holding rank 1's message, and no hang */
  if (size_ > 1) {
    model_make(&r, 0, 0, 0, 0);
    if (rank_ == 1) r.bufs[0].data = NULL;
    rc = mt_ckpt_read(MPI_COMM_WORLD, rep, &r.ts, NULL, NULL);
    expect_err(rc, MT_ERR_ARG, "one rank without data", "rank 1:", "buffer params has no data",
               NULL);
    model_free(&r);
  }
  /* a missing file; an unwritable place */
  rc = mt_ckpt_read(MPI_COMM_WORLD, "/nonexistent/ckpt.h5", NULL, NULL, NULL);
  expect_err(rc, MT_ERR_FILE, "missing file", "/nonexistent/ckpt.h5", "no such file", NULL);
  model_make(&r, 0, 0, 0, 0);
  model_fill(&r, 3);
  rc = mt_ckpt_write(MPI_COMM_WORLD, "/nonexistent/ckpt.h5", &r.ts, NULL, NULL);
  expect_err(rc, MT_ERR_FILE, "unwritable file", "/nonexistent/ckpt.h5", "cannot create", NULL);
  model_free(&r);
}

/* ----------------------------------------------------------- directory */

static int read_latest(const char *d, char *buf, size_t cap) {
  char p[1100];
  snprintf(p, sizeof(p), "%s/latest", d);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  int ok = fgets(buf, (int)cap, f) != NULL;
  fclose(f);
  return ok ? 0 : -1;
}

static int count_tmp(const char *d) {
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "ls %s | grep -c '\\.tmp$'", d);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
}

static void test_dir(void) {
  char d[1024], p[1100], latest[256];
  path_in(d, sizeof(d), "ck/sub");
  model m;
  model_make(&m, 0, 0, 0, 0);
  mt_ckpt_state st;
  int64_t s, *steps = NULL;
  int n = 0;
  make_state(&st, 0);
  mt_ckpt_meta meta = {"sp", "", "00000000000000aa", NULL}; /* pruning takes this run's files */
  int64_t found = -1;
  int rc = mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found);
  expect_err(rc, MT_ERR_FILE, "no checkpoint yet", "no checkpoint", "ck/sub", NULL);

  for (s = 10; s <= 50; s += 10) {
    model_fill(&m, (uint64_t)s);
    mt_ckpt_state_set_i64(&st, "global_step", s);
    CHECK_OK(mt_ckpt_save(MPI_COMM_WORLD, d, s, 3, &m.ts, &meta, &st, p, sizeof(p)),
             "save step %lld: %s", (long long)s, mt_error_message());
  }
  CHECK_OK(mt_ckpt_list(MPI_COMM_WORLD, d, &steps, &n), "list");
  CHECK(n == 3 && steps[0] == 50 && steps[1] == 40 && steps[2] == 30,
        "keep 3: steps 50, 40, 30 remain, newest first (%d)", n);
  mt_free(&steps);
  CHECK(read_latest(d, latest, sizeof(latest)) == 0 && !strcmp(latest, "ckpt-50.h5\n"),
        "latest names ckpt-50.h5");
  CHECK(count_tmp(d) == 0, "no .tmp file left");
  CHECK(strstr(p, "ckpt-50.h5") != NULL, "save returns the file name %.200s", p);
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "find latest");
  CHECK(found == 50, "the newest is 50 (%lld)", (long long)found);

  /* damage the newest two: a flipped byte in 50, a truncated 40 */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    char a[1100], b[1100];
    snprintf(a, sizeof(a), "%s/ckpt-50.h5", d);
    flip_byte(a, "/momentum_buffer/embed.weight", 10);
    snprintf(a, sizeof(a), "%s/ckpt-40.h5", d);
    snprintf(b, sizeof(b), "%s/x", d);
    copy_file(a, b, 0.5);
    rename(b, a);
    /* a stale temporary of a crashed save, newer than everything */
    snprintf(a, sizeof(a), "%s/ckpt-60.h5.tmp", d);
    FILE *f = fopen(a, "w");
    fputs("partial", f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "find latest past damaged ones: %s", mt_error_message());
  CHECK(found == 30 && strstr(p, "ckpt-30.h5"), "falls back to 30 (%lld, %.200s)", (long long)found, p);
  mt_ckpt_state got;
  memset(&got, 0, sizeof(got));
  model r;
  model_make(&r, 0, 0, 0, 0);
  CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, p, &r.ts, NULL, &got), "read the fallback");
  int64_t gs = -1;
  mt_ckpt_state_get_i64(&got, "global_step", &gs);
  CHECK(all_ok(model_diffs(&r, 30) == 0) && gs == 30, "fallback holds step 30's tensors and state");
  mt_ckpt_state_free(&got);
  model_free(&r);
  /* the damaged newest: OPEN passes 50, DATA does not */
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_OPEN, p, sizeof(p), &found),
           "structural check");
  CHECK(found == 50, "a structural check alone takes 50 (%lld)", (long long)found);

  /* a new save replaces the stale tmp of step 60 and prunes; the truncated
   * 40 cannot be read as this run's: it is left alone, not counted */
  model_fill(&m, 60);
  CHECK_OK(mt_ckpt_save(MPI_COMM_WORLD, d, 60, 2, &m.ts, &meta, &st, NULL, 0), "save step 60");
  CHECK_OK(mt_ckpt_list(MPI_COMM_WORLD, d, &steps, &n), "list");
  CHECK(n == 3 && steps[0] == 60 && steps[1] == 50 && steps[2] == 40,
        "keep 2: 60 and 50 remain, the unreadable 40 too, 30 is removed (%d)", n);
  mt_free(&steps);
  CHECK(count_tmp(d) == 0, "the stale .tmp is gone");
  CHECK(read_latest(d, latest, sizeof(latest)) == 0 && !strcmp(latest, "ckpt-60.h5\n"),
        "latest names ckpt-60.h5");
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "find latest");
  CHECK(found == 60, "the newest is 60");

  /* every checkpoint damaged */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    char a[1100];
    snprintf(a, sizeof(a), "%s/ckpt-60.h5", d);
    if (truncate(a, 1000) != 0) tu_fatal("cannot truncate", a);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  rc = mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found);
  expect_err(rc, MT_ERR_FILE, "all damaged", "none of the 3 checkpoints", "ckpt-60.h5", NULL);
  mt_ckpt_state_free(&st);
  model_free(&m);
}

/* ---------------------------------------------------------------- kill */

static void big_table(mt_param_table *t, size_t nfloats) {
  memset(t, 0, sizeof(*t));
  int64_t rows = (int64_t)(nfloats / 1024);
  int64_t s1[2] = {rows, 1024}, s2[1] = {1000};
  if (mt_param_table_add(t, "big.weight", 2, s1, 0) || mt_param_table_add(t, "big.bias", 1, s2, 0))
    tu_fatal("table", "");
}

static void big_fill(const mt_param_table *t, float *x, uint64_t seed) {
  memset(x, 0, t->total * sizeof(float));
  for (int k = 0; k < t->n; k++)
    for (size_t i = t->p[k].offset; i < t->p[k].offset + t->p[k].numel; i++) x[i] = val(seed, 0, i);
}

static char tmp_watch_[1200];

static void *killer(void *arg) {
  (void)arg;
  for (int i = 0; i < 200000; i++) { /* up to ~40 s */
    struct stat sb;
    if (stat(tmp_watch_, &sb) == 0 && sb.st_size >= (1 << 20)) {
      printf("rank %d: killing itself while %s is written (%lld bytes so far)\n", rank_,
             tmp_watch_, (long long)sb.st_size);
      fflush(stdout);
      raise(SIGKILL);
    }
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void test_kill(size_t nfloats) {
  char d[1024], p[1100];
  path_in(d, sizeof(d), "kill");
  mt_param_table t;
  big_table(&t, nfloats);
  float *x = tu_xmalloc(t.total * sizeof(float));
  mt_ckpt_buf b = {"params", x};
  mt_ckpt_tensors ts = {&t, &b, 1, mt_ckpt_replicated(), MT_FP32};
  mt_ckpt_state st;
  memset(&st, 0, sizeof(st));
  big_fill(&t, x, 1);
  mt_ckpt_state_set_i64(&st, "global_step", 1);
  CHECK_OK(mt_ckpt_save(MPI_COMM_WORLD, d, 1, 3, &ts, NULL, &st, p, sizeof(p)), "save step 1");
  big_fill(&t, x, 2);
  mt_ckpt_state_set_i64(&st, "global_step", 2);
  snprintf(tmp_watch_, sizeof(tmp_watch_), "%s/ckpt-2.h5.tmp", d);
  pthread_t th;
  if (rank_ == 1 || size_ == 1) pthread_create(&th, NULL, killer, NULL);
  MPI_Barrier(MPI_COMM_WORLD);
  int rc = mt_ckpt_save(MPI_COMM_WORLD, d, 2, 3, &ts, NULL, &st, p, sizeof(p));
  printf("rank %d: save of step 2 returned %d (the kill came too late)\n", rank_, rc);
  fflush(stdout);
  if (rank_ == 1 || size_ == 1) pthread_join(th, NULL);
  mt_ckpt_state_free(&st);
  free(x);
  mt_param_table_free(&t);
}

static void test_afterkill(size_t nfloats, int save) {
  char d[1024], p[1100];
  path_in(d, sizeof(d), "kill");
  int64_t found = -1;
  CHECK_OK(mt_ckpt_find_latest(MPI_COMM_WORLD, d, MT_CKPT_CHECK_DATA, p, sizeof(p), &found),
           "a checkpoint verifies after the kill: %s", mt_error_message());
  if (rank_ == 0) printf("# newest good checkpoint after the kill: step %lld\n", (long long)found);
  mt_param_table t;
  big_table(&t, nfloats);
  float *x = tu_xmalloc(t.total * sizeof(float)), *e = tu_xmalloc(t.total * sizeof(float));
  mt_ckpt_buf b = {"params", x};
  mt_ckpt_tensors ts = {&t, &b, 1, mt_ckpt_replicated(), MT_FP32};
  mt_ckpt_state st;
  memset(&st, 0, sizeof(st));
  CHECK_OK(mt_ckpt_read(MPI_COMM_WORLD, p, &ts, NULL, &st), "read it at %d ranks", size_);
  int64_t gs = -1;
  mt_ckpt_state_get_i64(&st, "global_step", &gs);
  big_fill(&t, e, (uint64_t)found);
  CHECK(all_ok(gs == found && bit_diffs(x, e, t.total) == 0),
        "it holds step %lld's tensors and state", (long long)found);
  if (save) { /* the next save goes through and removes the stale .tmp */
    big_fill(&t, x, 3);
    mt_ckpt_state_set_i64(&st, "global_step", 3);
    CHECK_OK(mt_ckpt_save(MPI_COMM_WORLD, d, 3, 3, &ts, NULL, &st, p, sizeof(p)), "save step 3");
    CHECK(count_tmp(d) == 0, "no .tmp left after the next save");
  }
  mt_ckpt_state_free(&st);
  free(x);
  free(e);
  mt_param_table_free(&t);
}

/* Open HDF5 identifiers of each kind, to check that every path closes
 * what it opens. */
static const H5I_type_t id_types_[] = {H5I_FILE,      H5I_GROUP, H5I_DATATYPE, H5I_DATASPACE,
                                       H5I_DATASET,   H5I_ATTR,  H5I_GENPROP_LST};
#define NIDT (sizeof(id_types_) / sizeof(id_types_[0]))

static void count_ids(hsize_t *n) {
  for (size_t k = 0; k < NIDT; k++)
    if (H5Inmembers(id_types_[k], &n[k]) < 0) n[k] = (hsize_t)-1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  mt_h5_quiet();
  H5open();
  /* split even this small table among ranks: pieces of >= 100 elements */
  mt_ckpt_min_piece = 100;
  hsize_t ids0[NIDT], ids1[NIDT];
  count_ids(ids0);
  if (argc < 3) {
    if (rank_ == 0) fprintf(stderr, "usage: test_checkpoint unit|write|read|errors|dir|kill|afterkill DIR [N]\n");
    MPI_Finalize();
    return 2;
  }
  const char *mode = argv[1];
  dir_ = argv[2];
  size_t nbig = argc > 3 ? (size_t)atol(argv[3]) : (size_t)1 << 24;
  if (!strcmp(mode, "unit")) test_unit();
  else if (!strcmp(mode, "write")) test_write();
  else if (!strcmp(mode, "read")) test_read(argc > 3 ? atoi(argv[3]) : 4);
  else if (!strcmp(mode, "errors")) test_errors();
  else if (!strcmp(mode, "dir")) test_dir();
  else if (!strcmp(mode, "kill")) test_kill(nbig);
  else if (!strcmp(mode, "afterkill")) test_afterkill(nbig, argc > 4 && !strcmp(argv[4], "save"));
  else {
    if (rank_ == 0) fprintf(stderr, "test_checkpoint: unknown mode %s\n", mode);
    MPI_Finalize();
    return 2;
  }
  count_ids(ids1);
  int leaked = 0;
  for (size_t k = 0; k < NIDT; k++) leaked |= ids1[k] != ids0[k];
  CHECK(!leaked, "no HDF5 identifier left open (files, groups, types, spaces, datasets, "
        "attributes, property lists)");
  int fails = tu_nfailed, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0)
    printf("test_checkpoint %s on %d ranks: %d checks per rank, %d failed on all ranks\n", mode,
           size_, tu_nchecks, all);
  MPI_Finalize();
  return all || !tu_nchecks ? 1 : 0;
}
