/* Backends by name. The registry holds parallel strategies (sp, ddp, fsdp
 * and any a user registers), each with its traits; a -backend name is one
 * of them, or one of them with a policy suffix (-amp, -amp-apex, -dp),
 * parsed here once into an mt_backend_spec. Nothing else in mpitrain reads
 * a backend's name: the rest asks the spec and the traits. */
#include "backends/amp.h"
#include "backends/backends.h"
#include "core/core.h"

#include <stdio.h>
#include <string.h>

#define MAX_BACKENDS 32
static const mt_backend_ops *backends_[MAX_BACKENDS];
static int nbackends_;

/* The policy suffixes: what each sets and the trait it needs. */
static const struct {
  const char *suffix, *what;
  int amp, dp;
  unsigned trait;
} suffixes_[] = {
    {"-amp-apex", "O2 mixed precision", 2, 0, MT_TRAIT_AMP_O2},
    {"-amp", "mixed precision", 1, 0, MT_TRAIT_AMP},
    {"-dp", "DP-SGD", 0, 1, MT_TRAIT_DP},
};
#define NSUFFIXES ((int)(sizeof(suffixes_) / sizeof(suffixes_[0])))

static void builtins(void) {
  if (nbackends_) return;
  backends_[nbackends_++] = &mt_sp_ops;
  backends_[nbackends_++] = &mt_ddp_ops;
  backends_[nbackends_++] = &mt_fsdp_ops;
}

const mt_backend_ops *mt_backend_find(const char *name) {
  builtins();
  for (int i = 0; i < nbackends_; i++)
    if (!strcmp(backends_[i]->name, name)) return backends_[i];
  return NULL;
}

/* Appends s to buf at *k (", " between items), as far as it fits. */
static void append(char *buf, size_t len, size_t *k, const char *s1, const char *s2) {
  if (*k >= len) return;
  int w = snprintf(buf + *k, len - *k, "%s%s%s", *k ? ", " : "", s1, s2);
  if (w > 0) *k += (size_t)w;
}

void mt_backend_names(char *buf, size_t len) {
  builtins();
  size_t k = 0;
  if (len) buf[0] = '\0';
  for (int i = 0; i < nbackends_; i++) {
    append(buf, len, &k, backends_[i]->name, "");
    static const int order[NSUFFIXES] = {1, 0, 2}; /* -amp, -amp-apex, -dp */
    for (int j = 0; j < NSUFFIXES; j++)
      if (backends_[i]->traits & suffixes_[order[j]].trait)
        append(buf, len, &k, backends_[i]->name, suffixes_[order[j]].suffix);
  }
}

int mt_backend_parse(const char *name, mt_backend_spec *spec) {
  builtins();
  *spec = (mt_backend_spec){0};
  if ((spec->ops = mt_backend_find(name))) return 0;
  const size_t n = strlen(name);
  for (int j = 0; j < NSUFFIXES; j++) {
    const size_t k = strlen(suffixes_[j].suffix);
    if (n <= k || strcmp(name + n - k, suffixes_[j].suffix)) continue;
    char base[64];
    snprintf(base, sizeof(base), "%.*s", (int)(n - k), name);
    const mt_backend_ops *ops = mt_backend_find(base);
    if (!ops) break;
    if (!(ops->traits & suffixes_[j].trait)) {
      char with[256] = "";
      size_t w = 0;
      for (int i = 0; i < nbackends_; i++)
        if (backends_[i]->traits & suffixes_[j].trait)
          append(with, sizeof(with), &w, backends_[i]->name, suffixes_[j].suffix);
      return MT_ERR(MT_ERR_OPTION, "option -backend %s: the %s policy (%s) does not compose with "
                    "the %s strategy%s%s", name, suffixes_[j].what, suffixes_[j].suffix, base,
                    w ? "; it does in: " : "", with);
    }
    *spec = (mt_backend_spec){ops, suffixes_[j].amp, suffixes_[j].dp};
    return 0;
  }
  char names[512];
  mt_backend_names(names, sizeof(names));
  return MT_ERR(MT_ERR_OPTION, "option -backend: '%s' is not one of: %s", name, names);
}

int mt_backend_register(const mt_backend_ops *ops) {
  builtins();
  MT_CHECK(ops && ops->name && ops->reduce_grads, MT_ERR_ARG,
           "mt_backend_register: name and reduce_grads are required");
  MT_CHECK(!(ops->traits & (MT_TRAIT_SHARDED | MT_TRAIT_CUDA)), MT_ERR_ARG,
           "mt_backend_register %s: MT_TRAIT_SHARDED and MT_TRAIT_CUDA are the built-in fsdp's "
           "and device path's", ops->name);
  for (int i = 0; i < nbackends_; i++)
    if (!strcmp(backends_[i]->name, ops->name)) {
      backends_[i] = ops;
      return 0;
    }
  MT_CHECK(nbackends_ < MAX_BACKENDS, MT_ERR_ARG, "too many backends registered");
  backends_[nbackends_++] = ops;
  return 0;
}

int mt_backend_create(const char *name, MPI_Comm comm, double bucket_mb, mt_backend **out) {
  *out = NULL;
  mt_backend_spec spec;
  MT_CALL(mt_backend_parse(name, &spec));
  mt_backend *b;
  MT_CALL(mt_calloc(&b, 1, sizeof(*b), "backend"));
  b->ops = spec.ops;
  b->spec = spec;
  snprintf(b->name, sizeof(b->name), "%s", name);
  b->comm = comm;
  b->bucket_mb = bucket_mb;
  b->reduce_dtype = MT_PREC_FP32;
  MT_MPI(MPI_Comm_rank(comm, &b->rank));
  MT_MPI(MPI_Comm_size(comm, &b->size));
  *out = b;
  return 0;
}

int mt_backend_setup(mt_backend *b, float *params, float *grads, size_t n) {
  /* the -amp policy's low-precision all-reduce wraps the strategy */
  if (b->spec.amp && b->reduce_dtype != MT_PREC_FP32 && b->size > 1 &&
      (b->spec.ops->traits & MT_TRAIT_LOWP_REDUCE))
    b->ops = &mt_lowp_reduce_ops;
  return b->ops->setup ? b->ops->setup(b, params, grads, n) : 0;
}

int mt_backend_arrive(mt_backend *b, double *t_after) {
  const double t0 = mt_now();
  MT_MPI(MPI_Barrier(b->comm));
  *t_after = mt_now();
  b->wait_seconds += *t_after - t0;
  b->comm_seconds += *t_after - t0;
  return 0;
}

void mt_backend_destroy(mt_backend **pb) {
  mt_backend *b = *pb;
  if (!b) return;
  if (b->ops && b->ops->destroy) b->ops->destroy(b);
  mt_free(pb);
}

int mt_backend_has_dtype(const mt_backend_ops *ops, mt_dtype dtype) {
  return dtype == MT_FP32 || (dtype == MT_FP64 && ops->sync_params64 && ops->reduce_grads64);
}

int mt_backend_sync(mt_backend *b, void *params, size_t n) {
  if (b->dtype == MT_FP64) {
    MT_CHECK(b->ops->sync_params64, MT_ERR_STATE, "backend %s: no sync_params64", b->name);
    return b->ops->sync_params64(b, params, n);
  }
  return b->ops->sync_params ? b->ops->sync_params(b, params, n) : 0;
}

int mt_backend_reduce(mt_backend *b, void *grads, size_t n) {
  if (b->dtype == MT_FP64) {
    MT_CHECK(b->ops->reduce_grads64, MT_ERR_STATE, "backend %s: no reduce_grads64", b->name);
    return b->ops->reduce_grads64(b, grads, n);
  }
  return b->ops->reduce_grads(b, grads, n);
}

int mt_backend_unit_ready(mt_backend *b, void *grads, int unit) {
  if (b->dtype == MT_FP64) return b->ops->unit_ready64 ? b->ops->unit_ready64(b, grads, unit) : 0;
  return b->ops->unit_ready ? b->ops->unit_ready(b, grads, unit) : 0;
}

int mt_backend_can_overlap(const mt_backend *b) {
  return b->overlap && (b->dtype == MT_FP64 ? b->ops->unit_ready64 != NULL
                                             : b->ops->unit_ready != NULL);
}
