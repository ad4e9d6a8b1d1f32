/* dnnl_sgemm and dnnl_gemm_bf16bf16f32 as oneDNN's brgemm matmul
 * primitives, kept (gemm_matmul.h).
 *
 * Why, fp32: on AVX-512 CPUs oneDNN 2.6 implements a matmul primitive with
 * its brgemm kernels, while dnnl_sgemm keeps its older GEMM kernels. At the
 * forward's 'N','T' shapes the matmul ran (one thread, X1, 2026-11-28,
 * bench/README.md "The forward as a matmul primitive") 1.07x dnnl_sgemm at
 * 128 x 1024 x 1024, 1.11x at 64 rows, 1.16x at 32, 1.11x on the gpt's
 * 2048 x 128 x 512, and the same at K = 128 (where the two give the same
 * bits); at the input gradient ('N','N') the two tied and at the weight
 * gradient ('T','N') dnnl_sgemm won, so only the forward goes there.
 * Where oneDNN offers no brgemm kernel (AVX2 CPUs: a matmul is its GEMM
 * again) the shape is declined once and dnnl_sgemm runs it.
 *
 * Why, bf16 (mt_gemm_bf16): where oneDNN has bf16 brgemm kernels
 * (AVX512_BF16, AMX) every transpose, alpha and beta runs as a kept
 * matmul primitive. Under AMX (E1, 2026-11-28, bench/README.md "bf16 GEMMs
 * as matmul primitives under AMX") a step's bf16 GEMMs took 4.23 ms for
 * the mlp against 5.49 through dnnl_gemm_bf16bf16f32, 21.3 against 28.8
 * for the gpt and 12.0 against 14.0 for the CNN (the gpt's weight
 * gradients, K = 2048, are 7-26% slower: left). Strided operands (an
 * attention head's q, k, v, rows 3C apart) are declined, oneDNN's matmul
 * being its gemm then, and run dnnl_gemm_bf16bf16f32.
 *
 * A primitive is made for a call's key (sizes, leading dimensions,
 * transposes, alpha, beta, the operands' type) at its
 * first call, with oneDNN's threads at one: it runs only where the GEMM
 * has the calling thread alone (a -thread_split gemm column block, a
 * -thread_split batch thread's rows, a one-thread run), so its bits do not
 * depend on the thread count it meets. Each thread keeps its own table of
 * entries (each with its memory objects, stream and scratchpad): no lock
 * on a call, and the table a thread needs does not grow with the threads.
 * One table for all had to hold threads x keys entries: 16 threads of the
 * gpt's -thread_split batch need ~21 keys each, 336 entries, and a table
 * of 128 under that cyclic use would have evicted and remade a primitive
 * at nearly every call. */
#include "nn/gemm_matmul.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* entries a thread keeps, the least recently used going first (the gpt
 * under bf16 runs ~21 keys a thread) */
#define MAXE 64

/* what a primitive is made for: the call's shape, transposes, alpha and
 * beta, and A and B's type (C is fp32) */
typedef struct {
  int64_t M, N, K, lda, ldb, ldc;
  char ta, tb;
  int bf16, bias; /* bias: a row vector added to C's rows (matmul's bias) */
  /* swap: the forward 'N','T' of few rows computed as its transpose,
   * C^T (N,M) = B (N,K) A^T, into the entry's dense buffer and written
   * into C transposed, the bias added there (swap_rule) */
  int swap;
  float alpha, beta;
} key;

typedef struct {
  key k;
  int used;      /* a slot of the table                                     */
  int declined;  /* no brgemm kernel: the library's GEMM call               */
  uint64_t last; /* the tick of its last call                               */
  dnnl_primitive_t p;
  dnnl_memory_t a, b, c, bias, scratch;
  dnnl_stream_t strm;
  /* ldc > N (a -thread_split gemm column block, an attention head's slice):
   * the primitive writes a dense M x N here and the rows are copied out
   * (and in first, when beta is not 0); into rows ldc apart the matmul ran
   * 7% slower (fp32 128 x 512 x 1024 at ldc 1024: 153.8-154.3 GFLOP/s,
   * dense-and-copied 160.3-161.0, X1); a swapped key's C^T (N x M) */
  float *dense;
} entry;

/* a thread's table; every table is on the list (mt_sgemm_matmul_free and
 * _stats walk it) */
typedef struct table {
  entry e[MAXE];
  uint64_t tick;
  struct table *next;
} table;

static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER; /* the list and the engine */
static table *tables_;
static dnnl_engine_t eng_;
static _Thread_local table *mine_;

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
  if (e->bias) dnnl_memory_destroy(e->bias);
  if (e->scratch) dnnl_memory_destroy(e->scratch);
  if (e->strm) dnnl_stream_destroy(e->strm);
  free(e->dense);
  memset(e, 0, sizeof(*e));
}

/* the (r x c) matrix whose rows are sr elements apart and columns sc */
static dnnl_status_t md(dnnl_memory_desc_t *d, int64_t r, int64_t c, int64_t sr, int64_t sc,
                        dnnl_data_type_t t) {
  dnnl_dims_t dims = {r, c}, st = {sr, sc};
  return dnnl_memory_desc_init_by_strides(d, 2, dims, t, st);
}

/* alpha as the output scale, beta as a sum post-op; NULL on failure */
static dnnl_primitive_attr_t make_attr(const key *k) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
           dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
               dnnl_success &&
           (k->alpha == 1.0f ||
            dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success);
  if (ok && k->beta != 0.0f)
    ok = dnnl_post_ops_create(&po) == dnnl_success &&
         dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
  if (po) dnnl_post_ops_destroy(po);
  if (!ok && attr) dnnl_primitive_attr_destroy(attr);
  return ok ? attr : NULL;
}

/* e's primitive for its key, or e->declined */
static void make(entry *e) {
  const key *k = &e->k;
  const dnnl_data_type_t t = k->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t a, b, c, bias;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_matmul_desc_t d;
  const char *impl = "";
  /* The primitive's own product: the call's, or swapped ('N','T' only) C^T
   * (N,M) = B (N,K) A^T (K,M), B as its A and A as its B, the bias then
   * added as C is written (run). */
  const int64_t M = k->swap ? k->N : k->M, N = k->swap ? k->M : k->N;
  const int64_t lda = k->swap ? k->ldb : k->lda, ldb = k->swap ? k->lda : k->ldb;
  const int pbias = k->bias && !k->swap; /* the primitive carries the bias */
  /* C (M,N) = op(A) (M,K) op(B) (K,N); a transposed operand is the same
   * memory read with its strides swapped */
  int ok = (k->ta == 'N' ? md(&a, M, k->K, lda, 1, t) : md(&a, M, k->K, 1, lda, t)) ==
               dnnl_success &&
           (k->tb == 'N' ? md(&b, k->K, N, ldb, 1, t) : md(&b, k->K, N, 1, ldb, t)) ==
               dnnl_success &&
           md(&c, M, N, N, 1, dnnl_f32) == dnnl_success &&
           (!pbias || md(&bias, 1, N, N, 1, dnnl_f32) == dnnl_success) &&
           (attr = make_attr(k)) != NULL &&
           dnnl_matmul_desc_init(&d, &a, &b, pbias ? &bias : NULL, &c) == dnnl_success;
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
       (!pbias || dnnl_memory_create(&e->bias, &bias, eng_, DNNL_MEMORY_NONE) == dnnl_success) &&
       dnnl_memory_create(&e->scratch,
                          dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), eng_,
                          DNNL_MEMORY_ALLOCATE) == dnnl_success &&
       dnnl_stream_create(&e->strm, eng_, dnnl_stream_default_flags) == dnnl_success;
  if (ok && (k->ldc != k->N || k->swap)) {
    const size_t bytes = ((size_t)k->M * (size_t)k->N * sizeof(float) + 63) / 64 * 64;
    ok = (e->dense = aligned_alloc(64, bytes)) != NULL;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) {
    const entry keep = {.k = *k, .used = 1, .declined = 1, .last = e->last};
    release(e);
    *e = keep;
  }
}

static int same(const key *a, const key *b) {
  return a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda && a->ldb == b->ldb &&
         a->ldc == b->ldc && a->ta == b->ta && a->tb == b->tb && a->bf16 == b->bf16 &&
         a->bias == b->bias && a->swap == b->swap && a->alpha == b->alpha && a->beta == b->beta;
}

/* A thread's recent keys and their slots in its table, or -1 where oneDNN
 * declined the key (its answer for a key does not change): a call finds
 * its entry without scanning the table (the attention's per-head products
 * are thousands of calls a step). A slot is checked against its key
 * before use: it may have been given to another. */
#define MEMO 16
static _Thread_local struct {
  key k;
  int slot;
} memo_[MEMO];
static _Thread_local int memo_n_, memo_next_;

static int memo_find(const key *k) {
  for (int i = 0; i < memo_n_; i++)
    if (same(&memo_[i].k, k)) return i;
  return -1;
}

static void memo_put(int i, const key *k, int slot) {
  if (i < 0) {
    i = memo_n_ < MEMO ? memo_n_++ : memo_next_;
    memo_next_ = (i + 1) % MEMO;
  }
  memo_[i].k = *k;
  memo_[i].slot = slot;
}

/* the calling thread's table (made and listed at its first call), NULL
 * when out of memory or without an engine */
static table *my_table(void) {
  if (mine_) return mine_;
  table *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  pthread_mutex_lock(&lock_);
  if (!eng_ && dnnl_engine_create(&eng_, dnnl_cpu, 0) != dnnl_success) eng_ = NULL;
  const int ok = eng_ != NULL;
  if (ok) {
    t->next = tables_;
    tables_ = t;
  }
  pthread_mutex_unlock(&lock_);
  if (!ok) {
    free(t);
    return NULL;
  }
  return mine_ = t;
}

/* The calling thread's entry for the key: the memo's slot, else one found
 * in its table, else made in a free slot (or in the least recently used
 * entry's); NULL: the library's call (the key declined) */
static entry *take(const key *k) {
  const int m = memo_find(k);
  if (m >= 0 && memo_[m].slot < 0) return NULL;
  table *t = my_table();
  if (!t) return NULL;
  entry *got = NULL, *slot = NULL;
  if (m >= 0 && t->e[memo_[m].slot].used && same(&t->e[memo_[m].slot].k, k))
    got = &t->e[memo_[m].slot];
  for (int i = 0; !got && i < MAXE; i++) {
    entry *e = &t->e[i];
    if (e->used && same(&e->k, k)) got = e;
    if (!slot || (slot->used && (!e->used || e->last < slot->last))) slot = e;
  }
  if (!got) {
    release(slot);
    *slot = (entry){.k = *k, .used = 1};
    make(slot);
    got = slot;
  }
  got->last = ++t->tick;
  memo_put(m, k, got->declined ? -1 : (int)(got - t->e));
  return got->declined ? NULL : got;
}

/* C (M rows ldc apart, N columns) = D^T + bias: D is the swapped
 * primitive's dense N x M; in 16 x 16 tiles, whose 16 lines of D stay in L1
 * while C's rows are written */
static void transpose_out(int64_t M, int64_t N, const float *D, float *C, int64_t ldc,
                          const float *bias) {
  enum { T = 16 };
  for (int64_t r0 = 0; r0 < M; r0 += T)
    for (int64_t j0 = 0; j0 < N; j0 += T) {
      const int64_t r1 = r0 + T < M ? r0 + T : M, j1 = j0 + T < N ? j0 + T : N;
      for (int64_t r = r0; r < r1; r++) {
        float *c = C + r * ldc;
        if (bias) {
#pragma omp simd
          for (int64_t j = j0; j < j1; j++) c[j] = D[j * M + r] + bias[j];
        } else {
#pragma omp simd
          for (int64_t j = j0; j < j1; j++) c[j] = D[j * M + r];
        }
      }
    }
}

static dnnl_status_t run(entry *e, const void *A, const void *B, float *C, const float *bias) {
  const key *k = &e->k;
  if (k->swap) { /* its product C^T = B A^T into dense (beta is 0) */
    const void *t = A;
    A = B, B = t;
  }
  if (e->dense && k->beta != 0.0f)
    for (int64_t r = 0; r < k->M; r++)
      memcpy(e->dense + r * k->N, C + r * k->ldc, (size_t)k->N * sizeof(float));
  dnnl_status_t s = dnnl_memory_set_data_handle(e->a, (void *)A);
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->b, (void *)B);
  if (s == dnnl_success) s = dnnl_memory_set_data_handle(e->c, e->dense ? e->dense : C);
  if (s == dnnl_success && e->bias) s = dnnl_memory_set_data_handle(e->bias, (void *)bias);
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->a},
                             {DNNL_ARG_WEIGHTS, e->b},
                             {DNNL_ARG_DST, e->c},
                             {DNNL_ARG_SCRATCHPAD, e->scratch},
                             {DNNL_ARG_BIAS, e->bias}};
  if (s == dnnl_success) s = dnnl_primitive_execute(e->p, e->strm, e->bias ? 5 : 4, args);
  if (s == dnnl_success) s = dnnl_stream_wait(e->strm);
  if (s == dnnl_success && k->swap)
    transpose_out(k->M, k->N, e->dense, C, k->ldc, k->bias ? bias : NULL);
  else if (s == dnnl_success && e->dense)
    for (int64_t r = 0; r < k->M; r++)
      memcpy(C + r * k->ldc, e->dense + r * k->N, (size_t)k->N * sizeof(float));
  return s;
}

/* Runs k's call as a primitive: 1 and its status in *s, or 0 (declined:
 * the caller's library call). */
static int run_key(const key *k, const void *A, const void *B, float *C, const float *bias,
                   dnnl_status_t *s) {
  entry *e = take(k);
  if (!e) return 0;
  *s = run(e, A, B, C, bias);
  return 1;
}

void mt_gemm_rows_add(int64_t M, int64_t N, float *C, int64_t ldc, const float *bias) {
#pragma omp parallel for schedule(static) if (!mt_gemm_own_thread() && M * N > 65536)
  for (int64_t r = 0; r < M; r++) {
    float *c = C + r * ldc;
#pragma omp simd
    for (int64_t j = 0; j < N; j++) c[j] += bias[j];
  }
}

/* a call's key, or 0 when its arguments are not ones a primitive takes */
static int call_key(key *k, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                    int64_t lda, int64_t ldb, float beta, int64_t ldc, int bf16, int bias) {
  ta = ta == 't' ? 'T' : ta == 'n' ? 'N' : ta;
  tb = tb == 't' ? 'T' : tb == 'n' ? 'N' : tb;
  *k = (key){M, N, K, lda, ldb, ldc, ta, tb, bf16, bias, 0, alpha, beta};
  /* oneDNN 2.x scales the bias with the output scale: alpha 1 only */
  if (bias && alpha != 1.0f) return 0;
  return (ta == 'N' || ta == 'T') && (tb == 'N' || tb == 'T') && M > 0 && N > 0 && K > 0 &&
         lda >= (ta == 'N' ? K : M) && ldb >= (tb == 'N' ? N : K) && ldc >= N &&
         mt_gemm_own_thread();
}

/* The call through a kept primitive where one takes it: 1 and its status
 * in *s, else 0 (the caller's library call, then with_bias) */
static int kept(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                int64_t lda, const void *B, int64_t ldb, float beta, float *C, int64_t ldc,
                int bf16, const float *bias, dnnl_status_t *s) {
  key k;
  return call_key(&k, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, bf16, bias != NULL) &&
         run_key(&k, A, B, C, bias, s);
}

/* a library call's status s, its C given the bias */
static dnnl_status_t with_bias(dnnl_status_t s, int64_t M, int64_t N, float *C, int64_t ldc,
                               const float *bias) {
  if (s == dnnl_success && bias) mt_gemm_rows_add(M, N, C, ldc, bias);
  return s;
}

/* the fp32 call through a kept primitive where one takes it, else
 * dnnl_sgemm (and the bias as a pass over C) */
static dnnl_status_t sgemm_any(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, int64_t lda, const float *B, int64_t ldb,
                               float beta, float *C, int64_t ldc, const float *bias) {
  dnnl_status_t s;
  if (kept(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0, bias, &s)) return s;
  return with_bias(dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), M, N, C, ldc,
                   bias);
}

dnnl_status_t mt_sgemm_matmul_any(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                  const float *A, int64_t lda, const float *B, int64_t ldb,
                                  float beta, float *C, int64_t ldc) {
  return sgemm_any(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

/* -1: swap_rule, 0: never, 1: every forward a primitive takes */
static int swap_mode_ = -1;

void mt_sgemm_forward_swap(int mode) { swap_mode_ = mode < 0 ? -1 : mode > 0; }

/* Where the forward of few rows runs as its transpose: C^T = B A^T. The
 * matmul's brgemm kernels copy a transposed B (here the weights, N x K)
 * into their layout at every call, a cost the call's M rows share; swapped,
 * the copy is A's, M x K, and the output's transpose is M x N, both small.
 * One thread, X1 (2026-11-29, bench/README.md "The forward of few rows as
 * its transpose"), with the output's transpose against the matmul with
 * its bias: 64 x 1024 x 1024 at 1.17x, 64 x 1024 x 784 1.18x, 32 rows
 * 1.41x, 128 x 1024 x 1024 1.03-1.08x, 128 x 512 x 1024 (a -threads 2
 * column block) 1.05x; 192 rows 0.99x, 256 rows 0.95x, and 128 x 128 x
 * 3136 (the CNN's hidden layer) 0.99x. The same bits: each output is the
 * same dot product, in the same order over K (test_gemm_matmul compares
 * the two ways). */
static int swap_rule(int64_t M, int64_t N, int64_t K) {
  return swap_mode_ < 0 ? M <= 128 && N >= 256 && K >= 256 : swap_mode_;
}

dnnl_status_t mt_sgemm_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                            const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                            float *C, int64_t ldc, const float *bias) {
  if (ta == 'N' && tb == 'T' && alpha == 1.0f && beta == 0.0f) {
    key k;
    dnnl_status_t s;
    if (swap_rule(M, N, K) &&
        call_key(&k, ta, tb, M, N, K, alpha, lda, ldb, beta, ldc, 0, bias != NULL)) {
      k.swap = 1;
      if (run_key(&k, A, B, C, bias, &s)) return s;
    }
    return sgemm_any(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  }
  return with_bias(dnnl_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), M, N, C, ldc,
                   bias);
}

dnnl_status_t mt_sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       float *C, int64_t ldc) {
  return mt_sgemm_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

dnnl_status_t mt_gemm_bf16_bias(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                                float beta, float *C, int64_t ldc, const float *bias) {
  dnnl_status_t s;
  if (kept(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1, bias, &s)) return s;
  return with_bias(dnnl_gemm_bf16bf16f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), M,
                   N, C, ldc, bias);
}

dnnl_status_t mt_gemm_bf16(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                           const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                           float beta, float *C, int64_t ldc) {
  return mt_gemm_bf16_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

void mt_sgemm_matmul_stats(int *kept, int *declined) {
  *kept = *declined = 0;
  pthread_mutex_lock(&lock_);
  for (const table *t = tables_; t; t = t->next)
    for (int i = 0; i < MAXE; i++) {
      *kept += t->e[i].used && !t->e[i].declined;
      *declined += t->e[i].used && t->e[i].declined;
    }
  pthread_mutex_unlock(&lock_);
}

void mt_sgemm_matmul_free(void) {
  pthread_mutex_lock(&lock_);
  for (table *t = tables_; t; t = t->next)
    for (int i = 0; i < MAXE; i++) release(&t->e[i]);
  pthread_mutex_unlock(&lock_);
}
