/* Gradient buckets of a flat buffer, as ddp all-reduces them (on the CPU,
 * src/backends/ddp.c, and on the GPU, src/gpu/gpu.c).
 *
 * Planned once, from the top of the buffer down (the last layers'
 * gradients are ready first): a first bucket of first_mb MiB (PyTorch's
 * 1 MB), then bucket_mb MiB each, at least 1024 elements each. With a
 * parameter table, each unit's span is known, and bucket k is ready once
 * every unit that overlaps it is done for this backward; buckets must be
 * started in index order, so every rank starts the same sequence. */
#ifndef MT_COMM_BUCKETS_H
#define MT_COMM_BUCKETS_H

#include "mpitrain/mpitrain.h"

#include <stddef.h>

typedef struct {
  int nb;            /* buckets, index 0 = the top of the buffer          */
  size_t *lo, *hi;   /* bucket k is [lo[k], hi[k])                        */
  int nunits;        /* 0 without a table                                 */
  size_t *ulo, *uhi; /* the span of each unit in the buffer               */
  int *udone;        /* unit u done in this backward                      */
} mt_buckets;

/* Plans the buckets of n elements of esz bytes; units (may be NULL: no
 * readiness) gives each tensor's unit. MT_ERR_OPTION for a size <= 0,
 * MT_ERR_STATE for a tensor without a unit. *p is zeroed first; free with
 * mt_buckets_free, also after a failure. */
int mt_buckets_plan(mt_buckets *p, size_t n, size_t esz, double bucket_mb, double first_mb,
                    const mt_param_table *units);
/* Unit `unit` is done for this backward (MT_ERR_ARG outside [0, nunits)). */
int mt_buckets_done(mt_buckets *p, int unit);
/* 1 when every unit overlapping bucket k is done. */
int mt_buckets_ready(const mt_buckets *p, int k);
/* A new backward: no unit done. */
void mt_buckets_reset(mt_buckets *p);
void mt_buckets_free(mt_buckets *p);

#endif
