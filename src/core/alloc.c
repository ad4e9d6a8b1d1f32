/* Aligned, zeroed allocation with an error that says what failed. */
#include "mpitrain/mpitrain.h"

#include <stdlib.h>
#include <string.h>

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
  *out = p;
  return 0;
}

void mt_free(void *pptr) {
  void **p = (void **)pptr;
  if (!p) return;
  free(*p);
  *p = NULL;
}
