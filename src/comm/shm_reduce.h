/* An all-reduce (sum) through an MPI-3 shared-memory window: ddp's
 * -ddp_allreduce shm (shm_reduce.c).
 *
 * Inside a node the ranks copy their buffer, a chunk at a time, into their
 * slot of one window; each rank sums its slice of the chunk (1/L of it, 64
 * bytes aligned) straight from every slot, in slot order 0, 1, ..., so the
 * sum has the same bits on every rank and every call; then every rank
 * copies the others' reduced slices. Across nodes the rank with local index
 * j of each node all-reduces the node's slice j with MPI_Allreduce among
 * themselves before it is read back: reduce in the node, all-reduce
 * across, broadcast in the node -- one code path for one node and many.
 * L is the smallest number of ranks on a node; ranks with a local index
 * past it only contribute and read.
 *
 * A buffer made by mt_shm_buffer lies in a window already: the ranks sum
 * it where it lies, with no copy in (ddp's gradients, -ddp_allreduce shm). */
#ifndef MT_COMM_SHM_REDUCE_H
#define MT_COMM_SHM_REDUCE_H

#include "mpitrain/mpitrain.h"

#include <stddef.h>

/* The element types: the buffers' (fp32, fp64 under -precision fp64) and
 * -ddp_reduce_dtype's (bf16, fp16: summed in fp32 and rounded to the type
 * at each step of the sum, as the MPI user operation of backends/amp.c). */
typedef enum { MT_SHM_F32 = 0, MT_SHM_F64, MT_SHM_BF16, MT_SHM_FP16 } mt_shm_type;

/* How the ranks of a node wait for one another between the phases of a
 * chunk: counters in the window (C11 release/acquire atomics, polled), or
 * MPI_Win_sync + MPI_Barrier on the node communicator. */
enum { MT_SHM_SYNC_FLAGS = 0, MT_SHM_SYNC_BARRIER };

/* The -ddp_allreduce methods: what the user asks for (auto, the default,
 * or one of the two), and what a run uses (mpi or shm). */
enum { MT_ALLREDUCE_MPI = 0, MT_ALLREDUCE_SHM, MT_ALLREDUCE_AUTO };
#define MT_ALLREDUCE_OPTION "-ddp_allreduce"
/* Reads -ddp_allreduce (auto | mpi | shm) from the options database into
 * *method (MT_ERR_OPTION naming the option for another value). The config
 * reads it; the trainer gives the backend what mt_allreduce_use makes of
 * it (mt_backend.allreduce). */
int mt_allreduce_option(int *method);
/* The method a run uses for the asked one: auto is shm for host buffers
 * (device 0) unless the buckets overlap the backward without the
 * communication thread (MPI_Iallreduce driven by MPI_Test: the window has
 * no non-blocking form), else mpi. */
int mt_allreduce_use(int asked, int device, int overlap, int comm_thread);

typedef struct mt_shm_reduce mt_shm_reduce;

/* Collective over comm: the node communicator, the cross-node
 * communicators and an empty window. chunk_bytes (0: 1 MiB) bounds each
 * rank's slot (the window holds 2 x local_size slots: consecutive chunks
 * alternate, so one chunk's reads never wait for the next one's writes);
 * sync is MT_SHM_SYNC_*. Free with mt_shm_destroy, also after a failure. */
int mt_shm_create(mt_shm_reduce **s, MPI_Comm comm, size_t chunk_bytes, int sync);
/* Sums buf (n elements of type t) over the ranks of the communicator, in
 * place. Collective: every rank passes the same n and t, and only one
 * thread of a rank uses s at a time. The window grows (collectively, up to
 * the chunk) when a larger buffer comes. The result has the same bits on
 * every rank: in a node the sum is (x[0] + x[1]) + ... in local rank order;
 * across nodes MPI_Allreduce sums the nodes' sums. A buf inside this rank's
 * mt_shm_buffer (every rank passing the same offset in its own) is summed
 * in place there, without the copy in: the same bits. */
int mt_shm_allreduce(mt_shm_reduce *s, void *buf, size_t n, mt_shm_type t);
/* What mt_shm_reduce_apply hands a piece of this rank's slice to: the sum
 * of elements [first, first + k) of the buffer (sum: k elements, valid
 * during the call). Nonzero: an error, returned by mt_shm_reduce_apply. */
typedef int (*mt_shm_apply_fn)(void *ctx, size_t first, size_t k, const void *sum);
/* The in-place sum of n elements at buf (in this rank's mt_shm_buffer,
 * every rank passing the same range) reduced to this rank's slice alone (a
 * reduce-scatter: mt_shm_partition(n, esz, L, local rank); ranks past L
 * have none), each piece of it handed to fn as it is summed (in cache, in
 * order, with the bits mt_shm_allreduce would give), instead of written
 * back into the ranks' buffers: ZeRO-1's sum fused with its optimizer step
 * (trainer/own_zero.c). Across nodes the slice is summed into this rank's
 * buffer, all-reduced among the nodes and handed to fn in one call. No
 * rank returns before every rank of the node is past its slice. Collective
 * as mt_shm_allreduce; afterwards the buffers hold no sum (stale). */
int mt_shm_reduce_apply(mt_shm_reduce *s, void *buf, size_t n, mt_shm_type t, mt_shm_apply_fn fn,
                        void *ctx);
/* Collective over the communicator: *buf = bytes for this rank (zeroed,
 * 64-byte aligned) in a window of the node's, which mt_shm_allreduce reads
 * where it lies: the other ranks read and write it during the calls on it,
 * and only then. Ordinary memory to this process otherwise (any thread, any
 * library; MPI_Win_allocate_shared's memory is the process's own), valid
 * until the next mt_shm_buffer or mt_shm_destroy. *buf NULL when every node
 * has one rank (no window: MPI_Allreduce across only), bytes is 0, or a
 * node's /dev/shm lacks the room (said on rank 0; the copy in then). */
int mt_shm_buffer(mt_shm_reduce *s, size_t bytes, void **buf);
/* Collective over the communicator: *buf = bytes that every rank of the
 * node shares (the same memory in each, in local rank 0's segment of a
 * window, 64-byte aligned; not zeroed): ZeRO-1's parameters
 * (trainer/own_zero.c), which each rank steps a slice of. Valid until the
 * next mt_shm_shared or mt_shm_destroy. *buf NULL as for mt_shm_buffer
 * (every node one rank, bytes 0, too little room in /dev/shm). */
int mt_shm_shared(mt_shm_reduce *s, size_t bytes, void **buf);
/* Collective on the node: its ranks wait for one another (after each has
 * written its part of a mt_shm_shared buffer, before any reads the whole);
 * needs the mt_shm_buffer, on whose counters it waits, in the sequence of
 * the in-place sums. Nothing crosses nodes. */
int mt_shm_arrive(mt_shm_reduce *s);
/* Slice q of L of m elements of esz bytes: [*lo, *hi), on 64-byte
 * boundaries (the in-node sums' partition; empty past the end). */
void mt_shm_partition(size_t m, size_t esz, int L, int q, size_t *lo, size_t *hi);
/* Bytes summed so far in place (in mt_shm_buffer) and through the slots. */
void mt_shm_bytes(const mt_shm_reduce *s, double *in_place, double *copied);
/* The window's bytes per slot now (for tests: it grows, bounded). */
size_t mt_shm_slot_bytes(const mt_shm_reduce *s);
/* Ranks that sum a slice on each node (L above). */
int mt_shm_slices(const mt_shm_reduce *s);
void mt_shm_destroy(mt_shm_reduce **s);

#endif
