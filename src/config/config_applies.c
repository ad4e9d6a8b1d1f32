/* Options that apply to some backends only. A backend ignores what its
 * strategy or policies do not use (sp has no -amp_dtype to honour), so such
 * an option given with another backend would be dropped silently: it is
 * refused instead, once, after -backend is parsed, naming the option, the
 * backend and the backends where it applies. One table, read against the
 * parsed spec's policies and its strategy's traits (mt_backend_parse), so a
 * user's strategy gets the same answers as the built-ins. Only options the
 * user gave are checked, not defaults. */
#include "config/mt_config.h"
#include "backends/backends.h"
#include "core/core.h"

#include <petscsys.h>
#include <stdio.h>
#include <string.h>

/* What an option needs of the backend. */
typedef enum {
  NEED_AMP,         /* a precision policy (-amp or -amp-apex)                */
  NEED_LOWP_REDUCE, /* -amp on a strategy that may all-reduce in low precision */
  NEED_DP,          /* the DP-SGD policy (-dp)                               */
  NEED_SHARDED,     /* a sharded strategy (fsdp)                             */
  NEED_RANKS,       /* a strategy of several ranks: parameters broadcast at
                       start, gradients reduced in buckets (ddp; fsdp's device
                       path reduces shard_grad_op's gradients in ddp's buckets) */
  NEED_OVERLAP,     /* buckets reduced during the backward: a replicated
                       strategy of several ranks, without DP-SGD (whose
                       per-sample clipping needs the whole gradient first) */
} need;

static const char *const need_what[] = {
    [NEED_AMP] = "a mixed-precision policy (-amp or -amp-apex)",
    [NEED_LOWP_REDUCE] = "a mixed-precision backend whose strategy all-reduces in low precision",
    [NEED_DP] = "the DP-SGD policy (-dp)",
    [NEED_SHARDED] = "a sharded strategy",
    [NEED_RANKS] = "a strategy of several ranks",
    [NEED_OVERLAP] = "a replicated strategy of several ranks without DP-SGD",
};

static const struct {
  const char *name;
  need need;
} table_[] = {
    {"-amp_dtype", NEED_AMP},
    {"-loss_scale", NEED_AMP},
    {"-loss_scale_init", NEED_AMP},
    {"-loss_scale_growth_factor", NEED_AMP},
    {"-loss_scale_backoff_factor", NEED_AMP},
    {"-loss_scale_growth_interval", NEED_AMP},
    {"-loss_scale_hysteresis", NEED_AMP},
    {"-loss_scale_min", NEED_AMP},
    {"-ddp_reduce_dtype", NEED_LOWP_REDUCE},
    {"-dp_noise_multiplier", NEED_DP},
    {"-dp_max_grad_norm", NEED_DP},
    {"-dp_delta", NEED_DP},
    {"-dp_target_epsilon", NEED_DP},
    {"-dp_sampling", NEED_DP},
    {"-dp_max_physical_batch", NEED_DP},
    {"-dp_accountant", NEED_DP},
    {"-dp_grad_sample", NEED_DP},
    {"-fsdp_sharding_strategy", NEED_SHARDED},
    {"-fsdp_unit", NEED_SHARDED},
    {"-fsdp_node_size", NEED_SHARDED},
    {"-fsdp_cpu_offload", NEED_SHARDED},
    {"-fsdp_prefetch", NEED_SHARDED},
    {"-sync_module_states", NEED_RANKS},
    {"-ddp_bucket_mb", NEED_RANKS},
    {"-ddp_first_bucket_mb", NEED_RANKS},
    {"-ddp_allreduce", NEED_RANKS},
    {"-ddp_overlap", NEED_OVERLAP},
    {"-ddp_comm_thread", NEED_OVERLAP},
};
#define NTABLE ((int)(sizeof(table_) / sizeof(table_[0])))
_Static_assert(sizeof(need_what) / sizeof(need_what[0]) == NEED_OVERLAP + 1,
               "a description per need");

static int has(const mt_backend_spec *s, need n) {
  const unsigned t = s->ops->traits;
  switch (n) {
  case NEED_AMP: return s->amp != 0;
  case NEED_LOWP_REDUCE: return s->amp != 0 && (t & MT_TRAIT_LOWP_REDUCE);
  case NEED_DP: return s->dp != 0;
  case NEED_SHARDED: return (t & MT_TRAIT_SHARDED) != 0;
  case NEED_RANKS: return !(t & MT_TRAIT_ONE_RANK);
  case NEED_OVERLAP: return !(t & (MT_TRAIT_ONE_RANK | MT_TRAIT_SHARDED)) && !s->dp;
  }
  return 0;
}

/* The -backend names (all the registry allows) that have n, comma-separated. */
static void where(need n, char *buf, size_t len) {
  char names[512], *save = NULL;
  size_t k = 0;
  buf[0] = '\0';
  mt_backend_names(names, sizeof(names));
  for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    mt_backend_spec s;
    if (mt_backend_parse(tok, &s)) { /* cannot happen: the registry's own names */
      mt_error_clear();
      continue;
    }
    if (!has(&s, n) || k >= len) continue;
    int w = snprintf(buf + k, len - k, "%s%s", k ? ", " : "", tok);
    if (w > 0) k += (size_t)w;
  }
}

int mt_config_applies(const mt_config *c) {
  mt_backend_spec s;
  MT_CALL(mt_backend_parse(c->backend, &s));
  for (int i = 0; i < NTABLE; i++) {
    PetscBool given = PETSC_FALSE;
    if (PetscOptionsHasName(NULL, NULL, table_[i].name, &given))
      return MT_ERR(MT_ERR_LIB, "option %s: cannot read the options database", table_[i].name);
    if (!given || has(&s, table_[i].need)) continue;
    char with[512];
    where(table_[i].need, with, sizeof(with));
    return MT_ERR(MT_ERR_OPTION, "option %s: needs %s, which -backend %s does not have; it "
                  "applies with: %s", table_[i].name, need_what[table_[i].need], c->backend,
                  with[0] ? with : "no registered backend");
  }
  return 0;
}
