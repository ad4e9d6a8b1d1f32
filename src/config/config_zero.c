/* -ddp_shard_optimizer 0 | 1: ZeRO stage 1 inside a node over ddp's
 * shared-memory window (src/trainer/own_zero.c). Read with mt_option_int
 * (so -help lists it and the configuration hash covers it) after the
 * backend, -amp, -dp, -ddp_allreduce and -device are known, and refused,
 * naming the option, where the window that holds the parameters is not
 * ddp's on the host. What only the trainer knows (auto's choice of method,
 * the ranks per node) its setup checks. */
#include "backends/backends.h"
#include "comm/shm_reduce.h"
#include "config/mt_config.h"
#include "core/core.h"
#include "nn/precision.h"

#include <string.h>

#define OPTION "-ddp_shard_optimizer"

int mt_config_zero(mt_config *c) {
  long v;
  MT_CALL(mt_option_int(OPTION,
                        "ddp: 1: each rank of a node keeps and steps the optimizer state of "
                        "1/L of the parameters (ZeRO stage 1, L the ranks per node), which the "
                        "node's ranks share once in the shared-memory window of -ddp_allreduce "
                        "shm; the same bits as 0",
                        0, 0, 1, &v));
  c->ddp_shard_optimizer = (int)v;
  if (!v) return 0;
  mt_backend_spec s;
  MT_CALL(mt_backend_parse(c->backend, &s));
  MT_CHECK(s.ops == &mt_ddp_ops && !c->fsdp, MT_ERR_OPTION,
           "option " OPTION " 1: shards the optimizer of -backend ddp (or ddp-amp), not of "
           "-backend %s", c->backend);
  MT_CHECK(!c->dp, MT_ERR_OPTION,
           "option " OPTION " 1: DP-SGD (-backend %s) clips and noises the whole gradient on "
           "every rank; use -backend ddp", c->backend);
  MT_CHECK(c->amp != 2, MT_ERR_OPTION,
           "option " OPTION " 1: not with the O2 policy (-backend %s); ddp or ddp-amp",
           c->backend);
  MT_CHECK(!c->amp || c->ddp_reduce_dtype == MT_PREC_FP32, MT_ERR_OPTION,
           "option " OPTION " 1: -ddp_reduce_dtype %s all-reduces a low-precision copy, not in "
           "the window it needs; use -ddp_reduce_dtype fp32",
           mt_precision_name((mt_precision)c->ddp_reduce_dtype));
  MT_CHECK(c->ddp_allreduce != MT_ALLREDUCE_MPI, MT_ERR_OPTION,
           "option " OPTION " 1: shares the parameters in the window of -ddp_allreduce shm, "
           "not with -ddp_allreduce mpi");
  MT_CHECK(strcmp(c->device, "cuda"), MT_ERR_OPTION,
           "option " OPTION " 1: shards host buffers (the CPU's window), not with -device cuda");
  return 0;
}
