/* fsdp full_shard and hybrid_shard on the device (only built with CUDA):
 * ZeRO-3, as PyTorch FSDP runs it. The device holds no whole copy of the
 * model: each rank keeps its part [lo, hi) of the parameters, the gradient
 * and the optimizer state (the CPU fsdp's partition: equal ranges rounded
 * to 16 floats, over the sharding group). The device model announces each
 * unit before it reads the unit's parameters (mt_dmodel.unit_use); the unit
 * is then gathered from the group's shards into a buffer of its own, the
 * next unit of the pass is gathered ahead on the communication stream, and
 * the unit used before is given back. The backward adds a unit's gradient
 * into a buffer of its own; when the unit is done (unit_done) it is
 * reduced on the communication stream, this rank's piece added into the
 * gradient shard, and the buffer given back. hybrid_shard sums the shards
 * over the replicas (the groups) after the last micro-batch.
 *
 * NCCL has no all-gather or reduce-scatter of unequal pieces, and a unit's
 * pieces are unequal (the partition is the model's, not the unit's): a
 * unit is gathered with one ncclBroadcast per rank holding a piece, and
 * reduced with one ncclReduce per rank, each in a group (NCCL's advice for
 * the "v" collectives). On one rank they are copies and sums on the
 * device.
 *
 * The buffers come from CUDA's stream-ordered allocator (a memory pool of
 * their own; allocated on the stream that writes a buffer first, freed on
 * the one that uses it last): a buffer given back is reused only after the
 * work queued before its release, as PyTorch's caching allocator with
 * record_stream. The pool keeps what it was given (release threshold
 * raised), so a step allocates nothing from the driver once warm; it is
 * trimmed after an evaluation, which gathers the whole model. The next unit
 * gathered ahead is the one the same pass used next the time before (the
 * first time, the next by number), as PyTorch FSDP's prefetch follows the
 * recorded order. Nothing here waits for the GPU, except the trim. */
#include "gpu/gpu_impl.h"
#include "backends/fsdp.h"

#include <stdint.h>
#include <string.h>

struct mt_gpu_units {
  mt_dunits view; /* what the device model reads                          */
  int nmodel, nunits;
  int *unit_of;   /* model unit -> unit (-fsdp_unit model: all 0)         */
  int *members, *ndone, *seen, *used;
  size_t *ulo, *uhi;
  size_t *cnt, *dsp; /* [u * G + r]: group rank r's piece of unit u: its
                        length and where it starts, from ulo[u]           */
  float **pslot, **gslot;
  cudaEvent_t *gathered; /* per unit: its last gather                     */
  /* the last two reductions' ends (their buffers given back): a new unit
   * gradient's buffer waits for the older, so that the compute stream may
   * reuse its memory and no more than two are in flight however far the
   * host runs ahead of the GPU (PyTorch FSDP's rate limiter) */
  cudaEvent_t reduced[2];
  int nreduced;
  int last, pass, pinned, prefetch;
  /* prefetch order: the units each pass (0 forward, 1 backward) used last
   * time, in order (ord, nord), and this pass's so far (rec, nrec); the
   * first time, the next unit by number */
  int *ord[2], nord[2], *rec, nrec;
  cudaMemPool_t pool; /* the buffers above come from it                   */
  double peak[2];     /* their bytes at most in use, and reserved by the
                         pool, in training                                 */
};

/* -------------------------------------------------------------- set-up */

int mt_gpu_units_groups(mt_trainer *t, MPI_Comm *group, MPI_Comm *replicas) {
  const mt_config *c = t->cfg;
  const mt_comm *comm = t->comm;
  *group = *replicas = MPI_COMM_NULL;
  if (!c->fsdp || (c->fsdp_strategy != MT_FSDP_FULL_SHARD &&
                   c->fsdp_strategy != MT_FSDP_HYBRID_SHARD))
    return 0;
  int node = 0;
  MT_CALL(mt_trainer_fsdp_node_size(t, &node));
  const int gs = c->fsdp_strategy == MT_FSDP_HYBRID_SHARD ? node : comm->size;
  MT_CHECK(gs >= 1 && comm->size % gs == 0, MT_ERR_OPTION,
           "option -fsdp_node_size: %d ranks are not whole nodes of %d ranks", comm->size, gs);
  MT_MPI(MPI_Comm_split(comm->world, comm->rank / gs, comm->rank, group));
  if (c->fsdp_strategy == MT_FSDP_HYBRID_SHARD)
    MT_MPI(MPI_Comm_split(comm->world, comm->rank % gs, comm->rank, replicas));
  return 0;
}

int mt_gpu_units_partition(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  const size_t n = t->model->params.total;
  MT_CHECK(g->group_mpi != MPI_COMM_NULL, MT_ERR_STATE, "fsdp on the device: no sharding group");
  MPI_Comm_rank(g->group_mpi, &g->grank);
  MPI_Comm_size(g->group_mpi, &g->G);
  g->per = ((n + (size_t)g->G - 1) / (size_t)g->G + 15) & ~(size_t)15;
  g->padded = g->per * (size_t)g->G;
  g->lo = (size_t)g->grank * g->per < n ? (size_t)g->grank * g->per : n;
  g->hi = g->lo + g->per < n ? g->lo + g->per : n;
  MT_CHECK(g->hi > g->lo, MT_ERR_OPTION,
           "-backend fsdp on the GPU: the model's %zu parameters leave rank %d of a sharding "
           "group of %d no shard; use fewer ranks", n, g->grank, g->G);
  return 0;
}

static int plan(struct mt_gpu *g, const mt_param_table *tb, int whole_model) {
  struct mt_gpu_units *U = g->units;
  MT_CALL(mt_fsdp_plan_units(tb, whole_model, &U->nmodel, &U->nunits, &U->unit_of, &U->members,
                             &U->ulo, &U->uhi));
  const int nu = U->nunits, G = g->G;
  int *arrays[] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++) MT_CALL(mt_calloc(&arrays[k], (size_t)nu, sizeof(int), "fsdp units"));
  U->ndone = arrays[0], U->seen = arrays[1], U->used = arrays[2];
  MT_CALL(mt_calloc(&U->cnt, (size_t)nu * G, sizeof(size_t), "fsdp units"));
  MT_CALL(mt_calloc(&U->dsp, (size_t)nu * G, sizeof(size_t), "fsdp units"));
  MT_CALL(mt_calloc(&U->pslot, (size_t)nu, sizeof(float *), "fsdp units"));
  MT_CALL(mt_calloc(&U->gslot, (size_t)nu, sizeof(float *), "fsdp units"));
  MT_CALL(mt_calloc(&U->gathered, (size_t)nu, sizeof(cudaEvent_t), "fsdp units"));
  const size_t n = tb->total;
  for (int u = 0; u < nu; u++) {
    for (int r = 0; r < G; r++) {
      size_t plo = (size_t)r * g->per < n ? (size_t)r * g->per : n;
      size_t phi = plo + g->per < n ? plo + g->per : n;
      size_t a = U->ulo[u] > plo ? U->ulo[u] : plo, b = U->uhi[u] < phi ? U->uhi[u] : phi;
      U->cnt[u * G + r] = b > a ? b - a : 0;
      U->dsp[u * G + r] = b > a ? a - U->ulo[u] : 0;
    }
    CU(cudaEventCreateWithFlags(&U->gathered[u], cudaEventDisableTiming));
  }
  for (int i = 0; i < 2; i++) CU(cudaEventCreateWithFlags(&U->reduced[i], cudaEventDisableTiming));
  U->view = (mt_dunits){U->unit_of, U->ulo, {U->pslot, U->gslot}};
  return 0;
}

/* The pool's high-water marks from now on (they can only be reset). */
static int reset_peak(struct mt_gpu_units *U) {
  uint64_t zero = 0;
  CU(cudaMemPoolSetAttribute(U->pool, cudaMemPoolAttrUsedMemHigh, &zero));
  CU(cudaMemPoolSetAttribute(U->pool, cudaMemPoolAttrReservedMemHigh, &zero));
  return 0;
}

static int unit_use(void *ctx, int munit, int pass);
static void unit_done(void *ctx, int munit);

int mt_gpu_units_create(mt_trainer *t) {
  const mt_config *c = t->cfg;
  struct mt_gpu *g = t->gpu;
  MT_CALL(mt_calloc(&g->units, 1, sizeof(*g->units), "fsdp units"));
  struct mt_gpu_units *U = g->units;
  U->last = U->pass = -1;
  U->prefetch = c->fsdp_prefetch;
  MT_CALL(plan(g, &t->model->params, c->fsdp_whole_model));
  const int cap = 2 * U->nunits + 2; /* a pass uses a unit at most twice (gpt's tied head) */
  for (int i = 0; i < 2; i++) MT_CALL(mt_calloc(&U->ord[i], (size_t)cap, sizeof(int), "fsdp order"));
  MT_CALL(mt_calloc(&U->rec, (size_t)cap, sizeof(int), "fsdp order"));
  /* a stream-ordered pool of the units' own, which keeps what it is given */
  int dev = 0;
  CU(cudaGetDevice(&dev));
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof(props));
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  CU(cudaMemPoolCreate(&U->pool, &props));
  uint64_t keep = UINT64_MAX;
  CU(cudaMemPoolSetAttribute(U->pool, cudaMemPoolAttrReleaseThreshold, &keep));
  MT_CALL(reset_peak(U));
  mt_dmodel *dm = &g->dm;
  dm->units = &U->view;
  dm->unit_use = unit_use;
  dm->unit_done = unit_done;
  dm->unit_ctx = t;
  return 0;
}

void mt_gpu_units_destroy(struct mt_gpu *g) {
  struct mt_gpu_units *U = g->units;
  if (!U) return;
  for (int u = 0; u < U->nunits; u++) {
    if (U->pslot && U->pslot[u]) cudaFree(U->pslot[u]);
    if (U->gslot && U->gslot[u]) cudaFree(U->gslot[u]);
    if (U->gathered && U->gathered[u]) cudaEventDestroy(U->gathered[u]);
  }
  for (int i = 0; i < 2; i++)
    if (U->reduced[i]) cudaEventDestroy(U->reduced[i]);
  if (U->pool) cudaMemPoolDestroy(U->pool); /* after the frees above */
  void *bufs[] = {&U->unit_of, &U->members, &U->ndone, &U->seen, &U->used, &U->ulo, &U->uhi,
                  &U->cnt, &U->dsp, &U->pslot, &U->gslot, &U->gathered, &U->ord[0], &U->ord[1],
                  &U->rec};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mt_free(bufs[i]);
  mt_free(&g->units);
}

int mt_gpu_units_pinned(const struct mt_gpu *g) { return g->units && g->units->pinned; }

/* ---------------------------------------------------------- parameters */

static size_t unit_len(const struct mt_gpu_units *U, int u) { return U->uhi[u] - U->ulo[u]; }

/* One NCCL call per group rank that holds a piece of unit u (slot: the
 * unit's buffer), in one group, ended whatever happens: each piece
 * broadcast from its holder (gather), or summed in place onto it. */
static int grouped(struct mt_gpu *g, int u, float *slot, int gather) {
  struct mt_gpu_units *U = g->units;
  const int G = g->G;
  MT_CHECK(g->gnc, MT_ERR_STATE, "fsdp on the device: the sharding group's NCCL communicator "
           "is gone (an earlier NCCL failure)");
  MT_CALL(mt_nccl_settle(g->gnc, ncclGroupStart(), "ncclGroupStart", 0, g->timeout));
  ncclResult_t r0 = ncclSuccess;
  for (int r = 0; r < G && (r0 == ncclSuccess || r0 == ncclInProgress); r++) {
    const size_t k = U->cnt[u * G + r], o = U->dsp[u * G + r];
    if (!k) continue;
    const float *send = r == g->grank && gather ? g->pshard + (U->ulo[u] + o - g->lo) : slot + o;
    r0 = gather ? ncclBroadcast(send, slot + o, k, ncclFloat, r, g->gnc, g->comm_stream)
                : ncclReduce(send, slot + o, k, ncclFloat, ncclSum, r, g->gnc, g->comm_stream);
  }
  const ncclResult_t r1 = ncclGroupEnd();
  return mt_nccl_settle(g->gnc, r0 == ncclSuccess || r0 == ncclInProgress ? r1 : r0,
                        gather ? "the gather of a unit's parameters (grouped ncclBroadcast)"
                               : "the reduction of a unit's gradient (grouped ncclReduce)",
                        unit_len(U, u), g->timeout);
}

/* Queues unit u's gather on the communication stream, after the work the
 * compute stream has queued (the optimizer's step of the shards). */
static int gather_start(mt_trainer *t, int u) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  const int G = g->G;
  const size_t len = unit_len(U, u);
  MT_CALL(mt_gpu_comm_begin(g));
  CU(cudaMallocFromPoolAsync((void **)&U->pslot[u], len * sizeof(float), U->pool,
                             g->comm_stream));
  float *slot = U->pslot[u];
  if (G == 1) { /* the whole unit is in the shard */
    CU(cudaMemcpyAsync(slot, g->pshard + (U->ulo[u] - g->lo), len * sizeof(float),
                       cudaMemcpyDeviceToDevice, g->comm_stream));
  } else {
    MT_CALL(grouped(g, u, slot, 1));
  }
  CU(cudaEventRecord(U->gathered[u], g->comm_stream));
  t->backend->comm_bytes += (double)len * sizeof(float);
  return 0;
}

/* Gives unit u's parameters back once the work queued on the compute
 * stream (its last reader) is done. */
static int release(struct mt_gpu *g, int u) {
  struct mt_gpu_units *U = g->units;
  if (!U->pslot[u]) return 0;
  /* a unit gathered ahead and never used: after its gather */
  CU(cudaStreamWaitEvent(g->stream, U->gathered[u], 0));
  CU(cudaFreeAsync(U->pslot[u], g->stream));
  U->pslot[u] = NULL;
  return 0;
}

/* The pass that ended used the units in the order recorded: the next
 * time the same pass prefetches by it. */
static void record_end(struct mt_gpu_units *U) {
  if (U->pass >= 0 && U->nrec > 0) {
    memcpy(U->ord[U->pass], U->rec, (size_t)U->nrec * sizeof(int));
    U->nord[U->pass] = U->nrec;
  }
  U->nrec = 0;
}

static int use(mt_trainer *t, int munit, int pass) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  MT_CHECK(munit >= 0 && munit < U->nmodel, MT_ERR_ARG, "fsdp: unit %d of %d", munit, U->nmodel);
  if (U->pinned) return 0;
  const int u = U->unit_of[munit];
  if (pass == 0) U->used[u] = 1;
  if (pass != U->pass) {
    record_end(U);
    memset(U->seen, 0, (size_t)U->nunits * sizeof(int));
  }
  U->pass = pass;
  if (U->nrec < 2 * U->nunits + 2 && (U->nrec == 0 || U->rec[U->nrec - 1] != u))
    U->rec[U->nrec++] = u;
  if (U->last >= 0 && U->last != u) MT_CALL(release(g, U->last));
  U->last = u;
  if (pass == 1 && !U->gslot[u]) { /* its gradient, zeroed, for the backward to add into */
    const size_t bytes = unit_len(U, u) * sizeof(float);
    if (U->nreduced >= 2) CU(cudaStreamWaitEvent(g->stream, U->reduced[U->nreduced % 2], 0));
    CU(cudaMallocFromPoolAsync((void **)&U->gslot[u], bytes, U->pool, g->stream));
    CU(cudaMemsetAsync(U->gslot[u], 0, bytes, g->stream));
  }
  if (!U->pslot[u]) MT_CALL(gather_start(t, u));
  CU(cudaStreamWaitEvent(g->stream, U->gathered[u], 0));
  /* the next unit of the pass, ahead: the one the pass used next last
   * time, or the first time the next by number unless the pass used it
   * already (gpt's forward ends with its first unit, the tied head) */
  U->seen[u] = 1;
  int next = -1;
  const int k = U->nrec - 1, by_number = pass == 0 ? u + 1 : u - 1; /* k: u's place */
  if (U->nord[pass] > 0)
    next = k + 1 < U->nord[pass] && U->ord[pass][k] == u ? U->ord[pass][k + 1] : -1;
  else if (by_number >= 0 && by_number < U->nunits && !U->seen[by_number])
    next = by_number;
  if (U->prefetch && next >= 0 && next != u && !U->pslot[next]) MT_CALL(gather_start(t, next));
  return 0;
}

static int unit_use(void *ctx, int munit, int pass) { return use(ctx, munit, pass); }

/* ----------------------------------------------------------- gradients */

/* Unit u's gradient, summed over the group, added into this rank's
 * gradient shard; its buffer given back. On the communication stream,
 * after the backward queued so far. */
static int reduce(mt_trainer *t, int u) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  const int G = g->G;
  float *slot = U->gslot[u];
  MT_CHECK(slot, MT_ERR_STATE, "fsdp: unit %d reported done without a gradient", u);
  MT_CALL(mt_gpu_comm_begin(g));
  if (G > 1) MT_CALL(grouped(g, u, slot, 0)); /* each piece summed on its holder */
  const size_t k = U->cnt[u * G + g->grank], o = U->dsp[u * G + g->grank];
  if (k) {
    float *dst = g->gshard + (U->ulo[u] + o - g->lo);
    MT_CALL(mt_cuda_residual_forward(dst, dst, slot + o, (int64_t)k, g->comm_stream));
  }
  CU(cudaFreeAsync(slot, g->comm_stream));
  CU(cudaEventRecord(U->reduced[U->nreduced++ % 2], g->comm_stream));
  U->gslot[u] = NULL;
  t->backend->comm_bytes += (double)unit_len(U, u) * sizeof(float);
  return 0;
}

static int done(mt_trainer *t, int munit) {
  struct mt_gpu_units *U = t->gpu->units;
  MT_CHECK(munit >= 0 && munit < U->nmodel, MT_ERR_ARG, "fsdp: unit %d of %d", munit, U->nmodel);
  const int u = U->unit_of[munit];
  MT_CHECK(U->used[u], MT_ERR_STATE,
           "fsdp: the device model's forward did not announce unit %d (unit_use), so its "
           "parameters were never gathered", munit);
  if (++U->ndone[u] < U->members[u]) return 0;
  U->ndone[u] = 0;
  return reduce(t, u);
}

static void unit_done(void *ctx, int munit) {
  mt_trainer *t = ctx;
  if (!t->gpu->overlap_err) t->gpu->overlap_err = done(t, munit);
}

/* The pool's high-water marks of bytes in use and reserved into U->peak. */
static int sample_peak(struct mt_gpu_units *U) {
  const enum cudaMemPoolAttr a[2] = {cudaMemPoolAttrUsedMemHigh, cudaMemPoolAttrReservedMemHigh};
  for (int i = 0; i < 2; i++) {
    uint64_t high = 0;
    CU(cudaMemPoolGetAttribute(U->pool, a[i], &high));
    if ((double)high > U->peak[i]) U->peak[i] = (double)high;
  }
  return 0;
}

int mt_gpu_units_finish(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  for (int u = 0; u < U->nunits; u++) {
    MT_CHECK(U->ndone[u] == 0 && !U->gslot[u], MT_ERR_STATE,
             "fsdp: the backward reported %d of the %d model units of unit %d as done",
             U->ndone[u], U->members[u], u);
    MT_CALL(release(g, u));
    U->used[u] = 0;
  }
  record_end(U);
  U->last = U->pass = -1;
  MT_CALL(sample_peak(U));
  MT_CALL(mt_gpu_comm_begin(g));
  if (g->rnc) { /* hybrid_shard: the shards summed over the replicas */
    const size_t ns = g->hi - g->lo;
    MT_CALL(mt_nccl_settle(g->rnc,
                           ncclAllReduce(g->gshard, g->gshard, ns, ncclFloat, ncclSum, g->rnc,
                                         g->comm_stream),
                           "ncclAllReduce of the gradient shard over the replicas", ns,
                           g->timeout));
    t->backend->comm_bytes += (double)ns * sizeof(float);
  }
  return mt_gpu_comm_end(g); /* the optimizer waits for the reductions */
}

/* ------------------------------------------------------------- pinning */

int mt_gpu_pin(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  if (!U || U->pinned) return 0;
  const double bytes = t->backend->comm_bytes; /* not training's communication */
  MT_CALL(sample_peak(U)); /* training's, before the whole model is gathered */
  for (int u = 0; u < U->nunits; u++)
    if (!U->pslot[u]) MT_CALL(gather_start(t, u));
  MT_CALL(mt_gpu_comm_end(g));
  t->backend->comm_bytes = bytes;
  U->pinned = 1;
  return 0;
}

int mt_gpu_unpin(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  if (!U || !U->pinned) return 0;
  U->pinned = 0;
  for (int u = 0; u < U->nunits; u++) MT_CALL(release(g, u));
  U->last = U->pass = -1;
  /* the whole model's buffers go back to the device (NCCL and cuBLAS
   * allocate outside the pool); the high-water marks from here on are
   * training's again */
  MT_CALL(mt_gpu_sync(g, "the release of the gathered model"));
  CU(cudaMemPoolTrimTo(U->pool, 0));
  return reset_peak(U);
}

int mt_gpu_memory_report(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  struct mt_gpu_units *U = g->units;
  double v[4] = {0, 0, 0, 2.0 * (double)t->model->params.total * sizeof(float)};
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) v[0] = (double)(total_b - free_b);
  const int e = U && !U->pinned ? sample_peak(U) : 0;
  if (U) v[1] = U->peak[0], v[2] = U->peak[1];
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_DOUBLE, MPI_MAX, t->comm->world));
  MT_CALL(mt_agree(t->comm->world, e));
  const double mib = 1048576.0;
  mt_print0("device memory per rank (largest over ranks): %.3f MiB in use at the end", v[0] / mib);
  if (U)
    mt_print0("; fsdp units gathered and their gradients (peak in training) %.3f MiB, the whole "
              "model's parameters and gradient %.3f MiB; the pool reserved at most %.3f MiB "
              "(in chunks)", v[1] / mib, v[3] / mib, v[2] / mib);
  mt_print0("\n");
  return 0;
}
