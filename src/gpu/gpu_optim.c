/* The optimizer side of -device cuda (only built with CUDA): the state
 * whole on the device (sp, ddp), sharded over the ranks (fsdp
 * shard_grad_op: ZeRO-2's partition, each rank's gradient shard
 * reduce-scattered by NCCL, its optimizer step on its shard, the
 * parameters all-gathered after it), or, with -fsdp_cpu_offload, the
 * shard's master parameters and optimizer state in host memory, stepped by
 * the CPU optimizer (ZeRO-Offload). The partition is the CPU fsdp's (equal
 * ranges rounded to 16 floats); the buffers on the device are padded to
 * per x P so NCCL's collectives see equal pieces. The host's state is kept
 * whole (the optimizer object t->optim, over the whole layout), so
 * checkpoints are those of the CPU. The device kernels are chosen by the
 * optimizer's device trait (mt_optim_device), never by its name. */
#include "gpu/gpu_impl.h"
#include "backends/fsdp.h"
#include "trainer/amp.h"

#include <math.h>
#include <string.h>

int mt_gpu_optim_setup(mt_trainer *t) {
  const mt_config *c = t->cfg;
  struct mt_gpu *g = t->gpu;
  const size_t n = t->model->params.total;
  const int P = t->comm->size, r = t->comm->rank;
  g->sharded = c->fsdp && c->fsdp_strategy == MT_FSDP_SHARD_GRAD_OP;
  g->zero3 = c->fsdp && (c->fsdp_strategy == MT_FSDP_FULL_SHARD ||
                         c->fsdp_strategy == MT_FSDP_HYBRID_SHARD);
  g->offload = g->sharded && c->fsdp_cpu_offload;
  g->G = 1;
  MT_CHECK(t->optim->ops->device != MT_OPTIM_DEVICE_NONE, MT_ERR_OPTION,
           "option -optimizer %s: has no device step (its mt_optimizer_ops.device); -device cpu "
           "runs it", t->optim->ops->name);
  if (g->zero3) {
    MT_CALL(mt_gpu_units_partition(t));
  } else if (g->sharded) {
    g->per = ((n + (size_t)P - 1) / (size_t)P + 15) & ~(size_t)15;
    g->padded = g->per * (size_t)P;
    g->lo = (size_t)r * g->per < n ? (size_t)r * g->per : n;
    g->hi = g->lo + g->per < n ? g->lo + g->per : n;
    MT_CHECK(g->hi > g->lo, MT_ERR_OPTION,
             "-backend fsdp on the GPU: the model's %zu parameters leave rank %d of %d no "
             "shard; use fewer ranks", n, r, P);
  } else {
    g->lo = 0, g->hi = g->per = g->padded = n;
  }
  MT_CALL(mt_param_table_slice(&t->model->params, g->lo, g->hi, &g->slice));
  double *nh = NULL;
  CU(cudaMallocHost((void **)&nh, sizeof(double)));
  g->norm_host = nh;
  int *fh = NULL;
  CU(cudaMallocHost((void **)&fh, sizeof(int)));
  g->flag_host = fh;
  MT_CALL(mt_gpu_alloc(&g->flag, sizeof(int), "the inf/NaN flag"));
  if (g->offload) { /* the state stays in the host's buffers */
    CU(cudaMallocHost((void **)&g->gshard_host, g->per * sizeof(float)));
    return 0;
  }
  MT_CALL(mt_cuda_table_create(&g->stable, &g->slice));
  if (t->optim->ops->device == MT_OPTIM_DEVICE_ADAMW)
    MT_CALL(mt_cuda_adamw_state_init(&g->adam, g->per, t->optim->hp.amsgrad));
  else if (t->optim->hp.momentum > 0)
    MT_CALL(mt_gpu_alloc(&g->mom, g->per * sizeof(float), "momentum buffers"));
  return 0;
}

void mt_gpu_optim_free(struct mt_gpu *g) {
  cudaFree(g->mom);
  mt_cuda_adamw_state_free(&g->adam);
  mt_cuda_table_destroy(&g->stable);
  mt_param_table_free(&g->slice);
  cudaFreeHost(g->gshard_host);
  cudaFreeHost(g->norm_host);
  cudaFreeHost(g->flag_host);
  cudaFree(g->flag);
}

/* buf (padded) gathered in place from every rank's piece at buf + r * per. */
static int gather(mt_trainer *t, float *buf, const char *what) {
  struct mt_gpu *g = t->gpu;
  MT_CALL(mt_gpu_comm_begin(g));
  MT_CALL(mt_nccl_settle(g->nc.world,
                         ncclAllGather(buf + (size_t)t->comm->rank * g->per, buf, g->per,
                                       ncclFloat, g->nc.world, g->comm_stream),
                         what, g->padded, g->timeout));
  return mt_gpu_comm_end(g);
}

int mt_gpu_shard_reduce(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  if (!g->sharded || !g->nccl) return 0;
  /* in place: rank r's sum lands at grads + r * per */
  float *mine = g->grads + (size_t)t->comm->rank * g->per;
  MT_CALL(mt_gpu_comm_begin(g));
  MT_CALL(mt_nccl_settle(g->nc.world,
                         ncclReduceScatter(g->grads, mine, g->per, ncclFloat, ncclSum, g->nc.world,
                                           g->comm_stream),
                         "ncclReduceScatter of the gradient", g->padded, g->timeout));
  MT_CALL(mt_gpu_comm_end(g));
  t->backend->comm_bytes += (double)g->padded * sizeof(float);
  return 0;
}

int mt_gpu_host_allgather(float *buf, size_t n, size_t per, int P, MPI_Comm comm) {
  if (P <= 1) return 0;
  int *cnt = NULL, *dsp = NULL;
  int err = mt_calloc(&cnt, (size_t)P, sizeof(int), "shard counts");
  if (!err) err = mt_calloc(&dsp, (size_t)P, sizeof(int), "shard offsets");
  for (int r = 0; !err && r < P; r++) {
    size_t lo = (size_t)r * per < n ? (size_t)r * per : n;
    size_t hi = lo + per < n ? lo + per : n;
    dsp[r] = (int)lo, cnt[r] = (int)(hi - lo);
  }
  if (!err && MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, cnt, dsp, MPI_FLOAT, comm) !=
                  MPI_SUCCESS)
    err = MT_ERR(MT_ERR_LIB, "MPI_Allgatherv of the shards failed");
  mt_free(&cnt);
  mt_free(&dsp);
  return err;
}

/* Clipping by the global norm of a sharded gradient: the shards' squared
 * norms summed over the ranks that share the partition (read on the host:
 * one wait). */
static int clip_norm_sharded(mt_trainer *t, float *gs, size_t ns) {
  struct mt_gpu *g = t->gpu;
  MT_CALL(mt_cuda_l2_norm(gs, ns, g->norm, &g->cx));
  CU(cudaMemcpyAsync(g->norm_host, g->norm, sizeof(double), cudaMemcpyDeviceToHost, g->stream));
  MT_CALL(mt_gpu_sync(g, "the gradient norm"));
  double n2 = *g->norm_host * *g->norm_host;
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &n2, 1, MPI_DOUBLE, MPI_SUM,
                       g->zero3 ? g->group_mpi : t->comm->world));
  return mt_cuda_clip_grad_norm_given(gs, ns, sqrt(n2), t->cfg->clip_grad_norm, g->stream);
}

/* -fsdp_cpu_offload: the CPU optimizer on the shard's host state. */
static int host_step(mt_trainer *t, double lr, long step, int all_decay) {
  struct mt_gpu *g = t->gpu;
  const size_t lo = g->lo, ns = g->hi - g->lo;
  CU(cudaMemcpyAsync(g->gshard_host, g->gshard, ns * sizeof(float), cudaMemcpyDeviceToHost,
                     g->stream));
  MT_CALL(mt_gpu_sync(g, "the gradient shard"));
  float *p = (float *)t->params + lo;
  /* the shard's piece of the host state */
  MT_CALL(mt_optimizer_step(t->optim, &g->slice, p, g->gshard_host, lo, lr, step,
                            all_decay));
  CU(cudaMemcpyAsync(g->pshard, p, ns * sizeof(float), cudaMemcpyHostToDevice, g->stream));
  return 0;
}

int mt_gpu_o2_round(mt_trainer *t, float *x, size_t xlo, size_t lo, size_t hi) {
  struct mt_gpu *g = t->gpu;
  const size_t(*r)[2] = NULL;
  const int nr = mt_amp_o2_ranges(t, &r);
  for (int i = 0; i < nr; i++) { /* the tensor's part inside [lo, hi) */
    size_t a = r[i][0] > lo ? r[i][0] : lo, b = r[i][0] + r[i][1] < hi ? r[i][0] + r[i][1] : hi;
    if (b > a) MT_CALL(mt_cuda_round_to(t->cfg->amp_dtype, x + (a - xlo), b - a, g->stream));
  }
  return 0;
}

int mt_gpu_after_reduce(mt_trainer *t, int *skip) {
  struct mt_gpu *g = t->gpu;
  const size_t ns = g->hi - g->lo;
  float *gs = g->gshard;
  *skip = 0;
  /* O2: the reduced gradients of the low-precision tensors rounded (once,
   * after the sum, as on the CPU) */
  if (g->work) MT_CALL(mt_gpu_o2_round(t, gs, g->lo, g->lo, g->hi));
  if (mt_amp_scaling(t)) { /* the trainer's mt_amp_after_reduce, on this rank's part */
    MT_CALL(mt_cuda_has_nonfinite(gs, ns, g->flag, g->stream));
    CU(cudaMemcpyAsync(g->flag_host, g->flag, sizeof(int), cudaMemcpyDeviceToHost, g->stream));
    /* the wait is for the backward and the reduction: compute, as the
     * step's other waits */
    mt_ev_begin(MT_EV_FORWARD);
    const int serr = mt_gpu_sync(g, "the inf/NaN check");
    mt_ev_end(MT_EV_FORWARD);
    MT_CALL(serr);
    int found = *g->flag_host;
    float inv;
    MT_CALL(mt_amp_found(t, &found, skip, &inv)); /* agreed over the ranks */
    if (!found) MT_CALL(mt_cuda_scale(gs, ns, inv, g->stream));
  }
  return 0;
}

static int clip(mt_trainer *t) {
  const mt_config *c = t->cfg;
  struct mt_gpu *g = t->gpu;
  const size_t ns = g->hi - g->lo;
  float *gs = g->gshard;
  if (c->clip_grad_value > 0)
    MT_CALL(mt_cuda_clip_grad_value(gs, ns, c->clip_grad_value, g->stream));
  if (c->clip_grad_norm > 0) {
    if ((g->sharded && g->nccl) || g->G > 1)
      MT_CALL(clip_norm_sharded(t, gs, ns));
    else
      MT_CALL(mt_cuda_clip_grad_norm(gs, ns, c->clip_grad_norm, g->norm, &g->cx));
  }
  return 0;
}

/* the sharded norm's wait is for the backward and the reduction: compute,
 * as the step's other waits */
int mt_gpu_clip(mt_trainer *t) {
  mt_ev_begin(MT_EV_FORWARD);
  const int err = clip(t);
  mt_ev_end(MT_EV_FORWARD);
  return err;
}

int mt_gpu_optim_step(mt_trainer *t, double lr, long step, int all_decay) {
  struct mt_gpu *g = t->gpu;
  float *gs = g->gshard, *ps = g->pshard;
  const mt_optimizer *o = t->optim;
  if (g->offload) {
    MT_CALL(host_step(t, lr, step, all_decay));
  } else if (o->ops->device == MT_OPTIM_DEVICE_ADAMW) {
    const mt_adamw_hparams h = mt_optim_adamw_hparams(&o->hp);
    g->adam.step = step; /* the bias correction: the kernel makes it step + 1 */
    MT_CALL(mt_cuda_adamw_step(&g->stable, ps, gs, &g->adam, &h, all_decay, lr, g->stream));
  } else {
    const mt_sgd_hparams h = mt_optim_sgd_hparams(&o->hp);
    MT_CALL(mt_cuda_sgd_step(&g->stable, ps, gs, g->mom, step == 0, &h, all_decay, lr,
                             g->stream));
  }
  if (g->sharded && g->nccl) { /* in place: rank r's shard at params + r * per */
    MT_CALL(gather(t, g->params, "ncclAllGather of the parameters"));
    t->backend->comm_bytes += (double)g->padded * sizeof(float);
  }
  return 0;
}

/* The optimizer's buffers: host (whole) and device (this rank's part). */
static int pairs(const mt_trainer *t, float **host, float **dev) {
  const struct mt_gpu *g = t->gpu;
  const char *names[3];
  void *data[3];
  /* the same order on both sides: exp_avg, exp_avg_sq, max_exp_avg_sq, or
   * momentum_buffer */
  const int n = mt_optimizer_state(t->optim, names, data, 3);
  float *const adam[3] = {g->adam.exp_avg, g->adam.exp_avg_sq, g->adam.max_exp_avg_sq};
  for (int i = 0; i < n; i++) {
    host[i] = data[i];
    dev[i] = t->optim->ops->device == MT_OPTIM_DEVICE_ADAMW ? adam[i] : g->mom;
  }
  return n;
}

int mt_gpu_optim_download(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  const size_t n = t->model->params.total;
  const int P = t->comm->size;
  float *host[3], *dev[3];
  const int k = pairs(t, host, dev);
  if (g->offload) { /* every rank's shard of the host state, to every rank */
    for (int i = 0; i < k; i++)
      MT_CALL(mt_gpu_host_allgather(host[i], n, g->per, P, t->comm->world));
    return 0;
  }
  if (g->zero3) { /* this rank's part down, then every part to every rank */
    for (int i = 0; i < k; i++)
      CU(cudaMemcpyAsync(host[i] + g->lo, dev[i], (g->hi - g->lo) * sizeof(float),
                         cudaMemcpyDeviceToHost, g->stream));
    MT_CALL(mt_gpu_sync(g, "the optimizer state's copy to the host"));
    for (int i = 0; i < k; i++)
      MT_CALL(mt_gpu_host_allgather(host[i], n, g->per, g->G, g->group_mpi));
    return 0;
  }
  for (int i = 0; i < k; i++) {
    const float *src = dev[i];
    if (g->sharded && g->nccl) { /* gathered into the gradient buffer, free between steps */
      CU(cudaMemcpyAsync(g->grads + (size_t)t->comm->rank * g->per, dev[i],
                         g->per * sizeof(float), cudaMemcpyDeviceToDevice, g->stream));
      MT_CALL(gather(t, g->grads, "ncclAllGather of the optimizer state"));
      src = g->grads;
    }
    CU(cudaMemcpyAsync(host[i], src, n * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
  }
  MT_CALL(mt_gpu_sync(g, "the optimizer state's copy to the host"));
  return 0;
}

int mt_gpu_optim_upload(mt_trainer *t) {
  struct mt_gpu *g = t->gpu;
  if (g->offload) return 0; /* the host's state is the state */
  float *host[3], *dev[3];
  const int k = pairs(t, host, dev);
  for (int i = 0; i < k; i++)
    CU(cudaMemcpyAsync(dev[i], host[i] + g->lo, (g->hi - g->lo) * sizeof(float),
                       cudaMemcpyHostToDevice, g->stream));
  MT_CALL(mt_gpu_sync(g, "the optimizer state's copy to the device"));
  return 0;
}
