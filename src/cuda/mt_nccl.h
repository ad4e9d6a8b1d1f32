/* NCCL bootstrap over MPI (only built with CUDA).
 *
 * The unique id is made by one rank (ncclGetUniqueId) and sent to the others
 * with MPI_Bcast; every rank then creates its NCCL communicator
 * non-blocking (ncclCommInitRankConfig, blocking = 0) and polls
 * ncclCommGetAsyncError under a time limit. A rank that fails (CUDA device,
 * NCCL error, time limit) aborts its communicator and tells the others, who
 * abort theirs at once rather than wait out the limit; then the ranks agree
 * (mt_agree): every rank returns the same error, rank 0 holds the message
 * of the lowest failing rank. No call here waits without a limit, except
 * the MPI collectives themselves (which the hang guard covers).
 *
 * The id exchange is a function of its own (no GPU needed; tested by
 * tests/test_nccl_id). */
#ifndef MT_CUDA_NCCL_H
#define MT_CUDA_NCCL_H

#include "comm/comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

/* Collective over comm: root makes a NCCL unique id and every rank of comm
 * receives its bytes in *id. A failure of ncclGetUniqueId on root is
 * returned on every rank (MT_ERR_LIB). */
int mt_nccl_id_exchange(MPI_Comm comm, int root, ncclUniqueId *id);

/* Collective over comm: a NCCL communicator of the same ranks (rank r of
 * comm is NCCL rank r) on CUDA device `device` (mt_device_select), made
 * within timeout_s seconds (<= 0: 300). *out is NULL on failure. */
int mt_nccl_comm_init(ncclComm_t *out, MPI_Comm comm, int device, double timeout_s);
/* Finalizes and destroys (aborts where that fails or takes longer than
 * timeout_s); NULL does nothing; sets *c to NULL. */
void mt_nccl_comm_destroy(ncclComm_t *c, double timeout_s);

/* A call on a non-blocking communicator that returned r: while in
 * progress, waited for (at most timeout_s, <= 0: 300), as NCCL asks before
 * the next call; then 0, or MT_ERR_LIB naming what (of n values) and the
 * NCCL error. */
int mt_nccl_settle(ncclComm_t nc, ncclResult_t r, const char *what, size_t n, double timeout_s);
/* In-place sum of n floats of buf over the communicator's ranks
 * (ncclAllReduce), queued on stream; on a non-blocking communicator a call
 * still in progress is waited for (at most timeout_s, <= 0: 300) before
 * this returns, as NCCL asks before the next call. MT_ERR_LIB naming the
 * NCCL error. */
int mt_nccl_allreduce_sum(ncclComm_t nc, float *buf, size_t n, cudaStream_t stream,
                          double timeout_s);
/* In place: root's n floats of buf to every rank (ncclBroadcast), as
 * mt_nccl_allreduce_sum for the rest. */
int mt_nccl_bcast(ncclComm_t nc, float *buf, size_t n, int root, cudaStream_t stream,
                  double timeout_s);
/* 0, or MT_ERR_LIB when the communicator reports an asynchronous error
 * (a failed peer, a network error); what names the operation waited for. */
int mt_nccl_async_check(ncclComm_t nc, const char *what);

/* The ranks of the other nodes with the same local rank (the cross-node
 * communicator of hybrid sharding): an MPI_Comm_split of c->world by
 * local rank, ordered by node. Free with MPI_Comm_free. Collective. */
int mt_comm_cross_node(const mt_comm *c, MPI_Comm *cross);

/* The NCCL communicators of a run: world always; with hybrid, node (the
 * ranks of this node) and cross (one rank per node, same local rank) too,
 * for hybrid sharding (reduce-scatter within the node, all-reduce across). */
typedef struct {
  ncclComm_t world, node, cross;
  MPI_Comm cross_mpi; /* the MPI communicator behind cross                */
  int device;
} mt_nccl_comms;

/* Collective over c->world. On failure everything made is released. */
int mt_nccl_comms_create(mt_nccl_comms *nc, const mt_comm *c, int device, int hybrid,
                         double timeout_s);
void mt_nccl_comms_destroy(mt_nccl_comms *nc);

#endif
