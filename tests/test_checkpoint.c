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
 * at any rank count knows what a file must hold.
 *
 * This file: the shared helpers (test_checkpoint.h) and main; the modes are
 * in test_checkpoint_rw.c (unit, write, read), test_checkpoint_damage.c
 * (errors, dir) and test_checkpoint_kill.c (kill, afterkill). */
#include "test_checkpoint.h"

#include <stdio.h>

int tu_nchecks, tu_nfailed; /* the program's tally (testutil.h) */
int rank_, size_;
static const char *dir_;

static const char *bufnames_[NBUF] = {"params", "momentum_buffer", "exp_avg"};

/* ------------------------------------------------------------ helpers */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

float val(uint64_t seed, int b, size_t i) {
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

size_t bit_diffs(const float *x, const float *y, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; i++) d += memcmp(&x[i], &y[i], sizeof(float)) != 0;
  return d;
}

int all_ok(int ok) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

void path_in(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", dir_, name);
}

void model_make(model *m, int variant, int sharded, size_t lo, size_t hi) {
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

void model_fill(model *m, uint64_t seed) {
  size_t lo = m->ts.part.sharded ? m->ts.part.lo : 0;
  size_t hi = m->ts.part.sharded ? m->ts.part.hi : m->t.total;
  for (int b = 0; b < NBUF; b++) fill(&m->t, seed, b, m->x[b], lo, hi);
}

/* Number of bits that differ from the expected values (elements past the
 * table are not compared). */
size_t model_diffs(const model *m, uint64_t seed) {
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

void model_free(model *m) {
  for (int b = 0; b < NBUF; b++) free(m->x[b]);
  mt_param_table_free(&m->t);
}

void make_state(mt_ckpt_state *st, int64_t step) {
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

/* Runs a call that must fail on every rank with code, and (rank 0, which
 * holds the agreed message) a message containing each of the texts. */
void expect_err(int rc, int code, const char *what, const char *t1, const char *t2,
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

int count_tmp(const char *d) {
  char cmd[1200];
  snprintf(cmd, sizeof(cmd), "ls %s | grep -c '\\.tmp$'", d);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
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
