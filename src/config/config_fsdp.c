/* The sharding options: read with mt_option_* (so -help lists them and the
 * configuration hash covers them) and checked against the backend. Every
 * message names the option. */
#include "backends/fsdp.h"
#include "config/mt_config.h"
#include "core/core.h"
#include "nn/precision.h"

#include <petscsys.h>
#include <string.h>

static int given(const char *name) {
  PetscBool set = PETSC_FALSE;
  if (PetscOptionsHasName(NULL, NULL, name, &set)) return 0;
  return set == PETSC_TRUE;
}

int mt_config_fsdp(mt_config *c) {
  char s[32];
  long v;
  MT_CALL(mt_option_string("-fsdp_sharding_strategy",
                           "fsdp: full_shard | shard_grad_op | hybrid_shard | no_shard",
                           "full_shard", s, sizeof(s)));
  c->fsdp_strategy = mt_fsdp_strategy_parse(s);
  MT_CHECK(c->fsdp_strategy >= 0, MT_ERR_OPTION,
           "option -fsdp_sharding_strategy: '%s' is not one of: full_shard, shard_grad_op, "
           "hybrid_shard, no_shard", s);
  MT_CALL(mt_option_string("-fsdp_unit",
                           "fsdp: what is gathered at once: layer or block (the model's own "
                           "units: a layer of mlp and cnn, a block of gpt) | model (everything)",
                           "layer", s, sizeof(s)));
  MT_CHECK(!strcmp(s, "layer") || !strcmp(s, "block") || !strcmp(s, "model"), MT_ERR_OPTION,
           "option -fsdp_unit: '%s' is not one of: layer, block, model", s);
  c->fsdp_whole_model = !strcmp(s, "model");
  MT_CALL(mt_option_int("-fsdp_node_size",
                        "fsdp hybrid_shard: ranks that shard among themselves (0: a node's)", 0,
                        0, 1 << 20, &v));
  c->fsdp_node_size = (int)v;
  MT_CALL(mt_option_int("-fsdp_prefetch",
                        "fsdp: 1: gather the next unit while one computes and reduce a unit's "
                        "gradient during the next unit's backward (two units of parameters and "
                        "of gradients held); 0: one unit of each, communication not overlapped",
                        1, 0, 1, &v));
  c->fsdp_prefetch = (int)v;
  /* read as a string: PetscOptionsGetBool prints PETSc's traceback for a
   * value like 1e-5 (tests/fuzz) before the one line the user should see */
  char b[64];
  MT_CALL(mt_option_string("-fsdp_cpu_offload", "fsdp: keep the shards and the optimizer on the "
                           "host (CPU offload)", "0", b, sizeof(b)));
  /* a bare flag is 1; auto is not a value of this one */
  const int offload = given("-fsdp_cpu_offload") && !b[0] ? 1 : mt_config_bool_word(b);
  MT_CHECK(offload >= 0, MT_ERR_OPTION,
           "option -fsdp_cpu_offload: '%s' is not a boolean (allowed: 0, 1, true, false, yes, no, "
           "on, off)", b);
  MT_CALL(mt_option_int("-sync_module_states",
                        "ddp, fsdp: broadcast rank 0's parameters at start (1) or trust that "
                        "every rank initialised the same (0)", 1, 0, 1, &v));
  c->sync_module_states = (int)v;
  MT_CALL(mt_option_real("-memory_limit_mb",
                         "refuse a run whose forecast memory per rank exceeds this (0: the "
                         "node's memory or its cgroup's limit / its ranks, or ulimit -v)",
                         0, 0, 1e12, &c->memory_limit_mb));
  if (!c->fsdp) return 0; /* given under another backend: refused by config_applies.c */
  c->fsdp_cpu_offload = offload; /* checked with -device (config_device.c) */
  MT_CHECK(c->fsdp_strategy == MT_FSDP_HYBRID_SHARD || !given("-fsdp_node_size"), MT_ERR_OPTION,
           "option -fsdp_node_size: only for -fsdp_sharding_strategy hybrid_shard");
  MT_CHECK(c->fsdp_node_size == 0 || c->world_size % c->fsdp_node_size == 0, MT_ERR_OPTION,
           "option -fsdp_node_size: %d ranks are not whole groups of %d", c->world_size,
           c->fsdp_node_size);
  return 0;
}

void mt_config_fsdp_print(const mt_config *c, FILE *f) {
  if (!c->fsdp) return;
  fprintf(f, "  fsdp: %s, unit %s%s", mt_fsdp_strategy_name(c->fsdp_strategy),
          c->fsdp_whole_model ? "model" : "layer", c->fsdp_prefetch ? "" : ", no prefetch");
  if (c->fsdp_strategy == MT_FSDP_HYBRID_SHARD && c->fsdp_node_size)
    fprintf(f, ", groups of %d ranks", c->fsdp_node_size);
  else if (c->fsdp_strategy == MT_FSDP_HYBRID_SHARD)
    fprintf(f, ", groups: the ranks of a node");
  fprintf(f, "\n");
}
