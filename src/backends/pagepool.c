/* fsdp's pool of physical pages: see pagepool.h. */
#define _GNU_SOURCE /* mremap */
#include "backends/pagepool.h"
#include "core/core.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
  char *base;
  int busy;      /* lent to a range of a view                               */
  int populated; /* may hold pages (0: trimmed or never used)               */
} slot;

struct mt_page_pool {
  size_t page, cap;  /* page size; bytes per slot                           */
  char *region;      /* the slots, one after the other                      */
  int n;
  slot *s;
  size_t *cut;       /* offsets where a slot's mappings may be split, sorted */
  int ncut, capcut;
  int busy, hold;    /* slots lent now; the most lent at once in training   */
  unsigned char *vec; /* mincore                                            */
};

static int reserve(char *at, size_t len) {
  void *q = mmap(at, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (at ? MAP_FIXED : 0), -1, 0);
  MT_CHECK(q != MAP_FAILED && (!at || q == at), MT_ERR_MEM,
           "fsdp page pool: cannot reserve %.1f MiB of address space: %s",
           (double)len / 1048576.0, strerror(errno));
  return 0;
}

int mt_page_pool_create(mt_page_pool **out, size_t slot_bytes, int nslots) {
  mt_page_pool *p;
  *out = NULL;
  MT_CALL(mt_calloc(&p, 1, sizeof(*p), "fsdp page pool"));
  *out = p;
  p->page = (size_t)sysconf(_SC_PAGESIZE);
  p->cap = (slot_bytes + p->page - 1) & ~(p->page - 1);
  if (!p->cap) p->cap = p->page;
  p->n = nslots > 0 ? nslots : 1;
  MT_CALL(mt_calloc(&p->s, (size_t)p->n, sizeof(slot), "fsdp page pool"));
  MT_CALL(mt_calloc(&p->vec, (size_t)p->n * (p->cap / p->page), 1, "fsdp page pool"));
  p->capcut = 16;
  MT_CALL(mt_calloc(&p->cut, (size_t)p->capcut, sizeof(size_t), "fsdp page pool"));
  p->cut[0] = 0;
  p->cut[1] = p->cap;
  p->ncut = 2;
  void *r = mmap(NULL, (size_t)p->n * p->cap, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  MT_CHECK(r != MAP_FAILED, MT_ERR_MEM, "fsdp page pool: cannot reserve %.1f MiB of address space",
           (double)p->n * (double)p->cap / 1048576.0);
  p->region = r;
  for (int i = 0; i < p->n; i++) p->s[i].base = p->region + (size_t)i * p->cap;
  return 0;
}

void mt_page_pool_destroy(mt_page_pool **pp) {
  mt_page_pool *p = *pp;
  if (!p) return;
  if (p->region) munmap(p->region, (size_t)p->n * p->cap);
  mt_free(&p->s);
  mt_free(&p->vec);
  mt_free(&p->cut);
  mt_free(pp);
}

/* len becomes a cut (a later move may split a mapping there). */
static int add_cut(mt_page_pool *p, size_t len) {
  int i = 0;
  while (i < p->ncut && p->cut[i] < len) i++;
  if (i < p->ncut && p->cut[i] == len) return 0;
  if (p->ncut == p->capcut) {
    size_t *c = NULL;
    MT_CALL(mt_calloc(&c, (size_t)p->capcut * 2, sizeof(size_t), "fsdp page pool"));
    memcpy(c, p->cut, (size_t)p->ncut * sizeof(size_t));
    mt_free(&p->cut);
    p->cut = c;
    p->capcut *= 2;
  }
  memmove(p->cut + i + 1, p->cut + i, (size_t)(p->ncut - i) * sizeof(size_t));
  p->cut[i] = len;
  p->ncut++;
  return 0;
}

/* Moves the pages of [from, from + len) to [to, to + len), piece by piece
 * between cuts (each piece lies inside one mapping on both sides), and
 * reserves the source again. */
static int move(mt_page_pool *p, char *from, char *to, size_t len) {
  for (int i = 0; i + 1 < p->ncut && p->cut[i] < len; i++) {
    size_t a = p->cut[i], b = p->cut[i + 1] < len ? p->cut[i + 1] : len;
    void *q = mremap(from + a, b - a, b - a, MREMAP_MAYMOVE | MREMAP_FIXED, to + a);
    MT_CHECK(q != MAP_FAILED, MT_ERR_MEM, "fsdp page pool: mremap of %zu bytes failed: %s", b - a,
             strerror(errno));
    MT_CALL(reserve(from + a, b - a));
  }
  return 0;
}

int mt_page_pool_lend(mt_page_pool *p, char *va, size_t len, int *out) {
  *out = -1;
  MT_CHECK(len <= p->cap && len % p->page == 0 && (size_t)va % p->page == 0, MT_ERR_ARG,
           "fsdp page pool: a range of %zu bytes at %p does not fit a slot of %zu", len,
           (void *)va, p->cap);
  int k = -1;
  for (int i = 0; i < p->n && (k < 0 || !p->s[k].populated); i++)
    if (!p->s[i].busy && (k < 0 || p->s[i].populated)) k = i;
  MT_CHECK(k >= 0, MT_ERR_STATE, "fsdp page pool: all %d slots are lent", p->n);
  if (len) {
    MT_CALL(add_cut(p, len));
    MT_CALL(move(p, p->s[k].base, va, len));
  }
  p->s[k].busy = 1;
  p->busy++;
  *out = k;
  return 0;
}

int mt_page_pool_take(mt_page_pool *p, char *va, size_t len, int *k, int training) {
  MT_CHECK(*k >= 0 && *k < p->n && p->s[*k].busy, MT_ERR_STATE,
           "fsdp page pool: slot %d taken back but not lent", *k);
  slot *s = &p->s[*k];
  if (training && p->busy > p->hold) p->hold = p->busy;
  if (len) MT_CALL(move(p, va, s->base, len));
  s->busy = 0;
  s->populated = 1;
  p->busy--;
  *k = -1;
  /* keep no more pages than training held at once */
  int held = 0;
  for (int i = 0; i < p->n; i++) held += p->s[i].busy || p->s[i].populated;
  if (held > p->hold) {
    madvise(s->base, p->cap, MADV_DONTNEED);
    s->populated = 0;
  }
  return 0;
}

double mt_page_pool_resident(const mt_page_pool *p) {
  size_t np = (size_t)p->n * (p->cap / p->page), k = 0;
  if (mincore(p->region, (size_t)p->n * p->cap, p->vec)) return 0;
  for (size_t i = 0; i < np; i++) k += p->vec[i] & 1;
  return (double)k * (double)p->page;
}
