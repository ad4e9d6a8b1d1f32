/* A packed fp32 GEMM for AVX2 + FMA (gemm_pack.h), the classic blocking of
 * Goto's and BLIS's papers: op(B) in KC x NC blocks packed into panels of 16
 * columns, op(A) in MC x KC blocks packed into panels of 6 rows, and a 6x16
 * micro-kernel holding C's tile in 12 ymm registers over the KC loop.
 * Packing reads either layout, so 'N' and 'T' cost the same: why it exists
 * (dnnl_sgemm runs the MLP's input-gradient shape, row-major 'N','N', at
 * about half its 'N','T' speed on this machine, and the gpt's 'T','N'
 * weight gradients of 2048 rows at 0.7-0.85x ours; bench/README.md; the
 * shapes it takes: mt_gemm_pack_wins). */
#include "nn/gemm_pack.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define MT_PACK_AVX2 1
#else
#define MT_PACK_AVX2 0
#endif

#define MR 6
#define NR 16
#define KC 256
/* op(A)'s block rows, whole panels: 'N' packs KC floats of each row
 * whatever the block's height; 'T' reads a row of A for each k, the
 * block's width of it, so a tall block reads long runs (516 rows: the
 * gpt's 512-wide weight gradients in one block, 1.2x the 96-row blocks
 * there: bench/README.md "The weight gradients of many rows") */
#define MC_N 96
#define MC_T (86 * MR)
#define NC 1024

int mt_gemm_pack_available(void) {
#if MT_PACK_AVX2
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

int mt_gemm_pack_wins(char ta, char tb, int64_t M, int64_t N, int64_t K) {
  if (ta == 'T' && tb == 'N') return K >= 1024 && M * N >= 65536 && M * N <= 262144;
  return ta == 'N' && tb == 'N' && M <= 384 && N >= 512 && K >= 256;
}

#if MT_PACK_AVX2
/* the caller thread's packing buffers, made once, kept for its next call
 * (never freed: mpitrain's threads live as long as the process) */
static _Thread_local float *pack_a, *pack_b;

static float *buffers(void) {
  if (!pack_a) pack_a = aligned_alloc(64, sizeof(float) * MC_T * KC);
  if (!pack_b) pack_b = aligned_alloc(64, sizeof(float) * KC * NC);
  return pack_a && pack_b ? pack_a : NULL;
}

/* one panel of w interleaved vectors: dst[k * w + r] = src[r * ld + k] for
 * the n (<= w) vectors of kc floats at src, ld apart, and 0 for r >= n */
static void interleave(float *dst, int w, const float *src, int64_t ld, int n, int kc) {
  for (int r = 0; r < w; r++) {
    if (r < n)
      for (int k = 0; k < kc; k++) dst[k * w + r] = src[r * ld + k];
    else
      for (int k = 0; k < kc; k++) dst[k * w + r] = 0;
  }
}

/* op(A)[i0.., k0..] (mc x kc) into panels of MR rows: panel p, step k holds
 * rows p*MR..p*MR+5 at k; rows past mc are zero */
static void pack_A(float *dst, char ta, const float *A, int64_t lda, int64_t i0, int64_t k0,
                   int mc, int kc) {
  if (ta == 'T') {
    /* row k0 + k of A holds step k of every panel: read once, whole.
     * Panel by panel instead (six floats of each of kc rows, the rows 2
     * KiB apart at the gpt's 512-wide weight gradients) the packing had
     * cost a third of the products' time there. */
    for (int k = 0; k < kc; k++) {
      const float *src = A + (k0 + k) * lda + i0;
      float *d = dst + k * MR;
      int p = 0;
      for (; p + MR <= mc; p += MR, d += (size_t)MR * kc)
        for (int r = 0; r < MR; r++) d[r] = src[p + r];
      if (p < mc)
        for (int r = 0; r < MR; r++) d[r] = p + r < mc ? src[p + r] : 0;
    }
    return;
  }
  for (int p = 0; p < mc; p += MR, dst += (size_t)MR * kc)
    interleave(dst, MR, A + (i0 + p) * lda + k0, lda, mc - p < MR ? mc - p : MR, kc);
}

/* op(B)[k0.., j0..] (kc x nc) into panels of NR columns; columns past nc are
 * zero. 'N' row by row: each row of B read whole, in order, its 64-byte
 * pieces spread over the panels. Panel by panel instead (16 floats of every
 * row, the rows 4 KiB apart at the MLP's 1024 columns: a page apart, which
 * the hardware prefetchers do not follow) the packing of a 1024 x 1024 B
 * had cost ~1.1 ms a call on the AVX2 EPYC, as much as the products of 64
 * rows: 39.3 GFLOP/s at 64 x 1024 x 1024 against 55.8 row by row (medians
 * of 7 gemm_shapes processes; bench/README.md "The input gradient's
 * packing"). */
static void pack_B(float *dst, char tb, const float *B, int64_t ldb, int64_t k0, int64_t j0,
                   int kc, int nc) {
  const int full = nc / NR * NR, cols = nc - full; /* whole panels; the last one's columns */
  if (tb == 'N') {
    for (int k = 0; k < kc; k++) {
      const float *src = B + (k0 + k) * ldb + j0;
      float *d = dst + k * NR;
      for (int p = 0; p < full; p += NR, d += (size_t)NR * kc) {
        _mm256_store_ps(d, _mm256_loadu_ps(src + p));
        _mm256_store_ps(d + 8, _mm256_loadu_ps(src + p + 8));
      }
      for (int c = 0; c < NR && cols; c++) d[c] = c < cols ? src[full + c] : 0;
    }
    return;
  }
  for (int p = 0; p < nc; p += NR, dst += (size_t)NR * kc)
    interleave(dst, NR, B + (j0 + p) * ldb + k0, ldb, nc - p < NR ? nc - p : NR, kc);
}

/* C tile (MR x NR, ldc) = or += Ap (kc x MR) . Bp (kc x NR) */
static void kernel(int kc, const float *Ap, const float *Bp, float *C, int64_t ldc, int add) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int k = 0; k < kc; k++) {
    __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8), a;
    a = _mm256_broadcast_ss(Ap + 0), c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(Ap + 1), c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(Ap + 2), c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(Ap + 3), c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(Ap + 4), c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(Ap + 5), c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
    Ap += MR;
    Bp += NR;
  }
  __m256 r[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < MR; i++) {
    float *o = C + i * ldc;
    if (add) {
      r[i][0] = _mm256_add_ps(r[i][0], _mm256_loadu_ps(o));
      r[i][1] = _mm256_add_ps(r[i][1], _mm256_loadu_ps(o + 8));
    }
    _mm256_storeu_ps(o, r[i][0]);
    _mm256_storeu_ps(o + 8, r[i][1]);
  }
}

/* the GEMM on the calling thread (sizes checked, M, N, K > 0) */
static int gemm_serial(char ta, char tb, int64_t M, int64_t N, int64_t K, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc) {
  float *pa = buffers(), *pb = pack_b;
  if (!pa) return -1;
  float edge[MR * NR];
  const int mcb = ta == 'T' ? MC_T : MC_N;
  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    int nc = N - j0 < NC ? (int)(N - j0) : NC;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      int kc = K - k0 < KC ? (int)(K - k0) : KC;
      /* the first K block applies beta; the others add */
      int add = k0 > 0 || beta != 0;
      pack_B(pb, tb, B, ldb, k0, j0, kc, nc);
      for (int64_t i0 = 0; i0 < M; i0 += mcb) {
        int mc = M - i0 < mcb ? (int)(M - i0) : mcb;
        pack_A(pa, ta, A, lda, i0, k0, mc, kc);
        for (int jr = 0; jr < nc; jr += NR) {
          const float *bp = pb + (size_t)jr * kc;
          int cols = nc - jr < NR ? nc - jr : NR;
          for (int ir = 0; ir < mc; ir += MR) {
            const float *ap = pa + (size_t)ir * kc;
            int rows = mc - ir < MR ? mc - ir : MR;
            float *c = C + (i0 + ir) * ldc + j0 + jr;
            if (rows == MR && cols == NR) {
              kernel(kc, ap, bp, c, ldc, add);
              continue;
            }
            /* a partial tile: through a full one of our own */
            kernel(kc, ap, bp, edge, NR, 0);
            for (int i = 0; i < rows; i++)
              for (int j = 0; j < cols; j++)
                c[i * ldc + j] = add ? c[i * ldc + j] + edge[i * NR + j] : edge[i * NR + j];
          }
        }
      }
    }
  }
  return 0;
}

int mt_gemm_pack(char ta, char tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if ((ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T') || (beta != 0 && beta != 1) || M < 0 ||
      N < 0 || K < 0 || !mt_gemm_pack_available())
    return -1;
  if (M == 0 || N == 0) return 0;
  if (K == 0) {
    if (beta == 0)
      for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * N);
    return 0;
  }
  int nt = 1;
#ifdef _OPENMP
  if (!omp_in_parallel()) nt = omp_get_max_threads();
#endif
  /* threads split C's columns in whole panels, each packs its own blocks
   * (op(A) is packed once per thread: small beside op(B) at these shapes) */
  int64_t per = ((N + nt - 1) / nt + NR - 1) / NR * NR;
  if (nt <= 1 || per >= N || (double)M * N * K < 1 << 20)
    return gemm_serial(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  int err = 0;
#pragma omp parallel for schedule(static) num_threads(nt) reduction(| : err)
  for (int t = 0; t < nt; t++) {
    int64_t j = t * per, n = N - j < per ? N - j : per;
    if (n > 0)
      err |= gemm_serial(ta, tb, M, n, K, A, lda, tb == 'N' ? B + j : B + j * ldb, ldb, beta,
                         C + j, ldc);
  }
  return err ? -1 : 0;
}
#else
int mt_gemm_pack(char ta, char tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb;
  (void)beta, (void)C, (void)ldc;
  return -1;
}
#endif
