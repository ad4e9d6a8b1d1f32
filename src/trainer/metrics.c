/* A user model's own metrics (mt_model_ops.metrics) into the learning
 * curve: the names are fixed by the first report, so the columns of
 * curve.csv stay the same for the whole run (and across restarts, which
 * bring the names back with the curve); every rank must report rank 0's
 * list, since every rank records and checkpoints the same curve. */
#include "trainer/trainer.h"

#include <math.h>
#include <string.h>

static int name_ok(const char *s) {
  if (!s[0]) return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '.'))
      return 0;
  return 1;
}

/* This rank's report checked on its own: count, names, and the names of the
 * curve so far when there are any. */
static int check_local(const mt_trainer *t, const mt_metric *out, int n) {
  const char *model = t->cfg->model;
  MT_CHECK(n >= 0 && n <= MT_METRICS_MAX, MT_ERR_ARG,
           "model %s: its metrics op reports %d metrics, at most %d", model, n, MT_METRICS_MAX);
  for (int k = 0; k < n; k++) {
    MT_CHECK(memchr(out[k].name, '\0', MT_METRIC_NAME_MAX) && name_ok(out[k].name), MT_ERR_ARG,
             "model %s: metric %d has no name of letters, digits, '_' and '.' (up to %d bytes)",
             model, k, MT_METRIC_NAME_MAX - 1);
    for (int j = 0; j < k; j++)
      MT_CHECK(strcmp(out[j].name, out[k].name) != 0, MT_ERR_ARG,
               "model %s: metric %s reported twice", model, out[k].name);
  }
  if (t->nmetrics == 0) return 0; /* the first report names the columns */
  int same = n == t->nmetrics;
  for (int k = 0; same && k < n; k++) same = strcmp(out[k].name, t->metric_names[k]) == 0;
  MT_CHECK(same, MT_ERR_ARG, "model %s: its metrics op reports %d metrics (%s%s), the curve has "
           "%d (metric.%s, ...): the list must not change during a run", model, n,
           n ? out[0].name : "", n > 1 ? ", ..." : "", t->nmetrics, t->metric_names[0]);
  return 0;
}

int mt_trainer_metrics(mt_trainer *t, int set, double *row) {
  for (int k = 0; k < MT_METRICS_MAX; k++) row[k] = NAN;
  const mt_model_ops *ops = t->model->ops;
  if (!ops->metrics) return 0; /* the same on every rank: one registry */
  mt_model *models[2 * MT_MAX_THREADS];
  const int nm = mt_compute_models(t, models);
  mt_metric out[MT_METRICS_MAX];
  memset(out, 0, sizeof(out));
  int n = 0;
  int err = ops->metrics(models, nm, t->comm->world, set, out, MT_METRICS_MAX, &n);
  if (!err) err = check_local(t, out, n);
  MT_CALL(mt_agree(t->comm->world, err));
  /* rank 0's report, compared on every rank: names and values bit for bit */
  mt_metric first[MT_METRICS_MAX];
  memcpy(first, out, sizeof(out));
  int n0 = n;
  MT_MPI(MPI_Bcast(&n0, 1, MPI_INT, 0, t->comm->world));
  MT_MPI(MPI_Bcast(first, (int)sizeof(first), MPI_BYTE, 0, t->comm->world));
  err = n0 != n ? MT_ERR(MT_ERR_ARG, "model %s: rank %d reports %d metrics, rank 0 %d",
                         t->cfg->model, t->comm->rank, n, n0)
                : 0;
  for (int k = 0; !err && k < n; k++)
    if (strcmp(first[k].name, out[k].name) != 0 ||
        memcmp(&first[k].value, &out[k].value, sizeof(double)) != 0)
      err = MT_ERR(MT_ERR_ARG, "model %s: metric %s is %.17g on rank %d, %s %.17g on rank 0: "
                   "combine the ranks' values (mt_allgather_values) so every rank has the same",
                   t->cfg->model, out[k].name, out[k].value, t->comm->rank, first[k].name,
                   first[k].value);
  MT_CALL(mt_agree(t->comm->world, err));
  if (t->nmetrics == 0) {
    for (int k = 0; k < n; k++) snprintf(t->metric_names[k], MT_METRIC_NAME_MAX, "%s", out[k].name);
    t->nmetrics = n;
  }
  for (int k = 0; k < n; k++) row[k] = out[k].value;
  return 0;
}
