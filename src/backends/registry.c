/* Backends by name: the built-ins plus any a user registers. */
#include "backends/amp.h"
#include "backends/backends.h"
#include "core/core.h"

#include <stdio.h>
#include <string.h>

#define MAX_BACKENDS 32
static const mt_backend_ops *backends_[MAX_BACKENDS];
static int nbackends_;

static void builtins(void) {
  if (nbackends_) return;
  backends_[nbackends_++] = &mt_sp_ops;
  backends_[nbackends_++] = &mt_ddp_ops;
  backends_[nbackends_++] = &mt_sp_amp_ops;
  backends_[nbackends_++] = &mt_ddp_amp_ops;
  backends_[nbackends_++] = &mt_sp_amp_apex_ops;
  backends_[nbackends_++] = &mt_ddp_amp_apex_ops;
  backends_[nbackends_++] = &mt_sp_dp_ops;
  backends_[nbackends_++] = &mt_ddp_dp_ops;
  backends_[nbackends_++] = &mt_fsdp_ops;
  backends_[nbackends_++] = &mt_fsdp_amp_ops;
}

const mt_backend_ops *mt_backend_find(const char *name) {
  builtins();
  for (int i = 0; i < nbackends_; i++)
    if (!strcmp(backends_[i]->name, name)) return backends_[i];
  return NULL;
}

void mt_backend_names(char *buf, size_t len) {
  builtins();
  size_t k = 0;
  if (len) buf[0] = '\0';
  for (int i = 0; i < nbackends_ && k < len; i++) {
    int w = snprintf(buf + k, len - k, "%s%s", i ? ", " : "", backends_[i]->name);
    if (w < 0) break;
    k += (size_t)w;
  }
}

int mt_backend_register(const mt_backend_ops *ops) {
  builtins();
  MT_CHECK(ops && ops->name && ops->reduce_grads, MT_ERR_ARG,
           "mt_backend_register: name and reduce_grads are required");
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
  builtins();
  *out = NULL;
  const mt_backend_ops *ops = NULL;
  for (int i = 0; i < nbackends_; i++)
    if (!strcmp(backends_[i]->name, name)) ops = backends_[i];
  MT_CHECK(ops, MT_ERR_OPTION, "option -backend: unknown backend '%s'", name);
  mt_backend *b;
  MT_CALL(mt_calloc(&b, 1, sizeof(*b), "backend"));
  b->ops = ops;
  b->comm = comm;
  b->bucket_mb = bucket_mb;
  MT_MPI(MPI_Comm_rank(comm, &b->rank));
  MT_MPI(MPI_Comm_size(comm, &b->size));
  *out = b;
  return 0;
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
    MT_CHECK(b->ops->sync_params64, MT_ERR_STATE, "backend %s: no sync_params64", b->ops->name);
    return b->ops->sync_params64(b, params, n);
  }
  return b->ops->sync_params ? b->ops->sync_params(b, params, n) : 0;
}

int mt_backend_reduce(mt_backend *b, void *grads, size_t n) {
  if (b->dtype == MT_FP64) {
    MT_CHECK(b->ops->reduce_grads64, MT_ERR_STATE, "backend %s: no reduce_grads64", b->ops->name);
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
