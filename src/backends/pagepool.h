/* A pool of physical pages for fsdp's views (backends/fsdp.c).
 *
 * fsdp reads a unit's parameters (and writes its gradient) through a view
 * of the whole layout that is reserved address space; a unit's pages are
 * given back when it is released. Given back with madvise, every gather
 * faults them in again, zeroed by the kernel: on a GPT of 3 MiB units at 2
 * ranks that was ~19,000 page faults per rank per step and a fifth of the
 * step (bench/README.md). The pool keeps the physical pages instead and
 * moves them between the view and its slots with mremap, which moves page
 * table entries, not bytes: lending a slot to a unit's range maps the
 * slot's pages there, taking it back maps them into the slot again and
 * reserves the range anew (it reads zero; nothing is resident there).
 *
 * A slot holds up to the largest unit's pages. A slot lent to a smaller
 * unit lends only the unit's length; mremap wants each move inside one
 * mapping, so moves are cut at every length ever moved (a slot's mappings
 * can only be split there). Slots beyond the most that training had lent
 * at once are trimmed (their pages given back with madvise) when taken
 * back, so an evaluation that lends every unit does not leave the whole
 * model resident. Not thread-safe; every call is on the rank's main
 * thread. */
#ifndef MT_PAGEPOOL_H
#define MT_PAGEPOOL_H

#include <stddef.h>

typedef struct mt_page_pool mt_page_pool;

/* A pool of up to nslots slots of slot_bytes each (rounded up to pages).
 * Reserves address space only. */
int mt_page_pool_create(mt_page_pool **p, size_t slot_bytes, int nslots);
void mt_page_pool_destroy(mt_page_pool **p);

/* Backs [va, va + len) (page-aligned, len <= slot_bytes, inside a mapping
 * that may be replaced) with a free slot's pages, those of a slot that has
 * pages first; *slot is its index. The range's contents are the slot's
 * last contents (or zero where it had none). */
int mt_page_pool_lend(mt_page_pool *p, char *va, size_t len, int *slot);

/* Moves the pages of [va, va + len), lent as *slot, back into the slot and
 * reserves the range again (it reads zero); *slot becomes -1. training:
 * the lend counted towards what the pool keeps (0 for an evaluation's). */
int mt_page_pool_take(mt_page_pool *p, char *va, size_t len, int *slot, int training);

/* Bytes resident in the pool's free slots (mincore). */
double mt_page_pool_resident(const mt_page_pool *p);

#endif
