/* Built-in backends. */
#ifndef MT_BACKENDS_H
#define MT_BACKENDS_H

#include "mpitrain/mpitrain.h"

/* The built-in parallel strategies (registry.c parses a -backend name into
 * one of them and its policies): sp (sp.c), ddp (ddp.c), fsdp (fsdp.c;
 * the trainer drives its shards, fsdp.h). */
extern const mt_backend_ops mt_sp_ops;
extern const mt_backend_ops mt_ddp_ops;
/* Before a blocking gradient reduction: a barrier, timed into
 * b->wait_seconds (and b->comm_seconds), so that the reduction's own time,
 * and its bandwidth, do not count the wait for the slowest rank's backward.
 * Returns the time after the barrier. */
int mt_backend_arrive(mt_backend *b, double *t_after);
extern const mt_backend_ops mt_fsdp_ops;
/* Before any reduction (the trainer calls it after setting the fields the
 * strategy reads: table, dtype, overlap, buckets, reduce_dtype): the
 * strategy's setup, wrapped in the -amp policy's low-precision all-reduce
 * (amp.h) when b->reduce_dtype asks for one. Under fp64 params and grads
 * are NULL (mpitrain.h). */
int mt_backend_setup(mt_backend *b, float *params, float *grads, size_t n);

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
/* Collective over b->comm: *buf = bytes for the gradient buffer inside
 * ddp's shared-memory window (-ddp_allreduce shm), zeroed, so that its
 * all-reduce reads the ranks' gradients where the backward writes them
 * (comm/shm_reduce.h, mt_shm_buffer); the memory is the backend's, freed
 * by mt_backend_destroy. *buf NULL where the buckets are summed otherwise:
 * another strategy, MPI_Allreduce, the -amp low-precision all-reduce (it
 * converts a copy), one rank per node. The host's buffers only. */
int mt_backend_grads_window(mt_backend *b, size_t bytes, void **buf);
/* Collective over b->comm: *buf = bytes that the ranks of a node share
 * (the same memory in each; comm/shm_reduce.h, mt_shm_shared), where ddp
 * has the window of mt_backend_grads_window (else NULL). The backend's,
 * freed with it. -ddp_shard_optimizer's parameters (trainer/own_zero.c). */
int mt_backend_params_window(mt_backend *b, size_t bytes, void **buf);
/* Collective on the node: its ranks wait for one another, in the sequence
 * of the window's in-place sums (mt_shm_arrive); an error without one. */
int mt_backend_window_arrive(mt_backend *b);
/* Collective: the step's gradient (grads, n elements, in the window of
 * mt_backend_grads_window, no bucket started by the backward) summed over
 * the ranks and handed to fn slice by slice, this rank's slice of each
 * node's partition only, without writing the sums back
 * (comm/shm_reduce.h, mt_shm_reduce_apply): ZeRO-1's sum fused with its
 * step (trainer/own_zero.c). fn's type is mt_shm_apply_fn; an error where
 * the gradient is not in the window. */
int mt_backend_reduce_apply(mt_backend *b, void *grads, size_t n,
                            int (*fn)(void *ctx, size_t first, size_t k, const void *sum),
                            void *ctx);

#endif
