/* The distributed environment: world and node communicators. */
#ifndef MT_COMM_H
#define MT_COMM_H

#include "mpitrain/mpitrain.h"

typedef struct {
  MPI_Comm world; /* a duplicate of MPI_COMM_WORLD owned by mpitrain        */
  MPI_Comm node;  /* ranks sharing memory with this one                    */
  int rank, size;
  int local_rank, local_size; /* within the node                           */
  int nnodes, node_id;
  int node_min, node_max; /* the fewest and the most ranks on a node       */
  int node_cores;  /* cores the node's ranks may run on: the union of their
                   * affinity masks (a Slurm allocation's cpuset, not the
                   * machine's online cores)                               */
  int rank_cores;  /* cores in this rank's own mask (1 when bound to a core) */
} mt_comm;

/* Collective over MPI_COMM_WORLD. */
int mt_comm_create(mt_comm *c);
void mt_comm_destroy(mt_comm *c);
/* Threads per rank: requested if > 0, else the node's cores / its ranks,
 * and no more than the rank's own cores (a rank bound to one core gets 1). */
int mt_comm_default_threads(const mt_comm *c, int requested);

/* small per-rank values of mixed types: mt_value and mt_allgather_values
 * are public (mpitrain/mpitrain.h), for a user's model as for the trainer */

/* ------------------------------------- collectives for sharding (FSDP) */

/* Reduce-scatter and all-gather of flat float buffers (collectives.c).
 * A full buffer is size * shard_n floats: block r = elements
 * [r * shard_n, (r + 1) * shard_n) belongs to rank r. Uneven shards are the
 * caller's business: pad every rank's shard to the same shard_n (zeros in
 * the padding of a reduce-scatter input keep the sums right). Collective:
 * every rank passes the same shard_n and method, and starts operations on
 * one communicator in the same order. shard_n == 0 does nothing. The ring
 * takes any shard_n (its messages are segments); the MPI methods need
 * size * shard_n <= INT_MAX (MT_ERR_ARG otherwise; AUTO takes the ring
 * then). Point-to-point messages use
 * tags 0x4d00-0x50ff of comm: give the collectives a communicator of their
 * own (mt_comm's world is mpitrain's duplicate). */
enum {
  MT_COLL_AUTO = 0,    /* the measured choice (bench/README.md)            */
  MT_COLL_RING,        /* point-to-point ring, pipelined segments          */
  MT_COLL_MPI,         /* MPI_(I)reduce_scatter_block / MPI_(I)allgather   */
  MT_COLL_MPI_CHUNKED, /* reduce-scatter: MPI_Reduce_scatter_block by pieces */
  MT_COLL_ALLREDUCE    /* reduce-scatter: MPI_Allreduce, then a copy       */
};
/* Sums full_in over the ranks; rank r receives block r in shard_out, which
 * must not overlap full_in. Deterministic: the same inputs give the same
 * bits on every call (a fixed summation order per method and size). */
int mt_reduce_scatter(float *shard_out, const float *full_in, size_t shard_n, MPI_Comm comm);
/* Every rank's shard_in to every rank: full_out block r = rank r's shard.
 * shard_in may be full_out + rank * shard_n (in place). */
int mt_all_gather(float *full_out, const float *shard_in, size_t shard_n, MPI_Comm comm);
/* The same with a chosen method (tests, benchmarks). */
int mt_reduce_scatter_method(float *shard_out, const float *full_in, size_t shard_n,
                             MPI_Comm comm, int method);
int mt_all_gather_method(float *full_out, const float *shard_in, size_t shard_n, MPI_Comm comm,
                         int method);
/* The method MT_COLL_AUTO stands for (all_gather: 1 for an all-gather). */
int mt_coll_auto_method(int all_gather, size_t shard_n, int size);
/* Non-blocking forms (method MT_COLL_AUTO, MT_COLL_RING or MT_COLL_MPI):
 * start returns a handle; the buffers must stay untouched until
 * mt_coll_wait. mt_coll_test moves the operation on (a ring completes the
 * segments that arrived, sums them and posts the next ones; MPI's form
 * calls MPI_Test) and says whether it is done: call it now and then from a
 * compute loop so that the transfer overlaps the computation. mt_coll_wait
 * finishes it, frees the handle and sets *h to NULL (NULL: nothing). */
typedef struct mt_coll mt_coll;
int mt_coll_start_reduce_scatter(mt_coll **h, float *shard_out, const float *full_in,
                                 size_t shard_n, MPI_Comm comm, int method);
/* Reduce-scatter of uneven blocks, by the ring: block b of full_in is
 * counts[b] floats at full_in + displs[b] (counts may be 0, blocks need not
 * be adjacent); rank r receives the sum of block r in shard_out (counts[r]
 * floats, not overlapping its block of full_in). Every rank passes the same
 * counts and displs. Block b is summed in the ring order above, the same
 * bits on every call. */
int mt_coll_start_reduce_scatter_v(mt_coll **h, float *shard_out, const float *full_in,
                                   const int *counts, const int *displs, MPI_Comm comm);
int mt_coll_start_all_gather(mt_coll **h, float *full_out, const float *shard_in, size_t shard_n,
                             MPI_Comm comm, int method);
int mt_coll_test(mt_coll *h, int *done);
int mt_coll_wait(mt_coll **h);
/* The ring's segment (floats) and segments in flight (at most 8); 0 keeps
 * the current value. For benchmarks; not thread-safe. */
void mt_coll_set_ring(size_t segment_floats, int window);

#endif
