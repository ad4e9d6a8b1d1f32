/* Memory per rank: a forecast before the first step, checked against
 * -memory_limit_mb, and what was measured after training.
 *
 * Parameters and gradients are the buffers the rank owns (the whole layout,
 * or its shard when sharded, own.h); the optimizer state and the model's
 * activations are measured with the allocator's counter around their
 * allocation (mt_alloc_bytes); the owner's (own.h) gathered units are
 * forecast from the units' sizes and measured as the resident pages of its
 * views (mincore), sampled whenever a unit is gathered or reduced. */
#include "trainer/own.h"

#include <unistd.h>

#define MIB (1024.0 * 1024.0)

typedef struct {
  double params, grads, optim, gathered, unit_grads, acts;
} parts;

static double sum(const parts *p) {
  return p->params + p->grads + p->optim + p->gathered + p->unit_grads + p->acts;
}

static int max_over_ranks(const mt_trainer *t, double *v, int n) {
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, t->comm->world));
  return 0;
}

int mt_memory_forecast(mt_trainer *t) {
  const mt_config *c = t->cfg;
  mt_owned o;
  mt_trainer_owned(t, &o);
  const double esz = (double)t->esz;
  parts p = {(double)o.n * esz, (double)o.n * esz, (double)t->mem_optim, 0, 0,
             (double)t->mem_acts};
  mt_owner_memory om;
  t->owner->memory(t, 0, &om);
  p.gathered = om.gathered;
  p.unit_grads = om.unit_grads;
  double v[7] = {p.params, p.grads, p.optim, p.gathered, p.unit_grads, p.acts, sum(&p)};
  MT_CALL(max_over_ranks(t, v, 7));
  double limit = c->memory_limit_mb * MIB;
  if (limit <= 0) {
    double node = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    limit = node / (t->comm->local_size > 0 ? t->comm->local_size : 1);
  }
  mt_print0("memory forecast per rank: parameters %.2f MiB, gradients %.2f, optimizer state "
            "%.2f, gathered parameters %.2f, unit gradients %.2f, activations %.2f; total %.2f "
            "MiB of %.0f MiB (-memory_limit_mb)\n", v[0] / MIB, v[1] / MIB, v[2] / MIB,
            v[3] / MIB, v[4] / MIB, v[5] / MIB, v[6] / MIB, limit / MIB);
  MT_CHECK(v[6] <= limit, MT_ERR_OPTION,
           "option -memory_limit_mb: the forecast of %.1f MiB per rank (parameters %.1f, "
           "gradients %.1f, optimizer state %.1f, gathered parameters %.1f, unit gradients %.1f, "
           "activations %.1f) exceeds %.1f MiB; use more ranks, -backend fsdp, a smaller "
           "-micro_batch_size or a smaller model", v[6] / MIB, v[0] / MIB, v[1] / MIB, v[2] / MIB,
           v[3] / MIB, v[4] / MIB, v[5] / MIB, limit / MIB);
  return 0;
}

int mt_memory_report(mt_trainer *t) {
  mt_owned o;
  mt_trainer_owned(t, &o);
  const double esz = (double)t->esz, whole = (double)t->model->params.total * esz;
  parts p = {(double)o.n * esz, (double)o.n * esz, (double)t->mem_optim, 0, 0, 0};
  mt_owner_memory om;
  t->owner->memory(t, 1, &om);
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
  double v[7] = {p.params, p.grads, p.optim, p.gathered, p.unit_grads, sum(&p), bound};
  MT_CALL(max_over_ranks(t, v, 7));
  mt_print0("memory per rank (measured, largest over ranks): parameters %.3f MiB, gradients "
            "%.3f, optimizer state %.3f, gathered parameters (peak in training) %.3f, unit "
            "gradients (peak) %.3f; total %.3f MiB; ZeRO bound total/%d + largest unit (parameters, "
            "gradient) %.3f MiB\n",
            v[0] / MIB, v[1] / MIB, v[2] / MIB, v[3] / MIB, v[4] / MIB, v[5] / MIB, N,
            v[6] / MIB);
  return 0;
}
