/* Memory per rank: a forecast before the first step, checked against
 * -memory_limit_mb, and what was measured after training.
 *
 * Parameters and gradients are the buffers the rank owns (the whole layout,
 * or its shard under fsdp); the optimizer state and the model's
 * activations are measured with the allocator's counter around their
 * allocation (mt_alloc_bytes); fsdp's gathered units are the resident pages
 * of its views (mincore), sampled whenever a unit is gathered or reduced. */
#include "trainer/trainer.h"
#include "backends/fsdp.h"

#include <unistd.h>

#define MIB (1024.0 * 1024.0)

typedef struct {
  double params, grads, optim, gathered, unit_grads, acts;
} parts;

static double sum(const parts *p) {
  return p->params + p->grads + p->optim + p->gathered + p->unit_grads + p->acts;
}

/* The two and the three largest units' bytes (elements of esz bytes). */
static void largest(const mt_param_table *t, double esz, double *two, double *three) {
  double top[3] = {0, 0, 0};
  int nu = 0;
  for (int i = 0; i < t->n; i++) nu = t->p[i].unit + 1 > nu ? t->p[i].unit + 1 : nu;
  for (int u = 0; u < nu; u++) {
    double b = 0;
    for (int i = 0; i < t->n; i++) b += t->p[i].unit == u ? (double)t->p[i].numel * esz : 0.0;
    for (int k = 0; k < 3; k++)
      if (b > top[k]) {
        double x = top[k];
        top[k] = b;
        b = x;
      }
  }
  *two = top[0] + top[1];
  *three = *two + top[2];
}

static int max_over_ranks(const mt_trainer *t, double *v, int n) {
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, t->comm->world));
  return 0;
}

int mt_memory_forecast(mt_trainer *t) {
  const mt_config *c = t->cfg;
  mt_owned o;
  mt_trainer_owned(t, &o);
  const double esz = (double)t->esz, whole = (double)t->model->params.total * esz;
  parts p = {(double)o.n * esz, (double)o.n * esz, (double)t->mem_optim, 0, 0,
             (double)t->mem_acts};
  if (t->fsdp) {
    double two, three;
    largest(&t->model->params, esz, &two, &three);
    /* full_shard: the unit in use and the prefetched one; shard_grad_op
     * keeps the forward's units until the backward; evaluation gathers
     * the whole model; the gradient of the unit computed, (with
     * -fsdp_prefetch 1) of the one in reduction, and of a unit whose
     * parameters serve twice (gpt's tied embedding and head: its gradient
     * stays from the start of the backward to its end) */
    p.gathered = whole;
    const double g = c->fsdp_prefetch ? three : two;
    p.unit_grads = c->fsdp_whole_model || g > whole ? whole : g;
  }
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
  double unit = 0;
  if (t->fsdp) {
    mt_fsdp_memory m;
    mt_fsdp_memory_get(t->fsdp, &m);
    p.gathered = m.peak_params_view;
    p.unit_grads = m.peak_grads_view;
    unit = m.largest_unit;
  }
  /* ZeRO's formula: (parameters + gradients + optimizer state) / N plus
   * the largest unit, gathered, and its gradient (N the ranks that shard,
   * 1 unless fsdp). -fsdp_prefetch 1 holds a second unit of each; a unit
   * whose parameters serve twice (gpt's tied embedding and head) keeps its
   * gradient through the backward, and a unit's edge pages stay. */
  double per_elem = o.n ? p.optim / ((double)o.n * esz) : 0;
  int N = t->fsdp ? mt_fsdp_group_size(t->fsdp) : 1;
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
