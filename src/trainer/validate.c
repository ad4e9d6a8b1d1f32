/* Validation: each rank evaluates a contiguous block of the set, so every
 * sample is counted exactly once; no padding is needed because a batch may
 * be short. */
#include "trainer/trainer.h"

#include <stdlib.h>

int mt_validate(mt_trainer *t, int set, double *loss, double *acc, int64_t *count) {
  const mt_config *c = t->cfg;
  mt_dataset *d = &t->val[set];
  int64_t start, n;
  mt_sampler_val_block(d->n, t->comm->rank, t->comm->size, &start, &n);
  int vb = c->val_batch_size;
  int64_t nb = (n + vb - 1) / vb;
  if (c->max_val_steps > 0 && nb > c->max_val_steps) nb = c->max_val_steps;
  int64_t rows = nb * vb < n ? nb * vb : n;
  int64_t *idx = NULL;
  int *counts = NULL;
  int err = mt_calloc(&idx, (size_t)(rows > 0 ? rows : 1), sizeof(int64_t), "validation plan");
  if (!err) err = mt_calloc(&counts, (size_t)(nb > 0 ? nb : 1), sizeof(int), "validation plan");
  for (int64_t i = 0; !err && i < rows; i++) idx[i] = start + i;
  for (int64_t b = 0; !err && b < nb; b++)
    counts[b] = (int)((b + 1) * vb <= rows ? vb : rows - b * vb);
  if (!err) err = mt_loader_start(t->val_loader[set], idx, counts, (int)nb);
  mt_batch_stats st = {0, 0};
  for (int64_t b = 0; !err && b < nb; b++) {
    mt_batch bt;
    err = mt_loader_next(t->val_loader[set], &bt);
    if (!err) err = mt_compute(t, &bt, 0.0f, 0, &st);
  }
  mt_free(&idx);
  mt_free(&counts);
  MT_CALL(mt_agree(t->comm->world, err));
  double v[3] = {st.loss_sum, st.correct, (double)rows};
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_SUM, t->comm->world));
  *loss = v[2] > 0 ? v[0] / v[2] : 0;
  *acc = v[2] > 0 ? v[1] / v[2] : 0;
  *count = (int64_t)v[2];
  return 0;
}
