/* -device cuda in the trainer (only built with CUDA): device buffers, the
 * training step on the device, NCCL's gradient all-reduce overlapped with
 * the backward, and the copies between device and host (gpu/gpu.h). */
#include "gpu/gpu_impl.h"
#include "backends/backends.h"
#include "backends/fsdp.h"
#include "comm/buckets.h"
#include "cuda/cuda_optim.h"
#include "cuda/device.h"
#include "cuda/dmodel.h"
#include "cuda/mt_nccl.h"
#include "models/models.h"
#include "trainer/amp.h"

#include <string.h>


/* fsdp shard_grad_op: [a, b) of the gradient summed in place onto the
 * ranks that own its pieces (rank r: [r * per, (r + 1) * per), where the
 * reduce-scatter of the whole buffer puts its sum): one ncclReduce per
 * piece, in a group (NCCL has no reduce-scatter of unequal pieces). */
static int reduce_owned(struct mt_gpu *g, size_t a, size_t b) {
  const int P = (int)(g->padded / g->per);
  MT_CALL(mt_nccl_settle(g->nc.world, ncclGroupStart(), "ncclGroupStart", 0, g->timeout));
  ncclResult_t r0 = ncclSuccess; /* the group is ended whatever happens */
  for (int r = 0; r < P && (r0 == ncclSuccess || r0 == ncclInProgress); r++) {
    size_t lo = (size_t)r * g->per > a ? (size_t)r * g->per : a;
    size_t hi = (size_t)(r + 1) * g->per < b ? (size_t)(r + 1) * g->per : b;
    if (hi > lo)
      r0 = ncclReduce(g->grads + lo, g->grads + lo, hi - lo, ncclFloat, ncclSum, r, g->nc.world,
                      g->comm_stream);
  }
  const ncclResult_t r1 = ncclGroupEnd();
  return mt_nccl_settle(g->nc.world, r0 == ncclSuccess || r0 == ncclInProgress ? r1 : r0,
                        "the reduction of a gradient bucket (grouped ncclReduce)", b - a,
                        g->timeout);
}

/* Starts the next bucket: the communication stream waits for what the
 * compute stream has queued so far, then all-reduces the bucket (ddp) or
 * reduces each piece onto its owner (fsdp shard_grad_op). */
static int start_next(struct mt_gpu *g) {
  const int k = g->nstarted++;
  CU(cudaEventRecord(g->ready[k], g->stream));
  CU(cudaStreamWaitEvent(g->comm_stream, g->ready[k], 0));
  if (g->sharded) return reduce_owned(g, g->bk.lo[k], g->bk.hi[k]);
  return mt_nccl_allreduce_sum(g->nc.world, g->grads + g->bk.lo[k], g->bk.hi[k] - g->bk.lo[k],
                               g->comm_stream, g->timeout);
}

/* The backward finished unit u: the buckets now ready start, in order. */
static void unit_done(void *ctx, int u) {
  mt_trainer *t = ctx;
  struct mt_gpu *g = t->gpu;
  if (g->overlap_err) return;
  g->overlap_err = mt_buckets_done(&g->bk, u);
  while (!g->overlap_err && g->nstarted < g->bk.nb && mt_buckets_ready(&g->bk, g->nstarted))
    g->overlap_err = start_next(g);
}

/* Every bucket not started yet, in order; then the compute stream waits
 * for the reduction. */
static int finish_reduce(struct mt_gpu *g) {
  while (g->nstarted < g->bk.nb) MT_CALL(start_next(g));
  CU(cudaEventRecord(g->reduced, g->comm_stream));
  CU(cudaStreamWaitEvent(g->stream, g->reduced, 0));
  g->nstarted = 0;
  mt_buckets_reset(&g->bk);
  return 0;
}

/* ------------------------------------------------------------ batches */

#define ALIGN(x) (((x) + 255) & ~(size_t)255)

static int slot_init(slot *s, const mt_model *m, int max_batch) {
  const mt_data_spec *sp = &m->spec;
  const size_t B = (size_t)max_batch;
  size_t bytes = ALIGN(B * sp->sample_numel * sizeof(float)) + ALIGN(B * sizeof(int32_t)) +
                 ALIGN(B * (sp->sample_numel + 1) * sizeof(int32_t)) +
                 ALIGN(B * (sp->ntargets > 0 ? sp->ntargets : 1) * sizeof(float)) +
                 ALIGN(B * sizeof(int64_t));
  s->bytes = bytes;
  CU(cudaMallocHost(&s->host, bytes));
  MT_CALL(mt_gpu_alloc(&s->dev, bytes, "batches"));
  CU(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
  CU(cudaEventRecord(s->copied, 0));
  return 0;
}

/* Copies the host batch into slot s's pinned block, then to the device,
 * and describes the device copy in *d. */
static int upload_batch(struct mt_gpu *g, slot *s, const mt_batch *b, mt_dbatch *d) {
  MT_CALL(mt_gpu_wait(g, s->copied, "a batch copy")); /* the block's last copy */
  *d = (mt_dbatch){.n = b->n, .x_len = b->x_len, .tokens_len = b->tokens_len,
                   .targets_len = b->targets_len, .train = b->train, .key = b->key};
  size_t off = 0;
  const void *src[5] = {b->x, b->labels, b->tokens, b->targets, b->ids};
  const size_t len[5] = {(size_t)b->n * b->x_len * sizeof(float), (size_t)b->n * sizeof(int32_t),
                         (size_t)b->n * b->tokens_len * sizeof(int32_t),
                         (size_t)b->n * b->targets_len * sizeof(float),
                         (size_t)b->n * sizeof(int64_t)};
  const void **dst[5] = {(const void **)&d->x, (const void **)&d->labels,
                         (const void **)&d->tokens, (const void **)&d->targets,
                         (const void **)&d->ids};
  if (b->tokens) { /* checked here, so the device's forward needs no wait */
    const int64_t n = (int64_t)b->n * b->tokens_len;
    const int V = g->dm.host->spec.nclasses;
    for (int64_t i = 0; i < n; i++)
      MT_CHECK(b->tokens[i] >= 0 && b->tokens[i] < V, MT_ERR_DATA,
               "token %d (sample %lld, position %lld of its window) is outside the vocabulary "
               "of %d", b->tokens[i], (long long)(i / b->tokens_len),
               (long long)(i % b->tokens_len), V);
  }
  for (int i = 0; i < 5; i++) {
    if (!src[i]) continue;
    MT_CHECK(off + len[i] <= s->bytes, MT_ERR_STATE, "-device cuda: a batch larger than its block");
    memcpy((char *)s->host + off, src[i], len[i]);
    *dst[i] = (char *)s->dev + off;
    off += ALIGN(len[i]);
  }
  CU(cudaMemcpyAsync(s->dev, s->host, off, cudaMemcpyHostToDevice, g->stream));
  CU(cudaEventRecord(s->copied, g->stream));
  return 0;
}

/* ------------------------------------------------------- create, copy */

static int create(mt_trainer *t, int device, MPI_Comm group, MPI_Comm replicas) {
  const mt_config *c = t->cfg;
  struct mt_gpu *g;
  int e = mt_calloc(&g, 1, sizeof(*g), "device state");
  if (e) {
    if (group != MPI_COMM_NULL) MPI_Comm_free(&group);
    if (replicas != MPI_COMM_NULL) MPI_Comm_free(&replicas);
    return e;
  }
  t->gpu = g;
  g->nc.cross_mpi = MPI_COMM_NULL; /* what mt_nccl_comms_destroy expects */
  g->group_mpi = group; /* freed by mt_gpu_destroy from here on */
  g->repl_mpi = replicas;
  g->timeout = c->comm_timeout;
  MT_CALL(mt_device_use(device));
  CU(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&g->comm_stream, cudaStreamNonBlocking));
  MT_CALL(mt_cuda_ctx_create(&g->cx, g->stream));
  /* labels are checked when a data set is opened, tokens by upload_batch:
   * the kernels need not wait for the GPU to check them again */
  g->cx.check = 0;
  /* O1 autocast on the device: bf16/fp16 operands, fp32 accumulation */
  /* O2 also rounds GEMM outputs, in training and evaluation alike (the
   * CPU's mt_amp_policy sets t->policy for the run) */
  if (c->amp) g->cx.prec = c->amp_dtype;
  g->cx.round_outputs = c->amp == 2;
  const mt_model *m = t->model;
  const size_t n = m->params.total;
  MT_CALL(mt_gpu_optim_setup(t)); /* the partition and the optimizer state */
  if (g->zero3) { /* the shards only; the units come and go (gpu_fsdp.c) */
    MT_CALL(mt_gpu_alloc(&g->pshard, g->per * sizeof(float), "the parameter shard"));
    MT_CALL(mt_gpu_alloc(&g->gshard, g->per * sizeof(float), "the gradient shard"));
  } else {
    MT_CALL(mt_gpu_alloc(&g->params, g->padded * sizeof(float), "parameters"));
    MT_CALL(mt_gpu_alloc(&g->grads, g->padded * sizeof(float), "gradients"));
    if (c->amp == 2)
      MT_CALL(mt_gpu_alloc(&g->work, g->padded * sizeof(float), "O2 working copy"));
    g->pshard = g->params + g->lo;
    g->gshard = g->grads + g->lo;
  }
  const int k = c->accum_steps;
  MT_CALL(mt_gpu_alloc(&g->sums, (size_t)k * sizeof(double), "step losses"));
  MT_CALL(mt_gpu_alloc(&g->norm, sizeof(double), "the gradient norm"));
  CU(cudaMallocHost((void **)&g->sums_host, (size_t)k * sizeof(double)));
  for (int i = 0; i < 2; i++) MT_CALL(slot_init(&g->slots[i], m, t->max_batch));
  MT_CALL(mt_dmodel_create(&g->dm, m, t->max_batch, &g->cx));
  if (g->zero3) MT_CALL(mt_gpu_units_create(t)); /* the device model's hooks */
  if (m->buffers.total) {
    MT_CALL(mt_gpu_alloc(&g->buf, m->buffers.total * sizeof(float), "model buffers"));
    g->dm.buf = g->buf;
  }
  const size_t B = (size_t)t->max_batch, lps = (size_t)g->dm.losses_per_sample;
  int K = 1; /* the outputs' row length (none for gpt) */
  (void)g->dm.ops->outputs(&g->dm, &K);
  MT_CALL(mt_gpu_alloc(&g->esum, sizeof(double), "evaluation sums"));
  MT_CALL(mt_gpu_alloc(&g->ehits, sizeof(int64_t), "evaluation sums"));
  MT_CALL(mt_gpu_alloc(&g->elosses, B * lps * sizeof(float), "evaluation losses"));
  CU(cudaMallocHost((void **)&g->esum_host, sizeof(double)));
  CU(cudaMallocHost((void **)&g->ehits_host, sizeof(int64_t)));
  CU(cudaMallocHost((void **)&g->elosses_host, B * lps * sizeof(float)));
  CU(cudaMallocHost((void **)&g->eout_host, B * (size_t)(K > 0 ? K : 1) * sizeof(float)));
  if (!g->zero3) /* ddp's buckets, and shard_grad_op's reduced behind the backward */
    MT_CALL(mt_buckets_plan(&g->bk, n, sizeof(float), c->ddp_bucket_mb, c->ddp_first_bucket_mb,
                            &m->params));
  MT_CALL(mt_calloc(&g->ready, (size_t)g->bk.nb + 1, sizeof(cudaEvent_t), "bucket events"));
  for (int b = 0; b < g->bk.nb; b++)
    CU(cudaEventCreateWithFlags(&g->ready[b], cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&g->reduced, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&g->step_done, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&g->stepped, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&g->synced, cudaEventDisableTiming));
  /* the zero fills above ran on the legacy stream, which the step's
   * non-blocking streams do not wait for; the parameters and the optimizer
   * state are copied up once, by mt_trainer_run after its restart */
  CU(cudaDeviceSynchronize());
  return 0;
}

int mt_gpu_create(mt_trainer *t, int device) {
  MPI_Comm group, replicas; /* fsdp full_shard / hybrid_shard: collective, first */
  MT_CALL(mt_agree(t->comm->world, mt_gpu_units_groups(t, &group, &replicas)));
  MT_CALL(mt_agree(t->comm->world, create(t, device, group, replicas)));
  if (t->comm->size > 1) {
    /* collective and agreed in itself, under -comm_timeout */
    MT_CALL(mt_nccl_comms_create(&t->gpu->nc, t->comm, device, 0, t->cfg->comm_timeout));
    t->gpu->nccl = 1;
  }
  struct mt_gpu *gz = t->gpu;
  if (gz->zero3) { /* the sharding group's and the replicas' communicators */
    int e = 0, P = 1;
    if (gz->G > 1) e = mt_nccl_comm_init(&gz->gnc, gz->group_mpi, device, t->cfg->comm_timeout);
    MT_CALL(mt_agree(t->comm->world, e));
    if (gz->repl_mpi != MPI_COMM_NULL) MPI_Comm_size(gz->repl_mpi, &P);
    e = P > 1 ? mt_nccl_comm_init(&gz->rnc, gz->repl_mpi, device, t->cfg->comm_timeout) : 0;
    MT_CALL(mt_agree(t->comm->world, e));
  }
  char desc[256] = "";
  if (mt_cuda_device_describe(device, desc, sizeof(desc))) mt_error_clear();
  const struct mt_gpu *g = t->gpu;
  mt_print0("device: rank 0 on cuda:%d (%s)", device, desc);
  if (t->cfg->amp)
    mt_print0(", %s GEMM operands%s", mt_precision_name((mt_precision)t->cfg->amp_dtype),
              t->cfg->amp == 2 ? " on the O2 working copy" : "");
  if (g->sharded)
    mt_print0("; fsdp shard_grad_op: %zu of %zu parameters per rank%s", g->hi - g->lo,
              t->model->params.total, g->offload ? ", stepped on the host" : "");
  if (g->sharded && g->nccl && t->cfg->fsdp_prefetch)
    mt_print0(", reduced in %d bucket%s behind the backward", g->bk.nb, g->bk.nb > 1 ? "s" : "");
  if (g->zero3)
    mt_print0("; fsdp %s: %zu of %zu parameters per rank (groups of %d), gathered unit by unit",
              mt_fsdp_strategy_name(t->cfg->fsdp_strategy), g->hi - g->lo,
              t->model->params.total, g->G);
  if (g->nccl && !g->sharded && !g->zero3)
    mt_print0("; NCCL, %d gradient bucket%s", g->bk.nb, g->bk.nb > 1 ? "s" : "");
  size_t free_b = 0, total_b = 0; /* what the run holds now, before the first step */
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    mt_print0("; %.0f of %.0f MiB in use", (double)(total_b - free_b) / 1048576.0,
              (double)total_b / 1048576.0);
  mt_print0("\n");
  return 0;
}

void mt_gpu_destroy(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  if (!g) return;
  /* NCCL first: finalized under a time limit, else aborted, so a collective
   * a failed peer never joins cannot hold the waits below */
  if (g->nccl) mt_nccl_comms_destroy(&g->nc);
  mt_nccl_comm_destroy(&g->gnc, 0);
  mt_nccl_comm_destroy(&g->rnc, 0);
  if (g->stream) (void)cudaStreamSynchronize(g->stream);
  if (g->comm_stream) (void)cudaStreamSynchronize(g->comm_stream);
  mt_gpu_units_destroy(g);
  mt_dmodel_destroy(&g->dm);
  if (g->group_mpi != MPI_COMM_NULL) MPI_Comm_free(&g->group_mpi);
  if (g->repl_mpi != MPI_COMM_NULL) MPI_Comm_free(&g->repl_mpi);
  for (int i = 0; i < 2; i++) {
    cudaFreeHost(g->slots[i].host);
    cudaFree(g->slots[i].dev);
    if (g->slots[i].copied) cudaEventDestroy(g->slots[i].copied);
  }
  for (int b = 0; g->ready && b < g->bk.nb; b++)
    if (g->ready[b]) cudaEventDestroy(g->ready[b]);
  mt_free(&g->ready);
  mt_buckets_free(&g->bk);
  if (g->reduced) cudaEventDestroy(g->reduced);
  if (g->step_done) cudaEventDestroy(g->step_done);
  if (g->stepped) cudaEventDestroy(g->stepped);
  if (g->synced) cudaEventDestroy(g->synced);
  cudaFree(g->buf);
  cudaFree(g->params);
  cudaFree(g->grads);
  cudaFree(g->work);
  if (g->zero3) {
    cudaFree(g->pshard);
    cudaFree(g->gshard);
  }
  mt_gpu_optim_free(g);
  cudaFree(g->sums);
  cudaFree(g->norm);
  cudaFreeHost(g->sums_host);
  cudaFree(g->esum);
  cudaFree(g->ehits);
  cudaFree(g->elosses);
  cudaFreeHost(g->esum_host);
  cudaFreeHost(g->ehits_host);
  cudaFreeHost(g->elosses_host);
  cudaFreeHost(g->eout_host);
  mt_cuda_ctx_destroy(&g->cx);
  if (g->stream) cudaStreamDestroy(g->stream);
  if (g->comm_stream) cudaStreamDestroy(g->comm_stream);
  mt_free(&t->gpu);
}

/* Copies between host and device on the step's stream, waited for: the
 * stream is non-blocking, so a copy on the legacy stream would not be
 * ordered with its kernels. */
static int copy(struct mt_gpu *g, void *dst, const void *src, size_t bytes,
                enum cudaMemcpyKind kind) {
  if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, kind, g->stream));
  return 0;
}

int mt_gpu_download(mt_trainer *t, int optim) {
  struct mt_gpu *g = t->gpu;
  const size_t bytes = t->model->params.total * sizeof(float);
  const enum cudaMemcpyKind d2h = cudaMemcpyDeviceToHost;
  if (g->zero3) /* this rank's part; the others' from them below */
    MT_CALL(copy(g, (float *)t->params + g->lo, g->pshard, (g->hi - g->lo) * sizeof(float), d2h));
  else
    MT_CALL(copy(g, t->params, g->params, bytes, d2h));
  if (g->buf) MT_CALL(copy(g, t->model->buf, g->buf, t->model->buffers.total * sizeof(float), d2h));
  MT_CALL(mt_gpu_sync(g, "the parameters' copy to the host"));
  if (g->zero3)
    MT_CALL(mt_gpu_host_allgather(t->params, t->model->params.total, g->per, g->G, g->group_mpi));
  return optim ? mt_gpu_optim_download(t) : 0; /* collective when sharded */
}

int mt_gpu_upload(mt_trainer *t, int optim) {
  struct mt_gpu *g = t->gpu;
  const size_t bytes = t->model->params.total * sizeof(float);
  const enum cudaMemcpyKind h2d = cudaMemcpyHostToDevice;
  if (g->zero3)
    MT_CALL(copy(g, g->pshard, (const float *)t->params + g->lo, (g->hi - g->lo) * sizeof(float),
                 h2d));
  else
    MT_CALL(copy(g, g->params, t->params, bytes, h2d));
  if (g->buf) MT_CALL(copy(g, g->buf, t->model->buf, t->model->buffers.total * sizeof(float), h2d));
  MT_CALL(mt_gpu_sync(g, "the parameters' copy to the device"));
  return optim ? mt_gpu_optim_upload(t) : 0;
}

/* --------------------------------------------------------------- step */

/* The parts of the training step (trainer/step.c runs them in order, as
 * its place "cuda"; gpu.h). The host queues the work and waits at the end:
 * both count as compute (the forward event); the data event is the
 * loader's. */
int mt_gpu_step_begin(mt_trainer *t) {
  const mt_config *c = t->cfg;
  struct mt_gpu *g = t->gpu;
  const size_t n = t->model->params.total;
  MT_CHECK(!mt_gpu_units_pinned(g), MT_ERR_STATE,
           "fsdp on the device: a training step while the whole model is gathered "
           "(mt_trainer_params_release)");
  if (g->zero3)
    CU(cudaMemsetAsync(g->gshard, 0, g->per * sizeof(float), g->stream));
  else
    CU(cudaMemsetAsync(g->grads, 0, g->padded * sizeof(float), g->stream));
  mt_amp_device_step_begin(t); /* the loss scale of this step (fp16) */
  /* ddp: -ddp_overlap; shard_grad_op: -fsdp_prefetch (reduce behind) */
  g->step_overlap = g->nccl && !g->zero3 && (g->sharded ? c->fsdp_prefetch : c->ddp_overlap != 0);
  /* O2: forward and backward on the master rounded (norms kept);
   * evaluation runs on the master */
  g->wp = g->params; /* zero3: not read (the units are gathered) */
  if (g->work) { /* (no fsdp backend has O2) */
    CU(cudaMemcpyAsync(g->work, g->params, n * sizeof(float), cudaMemcpyDeviceToDevice,
                       g->stream));
    MT_CALL(mt_gpu_o2_round(t, g->work, 0, 0, n));
    g->wp = g->work;
  }
  return 0;
}

int mt_gpu_step_micro(mt_trainer *t, const mt_batch *b, int k, int last, double scale) {
  struct mt_gpu *g = t->gpu;
  mt_dmodel *dm = &g->dm;
  mt_dbatch db;
  MT_CHECK(k < t->cfg->accum_steps, MT_ERR_STATE, "-device cuda: micro-step %d of %d", k,
           t->cfg->accum_steps);
  mt_ev_begin(MT_EV_FORWARD);
  MT_CALL(upload_batch(g, &g->slots[k % 2], b, &db));
  const mt_dsums s = {g->sums + k, NULL, NULL, NULL};
  MT_CALL(dm->ops->forward(dm, g->wp, &db, &s));
  if (last && g->step_overlap) {
    g->overlap_err = 0;
    dm->unit_done = unit_done;
    dm->unit_ctx = t;
  }
  if (g->zero3) g->overlap_err = 0; /* the hooks' errors (gpu_fsdp.c) */
  int err = dm->ops->backward(dm, g->wp, g->grads, (float)scale, b->n);
  if (!g->zero3) dm->unit_done = NULL;
  MT_CALL(err);
  MT_CALL(g->overlap_err);
  /* -log_view: on the device forward and backward share this event */
  const mt_model_ops *o = t->model->ops;
  if (o->flops_per_sample) mt_ev_flops(o->flops_per_sample(t->model) * (double)b->n);
  mt_ev_end(MT_EV_FORWARD);
  return 0;
}

int mt_gpu_step_reduce(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  if (g->zero3) {
    MT_CALL(mt_gpu_units_finish(t));
  } else if (g->sharded && !g->step_overlap) {
    MT_CALL(mt_gpu_shard_reduce(t));
  } else if (g->nccl) {
    MT_CALL(finish_reduce(g));
    t->backend->comm_bytes += (double)t->model->params.total * sizeof(float);
  }
  return 0;
}

int mt_gpu_step_buffers(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  if (g->nccl && g->buf) {
    /* rank 0's running statistics for all, as the CPU's sync_buffers: on
     * the communication stream, after the step, before the next forward */
    MT_CALL(mt_gpu_comm_begin(g));
    MT_CALL(mt_nccl_bcast(g->nc.world, g->buf, t->model->buffers.total, 0, g->comm_stream,
                          g->timeout));
    MT_CALL(mt_gpu_comm_end(g));
  }
  return 0;
}

int mt_gpu_step_end(mt_trainer *t, double *loss_sum) {
  struct mt_gpu *g = t->gpu;
  mt_dmodel *dm = &g->dm;
  const int K = t->cfg->accum_steps;
  mt_ev_begin(MT_EV_FORWARD);
  CU(cudaMemcpyAsync(g->sums_host, g->sums, (size_t)K * sizeof(double), cudaMemcpyDeviceToHost,
                     g->stream));
  MT_CALL(mt_gpu_sync(g, "a training step"));
  mt_ev_end(MT_EV_FORWARD);
  const double per = (double)dm->ops->per_sample(dm);
  for (int k = 0; k < K; k++) *loss_sum += g->sums_host[k] / per;
  return 0;
}

/* ---------------------------------------------------------- evaluation */

int mt_gpu_eval(mt_trainer *t, const mt_batch *b, float *losses, mt_batch_stats *st) {
  struct mt_gpu *g = t->gpu;
  mt_dmodel *dm = &g->dm;
  const char *name = t->model->ops->name;
  const int B = b->n, lps = dm->losses_per_sample;
  int K = 0;
  const float *out = dm->ops->outputs(dm, &K);
  MT_CHECK(!st->logits64, MT_ERR_STATE, "-device cuda: double outputs asked for");
  MT_CHECK(out || !st->logits, MT_ERR_ARG, "model %s offers no per-sample logits (token data)",
           name);
  if (B == 0) return 0;
  MT_CHECK(!g->zero3 || mt_gpu_units_pinned(g), MT_ERR_STATE,
           "fsdp on the device: an evaluation without the whole model (mt_trainer_params_whole)");
  mt_dbatch db;
  MT_CALL(upload_batch(g, &g->slots[0], b, &db));
  CU(cudaMemsetAsync(g->ehits, 0, sizeof(int64_t), g->stream));
  const mt_dsums s = {g->esum, g->ehits, NULL, losses ? g->elosses : NULL};
  MT_CALL(dm->ops->forward(dm, g->params, &db, &s));
  CU(cudaMemcpyAsync(g->esum_host, g->esum, sizeof(double), cudaMemcpyDeviceToHost, g->stream));
  CU(cudaMemcpyAsync(g->ehits_host, g->ehits, sizeof(int64_t), cudaMemcpyDeviceToHost, g->stream));
  if (losses)
    CU(cudaMemcpyAsync(g->elosses_host, g->elosses, (size_t)B * lps * sizeof(float),
                       cudaMemcpyDeviceToHost, g->stream));
  const int want_out = out && (st->pred || st->logits);
  if (want_out)
    CU(cudaMemcpyAsync(g->eout_host, out, (size_t)B * K * sizeof(float), cudaMemcpyDeviceToHost,
                       g->stream));
  MT_CALL(mt_gpu_sync(g, "an evaluation batch"));
  const double per = (double)dm->ops->per_sample(dm);
  st->loss_sum += *g->esum_host / per;
  st->correct += (double)*g->ehits_host / per;
  for (int i = 0; losses && i < B; i++) {
    if (lps == 1) {
      losses[i] = g->elosses_host[i];
      continue;
    }
    double l = 0; /* a sample's mean over its tokens, as the CPU model's */
    for (int k = 0; k < lps; k++) l += g->elosses_host[(size_t)i * lps + k];
    losses[i] = (float)(l / lps);
  }
  if (!want_out || t->model->spec.ntargets > 0) { /* no class per sample */
    for (int i = 0; st->pred && i < B; i++) st->pred[i] = -1;
    if (want_out && st->logits) {
      MT_CHECK(st->logits_len == K, MT_ERR_ARG,
               "model %s: output rows of %d asked for, it has %d", name, st->logits_len, K);
      memcpy(st->logits, g->eout_host, (size_t)B * K * sizeof(float));
    }
    return 0;
  }
  return mt_model_put_outputs(name, st, g->eout_host, B, K);
}
