/* Built-in backends. */
#ifndef MT_BACKENDS_H
#define MT_BACKENDS_H

#include "mpitrain/mpitrain.h"

extern const mt_backend_ops mt_sp_ops;
extern const mt_backend_ops mt_ddp_ops;
/* DP-SGD (dp.c): sp-dp, ddp-dp; 1 when name is a DP backend ("-dp" suffix). */
extern const mt_backend_ops mt_sp_dp_ops;
extern const mt_backend_ops mt_ddp_dp_ops;
int mt_backend_is_dp(const char *name);
/* Before a blocking gradient reduction: a barrier, timed into
 * b->wait_seconds (and b->comm_seconds), so that the reduction's own time,
 * and its bandwidth, do not count the wait for the slowest rank's backward.
 * Returns the time after the barrier. */
int mt_backend_arrive(mt_backend *b, double *t_after);
/* fsdp.c; the trainer drives its shards (fsdp.h). */
extern const mt_backend_ops mt_fsdp_ops;
extern const mt_backend_ops mt_fsdp_amp_ops;

/* The backend's operations on the trainer's buffers, of b->dtype (float,
 * or double through the *64 entries under -precision fp64): parameters
 * made equal (a no-op without sync_params), gradients summed, and a unit's
 * gradients ready during the backward (a no-op without unit_ready).
 * mt_backend_has_dtype tells whether ops has the entries for dtype. */
int mt_backend_has_dtype(const mt_backend_ops *ops, mt_dtype dtype);
int mt_backend_sync(mt_backend *b, void *params, size_t n);
int mt_backend_reduce(mt_backend *b, void *grads, size_t n);
int mt_backend_unit_ready(mt_backend *b, void *grads, int unit);
int mt_backend_can_overlap(const mt_backend *b);

#endif
