/* The parameter table: names, shapes and offsets into one flat buffer. */
#include "mpitrain/mpitrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* Room for one more tensor. */
static int grow(mt_param_table *t) {
  if (t->n < t->cap) return 0;
  int cap = t->cap ? 2 * t->cap : 16;
  mt_param *p = realloc(t->p, (size_t)cap * sizeof(*p));
  MT_CHECK(p, MT_ERR_MEM, "cannot grow a parameter table");
  t->p = p;
  t->cap = cap;
  return 0;
}

int mt_param_table_add(mt_param_table *t, const char *name, int ndim, const int64_t *shape,
                       int unit) {
  MT_CHECK(ndim >= 1 && ndim <= MT_MAX_DIMS, MT_ERR_ARG, "tensor %s: %d dims", name, ndim);
  MT_CHECK(strlen(name) < MT_NAME_MAX, MT_ERR_ARG, "tensor name too long: %s", name);
  MT_CHECK(!mt_param_table_find(t, name), MT_ERR_ARG, "tensor %s added twice", name);
  MT_CALL(grow(t));
  mt_param *q = &t->p[t->n];
  memset(q, 0, sizeof(*q));
  snprintf(q->name, sizeof(q->name), "%s", name);
  q->ndim = ndim;
  q->numel = 1;
  for (int i = 0; i < ndim; i++) {
    MT_CHECK(shape[i] > 0, MT_ERR_ARG, "tensor %s: dim %d is %lld", name, i, (long long)shape[i]);
    q->shape[i] = shape[i];
    /* sizes from options and files: a product past what a byte count of
     * 8-byte elements can hold is refused, not wrapped */
    MT_CHECK((size_t)shape[i] <= (SIZE_MAX / 64) / q->numel, MT_ERR_ARG,
             "tensor %s: %zu x %lld elements overflow a size", name, q->numel,
             (long long)shape[i]);
    q->numel *= (size_t)shape[i];
  }
  MT_CHECK(q->numel + 15 <= SIZE_MAX / 64 - t->total, MT_ERR_ARG,
           "tensor %s: the layout's %zu + %zu elements overflow a size", name, t->total, q->numel);
  q->offset = t->total;
  q->unit = unit;
  q->decay = ndim > 1;
  t->total += (q->numel + 15) & ~(size_t)15;
  if (unit + 1 > t->nunits) t->nunits = unit + 1;
  t->n++;
  return 0;
}

const mt_param *mt_param_table_find(const mt_param_table *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (!strcmp(t->p[i].name, name)) return &t->p[i];
  return NULL;
}

void mt_param_table_free(mt_param_table *t) {
  free(t->p);
  memset(t, 0, sizeof(*t));
}

int mt_param_table_slice(const mt_param_table *t, size_t lo, size_t hi, mt_param_table *out) {
  memset(out, 0, sizeof(*out));
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    size_t a = q->offset > lo ? q->offset : lo;
    size_t b = q->offset + q->numel < hi ? q->offset + q->numel : hi;
    if (b <= a) continue;
    MT_CALL(grow(out));
    mt_param *s = &out->p[out->n++];
    *s = *q;
    s->ndim = 1;
    s->shape[0] = (int64_t)(b - a);
    s->offset = a - lo;
    s->numel = b - a;
  }
  out->total = hi > lo ? hi - lo : 0;
  out->nunits = t->nunits;
  return 0;
}
