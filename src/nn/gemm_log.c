/* The record of a step's GEMM shapes (nn/gemm_log.h). A small table under
 * a spin lock: a step has tens of distinct shapes and the lock is taken
 * only while recording is on (one step of a run). */
#include "nn/gemm_log.h"
#include "mpitrain/mpitrain.h"

#include <stdlib.h>
#include <string.h>

atomic_int mt_gemm_log_on_;

typedef struct {
  int kind;
  char ta, tb;
  int64_t M, N, K, count;
  float beta;
  int prec;
} entry;

static atomic_flag lock_ = ATOMIC_FLAG_INIT;
static entry *tab_;
static int n_, cap_, lost_;

static const char *const kind_name[MT_GEMM_LOG_NKINDS] = {"gemm", "conv_fwd", "conv_bwd_data",
                                                          "conv_bwd_w"};

void mt_gemm_log_record(mt_gemm_log_kind kind, char ta, char tb, int64_t M, int64_t N, int64_t K,
                        float beta, mt_precision p, int64_t count) {
  if (!mt_gemm_log_active() || M <= 0 || N <= 0 || K <= 0 || count <= 0) return;
  ta = ta == 't' ? 'T' : ta == 'n' ? 'N' : ta;
  tb = tb == 't' ? 'T' : tb == 'n' ? 'N' : tb;
  while (atomic_flag_test_and_set_explicit(&lock_, memory_order_acquire)) {
  }
  int i = 0;
  for (; i < n_; i++) {
    const entry *e = &tab_[i];
    if (e->kind == (int)kind && e->ta == ta && e->tb == tb && e->M == M && e->N == N &&
        e->K == K && e->beta == beta && e->prec == (int)p)
      break;
  }
  if (i == n_ && n_ == cap_) { /* grow; on failure the shape is lost, and said */
    int cap = cap_ ? 2 * cap_ : 32;
    entry *t = realloc(tab_, (size_t)cap * sizeof(*t));
    if (t) tab_ = t, cap_ = cap;
  }
  if (i < n_)
    tab_[i].count += count;
  else if (n_ < cap_)
    tab_[n_++] = (entry){(int)kind, ta, tb, M, N, K, count, beta, (int)p};
  else
    lost_ = 1;
  atomic_flag_clear_explicit(&lock_, memory_order_release);
}

void mt_gemm_log_begin(void) {
  while (atomic_flag_test_and_set_explicit(&lock_, memory_order_acquire)) {
  }
  n_ = 0;
  lost_ = 0;
  atomic_flag_clear_explicit(&lock_, memory_order_release);
  atomic_store(&mt_gemm_log_on_, 1);
}

void mt_gemm_log_end(void) { atomic_store(&mt_gemm_log_on_, 0); }

int mt_gemm_log_count(void) { return n_; }

int mt_gemm_log_write(FILE *f, const char *header) {
  MT_CHECK(!lost_, MT_ERR_MEM, "option -log_gemm_shapes: out of memory while recording");
  MT_CHECK(n_ > 0, MT_ERR_STATE, "option -log_gemm_shapes: the step ran no GEMM or convolution");
  for (const char *h = header; h && *h;) {
    const char *e = strchr(h, '\n');
    int len = e ? (int)(e - h) : (int)strlen(h);
    fprintf(f, "# %.*s\n", len, h);
    h += len + (e ? 1 : 0);
  }
  fprintf(f, "# kind ta tb M N K beta precision count\n");
  for (int i = 0; i < n_; i++) {
    const entry *e = &tab_[i];
    fprintf(f, "%s %c %c %lld %lld %lld %g %s %lld\n", kind_name[e->kind], e->ta, e->tb,
            (long long)e->M, (long long)e->N, (long long)e->K, (double)e->beta,
            mt_precision_name((mt_precision)e->prec), (long long)e->count);
  }
  return 0;
}
