/* Mixed precision around the training step (trainer/amp.h). */
#include "trainer/amp.h"
#include "trainer/own.h"
#include "nn/lowp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct mt_amp {
  int level;          /* 1: O1, 2: O2                                      */
  mt_precision dtype;
  void *cache;        /* the weights' cast cache                           */
  float *work;        /* O2: the working copy                              */
  float *master;      /* O2: t->params while the working copy stands in    */
  size_t (*ranges)[2];/* O2: (offset, numel) of the tensors held low       */
  int nranges;
  int scaling;        /* loss scaler on                                    */
  mt_scaler scaler;
  float step_scale;   /* the scale the current step's loss used            */
  long inf_step;      /* test hook: -1 none                                */
  int inf_every, inf_rank;
  FILE *csv;          /* rank 0: loss_scale.csv                            */
};

int mt_amp_policy(mt_trainer *t) {
  const mt_config *c = t->cfg;
  t->policy = c->amp ? mt_nn_policy_make((mt_precision)c->amp_dtype, c->amp == 2)
                     : mt_nn_policy_make(MT_PREC_FP32, 0);
  return 0;
}

/* A tensor of a normalisation layer: its module's weight is 1-d. */
static int is_norm(const mt_param_table *tab, const mt_param *p) {
  char mod[MT_NAME_MAX + 8];
  const char *dot = strrchr(p->name, '.');
  size_t k = dot ? (size_t)(dot - p->name) : strlen(p->name);
  snprintf(mod, sizeof(mod), "%.*s.weight", (int)k, p->name);
  const mt_param *w = mt_param_table_find(tab, mod);
  return w && w->ndim == 1;
}

int mt_amp_setup(mt_trainer *t) {
  const mt_config *c = t->cfg;
  if (!c->amp) return 0;
  struct mt_amp *a;
  MT_CALL(mt_calloc(&a, 1, sizeof(*a), "amp state"));
  t->amp = a;
  a->level = c->amp;
  a->dtype = (mt_precision)c->amp_dtype;
  a->inf_step = -1;
  const mt_param_table *tab = &t->model->params;
  size_t n = tab->total;
  /* sharded (own.h): the weights are gathered unit by unit, so no cast of
   * the whole buffer; the GEMMs round their weight operands themselves
   * (zero1 holds them whole, as the replicated owner) */
  if (!t->owner->sharded || t->owner->whole_grads)
    MT_CALL(mt_calloc(&a->cache, n, mt_nn_weight_cache_elem(a->dtype), "weight cast cache"));
  if (a->level == 2) {
    MT_CALL(mt_calloc(&a->work, n, sizeof(float), "O2 working copy"));
    MT_CALL(mt_calloc(&a->ranges, (size_t)tab->n + 1, sizeof(*a->ranges), "O2 ranges"));
    for (int i = 0; i < tab->n; i++)
      if (!is_norm(tab, &tab->p[i])) {
        a->ranges[a->nranges][0] = tab->p[i].offset;
        a->ranges[a->nranges++][1] = tab->p[i].numel;
      }
  }
  a->scaling = c->loss_scale_mode != 0;
  mt_scaler_opts o = mt_scaler_defaults();
  o.init_scale = c->loss_scale_init;
  o.growth_factor = c->loss_scale_growth_factor;
  o.backoff_factor = c->loss_scale_backoff_factor;
  o.growth_interval = c->loss_scale_growth_interval;
  o.hysteresis = c->loss_scale_hysteresis;
  o.dynamic = c->loss_scale_mode == 1;
  o.min_scale = o.dynamic ? c->loss_scale_min : c->loss_scale_init;
  if (a->scaling) MT_CALL(mt_scaler_init(&a->scaler, &o));
  /* TEST HOOK (tests/test_amp_train.sh): see trainer/amp.h */
  const char *e = getenv("MT_DEBUG_INF_STEP");
  if (e && *e && a->scaling) {
    char *end;
    a->inf_step = strtol(e, &end, 10);
    a->inf_every = *end == '+';
    const char *r = getenv("MT_DEBUG_INF_RANK");
    a->inf_rank = r && *r ? atoi(r) : t->comm->size - 1;
    mt_print0("TEST HOOK: inf injected into rank %d's gradient at global step %ld%s\n",
              a->inf_rank, a->inf_step, a->inf_every ? " and every later step" : "");
  }
  mt_print0("amp: %s, %s compute, gradient all-reduce in %s, loss scaling %s\n",
            a->level == 2 ? "O2 (low-precision working weights, fp32 master)"
                          : "O1 (autocast: fp32 weights)",
            mt_precision_name(a->dtype), mt_precision_name((mt_precision)c->ddp_reduce_dtype),
            !a->scaling ? "off" : o.dynamic ? "dynamic" : "static");
  if (a->dtype == MT_PREC_BF16 && !mt_gemm_bf16_native())
    mt_print0("amp: note: this CPU has no bf16 instructions (AVX512_BF16 or AMX; oneDNN's "
              "ISA here: %s): bf16 products are computed in fp32 from bf16 operands, the same "
              "numbers, slower than fp32 (a backend without -amp; bench/README.md)\n",
              mt_dnnl_isa_name());
  return 0;
}

void mt_amp_destroy(mt_trainer *t) {
  struct mt_amp *a = t->amp;
  if (!a) return;
  mt_nn_weight_cache_off(&t->policy);
  if (a->csv) fclose(a->csv);
  mt_free(&a->cache);
  mt_free(&a->work);
  mt_free(&a->ranges);
  mt_free(&t->amp);
}

int mt_amp_step_begin(mt_trainer *t) {
  struct mt_amp *a = t->amp;
  if (!a) return 0;
  if (a->level == 2) { /* the working copy: master rounded, norms kept */
    size_t n = t->model->params.total;
    memcpy(a->work, t->params, n * sizeof(float));
    for (int i = 0; i < a->nranges; i++)
      mt_round_to(a->dtype, a->work + a->ranges[i][0], a->ranges[i][1]);
    a->master = t->params;
    t->params = a->work;
  }
  if (a->cache) mt_nn_weight_cache_fill(&t->policy, t->params, a->cache, t->model->params.total);
  a->step_scale = a->scaling ? mt_scaler_scale(&a->scaler) : 1.0f;
  return 0;
}

void mt_amp_step_compute_done(mt_trainer *t) {
  struct mt_amp *a = t->amp;
  if (!a) return;
  mt_nn_weight_cache_off(&t->policy);
  if (a->level == 2) {
    t->params = a->master;
    a->master = NULL;
  }
}

float mt_amp_loss_scale(const mt_trainer *t) { return t->amp ? t->amp->step_scale : 1.0f; }

long mt_amp_lr_step(const mt_trainer *t) {
  const struct mt_amp *a = t->amp;
  return a && a->scaling ? t->global_step - a->scaler.nskipped : t->global_step;
}

static int csv_row(mt_trainer *t, int found, int skip) {
  struct mt_amp *a = t->amp;
  if (t->comm->rank != 0) return 0;
  if (!a->csv) {
    char path[MT_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/loss_scale.csv", t->cfg->output_dir);
    /* a resumed run appends */
    a->csv = fopen(path, t->global_step > 0 ? "a" : "w");
    MT_CHECK(a->csv, MT_ERR_FILE, "cannot write %s", path);
    if (t->global_step == 0) fprintf(a->csv, "step,loss_scale,found_inf,skipped\n");
  }
  fprintf(a->csv, "%ld,%.9g,%d,%d\n", t->global_step, (double)a->step_scale, found, skip);
  return 0;
}

int mt_amp_reads_grads(const mt_trainer *t) {
  const struct mt_amp *a = t->amp;
  return a && (a->level == 2 || a->scaling);
}

int mt_amp_after_reduce(mt_trainer *t, int *skip) {
  struct mt_amp *a = t->amp;
  *skip = 0;
  if (!a) return 0;
  void *gv; /* the whole gradient, or this rank's shard when sharded */
  size_t n;
  mt_trainer_step_grads(t, &gv, &n);
  float *g = gv;
  /* O2: the reduced gradients of the low-precision tensors are low-precision
   * tensors (rounded once, after the sum: sp's thread sum and ddp's rank sum
   * then give the same bits) */
  if (a->level == 2)
    for (int i = 0; i < a->nranges; i++)
      mt_round_to(a->dtype, g + a->ranges[i][0], a->ranges[i][1]);
  if (!a->scaling) return 0;
  /* TEST HOOK: see trainer/amp.h */
  if (a->inf_step >= 0 && t->comm->rank == a->inf_rank &&
      (t->global_step == a->inf_step || (a->inf_every && t->global_step > a->inf_step)) && n)
    g[0] = INFINITY;
  int found = mt_has_nonfinite(g, n);
  float inv;
  MT_CALL(mt_amp_found(t, &found, skip, &inv));
  if (!found) {
#pragma omp parallel for schedule(static) if (n > 262144)
    for (size_t i = 0; i < n; i++) g[i] *= inv;
  }
  return 0;
}

void mt_amp_device_step_begin(mt_trainer *t) {
  struct mt_amp *a = t->amp;
  if (a) a->step_scale = a->scaling ? mt_scaler_scale(&a->scaler) : 1.0f;
}

int mt_amp_scaling(const mt_trainer *t) { return t->amp && t->amp->scaling; }

void mt_amp_flush(const mt_trainer *t) {
  if (t->amp && t->amp->csv) fflush(t->amp->csv);
}

int mt_amp_o2_ranges(const mt_trainer *t, const size_t (**ranges)[2]) {
  const struct mt_amp *a = t->amp;
  if (!a || a->level != 2) return 0;
  *ranges = (const size_t(*)[2])a->ranges;
  return a->nranges;
}

int mt_amp_found(mt_trainer *t, int *found, int *skip, float *inv) {
  struct mt_amp *a = t->amp;
  *skip = 0;
  if (t->comm->size > 1)
    MT_MPI(MPI_Allreduce(MPI_IN_PLACE, found, 1, MPI_INT, MPI_MAX, t->comm->world));
  *inv = mt_scaler_inv_scale(&a->scaler); /* before the update: this step's scale */
  int err = mt_scaler_update(&a->scaler, *found, skip);
  if (err) { /* every rank gets here: the flag is agreed */
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", mt_error_message());
    mt_error_clear();
    return MT_ERR(err, "global step %ld: %s", t->global_step, msg);
  }
  MT_CALL(csv_row(t, *found, *skip));
  if (*skip)
    mt_print0("amp: inf/NaN gradient at global step %ld: step skipped, loss scale now %g\n",
              t->global_step, (double)mt_scaler_scale(&a->scaler));
  return 0;
}

int mt_amp_state_put(const mt_trainer *t, mt_ckpt_state *st) {
  const struct mt_amp *a = t->amp;
  if (!a || !a->scaling) return 0;
  double v[MT_SCALER_STATE_N];
  mt_scaler_state_pack(&a->scaler, v);
  MT_CALL(mt_ckpt_state_set_f64s(st, "loss_scaler", v, MT_SCALER_STATE_N));
  return 0;
}

int mt_amp_state_get(mt_trainer *t, const mt_ckpt_state *st) {
  struct mt_amp *a = t->amp;
  if (!a || !a->scaling) return 0;
  if (!mt_ckpt_state_find(st, "loss_scaler")) { /* a checkpoint of a run without one */
    mt_print0("amp: the checkpoint has no loss scaler state: starting at the initial scale\n");
    return 0;
  }
  const double *d;
  size_t k;
  MT_CALL(mt_ckpt_state_get_f64s(st, "loss_scaler", &d, &k));
  MT_CHECK(k == MT_SCALER_STATE_N, MT_ERR_DATA, "checkpoint: loss_scaler has %zu values, not %d",
           k, MT_SCALER_STATE_N);
  MT_CALL(mt_scaler_state_unpack(&a->scaler, d));
  return 0;
}

void mt_amp_report(const mt_trainer *t) {
  const struct mt_amp *a = t->amp;
  if (!a || !a->scaling) return;
  mt_print0("amp: loss scale %g, %ld of %ld steps skipped for inf/NaN gradients, %ld back-offs\n",
            (double)mt_scaler_scale(&a->scaler), a->scaler.nskipped, a->scaler.nupdates,
            a->scaler.nbackoffs);
}
