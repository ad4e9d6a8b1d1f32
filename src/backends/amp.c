/* The -amp policy's low-precision gradient all-reduce, wrapped around a
 * strategy that has MT_TRAIT_LOWP_REDUCE (backends/amp.h). */
#include "backends/amp.h"
#include "backends/backends.h"
#include "comm/shm_reduce.h"
#include "core/core.h"

#include <string.h>

typedef struct {
  void *inner;        /* the wrapped strategy's (b->spec.ops) own data,
                         swapped in around its calls                    */
  mt_precision dtype; /* of the all-reduce                              */
  uint16_t *lp;       /* the gradients in that type (n)                 */
  MPI_Op op;          /* sum in fp32, rounded to dtype                  */
  mt_shm_reduce *shm; /* -ddp_allreduce shm: the same sums in a window  */
} amp_data;

/* MPI user operations: inout[i] = round(in[i] + inout[i]) */
static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++)
    b[i] = mt_bf16_from_float(mt_float_from_bf16(a[i]) + mt_float_from_bf16(b[i]));
}

static void sum_fp16(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++)
    b[i] = mt_fp16_from_float(mt_float_from_fp16(a[i]) + mt_float_from_fp16(b[i]));
}

/* The wrapped backend's data in b->data while it runs, ours again after. */
static void *enter(mt_backend *b) {
  amp_data *d = b->data;
  b->data = d->inner;
  return d;
}
static void leave(mt_backend *b, void *d) {
  ((amp_data *)d)->inner = b->data;
  b->data = d;
}

static void amp_destroy(mt_backend *b) {
  amp_data *d = b->data;
  if (!d) return;
  if (d->op != MPI_OP_NULL) MPI_Op_free(&d->op);
  mt_shm_destroy(&d->shm);
  mt_free(&d->lp);
  b->data = d->inner; /* the wrapped strategy frees its own */
  if (b->spec.ops->destroy) b->spec.ops->destroy(b);
  b->data = NULL;
  mt_free(&d);
}

static int amp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  amp_data *d;
  MT_CALL(mt_calloc(&d, 1, sizeof(amp_data), "amp backend"));
  d->op = MPI_OP_NULL;
  b->data = NULL;
  int err = b->spec.ops->setup ? b->spec.ops->setup(b, params, grads, n) : 0;
  d->inner = b->data;
  b->data = d;
  MT_CALL(err);
  d->dtype = (mt_precision)b->reduce_dtype;
  MT_CALL(mt_calloc(&d->lp, n, sizeof(uint16_t), "low-precision gradients"));
  MT_MPI(MPI_Op_create(d->dtype == MT_PREC_BF16 ? sum_bf16 : sum_fp16, 1, &d->op));
  if (b->allreduce == MT_ALLREDUCE_SHM) {
    MT_CALL(mt_agree(b->comm, mt_shm_create(&d->shm, b->comm, 0, MT_SHM_SYNC_FLAGS)));
    mt_print0("amp: the %s gradient all-reduce sums in a shared-memory window "
              "(-ddp_allreduce shm)\n", mt_precision_name(d->dtype));
  }
  return 0;
}

/* Buckets of the low-precision copy, last first (as ddp). */
static int amp_reduce(mt_backend *b, float *grads, size_t n) {
  amp_data *d = b->data;
  double t0;
  MT_CALL(mt_backend_arrive(b, &t0));
  if (d->dtype == MT_PREC_BF16)
    mt_f32_to_bf16(d->lp, grads, n);
  else
    mt_f32_to_fp16(d->lp, grads, n);
  size_t bucket = (size_t)(b->bucket_mb * 1048576.0 / sizeof(uint16_t));
  if (bucket < 2048) bucket = 2048;
  for (size_t end = n; end > 0;) {
    size_t start = end > bucket ? end - bucket : 0;
    if (d->shm)
      MT_CALL(mt_shm_allreduce(d->shm, d->lp + start, end - start,
                               d->dtype == MT_PREC_BF16 ? MT_SHM_BF16 : MT_SHM_FP16));
    else
      MT_MPI(MPI_Allreduce(MPI_IN_PLACE, d->lp + start, (int)(end - start), MPI_UINT16_T, d->op,
                           b->comm));
    end = start;
  }
  if (d->dtype == MT_PREC_BF16)
    mt_bf16_to_f32(grads, d->lp, n);
  else
    mt_fp16_to_f32(grads, d->lp, n);
  b->comm_seconds += mt_now() - t0;
  b->comm_bytes += (double)n * sizeof(uint16_t);
  return 0;
}

static int amp_sync(mt_backend *b, float *params, size_t n) {
  amp_data *d = enter(b);
  int err = b->spec.ops->sync_params ? b->spec.ops->sync_params(b, params, n) : 0;
  leave(b, d);
  return err;
}

/* No unit_ready: the low-precision copy is made of the whole buffer after
 * the backward, so nothing overlaps it. */
const mt_backend_ops mt_lowp_reduce_ops = {.name = "lowp-reduce", .setup = amp_setup,
                                           .sync_params = amp_sync, .reduce_grads = amp_reduce,
                                           .destroy = amp_destroy};
