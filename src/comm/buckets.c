/* Gradient buckets (comm/buckets.h). */
#include "comm/buckets.h"
#include "core/core.h"

#include <string.h>

int mt_buckets_plan(mt_buckets *p, size_t n, size_t esz, double bucket_mb, double first_mb,
                    const mt_param_table *units) {
  memset(p, 0, sizeof(*p));
  MT_CHECK(bucket_mb > 0, MT_ERR_OPTION, "option -ddp_bucket_mb must be > 0");
  size_t bucket = (size_t)(bucket_mb * 1048576.0 / (double)esz);
  size_t first = (size_t)(first_mb * 1048576.0 / (double)esz);
  if (bucket < 1024) bucket = 1024;
  if (first < 1024 || first > bucket) first = bucket;
  int nb = 0;
  for (size_t end = n, k = 0; end > 0; k++, nb++) {
    size_t sz = k == 0 ? first : bucket;
    end = end > sz ? end - sz : 0;
  }
  MT_CALL(mt_calloc(&p->lo, (size_t)nb + 1, sizeof(size_t), "ddp buckets"));
  MT_CALL(mt_calloc(&p->hi, (size_t)nb + 1, sizeof(size_t), "ddp buckets"));
  size_t end = n;
  for (int k = 0; k < nb; k++) {
    size_t sz = k == 0 ? first : bucket;
    p->hi[k] = end;
    p->lo[k] = end > sz ? end - sz : 0;
    end = p->lo[k];
  }
  p->nb = nb;
  if (!units) return 0;
  int nu = 0;
  for (int i = 0; i < units->n; i++) nu = units->p[i].unit + 1 > nu ? units->p[i].unit + 1 : nu;
  MT_CALL(mt_calloc(&p->ulo, (size_t)nu + 1, sizeof(size_t), "ddp units"));
  MT_CALL(mt_calloc(&p->uhi, (size_t)nu + 1, sizeof(size_t), "ddp units"));
  MT_CALL(mt_calloc(&p->udone, (size_t)nu + 1, sizeof(int), "ddp units"));
  for (int u = 0; u < nu; u++) p->ulo[u] = n;
  for (int i = 0; i < units->n; i++) {
    const mt_param *q = &units->p[i];
    MT_CHECK(q->unit >= 0, MT_ERR_STATE, "tensor %s has no unit", q->name);
    if (q->offset < p->ulo[q->unit]) p->ulo[q->unit] = q->offset;
    if (q->offset + q->numel > p->uhi[q->unit]) p->uhi[q->unit] = q->offset + q->numel;
  }
  p->nunits = nu;
  return 0;
}

int mt_buckets_done(mt_buckets *p, int unit) {
  MT_CHECK(unit >= 0 && unit < p->nunits, MT_ERR_ARG, "ddp: unit %d of %d", unit, p->nunits);
  p->udone[unit] = 1;
  return 0;
}

int mt_buckets_ready(const mt_buckets *p, int k) {
  for (int u = 0; u < p->nunits; u++)
    if (!p->udone[u] && p->ulo[u] < p->hi[k] && p->uhi[u] > p->lo[k]) return 0;
  return 1;
}

void mt_buckets_reset(mt_buckets *p) {
  if (p->udone) memset(p->udone, 0, (size_t)p->nunits * sizeof(int));
}

void mt_buckets_free(mt_buckets *p) {
  mt_free(&p->lo);
  mt_free(&p->hi);
  mt_free(&p->ulo);
  mt_free(&p->uhi);
  mt_free(&p->udone);
  p->nb = p->nunits = 0;
}
