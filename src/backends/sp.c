/* sp: one process holds and updates the whole model. Under mpirun with
 * several ranks every rank would train alone, which is never what a user
 * wants, so sp refuses more than one rank. */
#include "backends/backends.h"

static int sp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  (void)params, (void)grads, (void)n;
  MT_CHECK(b->size == 1, MT_ERR_OPTION,
           "option -backend sp: runs on 1 rank (this job has %d); use -backend ddp", b->size);
  return 0;
}

static int sp_sync(mt_backend *b, float *params, size_t n) {
  (void)b, (void)params, (void)n;
  return 0;
}

static int sp_reduce(mt_backend *b, float *grads, size_t n) {
  (void)b, (void)grads, (void)n;
  return 0;
}

/* -precision fp64: nothing to do either */
static int sp_nothing64(mt_backend *b, double *buf, size_t n) {
  (void)b, (void)buf, (void)n;
  return 0;
}

const mt_backend_ops mt_sp_ops = {.name = "sp",
                                  .setup = sp_setup,
                                  .sync_params = sp_sync,
                                  .reduce_grads = sp_reduce,
                                  .sync_params64 = sp_nothing64,
                                  .reduce_grads64 = sp_nothing64};
