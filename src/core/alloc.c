/* Aligned, zeroed allocation with an error that says what failed. */
#include "mpitrain/mpitrain.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

/* Bytes held by mt_calloc's blocks (malloc_usable_size, so a block counts
 * the same at allocation and free): the allocator's instrumentation behind
 * the trainer's memory figures, which take differences of it around the
 * allocations they measure (unsigned, so modulo 2^64 if a block allocated
 * elsewhere is given to mt_free). */
static size_t bytes_;

size_t mt_alloc_bytes(void) { return __atomic_load_n(&bytes_, __ATOMIC_RELAXED); }

static void tally(size_t add, size_t sub) {
  if (add) __atomic_add_fetch(&bytes_, add, __ATOMIC_RELAXED);
  if (sub) __atomic_sub_fetch(&bytes_, sub, __ATOMIC_RELAXED);
}

int mt_calloc(void *pptr, size_t count, size_t size, const char *what) {
  void **out = (void **)pptr;
  *out = NULL;
  if (count == 0 || size == 0) return 0;
  if (count > SIZE_MAX / size)
    return MT_ERR(MT_ERR_MEM, "allocation of %zu x %zu bytes for %s overflows", count, size, what);
  size_t bytes = count * size;
  size_t rounded = (bytes + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, rounded);
  if (!p)
    return MT_ERR(MT_ERR_MEM, "cannot allocate %.1f MiB for %s", (double)bytes / (1 << 20), what);
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
