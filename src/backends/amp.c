/* sp-amp, sp-amp-apex, ddp-amp, ddp-amp-apex: sp and ddp with an optional
 * low-precision gradient all-reduce (backends/amp.h). */
#include "backends/amp.h"
#include "backends/backends.h"
#include "core/core.h"

#include <string.h>

static mt_precision reduce_ = MT_PREC_FP32;

void mt_backend_amp_reduce_dtype(mt_precision p) { reduce_ = p; }

typedef struct {
  void *inner;        /* sp's or ddp's own data (swapped in around calls) */
  mt_precision dtype; /* of the all-reduce                              */
  uint16_t *lp;       /* the gradients in that type (n), fp32: NULL     */
  MPI_Op op;          /* sum in fp32, rounded to dtype                  */
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
  mt_free(&d->lp);
  b->data = d->inner; /* the wrapped backend frees its own */
  const mt_backend_ops *w = !strncmp(b->ops->name, "ddp", 3) ? &mt_ddp_ops : &mt_sp_ops;
  if (w->destroy) w->destroy(b);
  b->data = NULL;
  mt_free(&d);
}

static int amp_setup(mt_backend *b, float *params, float *grads, size_t n, int ddp) {
  amp_data *d;
  MT_CALL(mt_calloc(&d, 1, sizeof(amp_data), "amp backend"));
  d->op = MPI_OP_NULL;
  b->data = NULL;
  int err = ddp ? mt_ddp_ops.setup(b, params, grads, n) : mt_sp_ops.setup(b, params, grads, n);
  d->inner = b->data;
  b->data = d;
  MT_CALL(err);
  d->dtype = ddp ? reduce_ : MT_PREC_FP32;
  if (d->dtype != MT_PREC_FP32 && b->size > 1) {
    MT_CALL(mt_calloc(&d->lp, n, sizeof(uint16_t), "low-precision gradients"));
    MT_MPI(MPI_Op_create(d->dtype == MT_PREC_BF16 ? sum_bf16 : sum_fp16, 1, &d->op));
  }
  return 0;
}

static int sp_amp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  return amp_setup(b, params, grads, n, 0);
}
static int ddp_amp_setup(mt_backend *b, float *params, float *grads, size_t n) {
  return amp_setup(b, params, grads, n, 1);
}

/* Buckets of the low-precision copy, last first (as ddp). */
static int ddp_amp_reduce(mt_backend *b, float *grads, size_t n) {
  amp_data *d = b->data;
  if (b->size == 1) return 0;
  if (!d->lp) {
    void *s = enter(b);
    int err = mt_ddp_ops.reduce_grads(b, grads, n);
    leave(b, s);
    return err;
  }
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

static int sp_amp_sync(mt_backend *b, float *params, size_t n) {
  void *s = enter(b);
  int err = mt_sp_ops.sync_params(b, params, n);
  leave(b, s);
  return err;
}
static int sp_amp_reduce(mt_backend *b, float *grads, size_t n) {
  void *s = enter(b);
  int err = mt_sp_ops.reduce_grads(b, grads, n);
  leave(b, s);
  return err;
}
static int ddp_amp_sync(mt_backend *b, float *params, size_t n) {
  void *s = enter(b);
  int err = mt_ddp_ops.sync_params(b, params, n);
  leave(b, s);
  return err;
}
/* ddp's overlap (buckets all-reduced during the backward) with an fp32
 * all-reduce only: a low-precision one converts the whole buffer first. */
static int ddp_amp_unit_ready(mt_backend *b, float *grads, int unit) {
  amp_data *d = b->data;
  if (d->lp || !mt_ddp_ops.unit_ready) return 0;
  void *s = enter(b);
  int err = mt_ddp_ops.unit_ready(b, grads, unit);
  leave(b, s);
  return err;
}

const mt_backend_ops mt_sp_amp_ops = {.name = "sp-amp", .setup = sp_amp_setup,
                                      .sync_params = sp_amp_sync, .reduce_grads = sp_amp_reduce,
                                      .destroy = amp_destroy};
const mt_backend_ops mt_sp_amp_apex_ops = {.name = "sp-amp-apex", .setup = sp_amp_setup,
                                           .sync_params = sp_amp_sync,
                                           .reduce_grads = sp_amp_reduce, .destroy = amp_destroy};
const mt_backend_ops mt_ddp_amp_ops = {.name = "ddp-amp", .setup = ddp_amp_setup,
                                       .sync_params = ddp_amp_sync,
                                       .reduce_grads = ddp_amp_reduce,
                                       .unit_ready = ddp_amp_unit_ready, .destroy = amp_destroy};
const mt_backend_ops mt_ddp_amp_apex_ops = {.name = "ddp-amp-apex", .setup = ddp_amp_setup,
                                            .sync_params = ddp_amp_sync,
                                            .reduce_grads = ddp_amp_reduce,
                                            .unit_ready = ddp_amp_unit_ready,
                                            .destroy = amp_destroy};
