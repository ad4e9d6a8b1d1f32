/* Aligned, zeroed allocation with an error that says what failed, and the
 * plan mode in which a setup is run dry to learn what it would allocate. */
#include "core/core.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

/* Bytes held by mt_calloc's blocks (malloc_usable_size, so a block counts
 * the same at allocation and free): the allocator's instrumentation behind
 * the trainer's memory figures, which take differences of it around the
 * allocations they measure (unsigned, so modulo 2^64 if a block allocated
 * elsewhere is given to mt_free). */
static size_t bytes_;

/* The plan mode of the calling thread (mt_alloc_plan_begin): on, and the
 * bytes of the blocks it counted without allocating them. Per thread, so a
 * library's own threads (oneDNN's, the loader's) allocate as usual. */
static _Thread_local int plan_on_;
static _Thread_local size_t plan_bytes_, plan_base_;

size_t mt_alloc_bytes(void) { return __atomic_load_n(&bytes_, __ATOMIC_RELAXED); }

static void tally(size_t add, size_t sub) {
  if (add) __atomic_add_fetch(&bytes_, add, __ATOMIC_RELAXED);
  if (sub) __atomic_sub_fetch(&bytes_, sub, __ATOMIC_RELAXED);
}

void mt_alloc_plan_begin(void) {
  plan_on_ = 1;
  plan_bytes_ = 0;
  plan_base_ = mt_alloc_bytes();
}

void mt_alloc_plan_restart(void) {
  if (plan_on_) mt_alloc_plan_begin();
}

size_t mt_alloc_plan_end(void) {
  plan_on_ = 0;
  /* the small blocks were allocated: their growth of the counter (another
   * thread's allocations meanwhile would count too; the trainer plans
   * before it starts any) */
  return plan_bytes_ + (mt_alloc_bytes() - plan_base_);
}

int mt_calloc(void *pptr, size_t count, size_t size, const char *what) {
  void **out = (void **)pptr;
  *out = NULL;
  if (count == 0 || size == 0) return 0;
  if (count > (SIZE_MAX - 63) / size)
    return MT_ERR(MT_ERR_MEM, "allocation of %zu x %zu bytes for %s overflows", count, size, what);
  size_t bytes = count * size;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (plan_on_ && rounded >= MT_ALLOC_PLAN_MIN) {
    /* what malloc_usable_size gives such a block: a mapping's pages less
     * its header; the figure only has to be close (memory.c's check) */
    plan_bytes_ += rounded;
    return 0;
  }
  void *p = aligned_alloc(64, rounded);
  if (!p)
    return MT_ERR(MT_ERR_MEM, "cannot allocate %zu bytes (%.1f MiB) for %s", bytes,
                  (double)bytes / (1 << 20), what);
  memset(p, 0, rounded);
  tally(malloc_usable_size(p), 0);
  *out = p;
  return 0;
}

void mt_free(void *pptr) {
  void **p = (void **)pptr;
  if (!p) return;
  if (*p) tally(0, malloc_usable_size(*p));
  free(*p);
  *p = NULL;
}
