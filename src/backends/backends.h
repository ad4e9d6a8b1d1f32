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

#endif
