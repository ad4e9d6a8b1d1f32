/* dnnl_sgemm, with the linear layers' forward as oneDNN's brgemm matmul
 * (gemm_matmul.h).
 *
 * Why: on AVX-512 CPUs oneDNN 2.6 implements a matmul primitive with its
 * brgemm kernels, while dnnl_sgemm keeps its older GEMM kernels. At the
 * forward's 'N','T' shapes the matmul ran (one thread, X1, 2026-11-28,
 * bench/README.md "The forward as a matmul primitive") 1.07x dnnl_sgemm at
 * 128 x 1024 x 1024, 1.11x at 64 rows, 1.16x at 32, 1.11x on the gpt's
 * 2048 x 128 x 512, and the same at K = 128 (where the two give the same
 * bits); at the input gradient ('N','N') the two tied and at the weight
 * gradient ('T','N') dnnl_sgemm won, so only the forward goes there.
 * Where oneDNN offers no brgemm kernel (AVX2 CPUs: a matmul is its GEMM
 * again) the shape is declined once and dnnl_sgemm runs it.
 *
 * A primitive is made for a shape (sizes and leading dimensions) at its
 * first call, with oneDNN's threads at one: it runs only where the GEMM
 * has the calling thread alone (a -thread_split gemm column block, a
 * -thread_split batch thread's rows, a one-thread run), so its bits do not
 * depend on the thread count it meets. Each kept entry has its own memory
 * objects, stream and scratchpad, and is taken by one call at a time (a
 * mutex guards the table; two threads on one shape make two entries). */
#include "nn/gemm_matmul.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAXE 64 /* entries kept; the least recently used free one goes first */

typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  int used;      /* a slot of the table                                     */
  int declined;  /* no brgemm kernel: dnnl_sgemm                            */
  int busy;      /* a call is running it                                    */
  uint64_t last; /* the tick of its last call                               */
  dnnl_primitive_t p;
  dnnl_memory_t a, b, c, scratch;
  dnnl_stream_t strm;
  /* ldc > N (a -thread_split gemm column block): the primitive writes a
   * dense M x N here and the rows are copied out; into rows ldc apart the
   * matmul ran 7% slower (128 x 512 x 1024 at ldc 1024: 153.8-154.3
   * GFLOP/s dense-and-copied 160.3-161.0, X1) */
  float *dense;
} entry;

static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
static entry table_[MAXE];
static dnnl_engine_t eng_;
static uint64_t tick_;

int mt_gemm_own_thread(void) {
#ifdef _OPENMP
  return omp_in_parallel() || omp_get_max_threads() == 1;
#else
  return 1;
#endif
}

static void release(entry *e) {
  if (e->p) dnnl_primitive_destroy(e->p);
  if (e->a) dnnl_memory_destroy(e->a);
  if (e->b) dnnl_memory_destroy(e->b);
  if (e->c) dnnl_memory_destroy(e->c);
  if (e->scratch) dnnl_memory_destroy(e->scratch);
  if (e->strm) dnnl_stream_destroy(e->strm);
  free(e->dense);
  memset(e, 0, sizeof(*e));
}

static dnnl_status_t md(dnnl_memory_desc_t *d, int64_t r, int64_t c, int64_t sr, int64_t sc) {
  dnnl_dims_t dims = {r, c}, st = {sr, sc};
  return dnnl_memory_desc_init_by_strides(d, 2, dims, dnnl_f32, st);
}

/* e's primitive for its shape, or e->declined; under the lock */
static void make(entry *e) {
  dnnl_memory_desc_t a, b, c;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_matmul_desc_t d;
  const char *impl = "";
  /* C (M,N) = A (M,K) B^T: B is (N,K) with rows ldb apart, B^T (K,N) */
  int ok = md(&a, e->M, e->K, e->lda, 1) == dnnl_success &&
           md(&b, e->K, e->N, 1, e->ldb) == dnnl_success &&
           md(&c, e->M, e->N, e->N, 1) == dnnl_success &&
           dnnl_primitive_attr_create(&attr) == dnnl_success &&
           dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
               dnnl_success &&
           dnnl_matmul_desc_init(&d, &a, &b, NULL, &c) == dnnl_success;
#ifdef _OPENMP
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1); /* the primitive's partition: one thread's */
#endif
  ok = ok && dnnl_primitive_desc_create(&pd, &d, attr, eng_, NULL) == dnnl_success &&
       dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
       strncmp(impl, "brg", 3) == 0 && dnnl_primitive_create(&e->p, pd) == dnnl_success;
#ifdef _OPENMP
  omp_set_num_threads(nt);
#endif
  ok = ok && dnnl_memory_create(&e->a, &a, eng_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&e->b, &b, eng_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&e->c, &c, eng_, DNNL_MEMORY_NONE) == dnnl_success &&
       dnnl_memory_create(&e->scratch,
                          dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), eng_,
                          DNNL_MEMORY_ALLOCATE) == dnnl_success &&
       dnnl_stream_create(&e->strm, eng_, dnnl_stream_default_flags) == dnnl_success;
  if (ok && e->ldc != e->N) {
    const size_t bytes = ((size_t)e->M * (size_t)e->N * sizeof(float) + 63) / 64 * 64;
    ok = (e->dense = aligned_alloc(64, bytes)) != NULL;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) {
    const entry key = *e;
    release(e);
    *e = (entry){key.M, key.N, key.K, key.lda, key.ldb, key.ldc, 1, 1, 0, key.last,
                 NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  }
}

static int same(const entry *e, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                int64_t ldc) {
  return e->used && e->M == M && e->N == N && e->K == K && e->lda == lda && e->ldb == ldb &&
         e->ldc == ldc;
}

/* A free entry of the shape, taken (busy), made in a free slot (or in the
 * least recently used entry's) if none is; NULL: dnnl_sgemm (the shape
 * declined, or every entry busy) */
static entry *take(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  entry *got = NULL, *slot = NULL;
  int declined = 0;
  pthread_mutex_lock(&lock_);
  if (!eng_ && dnnl_engine_create(&eng_, dnnl_cpu, 0) != dnnl_success) eng_ = NULL;
  for (int i = 0; eng_ && i < MAXE; i++) {
    entry *e = &table_[i];
    if (same(e, M, N, K, lda, ldb, ldc)) {
      declined |= e->declined;
      if (!e->declined && !e->busy && !got) got = e;
    }
    if (!e->busy && (!slot || (slot->used && (!e->used || e->last < slot->last)))) slot = e;
  }
  if (eng_ && !got && !declined && slot) {
    release(slot);
    *slot = (entry){M, N, K, lda, ldb, ldc, 1, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    make(slot);
    if (!slot->declined) got = slot;
  }
  if (got) {
    got->busy = 1;
    got->last = ++tick_;
  }
  pthread_mutex_unlock(&lock_);
  return got;
}

static dnnl_status_t run(entry *e, const float *A, const float *B, float *C) {
  dnnl_status_t s = dnnl_memory_set_data_handle(e->a, (void *)A);
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->b, (void *)B);
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->c, e->dense ? e->dense : C);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a},
                             {DNNL_ARG_WEIGHTS, e->b},
                             {DNNL_ARG_DST, e->c},
                             {DNNL_ARG_SCRATCHPAD, e->scratch}};
  if (s == dnnl_success) s = dnnl_primitive_execute(e->p, e->strm, 4, args);
  if (s == dnnl_success) s = dnnl_stream_wait(e->strm);
  if (s == dnnl_success && e->dense)
    for (int64_t r = 0; r < e->M; r++)
      memcpy(C + r * e->ldc, e->dense + r * e->N, (size_t)e->N * sizeof(float));
  pthread_mutex_lock(&lock_);
  e->busy = 0;
  pthread_mutex_unlock(&lock_);
  return s;
}

dnnl_status_t mt_sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc) {
  if (ta == 'N' && tb == 'T' && alpha == 1.0f && beta == 0.0f && M > 0 && N > 0 && K > 0 &&
      lda >= K && ldb >= K && ldc >= N && mt_gemm_own_thread()) {
    entry *e = take(M, N, K, lda, ldb, ldc);
    if (e) return run(e, A, B, C);
  }
  return dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void mt_sgemm_matmul_stats(int *kept, int *declined) {
  *kept = *declined = 0;
  pthread_mutex_lock(&lock_);
  for (int i = 0; i < MAXE; i++) {
    *kept += table_[i].used && !table_[i].declined;
    *declined += table_[i].used && table_[i].declined;
  }
  pthread_mutex_unlock(&lock_);
}

void mt_sgemm_matmul_free(void) {
  pthread_mutex_lock(&lock_);
  for (int i = 0; i < MAXE; i++)
    if (!table_[i].busy) release(&table_[i]);
  pthread_mutex_unlock(&lock_);
}
