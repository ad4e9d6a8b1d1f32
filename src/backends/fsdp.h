/* fsdp: sharded data parallelism (PyTorch FSDP, DeepSpeed ZeRO 1-3).
 *
 * The flat layout [0, n) is split into contiguous ranges, one per rank of a
 * sharding group (all ranks; a node's ranks for hybrid_shard): rank g of
 * the group holds [lo, hi) of the parameters, of the gradient and of the
 * optimizer state (DeepSpeed's flat partition; the checkpoint format's
 * sharded part). The model sees the whole layout through two views of n
 * floats that are reserved address space, not memory: a unit's parameters
 * are all-gathered into the parameter view when the model is about to read
 * them (mt_model_unit_use) and its pages go back to a pool (pagepool.h)
 * that lends them to the next unit gathered when the unit is
 * released; the backward writes a unit's gradient into the gradient view,
 * which is reduced onto its owners as soon as the unit is done and then
 * given back too. So a rank holds its shards plus the units in use.
 *
 *   full_shard     parameters released after each unit's forward, gathered
 *                  again for its backward (ZeRO-3);
 *   shard_grad_op  parameters kept from the forward until the unit's
 *                  backward is done (ZeRO-2);
 *   hybrid_shard   full_shard inside groups of -fsdp_node_size ranks (a
 *                  node), the groups' gradient shards all-reduced across;
 *   no_shard       ddp (the trainer creates the ddp backend).
 *
 * The next unit's all-gather is started when a unit is used (prefetch), and
 * a unit's gradient reduction runs while the backward goes on; both are
 * non-blocking, issued in the same order on every rank: MPI_Iallgatherv, and
 * mt_coll_start_reduce_scatter_v (comm.h: a ring over the unit's uneven
 * pieces per owner; at 2 ranks it took 0.41-0.49 s where one MPI_Ireduce
 * per owner took 0.63-0.67 s of a 20-step gpt run, bench/README.md). */
#ifndef MT_FSDP_H
#define MT_FSDP_H

#include "mpitrain/mpitrain.h"

typedef enum {
  MT_FSDP_FULL_SHARD = 0,
  MT_FSDP_SHARD_GRAD_OP,
  MT_FSDP_HYBRID_SHARD,
  MT_FSDP_NO_SHARD
} mt_fsdp_strategy;

/* "full_shard", ... (-fsdp_sharding_strategy), and back; -1: unknown. */
const char *mt_fsdp_strategy_name(int s);
int mt_fsdp_strategy_parse(const char *s);

typedef struct mt_fsdp mt_fsdp;

/* The units of a layout (the CPU's fsdp and the GPU's, gpu/gpu_fsdp.c):
 * *nmodel units of the model (mt_param.unit), grouped into *nunits (one
 * with whole_model, -fsdp_unit model); allocates unit_of (model unit ->
 * unit), members (model units per unit) and each unit's range [ulo, uhi)
 * of the layout. Every tensor has a unit, every unit a tensor, and the
 * units do not overlap, or MT_ERR_STATE. */
int mt_fsdp_plan_units(const mt_param_table *t, int whole_model, int *nmodel, int *nunits,
                       int **unit_of, int **members, size_t **ulo, size_t **uhi);

/* Memory of a rank, in bytes: the shards and the peak of the views'
 * resident pages (mincore), sampled whenever a unit is gathered or its
 * gradient reduced. */
typedef struct {
  double shard_params, shard_grads;
  double peak_params_view, peak_grads_view;
  double largest_unit; /* the largest unit's parameters                     */
} mt_fsdp_memory;

/* Collective over world. params holds the whole initialised model (every
 * rank the same); it is copied into this rank's shard. whole_model: one
 * unit for the whole model (-fsdp_unit model). node_size: the sharding
 * group of hybrid_shard (world size must be a multiple of it). prefetch
 * (-fsdp_prefetch): 1 gathers the next unit of a pass while a unit
 * computes and lets a unit's gradient reduction run through the next
 * unit's backward; 0 does neither, so full_shard holds at most one unit's
 * parameters (shard_grad_op keeps the forward's units to the backward
 * anyway) and one unit's gradient. */
int mt_fsdp_create(mt_fsdp **f, MPI_Comm world, const mt_param_table *table, const float *params,
                   int strategy, int whole_model, int node_size, int prefetch);
void mt_fsdp_destroy(mt_fsdp **f);
/* The flat partition of n elements over a sharding group of gsize ranks:
 * rank grank's range [*lo, *hi), equal ranges rounded to 16 floats (what
 * mt_fsdp_create makes; the memory forecast takes it before any model). */
void mt_fsdp_partition(size_t n, int gsize, int grank, size_t *lo, size_t *hi);

/* This rank's shard: [*lo, *hi) of the layout; its parameter and gradient
 * buffers (hi - lo floats); the tensors' pieces in it as a table whose
 * offsets are relative to lo (for the optimizer). */
void mt_fsdp_range(const mt_fsdp *f, size_t *lo, size_t *hi);
float *mt_fsdp_params(mt_fsdp *f);
float *mt_fsdp_grads(mt_fsdp *f);
const mt_param_table *mt_fsdp_table(const mt_fsdp *f);
/* The views the model reads and writes (n floats each). */
float *mt_fsdp_params_view(mt_fsdp *f);
float *mt_fsdp_grads_view(mt_fsdp *f);

/* The model's hooks (ctx is the mt_fsdp): unit_use gathers; unit_done
 * starts the reduction of the unit's gradient. unit_done returns an error
 * code (the trainer keeps the first). */
int mt_fsdp_unit_use(void *ctx, int unit, int pass);
int mt_fsdp_unit_done(mt_fsdp *f, int unit);

/* A global step begins: the shard gradient is zeroed. */
void mt_fsdp_step_begin(mt_fsdp *f);
/* After the last backward of a step: every reduction finished, gathers in
 * flight completed, the gradient shard holds the global gradient (summed
 * across hybrid_shard's groups); all gathered parameters released. */
int mt_fsdp_finish_grads(mt_fsdp *f);
/* Squared L2 norm of the whole gradient (the shards' sum over the group). */
int mt_fsdp_grad_norm2(mt_fsdp *f, double *norm2);
/* Collective: the whole model gathered into the parameter view and kept
 * there (evaluation, saving the model) until mt_fsdp_unpin. */
int mt_fsdp_pin(mt_fsdp *f);
int mt_fsdp_unpin(mt_fsdp *f);
int mt_fsdp_pinned(const mt_fsdp *f);
/* Ranks that shard among themselves. */
int mt_fsdp_group_size(const mt_fsdp *f);

void mt_fsdp_memory_get(const mt_fsdp *f, mt_fsdp_memory *m);
double mt_fsdp_comm_seconds(const mt_fsdp *f);
double mt_fsdp_comm_bytes(const mt_fsdp *f);

#endif
