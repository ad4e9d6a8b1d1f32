/* Memory per rank: a forecast from shapes before any large allocation,
 * checked against -memory_limit_mb (and the device's memory), the
 * allocations set beside it, and what was measured after training.
 *
 * The forecast runs the setups themselves dry (core.h's plan mode: a block
 * is counted, not allocated): the model's (its activations for one
 * micro-batch, per thread of the batch split), the optimizer's state over
 * the owned part, the loaders' batches, the permutation and the batch plan.
 * So a model, an optimizer or a loader that changes what it allocates
 * changes the forecast with it, with no second formula to drift. A user's
 * model or optimizer, whose setup may write into what it allocates, is made
 * for real and freed (measured). The owned part is the owner's (own.h: the
 * whole layout, or fsdp's partition) and its gathered units are forecast
 * from the units' sizes and measured as the resident pages of its views
 * (mincore), sampled whenever a unit is gathered or reduced. */
#include "trainer/own.h"
#include "gpu/gpu.h"
#include "backends/fsdp.h" /* MT_FSDP_NO_SHARD: -fsdp_sharding_strategy */
#include "models/models.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static double host_total(const mt_memory_parts *p) {
  return p->params + p->grads + p->optim + p->gathered + p->unit_grads + p->acts + p->data +
         p->best;
}

static int max_over_ranks(const mt_trainer *t, double *v, int n) {
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, t->comm->world));
  return 0;
}

/* The rank's model made dry for batch samples (0: the run's) into t->model,
 * which the caller destroys: *bytes its allocations and the other threads'
 * models and gradients (compute.c makes nthr - 1 more of each). */
static int plan_models(mt_trainer *t, int batch, double *bytes) {
  const mt_config *c = t->cfg;
  const int dry = mt_model_builtin_of(mt_model_find(c->model)) != NULL;
  int nthr = 1, split = 0;
  size_t a0 = mt_alloc_bytes();
  if (dry) mt_alloc_plan_begin();
  int err = mt_compute_make_model(t, batch, 1, &nthr, &split);
  const size_t one = dry ? mt_alloc_plan_end() : mt_alloc_bytes() - a0;
  if (split) omp_set_num_threads(c->threads);
  MT_CALL(err);
  *bytes = (double)nthr * (double)one +
           (double)(nthr - 1) * (double)t->model->params.total * (double)t->esz;
  /* one model for the rank's threads: their evaluation models of a piece */
  const int ne = mt_compute_eval_models(t, nthr);
  if (ne == 0) return 0;
  mt_model *e = NULL;
  a0 = mt_alloc_bytes();
  if (dry) mt_alloc_plan_begin();
  err = mt_model_create_policy(c->model, &t->train.spec, mt_eval_piece(t), t->dtype, &t->policy,
                               &e);
  const size_t each = dry ? mt_alloc_plan_end() : mt_alloc_bytes() - a0;
  mt_model_destroy(&e);
  MT_CALL(err);
  *bytes += (double)ne * (double)each;
  return 0;
}

/* The optimizer's state for n elements, its setup run dry. */
static int plan_optimizer(const mt_trainer *t, size_t n, mt_dtype dtype, double *bytes) {
  const mt_config *c = t->cfg;
  const mt_optim_hparams hp = {c->momentum, c->dampening, c->weight_decay, c->nesterov,
                               c->adam_beta1, c->adam_beta2, c->adam_eps, c->adam_amsgrad};
  const mt_optimizer_ops *ops = mt_optimizer_find(c->optimizer);
  const int dry = ops && ops->device != MT_OPTIM_DEVICE_NONE; /* the built-ins */
  mt_optimizer *o = NULL;
  size_t a0 = mt_alloc_bytes();
  if (dry) mt_alloc_plan_begin();
  int err = mt_optimizer_create(c->optimizer, &hp, dtype, n, &o);
  *bytes = (double)(dry ? mt_alloc_plan_end() : mt_alloc_bytes() - a0);
  mt_optimizer_destroy(&o);
  return err;
}

/* The data buffers (compute.c), dry. */
static int plan_data(mt_trainer *t, double *bytes) {
  mt_alloc_plan_begin();
  int err = mt_compute_data_buffers(t, 1);
  *bytes = (double)mt_alloc_plan_end();
  mt_compute_data_free(t);
  return err;
}

/* The limit of a rank's host memory in bytes and where it came from. */
static void host_limit(const mt_trainer *t, double *limit, char *from, size_t len) {
  const mt_config *c = t->cfg;
  if (c->memory_limit_mb > 0) {
    *limit = c->memory_limit_mb * MIB;
    snprintf(from, len, "-memory_limit_mb");
    return;
  }
  const int ranks = t->comm->local_size > 0 ? t->comm->local_size : 1;
  const double node = mt_sys_node_memory();
  const double cg = mt_sys_cgroup_limit("/proc/self/cgroup", "/sys/fs/cgroup");
  if (cg > 0 && (node <= 0 || cg < node)) {
    *limit = cg / ranks;
    snprintf(from, len, "the cgroup limit of %.0f MiB over %d rank%s; -memory_limit_mb to change",
             cg / MIB, ranks, ranks > 1 ? "s" : "");
  } else {
    *limit = node / ranks;
    snprintf(from, len, "the node's %.0f MiB over %d rank%s; -memory_limit_mb to change",
             node / MIB, ranks, ranks > 1 ? "s" : "");
  }
  /* a process's address-space limit (ulimit -v) is its own, not shared */
  struct rlimit as;
  if (!getrlimit(RLIMIT_AS, &as) && as.rlim_cur != RLIM_INFINITY && (double)as.rlim_cur < *limit) {
    *limit = (double)as.rlim_cur;
    snprintf(from, len, "the address-space limit of %.0f MiB, ulimit -v; -memory_limit_mb to "
             "change", *limit / MIB);
  }
}

double mt_memory_rank_limit(const mt_trainer *t) {
  double limit = 0;
  char from[256];
  host_limit(t, &limit, from, sizeof(from));
  return limit;
}

/* The rank's parts from shapes into *p (t->model is the dry model). */
static int plan_parts(mt_trainer *t, mt_memory_parts *p) {
  const mt_config *c = t->cfg;
  const double esz = (double)t->esz;
  *p = (mt_memory_parts){0};
  MT_CALL(plan_models(t, 0, &p->acts));
  const mt_param_table *tab = &t->model->params;
  mt_owner_memory om;
  t->owner->memory(t, tab, 0, &om);
  p->params = p->grads = (double)om.owned * esz;
  p->gathered = om.gathered;
  p->unit_grads = om.unit_grads;
  MT_CALL(plan_optimizer(t, om.owned, t->dtype, &p->optim));
  if (c->restore_best)
    p->best = (double)om.owned * esz + (double)t->model->buffers.total * esz;
  MT_CALL(plan_data(t, &p->data));
  if (t->device < 0) return 0;
  /* -device cuda: the parameters and gradients in fp32, whole or (fsdp) the
   * partition with its gathered units (an evaluation gathers them all),
   * the optimizer's state, and the micro-batch's activations, which the
   * device twin holds: it mirrors the CPU model (DESIGN.md 7), whose dry
   * run at that batch gives them */
  const int sharded = c->fsdp && c->fsdp_strategy != MT_FSDP_NO_SHARD;
  mt_owner_memory dm;
  (sharded ? &mt_owner_sharded : &mt_owner_replicated)->memory(t, tab, 0, &dm);
  double optim = 0, acts;
  if (!c->fsdp_cpu_offload) /* else on the host, counted there */
    MT_CALL(plan_optimizer(t, dm.owned, MT_FP32, &optim));
  const double f = (double)sizeof(float) / esz; /* the unit figures are of t->esz */
  const double units = sharded ? f * (dm.gathered + dm.unit_grads) : 0.0;
  mt_model_destroy(&t->model); /* tab with it */
  MT_CALL(plan_models(t, c->micro_batch_size, &acts));
  p->device = 2.0 * (double)dm.owned * sizeof(float) + optim + acts + units;
  return 0;
}

int mt_memory_forecast(mt_trainer *t) {
  const mt_config *c = t->cfg;
  mt_memory_parts p;
  int err = plan_parts(t, &p);
  mt_model_destroy(&t->model);
  MT_CALL(mt_agree(t->comm->world, err));
  t->mem_plan = p;
  double v[10] = {p.params, p.grads, p.optim, p.gathered, p.unit_grads, p.acts, p.data, p.best,
                  host_total(&p), p.device};
  MT_CALL(max_over_ranks(t, v, 10));
  double limit;
  char from[160];
  host_limit(t, &limit, from, sizeof(from));
  mt_print0("memory forecast per rank (from shapes): parameters %.2f MiB, gradients %.2f, "
            "optimizer state %.2f, gathered parameters %.2f, unit gradients %.2f, activations "
            "%.2f, data %.2f, best model %.2f; total %.2f MiB of %.0f MiB (%s)\n",
            v[0] / MIB, v[1] / MIB, v[2] / MIB, v[3] / MIB, v[4] / MIB, v[5] / MIB, v[6] / MIB,
            v[7] / MIB, v[8] / MIB, limit / MIB, from);
  err = v[8] <= limit
            ? 0
            : MT_ERR(MT_ERR_OPTION,
                     "option -memory_limit_mb: the memory forecast of %.1f MiB per rank "
                     "(parameters %.1f, gradients %.1f, optimizer state %.1f, gathered "
                     "parameters %.1f, unit gradients %.1f, activations %.1f, data %.1f, best "
                     "model %.1f) exceeds %.1f MiB; use more ranks, -backend fsdp, a smaller "
                     "-micro_batch_size or a smaller model (the limit: %s)",
                     v[8] / MIB, v[0] / MIB, v[1] / MIB, v[2] / MIB, v[3] / MIB, v[4] / MIB,
                     v[5] / MIB, v[6] / MIB, v[7] / MIB, limit / MIB, from);
  MT_CALL(mt_agree(t->comm->world, err));
  if (t->device < 0) return 0;
  double dfree, dtotal;
  MT_CALL(mt_agree(t->comm->world, mt_gpu_device_memory(t, &dfree, &dtotal)));
  double d[1] = {-dfree}; /* the smallest free memory over the ranks' devices */
  MT_CALL(max_over_ranks(t, d, 1));
  dfree = -d[0];
  mt_print0("device memory forecast per rank (from shapes): %.2f MiB of %.0f MiB free\n",
            v[9] / MIB, dfree / MIB);
  err = v[9] <= dfree ? 0
                      : MT_ERR(MT_ERR_OPTION,
                               "option -device %s: the memory forecast of %.1f MiB of device "
                               "memory per rank exceeds the %.1f MiB free on the device; use "
                               "more GPUs, -backend fsdp, a smaller -micro_batch_size or a "
                               "smaller model", c->device, v[9] / MIB, dfree / MIB);
  return mt_agree(t->comm->world, err);
}

int mt_memory_check(mt_trainer *t) {
  mt_owned o;
  mt_trainer_owned(t, &o);
  mt_memory_parts m = t->mem;
  m.params = m.grads = (double)o.n * (double)t->esz;
  const mt_memory_parts *f = &t->mem_plan;
  double v[8] = {f->acts, m.acts, f->optim, m.optim, f->data, m.data, host_total(f),
                 m.params + m.grads + f->gathered + f->unit_grads + m.optim + m.acts + m.data +
                     m.best};
  MT_CALL(max_over_ranks(t, v, 8));
  mt_print0("memory allocated per rank (forecast / allocated): activations %.3f / %.3f MiB, "
            "optimizer state %.3f / %.3f, data %.3f / %.3f; total %.3f / %.3f MiB\n",
            v[0] / MIB, v[1] / MIB, v[2] / MIB, v[3] / MIB, v[4] / MIB, v[5] / MIB, v[6] / MIB,
            v[7] / MIB);
  return 0;
}

int mt_memory_report(mt_trainer *t) {
  mt_owned o;
  mt_trainer_owned(t, &o);
  const double esz = (double)t->esz, whole = (double)t->model->params.total * esz;
  mt_memory_parts p = {(double)o.n * esz, (double)o.n * esz, t->mem.optim, 0, 0, 0, 0, 0, 0};
  mt_owner_memory om;
  t->owner->memory(t, &t->model->params, 1, &om);
  p.gathered = om.gathered;
  p.unit_grads = om.unit_grads;
  const double unit = om.largest_unit;
  /* ZeRO's formula: (parameters + gradients + optimizer state) / N plus
   * the largest unit, gathered, and its gradient (N the ranks that shard,
   * 1 unless sharded). -fsdp_prefetch 1 holds a second unit of each; a unit
   * whose parameters serve twice (gpt's tied embedding and head) keeps its
   * gradient through the backward, and a unit's edge pages stay. */
  double per_elem = o.n ? p.optim / ((double)o.n * esz) : 0;
  const int N = om.group;
  double bound = whole * (2.0 + per_elem) / N + 2.0 * unit;
  double v[7] = {p.params, p.grads, p.optim, p.gathered, p.unit_grads,
                 p.params + p.grads + p.optim + p.gathered + p.unit_grads, bound};
  MT_CALL(max_over_ranks(t, v, 7));
  mt_print0("memory per rank (measured, largest over ranks): parameters %.3f MiB, gradients "
            "%.3f, optimizer state %.3f, gathered parameters (peak in training) %.3f, unit "
            "gradients (peak) %.3f; total %.3f MiB; ZeRO bound total/%d + largest unit (parameters, "
            "gradient) %.3f MiB\n",
            v[0] / MIB, v[1] / MIB, v[2] / MIB, v[3] / MIB, v[4] / MIB, v[5] / MIB, N,
            v[6] / MIB);
  return 0;
}
