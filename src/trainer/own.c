/* The two owners of the parameters (own.h): replicated and sharded. The
 * sharded one is the trainer's only door to fsdp's shards and units
 * (backends/fsdp.h). */
#include "trainer/own.h"
#include "backends/fsdp.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------- replicated */

static void rep_owned(const mt_trainer *t, mt_owned *o) {
  *o = (mt_owned){&t->model->params, t->params, t->grads, 0, t->model->params.total};
}

static void rep_step_begin(mt_trainer *t) {
  /* a model that writes its gradients finds them as the last step left them */
  t->grads_set_mode = t->grads_unwritten = mt_compute_sets_grads(t);
  if (!t->grads_set_mode) memset(t->grads, 0, t->model->params.total * t->esz);
}

static int rep_grad_norm(mt_trainer *t, double *norm) {
  (void)t;
  *norm = -1; /* the owned part is the whole gradient */
  return 0;
}

static int rep_pinned(const mt_trainer *t) {
  (void)t;
  return 1;
}

/* the modes that use a trained model have no backend (mode.h) */
static double rep_comm_seconds(const mt_trainer *t) {
  return t->backend ? t->backend->comm_seconds : 0;
}

static void rep_memory(const mt_trainer *t, const mt_param_table *tab, int measured,
                       mt_owner_memory *m) {
  (void)t, (void)measured;
  *m = (mt_owner_memory){0, 0, 0, 1, tab->total};
}

const mt_owner_ops mt_owner_replicated = {.name = "replicated",
                                          .owned = rep_owned,
                                          .step_begin = rep_step_begin,
                                          .grad_norm = rep_grad_norm,
                                          .pinned = rep_pinned,
                                          .comm_seconds = rep_comm_seconds,
                                          .memory = rep_memory};

/* ---------------------------------------------------------------- sharded */

int mt_trainer_fsdp_node_size(const mt_trainer *t, int *node) {
  const mt_config *c = t->cfg;
  const mt_comm *comm = t->comm;
  *node = c->fsdp_node_size;
  if (c->fsdp_strategy != MT_FSDP_HYBRID_SHARD || *node > 0) return 0;
  int mm[2] = {-comm->local_size, comm->local_size};
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_INT, MPI_MAX, comm->world));
  MT_CHECK(-mm[0] == mm[1], MT_ERR_OPTION,
           "option -fsdp_sharding_strategy hybrid_shard: the nodes run %d to %d ranks; give "
           "-fsdp_node_size", -mm[0], mm[1]);
  *node = mm[1];
  mt_print0("fsdp hybrid_shard: sharding groups of %d ranks (the node's), replicated across "
            "%d groups\n", *node, comm->size / *node);
  return 0;
}

/* The initialised (and agreed) model becomes this rank's shards; the
 * model then reads and writes the shards' views. */
static int sh_setup(mt_trainer *t) {
  const mt_config *c = t->cfg;
  const mt_comm *comm = t->comm;
  int node;
  MT_CALL(mt_trainer_fsdp_node_size(t, &node));
  int err = mt_fsdp_create(&t->fsdp, comm->world, &t->model->params, t->params, c->fsdp_strategy,
                           c->fsdp_whole_model, node, c->fsdp_prefetch);
  MT_CALL(mt_agree(comm->world, err));
  mt_free(&t->params);
  mt_free(&t->grads);
  t->params = mt_fsdp_params_view(t->fsdp);
  t->grads = mt_fsdp_grads_view(t->fsdp);
  t->backend->data = t->fsdp;
  return 0;
}

static void sh_destroy(mt_trainer *t) {
  if (t->fsdp) t->params = t->grads = NULL; /* its views */
  mt_fsdp_destroy(&t->fsdp);
}

static void sh_owned(const mt_trainer *t, mt_owned *o) {
  size_t lo, hi;
  mt_fsdp_range(t->fsdp, &lo, &hi);
  *o = (mt_owned){mt_fsdp_table(t->fsdp), mt_fsdp_params(t->fsdp), mt_fsdp_grads(t->fsdp), lo,
                  hi - lo};
}

static void sh_step_begin(mt_trainer *t) {
  t->grads_set_mode = t->grads_unwritten = 0; /* the units' gradients add up */
  mt_fsdp_step_begin(t->fsdp);                /* units start at 0 */
}

/* the norm from the shards' squared norms, summed over the sharding group */
static int sh_grad_norm(mt_trainer *t, double *norm) {
  double n2;
  MT_CALL(mt_fsdp_grad_norm2(t->fsdp, &n2));
  *norm = sqrt(n2);
  return 0;
}

static int sh_whole(mt_trainer *t) { return mt_fsdp_pin(t->fsdp); }

static int sh_release(mt_trainer *t) {
  MT_CALL(mt_agree(t->comm->world, mt_fsdp_unpin(t->fsdp)));
  return 0;
}

static int sh_unit_use(mt_trainer *t, int unit, int pass) {
  return mt_fsdp_unit_use(t->fsdp, unit, pass);
}

/* every backward reduces each unit's gradient as it is done */
static int sh_unit_done(mt_trainer *t, int unit) { return mt_fsdp_unit_done(t->fsdp, unit); }

static int sh_pinned(const mt_trainer *t) { return mt_fsdp_pinned(t->fsdp); }

static double sh_comm_seconds(const mt_trainer *t) { return mt_fsdp_comm_seconds(t->fsdp); }

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

static void sh_memory(const mt_trainer *t, const mt_param_table *tab, int measured,
                      mt_owner_memory *m) {
  const mt_config *c = t->cfg;
  const double esz = (double)t->esz, whole = (double)tab->total * esz;
  if (measured) {
    size_t lo, hi;
    mt_fsdp_range(t->fsdp, &lo, &hi);
    *m = (mt_owner_memory){0, 0, 0, mt_fsdp_group_size(t->fsdp), hi - lo};
    mt_fsdp_memory f;
    mt_fsdp_memory_get(t->fsdp, &f);
    m->gathered = f.peak_params_view;
    m->unit_grads = f.peak_grads_view;
    m->largest_unit = f.largest_unit;
    return;
  }
  /* before fsdp is made: its sharding group (hybrid_shard: -fsdp_node_size
   * or the node's ranks, which sh_setup requires to be alike) and the
   * partition it will make */
  const mt_comm *comm = t->comm;
  int G = c->fsdp_strategy != MT_FSDP_HYBRID_SHARD ? comm->size
          : c->fsdp_node_size > 0                  ? c->fsdp_node_size
                                                   : comm->local_size;
  if (G < 1 || comm->size % G) G = 1; /* refused by mt_fsdp_create, later */
  size_t lo, hi;
  mt_fsdp_partition(tab->total, G, comm->rank % G, &lo, &hi);
  *m = (mt_owner_memory){0, 0, 0, G, hi - lo};
  double two, three;
  largest(tab, esz, &two, &three);
  /* full_shard: the unit in use and the prefetched one; shard_grad_op
   * keeps the forward's units until the backward; evaluation gathers
   * the whole model; the gradient of the unit computed, (with
   * -fsdp_prefetch 1) of the one in reduction, and of a unit whose
   * parameters serve twice (gpt's tied embedding and head: its gradient
   * stays from the start of the backward to its end) */
  m->gathered = whole;
  const double g = c->fsdp_prefetch ? three : two;
  m->unit_grads = c->fsdp_whole_model || g > whole ? whole : g;
}

static int sh_report(const mt_trainer *t, double share) {
  const mt_backend *b = t->backend;
  mt_print0("\nfsdp communication (rank 0): %.2f s, %.0f%% of training, %.0f MB gathered and "
            "reduced", b->comm_seconds, share, b->comm_bytes / 1e6);
  return 1;
}

const mt_owner_ops mt_owner_sharded = {.name = "sharded",
                                       .sharded = 1,
                                       .setup = sh_setup,
                                       .destroy = sh_destroy,
                                       .owned = sh_owned,
                                       .step_begin = sh_step_begin,
                                       .grad_norm = sh_grad_norm,
                                       .whole = sh_whole,
                                       .release = sh_release,
                                       .unit_use = sh_unit_use,
                                       .unit_done = sh_unit_done,
                                       .pinned = sh_pinned,
                                       .comm_seconds = sh_comm_seconds,
                                       .memory = sh_memory,
                                       .report = sh_report};
