/* fsdp's page pool (src/backends/pagepool.c):
 * - a lent range keeps what was written into it; taken back, it reads zero
 *   and its pages are not resident there, but the pool keeps them;
 * - lending again gives those pages (and their contents) to another range,
 *   also of another length (moves cut where lengths differ), with no new
 *   page faulted in;
 * - the pool keeps no more slots than training held at once: an
 *   evaluation's extra lends are trimmed when taken back;
 * - bad ranges and a slot taken twice are refused. */
#include "backends/pagepool.h"
#include "core/core.h"
#include "testutil.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static size_t page_;

static char *view(size_t pages) {
  void *p = mmap(NULL, pages * page_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) tu_fatal("mmap failed", "view");
  return p;
}

static size_t resident_pages(const char *v, size_t pages) {
  unsigned char vec[256];
  if (pages > sizeof(vec) || mincore((void *)v, pages * page_, vec)) tu_fatal("mincore failed", "view");
  size_t k = 0;
  for (size_t i = 0; i < pages; i++) k += vec[i] & 1;
  return k;
}

static long minor_faults(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

int main(void) {
  page_ = (size_t)sysconf(_SC_PAGESIZE);
  const size_t vp = 64; /* view pages */
  char *v = view(vp);
  mt_page_pool *p = NULL;
  CHECK(mt_page_pool_create(&p, 16 * page_, 3) == 0, "a pool of 3 slots of 16 pages");

  /* lend 16 pages at page 4, write, take back */
  int a = -1;
  CHECK(mt_page_pool_lend(p, v + 4 * page_, 16 * page_, &a) == 0 && a >= 0, "lend 16 pages");
  for (size_t i = 0; i < 16 * page_; i++) v[4 * page_ + i] = (char)(i % 251 + 1);
  CHECK(resident_pages(v, vp) == 16, "16 pages resident in the view");
  CHECK(mt_page_pool_take(p, v + 4 * page_, 16 * page_, &a, 1) == 0 && a == -1, "taken back");
  CHECK(resident_pages(v, vp) == 0, "none resident in the view after the take");
  int zero = 1;
  for (size_t i = 0; i < 16 * page_; i++) zero &= v[4 * page_ + i] == 0;
  CHECK(zero, "the range reads zero again");
  CHECK(mt_page_pool_resident(p) == 16.0 * page_, "the pool keeps the 16 pages (%.0f bytes)",
        mt_page_pool_resident(p));

  /* the same pages, with their contents, at another place */
  long f0 = minor_faults();
  int b = -1;
  CHECK(mt_page_pool_lend(p, v + 40 * page_, 16 * page_, &b) == 0, "lend again elsewhere");
  int same = 1;
  for (size_t i = 0; i < 16 * page_; i++) same &= v[40 * page_ + i] == (char)(i % 251 + 1);
  long f1 = minor_faults();
  CHECK(same, "the pages moved with their contents");
  /* 16 pages would fault 16 times; a sanitizer's shadow may add a few */
  CHECK(f1 - f0 < 8, "no page faulted in (%ld minor faults)", f1 - f0);
  CHECK(mt_page_pool_take(p, v + 40 * page_, 16 * page_, &b, 1) == 0, "taken back");

  /* a shorter range, then the full one: moves cut at 5 pages */
  int c = -1;
  CHECK(mt_page_pool_lend(p, v, 5 * page_, &c) == 0, "lend 5 pages");
  same = 1;
  for (size_t i = 0; i < 5 * page_; i++) same &= v[i] == (char)(i % 251 + 1);
  CHECK(same, "the first 5 pages of the slot");
  memset(v, 7, 5 * page_);
  CHECK(mt_page_pool_take(p, v, 5 * page_, &c, 1) == 0, "taken back");
  CHECK(mt_page_pool_lend(p, v + 20 * page_, 16 * page_, &c) == 0, "lend 16 pages after 5");
  int ok = 1;
  for (size_t i = 0; i < 16 * page_; i++)
    ok &= v[20 * page_ + i] == (i < 5 * page_ ? 7 : (char)(i % 251 + 1));
  CHECK(ok, "a slot's pages in two mappings come back whole and in order");

  /* training holds 2 at once; an evaluation lends 3 */
  int d = -1;
  CHECK(mt_page_pool_lend(p, v + 40 * page_, 16 * page_, &d) == 0, "a second slot");
  memset(v + 40 * page_, 1, 16 * page_);
  CHECK(mt_page_pool_take(p, v + 20 * page_, 16 * page_, &c, 1) == 0 &&
        mt_page_pool_take(p, v + 40 * page_, 16 * page_, &d, 1) == 0, "both taken back");
  CHECK(mt_page_pool_resident(p) == 32.0 * page_, "the pool keeps 2 slots");
  int e[3] = {-1, -1, -1};
  for (int i = 0; i < 3; i++)
    CHECK(mt_page_pool_lend(p, v + (size_t)i * 20 * page_, 16 * page_, &e[i]) == 0,
          "evaluation lend %d", i);
  for (int i = 0; i < 3; i++) memset(v + (size_t)i * 20 * page_, 3, 16 * page_);
  int extra = -1;
  CHECK(mt_page_pool_lend(p, v, page_, &extra) == MT_ERR_STATE, "a fourth lend is refused");
  mt_error_clear();
  for (int i = 0; i < 3; i++)
    CHECK(mt_page_pool_take(p, v + (size_t)i * 20 * page_, 16 * page_, &e[i], 0) == 0,
          "evaluation take %d", i);
  CHECK(mt_page_pool_resident(p) == 32.0 * page_, "trimmed to training's 2 slots (%.0f bytes)",
        mt_page_pool_resident(p));
  CHECK(resident_pages(v, 16) + resident_pages(v + 20 * page_, 16) +
            resident_pages(v + 40 * page_, 16) == 0,
        "nothing left in the evaluation's ranges");

  /* refusals */
  int g = -1;
  CHECK(mt_page_pool_lend(p, v + 1, page_, &g) == MT_ERR_ARG, "an unaligned range is refused");
  mt_error_clear();
  CHECK(mt_page_pool_lend(p, v, 17 * page_, &g) == MT_ERR_ARG, "a range beyond a slot is refused");
  mt_error_clear();
  g = 1;
  CHECK(mt_page_pool_take(p, v, page_, &g, 1) == MT_ERR_STATE, "a slot not lent is refused");
  mt_error_clear();
  mt_page_pool_destroy(&p);
  CHECK(p == NULL, "destroyed");
  munmap(v, vp * page_);
  return tu_finish("test_pagepool");
}
