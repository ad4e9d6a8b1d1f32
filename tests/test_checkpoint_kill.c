/* test_checkpoint's modes kill (rank 1 SIGKILLs itself while a save is
 * being written) and afterkill (the newest checkpoint that verifies loads
 * bit-exact; with save, the next save cleans up). */
#include "test_checkpoint.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

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

void test_kill(size_t nfloats) {
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

void test_afterkill(size_t nfloats, int save) {
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
