/* Shared by the files of test_checkpoint (test_checkpoint*.c): the ranks,
 * the expected tensor values, the test model (a table with its buffers,
 * replicated or sharded), the trainer state, and the modes' entries. The
 * helpers are defined in test_checkpoint.c. */
#ifndef MT_TEST_CHECKPOINT_H
#define MT_TEST_CHECKPOINT_H

#define TU_SHARED_COUNTS /* one tally for all the files (testutil.h) */
#include "io/checkpoint.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

extern int rank_, size_;

#define CHECK_OK(expr, ...) CHECK((expr) == 0, __VA_ARGS__)
#define NBUF 3

/* The expected value of element i of buffer b: a random finite 32-bit
 * pattern (-0 and denormals included), a pure function of its arguments. */
float val(uint64_t seed, int b, size_t i);
/* the number of elements of x and y whose bits differ */
size_t bit_diffs(const float *x, const float *y, size_t n);
/* ok on every rank (collective) */
int all_ok(int ok);
/* DIR/name, DIR the folder of the command line */
void path_in(char *buf, size_t cap, const char *name);
/* the number of *.tmp files in folder d; -1 when it cannot tell */
int count_tmp(const char *d);

/* A fresh table-sized set of buffers (replicated) or shards. */
typedef struct {
  mt_param_table t;
  float *x[NBUF];
  mt_ckpt_buf bufs[NBUF];
  mt_ckpt_tensors ts;
} model;

/* variant 0: the reference table; 1: an extra tensor; 2: head.weight of
 * another shape; 3: without "scalar". Sharded: elements [lo, hi) only. The
 * buffers start as NaN. */
void model_make(model *m, int variant, int sharded, size_t lo, size_t hi);
/* the expected values of seed into every buffer */
void model_fill(model *m, uint64_t seed);
/* Number of bits that differ from the expected values (elements past the
 * table are not compared). */
size_t model_diffs(const model *m, uint64_t seed);
void model_free(model *m);

/* a trainer state of every entry type, global_step = step */
void make_state(mt_ckpt_state *st, int64_t step);

/* Runs a call that must fail on every rank with code, and (rank 0, which
 * holds the agreed message) a message containing each of the texts. */
void expect_err(int rc, int code, const char *what, const char *t1, const char *t2,
                const char *t3);

/* the modes (test_checkpoint.c's comment) */
void test_unit(void);                           /* test_checkpoint_rw.c     */
void test_write(void);                          /* test_checkpoint_rw.c     */
void test_read(int nw);                         /* test_checkpoint_rw.c     */
void test_errors(void);                         /* test_checkpoint_damage.c */
void test_dir(void);                            /* test_checkpoint_damage.c */
void test_kill(size_t nfloats);                 /* test_checkpoint_kill.c   */
void test_afterkill(size_t nfloats, int save);  /* test_checkpoint_kill.c   */

#endif
