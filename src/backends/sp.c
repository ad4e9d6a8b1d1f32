/* sp: one process holds and updates the whole model. Under mpirun with
 * several ranks every rank would train alone, which is never what a user
 * wants, so sp refuses more than one rank. */
#include "backends/backends.h"

#include <string.h>

static int sp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  (void)params, (void)grads, (void)n;
  /* the same policies over ddp: sp-amp -> ddp-amp */
  MT_CHECK(b->size == 1, MT_ERR_OPTION,
           "option -backend %s: runs on 1 rank (this job has %d); use -backend ddp%s", b->name,
           b->size, b->name + strlen(b->ops->name));
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
                                  .traits = MT_TRAIT_ONE_RANK | MT_TRAIT_AMP | MT_TRAIT_AMP_O2 |
                                            MT_TRAIT_DP | MT_TRAIT_CUDA,
                                  .setup = sp_setup,
                                  .sync_params = sp_sync,
                                  .reduce_grads = sp_reduce,
                                  .sync_params64 = sp_nothing64,
                                  .reduce_grads64 = sp_nothing64};
