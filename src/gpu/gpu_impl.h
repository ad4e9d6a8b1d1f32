/* The device state of -device cuda, shared by gpu.c (buffers, the step,
 * NCCL's buckets, evaluation) and gpu_optim.c (the optimizer state: whole
 * on the device, sharded by fsdp shard_grad_op, or on the host under
 * -fsdp_cpu_offload). Only built with CUDA. */
#ifndef MT_TRAINER_GPU_IMPL_H
#define MT_TRAINER_GPU_IMPL_H

#include "gpu/gpu.h"
#include "comm/buckets.h"
#include "cuda/cuda_optim.h"
#include "cuda/dmodel.h"
#include "cuda/mt_nccl.h"

/* A micro-batch's host staging (pinned) and device copy. */
typedef struct {
  void *host, *dev; /* one block each: x, labels, tokens, targets, ids      */
  size_t bytes;
  cudaEvent_t copied; /* the host block may be reused once this completed */
} slot;

struct mt_gpu {
  cudaStream_t stream, comm_stream;
  mt_cuda_ctx cx;
  mt_dmodel dm;
  float *params, *grads, *mom; /* params and grads: padded elements     */
  float *buf; /* the model buffers (batch norm's running statistics)      */
  cudaEvent_t stepped, synced; /* mt_gpu_comm_begin / mt_gpu_comm_end    */
  mt_cuda_adamw_state adam;
  /* per micro-batch of a step: its loss sum (device; host copy) */
  double *sums, *sums_host;
  double *norm; /* clipping's norm (device scalar)                        */
  /* an evaluation forward: its sums, per-sample losses and outputs */
  double *esum, *esum_host;
  int64_t *ehits, *ehits_host;
  float *elosses, *elosses_host, *eout_host;
  slot slots[2];
  /* NCCL and ddp's gradient buckets (comm/buckets.h: started in order as
   * the backward finishes their units) */
  mt_nccl_comms nc;
  int nccl;
  mt_buckets bk;
  int nstarted;
  cudaEvent_t *ready, reduced, step_done;
  int overlap_err;
  int step_overlap;     /* this step's reduction overlaps its last backward */
  const float *wp;      /* the weights this step's passes read (O2: work)   */
  double timeout;
  /* the partition (gpu_optim.c): rank r of P owns [lo, hi) of the layout,
   * per elements a rank; without sharding lo = 0, hi = n, padded = n */
  int sharded, offload;
  size_t lo, hi, per, padded;
  mt_param_table slice; /* the shard's tensors, offsets from lo           */
  mt_cuda_table stable; /* its device copy (sharded, not offloaded)       */
  float *gshard_host;   /* -fsdp_cpu_offload: the gradient shard (pinned) */
  double *norm_host;    /* the shard's norm, read on the host (pinned)    */
  int *flag, *flag_host; /* loss scaling: an inf/NaN in the gradient      */
  float *work;          /* O2: the working copy (master rounded), padded */
  /* this rank's part [lo, hi) of the parameters and the gradient: params +
   * lo and grads + lo, or under zero3 buffers of their own (per elements) */
  float *pshard, *gshard;
  /* zero3: fsdp full_shard and hybrid_shard (gpu_fsdp.c): no whole copy of
   * the model on the device; the partition is over the sharding group of G
   * ranks (grank: this rank's place), units gathered from the shards as the
   * model uses them and their gradients reduced into the shards */
  int zero3, G, grank;
  MPI_Comm group_mpi, repl_mpi; /* the group; hybrid_shard: the replicas  */
  ncclComm_t gnc, rnc;          /* NCCL over each (NULL: one rank)        */
  struct mt_gpu_units *units;
};



int mt_gpu_cuda_ok(cudaError_t e, const char *what);
#define CU(expr) MT_CALL(mt_gpu_cuda_ok((expr), #expr))
/* Device memory of bytes, zeroed, into *(void **)p; MT_ERR_MEM naming what. */
int mt_gpu_alloc(void *p, size_t bytes, const char *what);
/* Waits for ev polling it (and the NCCL communicator, under -comm_timeout). */
int mt_gpu_wait(struct mt_gpu *g, cudaEvent_t ev, const char *what);
/* Waits so for everything queued on the step's stream. */
int mt_gpu_sync(struct mt_gpu *g, const char *what);
/* Around a collective on the communication stream: it starts after what
 * the compute stream has queued (begin), and the compute stream's later
 * work waits for it (end). */
int mt_gpu_comm_begin(struct mt_gpu *g);
int mt_gpu_comm_end(struct mt_gpu *g);

/* gpu_optim.c: the partition and the optimizer state (before the params
 * and grads are allocated: it sets g->padded), its release; after the
 * backward, the gradient on this rank's part (sharded: reduce-scattered),
 * clipping, the optimizer step and (sharded) the parameters all-gathered;
 * the state's copies for a checkpoint (collective when sharded) and a
 * restart. */
int mt_gpu_optim_setup(mt_trainer *t);
void mt_gpu_optim_free(struct mt_gpu *g);
int mt_gpu_shard_reduce(mt_trainer *t);
/* O2: x's low-precision tensors rounded to -amp_dtype, within [lo, hi);
 * x holds the layout from element xlo on. */
int mt_gpu_o2_round(mt_trainer *t, float *x, size_t xlo, size_t lo, size_t hi);
int mt_gpu_optim_download(mt_trainer *t);
int mt_gpu_optim_upload(mt_trainer *t);
/* Every rank's part [r * per, ...) of the n-element host buffer buf, from
 * each of the P ranks of comm to all (in place). Collective. */
int mt_gpu_host_allgather(float *buf, size_t n, size_t per, int P, MPI_Comm comm);

/* gpu_fsdp.c (zero3): the sharding group and the replicas (hybrid_shard)
 * as MPI communicators (collective, before anything that can fail on one
 * rank; MPI_COMM_NULL without zero3); the partition (before the buffers
 * are allocated; sets G, grank, lo, hi, per, padded); the units (after the
 * buffers and the device model, whose hooks it sets) and their release;
 * the end of a step's gradient reduction (the compute stream waits for
 * it); whether every unit is gathered (mt_gpu_pin). */
int mt_gpu_units_groups(mt_trainer *t, MPI_Comm *group, MPI_Comm *replicas);
int mt_gpu_units_partition(mt_trainer *t);
int mt_gpu_units_create(mt_trainer *t);
void mt_gpu_units_destroy(struct mt_gpu *g);
int mt_gpu_units_finish(mt_trainer *t);
int mt_gpu_units_pinned(const struct mt_gpu *g);

#endif
