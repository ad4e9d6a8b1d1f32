/* -ddp_shard_optimizer auto | 0 | 1: ZeRO stage 1 inside a node over ddp's
 * shared-memory window (src/trainer/own_zero.c). Read as a string (so
 * -help lists it and the configuration hash covers it) after the backend,
 * -amp, -dp, -ddp_allreduce and -device are known. 1 is refused, naming
 * the option, where the window that holds the parameters is not ddp's on
 * the host; auto (-1, the default) is 0 there, and what only the trainer
 * knows (the ranks per node, auto's choice of method) its setup decides
 * (mt_zero1_auto). */
#include "backends/backends.h"
#include "comm/shm_reduce.h"
#include "config/mt_config.h"
#include "core/core.h"
#include "nn/precision.h"

#include <stdio.h>
#include <string.h>

#define OPTION "-ddp_shard_optimizer"

/* Why the run cannot shard ddp's optimizer in the host's window, into
 * why (empty: it can). */
static int refused(const mt_config *c, char *why, size_t len) {
  mt_backend_spec s;
  MT_CALL(mt_backend_parse(c->backend, &s));
  why[0] = 0;
  if (s.ops != &mt_ddp_ops || c->fsdp)
    snprintf(why, len, "shards the optimizer of -backend ddp (or ddp-amp), not of -backend %s",
             c->backend);
  else if (c->dp)
    snprintf(why, len, "DP-SGD (-backend %s) clips and noises the whole gradient on every rank; "
             "use -backend ddp", c->backend);
  else if (c->amp == 2)
    snprintf(why, len, "not with the O2 policy (-backend %s); ddp or ddp-amp", c->backend);
  else if (c->amp && c->ddp_reduce_dtype != MT_PREC_FP32)
    snprintf(why, len, "-ddp_reduce_dtype %s all-reduces a low-precision copy, not in the "
             "window it needs; use -ddp_reduce_dtype fp32",
             mt_precision_name((mt_precision)c->ddp_reduce_dtype));
  else if (c->ddp_allreduce == MT_ALLREDUCE_MPI)
    snprintf(why, len, "shares the parameters in the window of -ddp_allreduce shm, not with "
             "-ddp_allreduce mpi");
  else if (!strcmp(c->device, "cuda"))
    snprintf(why, len, "shards host buffers (the CPU's window), not with -device cuda");
  return 0;
}

int mt_config_zero(mt_config *c) {
  char b[64];
  MT_CALL(mt_option_string(OPTION,
                           "ddp: 1: each rank of a node keeps and steps the optimizer state of "
                           "1/L of the parameters (ZeRO stage 1, L the ranks per node), which the "
                           "node's ranks share once in the shared-memory window of -ddp_allreduce "
                           "shm; the same bits as 0; auto: 1 where the run allows it",
                           "auto", b, sizeof(b)));
  const int v = b[0] ? mt_config_bool_word(b) : 1; /* empty: a bare flag */
  MT_CHECK(v > -2, MT_ERR_OPTION, "option " OPTION ": '%s' is not auto, 1 or 0", b);
  c->ddp_shard_optimizer = v;
  if (!v) return 0;
  char why[256];
  MT_CALL(refused(c, why, sizeof(why)));
  if (!why[0]) return 0;
  if (v < 0) c->ddp_shard_optimizer = 0; /* auto: off where 1 would be refused */
  MT_CHECK(v < 0, MT_ERR_OPTION, "option " OPTION " 1: %s", why);
  return 0;
}
