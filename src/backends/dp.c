/* sp-dp and ddp-dp: the DP-SGD backends. They move gradients as sp and ddp
 * do (nothing on one rank; a sum over ranks in buckets); what makes them
 * private is the trainer's DP step (src/trainer/dp.c): per-sample clipping,
 * Poisson sampling, Gaussian noise added once per global batch (on rank 0,
 * before this sum) and the privacy accountant. The trainer knows a DP
 * backend by its name's "-dp" suffix (mt_backend_is_dp). */
#include "backends/backends.h"
#include "core/core.h"

#include <string.h>

int mt_backend_is_dp(const char *name) {
  size_t k = strlen(name);
  return k > 3 && !strcmp(name + k - 3, "-dp");
}

static int sp_dp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  (void)params, (void)grads, (void)n;
  MT_CHECK(b->size == 1, MT_ERR_OPTION,
           "option -backend sp-dp: runs on 1 rank (this job has %d); use -backend ddp-dp", b->size);
  return 0;
}

static int ddp_dp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  (void)params, (void)grads, (void)n;
  MT_CHECK(b->bucket_mb > 0, MT_ERR_OPTION, "option -ddp_bucket_mb must be > 0");
  return 0;
}

static int dp_sync(mt_backend *b, float *params, size_t n) {
  if (b->size == 1) return 0;
  for (size_t o = 0; o < n; o += (size_t)1 << 28) {
    size_t k = n - o < ((size_t)1 << 28) ? n - o : ((size_t)1 << 28);
    MT_MPI(MPI_Bcast(params + o, (int)k, MPI_FLOAT, 0, b->comm));
  }
  return 0;
}

static int dp_reduce(mt_backend *b, float *grads, size_t n) {
  if (b->size == 1) return 0;
  double t0 = mt_now();
  size_t bucket = (size_t)(b->bucket_mb * 1048576.0 / sizeof(float));
  if (bucket < 1024) bucket = 1024;
  for (size_t end = n; end > 0;) {
    size_t start = end > bucket ? end - bucket : 0;
    MT_MPI(MPI_Allreduce(MPI_IN_PLACE, grads + start, (int)(end - start), MPI_FLOAT, MPI_SUM, b->comm));
    end = start;
  }
  b->comm_seconds += mt_now() - t0;
  b->comm_bytes += (double)n * sizeof(float);
  return 0;
}

const mt_backend_ops mt_sp_dp_ops = {
    .name = "sp-dp", .setup = sp_dp_setup, .sync_params = dp_sync, .reduce_grads = dp_reduce};
const mt_backend_ops mt_ddp_dp_ops = {
    .name = "ddp-dp", .setup = ddp_dp_setup, .sync_params = dp_sync, .reduce_grads = dp_reduce};
