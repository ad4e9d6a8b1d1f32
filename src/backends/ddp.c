/* ddp: every rank holds the whole model; gradients are summed over ranks in
 * contiguous buckets of the flat gradient buffer (each already carries the
 * 1/global_batch factor, so the sum is the global-batch mean). */
#include "backends/backends.h"
#include "core/core.h"

static int ddp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  (void)params, (void)grads, (void)n;
  MT_CHECK(b->bucket_mb > 0, MT_ERR_OPTION, "option -ddp_bucket_mb must be > 0");
  return 0;
}

static int ddp_sync(mt_backend *b, float *params, size_t n) {
  for (size_t o = 0; o < n; o += (size_t)1 << 28) {
    size_t k = n - o < ((size_t)1 << 28) ? n - o : ((size_t)1 << 28);
    MT_MPI(MPI_Bcast(params + o, (int)k, MPI_FLOAT, 0, b->comm));
  }
  return 0;
}

static int ddp_reduce(mt_backend *b, float *grads, size_t n) {
  if (b->size == 1) return 0;
  double t0 = mt_now();
  size_t bucket = (size_t)(b->bucket_mb * 1048576.0 / sizeof(float));
  if (bucket < 1024) bucket = 1024;
  /* buckets in reverse order: the last layers' gradients are ready first */
  for (size_t end = n; end > 0;) {
    size_t start = end > bucket ? end - bucket : 0;
    MT_MPI(MPI_Allreduce(MPI_IN_PLACE, grads + start, (int)(end - start), MPI_FLOAT, MPI_SUM, b->comm));
    end = start;
  }
  b->comm_seconds += mt_now() - t0;
  b->comm_bytes += (double)n * sizeof(float);
  return 0;
}

const mt_backend_ops mt_ddp_ops = {
    .name = "ddp", .setup = ddp_setup, .sync_params = ddp_sync, .reduce_grads = ddp_reduce};
