/* Unit tests of the nn layers (src/nn/nn.h):
 *  - mt_gemm against a naive triple loop, all four transpose combinations,
 *    odd non-square sizes, padded leading dimensions, beta 0 and 1; 'N','N'
 *    and 'T','N' of many rows at sizes that take --with-gemm=pack's kernel
 *    (mt_gemm_pack_wins; several blocks of each dimension, partial tiles),
 *    and that kernel (nn/gemm_pack.h) itself in all four transposes, on 1
 *    and 2 threads (bit for bit the same);
 *  - every layer forward and backward against PyTorch references written by
 *    validation/gen_refs.py (1e-5 relative);
 *  - every backward against central finite differences of the forward;
 *  - backward ADDS (twice gives twice) and mt_relu_backward works in place;
 *  - mt_vexp (nn/fastmath.h: GELU's and the softmaxes' exponential) against
 *    double exp over every 31st float of [-87, 88] and at the edges and
 *    special values.
 * Prints one line per check; exits non-zero when any check fails. */
#include "nn/fastmath.h"
#include "nn/gemm_pack.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define REF_TOL 1e-5

/* ------------------------------------------------------------------ gemm */

static double naive_elem(char ta, char tb, int64_t i, int64_t j, int64_t K, const float *A,
                         int64_t lda, const float *B, int64_t ldb) {
  double s = 0;
  for (int64_t k = 0; k < K; k++) {
    double a = ta == 'N' ? A[i * lda + k] : A[k * lda + i];
    double b = tb == 'N' ? B[k * ldb + j] : B[j * ldb + k];
    s += a * b;
  }
  return s;
}

/* One gemm case; pad > 0 adds that many unused columns to every matrix and
 * checks that they are left alone. */
static void gemm_case(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                      int pad, uint64_t *rng) {
  int64_t arows = ta == 'N' ? M : K, acols = ta == 'N' ? K : M;
  int64_t brows = tb == 'N' ? K : N, bcols = tb == 'N' ? N : K;
  int64_t lda = acols + pad, ldb = bcols + pad, ldc = N + pad;
  float *A = malloc((size_t)(arows * lda) * sizeof(float));
  float *B = malloc((size_t)(brows * ldb) * sizeof(float));
  float *C = malloc((size_t)(M * ldc) * sizeof(float));
  float *C0 = malloc((size_t)(M * ldc) * sizeof(float));
  float *got = malloc((size_t)(M * N) * sizeof(float));
  double *want = malloc((size_t)(M * N) * sizeof(double));
  tu_fill(A, (size_t)(arows * lda), rng, 1.0f);
  tu_fill(B, (size_t)(brows * ldb), rng, 1.0f);
  tu_fill(C0, (size_t)(M * ldc), rng, 1.0f);
  memcpy(C, C0, (size_t)(M * ldc) * sizeof(float));
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++)
      want[i * N + j] = alpha * naive_elem(ta, tb, i, j, K, A, lda, B, ldb) +
                        (beta != 0 ? (double)beta * C0[i * ldc + j] : 0.0);
  int rc = mt_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
  int pad_ok = 1;
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) got[i * N + j] = C[i * ldc + j];
    for (int64_t j = N; j < ldc; j++) pad_ok &= C[i * ldc + j] == C0[i * ldc + j];
  }
  char what[160];
  snprintf(what, sizeof(what), "gemm %c%c M=%lld N=%lld K=%lld alpha=%g beta=%g pad=%d", ta, tb,
           (long long)M, (long long)N, (long long)K, alpha, beta, pad);
  CHECK(rc == 0, "%s: returns 0", what);
  double num = 0, den = 0;
  for (int64_t i = 0; i < M * N; i++) {
    num = fmax(num, fabs(got[i] - want[i]));
    den = fmax(den, fabs(want[i]));
  }
  CHECK_ERR(num / fmax(den, 1e-30), REF_TOL, "%s", what);
  if (pad) CHECK(pad_ok, "%s: padding columns of C untouched", what);
  free(A), free(B), free(C), free(C0), free(got), free(want);
}

/* BLAS convention: with beta == 0, C is output only (NaN in it is ignored). */
static void gemm_beta0_nan(void) {
  float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, -1, 2, 0.5f, 0, 3}, C[4];
  for (int i = 0; i < 4; i++) C[i] = NAN;
  int rc = mt_gemm('N', 'N', 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2, NULL);
  float want[4] = {1 + 4 + 0, -1 + 1 + 9, 4 + 10 + 0, -4 + 2.5f + 18};
  CHECK(rc == 0 && tu_rel_err_f(C, want, 4) <= REF_TOL, "gemm beta=0 ignores NaN already in C");
}

/* The same for a weight gradient's shape ('T','N', M x N = 160 x 128 from
 * K = 16 rows): C all NaN, every element written. */
static void gemm_tn_beta0_nan(void) {
  enum { M = 160, N = 128, K = 16 };
  float *A = malloc(K * M * sizeof(float)), *B = malloc(K * N * sizeof(float));
  float *C = malloc(M * N * sizeof(float));
  for (int i = 0; i < K * M; i++) A[i] = (float)(i % 7) - 3.0f;
  for (int i = 0; i < K * N; i++) B[i] = (float)(i % 5) * 0.5f;
  for (int i = 0; i < M * N; i++) C[i] = NAN;
  const int rc = mt_gemm('T', 'N', M, N, K, 1.0f, A, M, B, N, 0.0f, C, N, NULL);
  int ok = rc == 0;
  for (int i = 0; i < M && ok; i++)
    for (int j = 0; j < N; j++) {
      float w = 0; /* small integers and halves: exact in any order */
      for (int k = 0; k < K; k++) w += A[k * M + i] * B[k * N + j];
      ok &= C[i * N + j] == w;
    }
  CHECK(ok, "gemm TN M=%d N=%d K=%d beta=0 ignores NaN already in C, writes every element", M,
        N, K);
  free(A), free(B), free(C);
}

/* mt_gemm_pack directly: every transpose, blocks crossed in M, N and K
 * (MC 96 rows for 'N' A and 516 for 'T', NC 1024, KC 256) with partial
 * tiles; beta 0 over NaN and beta 1; the column split of 2 threads gives
 * the 1-thread result bit for bit. */
static void pack_case(char ta, char tb, int64_t M, int64_t N, int64_t K, float beta,
                      uint64_t *rng) {
  int64_t lda = (ta == 'N' ? K : M) + 1, ldb = (tb == 'N' ? N : K) + 2, ldc = N + 3;
  size_t na = (size_t)((ta == 'N' ? M : K) * lda), nb = (size_t)((tb == 'N' ? K : N) * ldb);
  size_t nc = (size_t)(M * ldc);
  float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float));
  float *C0 = malloc(nc * sizeof(float)), *C1 = malloc(nc * sizeof(float));
  float *C2 = malloc(nc * sizeof(float));
  tu_fill(A, na, rng, 1.0f);
  tu_fill(B, nb, rng, 1.0f);
  tu_fill(C0, nc, rng, 1.0f);
  if (beta == 0)
    for (size_t i = 0; i < nc; i++)
      if (i % (size_t)ldc < (size_t)N) C0[i] = NAN;
  memcpy(C1, C0, nc * sizeof(float));
  memcpy(C2, C0, nc * sizeof(float));
  int rc1 = 0, rc2 = 0;
#ifdef _OPENMP
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  rc1 = mt_gemm_pack(ta, tb, M, N, K, A, lda, B, ldb, beta, C1, ldc);
  omp_set_num_threads(2);
  rc2 = mt_gemm_pack(ta, tb, M, N, K, A, lda, B, ldb, beta, C2, ldc);
  omp_set_num_threads(nt);
#else
  rc1 = rc2 = mt_gemm_pack(ta, tb, M, N, K, A, lda, B, ldb, beta, C1, ldc);
  memcpy(C2, C1, nc * sizeof(float));
#endif
  double num = 0, den = 0;
  int pad_ok = 1;
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) {
      double want = naive_elem(ta, tb, i, j, K, A, lda, B, ldb) + (beta != 0 ? C0[i * ldc + j] : 0);
      num = fmax(num, fabs(C1[i * ldc + j] - want));
      den = fmax(den, fabs(want));
    }
    for (int64_t j = N; j < ldc; j++) pad_ok &= C1[i * ldc + j] == C0[i * ldc + j];
  }
  char what[120];
  snprintf(what, sizeof(what), "gemm_pack %c%c M=%lld N=%lld K=%lld beta=%g", ta, tb, (long long)M,
           (long long)N, (long long)K, beta);
  CHECK(rc1 == 0 && rc2 == 0, "%s: returns 0", what);
  CHECK_ERR(num / fmax(den, 1e-30), REF_TOL, "%s", what);
  CHECK(pad_ok, "%s: padding columns of C untouched", what);
  CHECK(memcmp(C1, C2, nc * sizeof(float)) == 0, "%s: 2 threads == 1 thread bit for bit", what);
  free(A), free(B), free(C0), free(C1), free(C2);
}

static void test_gemm_pack(void) {
  if (!mt_gemm_pack_available()) {
    printf("ok - gemm_pack # SKIP no AVX2/FMA kernel in this build or CPU\n");
    return;
  }
  float c = 5;
  CHECK(mt_gemm_pack('N', 'N', 1, 1, 1, &c, 1, &c, 1, 0.5f, &c, 1) == -1 && c == 5,
        "gemm_pack declines beta 0.5, writes nothing");
  CHECK(mt_gemm_pack('C', 'N', 1, 1, 1, &c, 1, &c, 1, 0.0f, &c, 1) == -1 && c == 5,
        "gemm_pack declines op 'C', writes nothing");
  uint64_t rng = 23;
  const char tr[2] = {'N', 'T'};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      pack_case(tr[a], tr[b], 101, 1043, 70, 0.0f, &rng);
      pack_case(tr[a], tr[b], 37, 53, 300, 1.0f, &rng);
      pack_case(tr[a], tr[b], 530, 40, 270, (float)b, &rng); /* 'T': past a block of 516 */
    }
}

static void test_gemm(void) {
  uint64_t rng = 11;
  const char tr[2] = {'N', 'T'};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      gemm_case(tr[a], tr[b], 7, 5, 9, 1.0f, 0.0f, 0, &rng);
      gemm_case(tr[a], tr[b], 7, 5, 9, 0.75f, 1.0f, 0, &rng);
      gemm_case(tr[a], tr[b], 13, 1, 3, 1.0f, 1.0f, 0, &rng);
      gemm_case(tr[a], tr[b], 1, 17, 33, -0.5f, 0.0f, 0, &rng);
      gemm_case(tr[a], tr[b], 31, 19, 65, 1.0f, 1.0f, 3, &rng);
    }
  /* 'N','N' at M <= 384, N >= 512, K >= 256 on one thread: --with-gemm=pack's
   * kernel, blocks crossed, partial tiles; on 2 threads: dnnl_sgemm */
#ifdef _OPENMP
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  gemm_case('N', 'N', 101, 1043, 300, 1.0f, 0.0f, 3, &rng);
  gemm_case('N', 'N', 70, 515, 257, 1.0f, 1.0f, 1, &rng);
#ifdef _OPENMP
  omp_set_num_threads(2);
  gemm_case('N', 'N', 70, 515, 257, 1.0f, 1.0f, 1, &rng);
  omp_set_num_threads(nt);
#endif
  /* the weight gradients' shape ('T','N', K rows of a batch) at one and
   * two threads, padded and not, beta 0 and 1 */
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
  gemm_case('T', 'N', 300, 70, 64, 1.0f, 0.0f, 3, &rng);
  gemm_case('T', 'N', 257, 129, 33, 1.0f, 1.0f, 1, &rng);
  gemm_case('T', 'N', 1024, 16, 7, 1.0f, 1.0f, 0, &rng);
  gemm_case('T', 'N', 300, 70, 64, 0.5f, 1.0f, 0, &rng);
  /* of many rows (K >= 1024) into 64 Ki-256 Ki entries: --with-gemm=pack's
   * kernel where built (mt_gemm_pack_wins), K's blocks crossed */
  gemm_case('T', 'N', 256, 260, 1100, 1.0f, 1.0f, 2, &rng);
  gemm_case('T', 'N', 70, 1000, 1030, 1.0f, 0.0f, 0, &rng);
  gemm_tn_beta0_nan();
#ifdef _OPENMP
  omp_set_num_threads(2);
  gemm_case('T', 'N', 300, 70, 64, 1.0f, 1.0f, 2, &rng);
  /* 'N','T' with N >= 512 on 2 threads: a block of columns each (the
   * second one partial at N = 777), beta 0 and 1, alpha 0.5 */
  gemm_case('N', 'T', 70, 777, 300, 1.0f, 0.0f, 3, &rng);
  gemm_case('N', 'T', 128, 1024, 64, 1.0f, 1.0f, 0, &rng);
  gemm_case('N', 'T', 33, 512, 17, 0.5f, 1.0f, 1, &rng);
  omp_set_num_threads(nt);
#endif
  gemm_beta0_nan();
  test_gemm_pack();
}

/* ----------------------------------------------------- finite differences */

/* A scalar loss of a float vector, evaluated in double. */
typedef double (*loss_fn)(void *ctx);

/* Central differences of loss() with respect to x[0..n-1] (x is modified and
 * restored). The step actually taken is the difference of the two rounded
 * float inputs, so no rounding of x +- h enters the quotient. */
static void fd_grad(double *g, float *x, int64_t n, float h, loss_fn loss, void *ctx) {
  for (int64_t i = 0; i < n; i++) {
    float x0 = x[i];
    float xp = x0 + h, xm = x0 - h;
    x[i] = xp;
    double lp = loss(ctx);
    x[i] = xm;
    double lm = loss(ctx);
    x[i] = x0;
    g[i] = (lp - lm) / ((double)xp - (double)xm);
  }
}

/* Like fd_grad, Richardson-extrapolated from steps h and h/2: the h^2 error
 * term cancels, which suits smooth non-linear losses. */
static void fd_grad_rich(double *g, float *x, int64_t n, float h, loss_fn loss, void *ctx) {
  double *g2 = malloc((size_t)n * sizeof(double));
  fd_grad(g, x, n, h, loss, ctx);
  fd_grad(g2, x, n, h / 2, loss, ctx);
  for (int64_t i = 0; i < n; i++) g[i] = (4 * g2[i] - g[i]) / 3;
  free(g2);
}

/* sum(out * R) in double. */
static double weighted_sum(const float *out, const float *R, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)out[i] * R[i];
  return s;
}

/* ---------------------------------------------------------------- linear */

static void test_linear_ref(int B, int IC, int OC) {
  char file[64], what[64];
  snprintf(file, sizeof(file), "linear_%d_%d_%d.txt", B, IC, OC);
  snprintf(what, sizeof(what), "linear B=%d IC=%d OC=%d", B, IC, OC);
  tu_ref r;
  tu_ref_load(&r, file);
  float *inp = tu_ref_floats(&r, "inp", (int64_t)B * IC);
  float *w = tu_ref_floats(&r, "w", (int64_t)OC * IC);
  float *b = tu_ref_floats(&r, "b", OC);
  float *dout = tu_ref_floats(&r, "dout", (int64_t)B * OC);
  const tu_tensor *rout = tu_ref_get(&r, "out", (int64_t)B * OC);
  const tu_tensor *rdinp = tu_ref_get(&r, "dinp", (int64_t)B * IC);
  const tu_tensor *rdw = tu_ref_get(&r, "dw", (int64_t)OC * IC);
  const tu_tensor *rdb = tu_ref_get(&r, "db", OC);
  float *out = calloc((size_t)B * OC, sizeof(float));
  float *dinp = calloc((size_t)B * IC, sizeof(float));
  float *dw = calloc((size_t)OC * IC, sizeof(float));
  float *db = calloc((size_t)OC, sizeof(float));
  double *twice = malloc((size_t)(B * IC + OC * IC + OC + B * OC) * sizeof(double));

  CHECK(mt_linear_forward(out, inp, w, b, B, IC, OC, NULL) == 0, "%s forward returns 0", what);
  CHECK_CLOSE_REF(out, rout, REF_TOL, "%s forward", what);
  CHECK(mt_linear_backward(dinp, dw, db, dout, inp, w, B, IC, OC, NULL) == 0,
        "%s backward returns 0", what);
  CHECK_CLOSE_REF(dinp, rdinp, REF_TOL, "%s backward dinp", what);
  CHECK_CLOSE_REF(dw, rdw, REF_TOL, "%s backward dw", what);
  CHECK_CLOSE_REF(db, rdb, REF_TOL, "%s backward db", what);

  /* a second call adds: twice the reference */
  mt_linear_backward(dinp, dw, db, dout, inp, w, B, IC, OC, NULL);
  for (int64_t i = 0; i < rdinp->n; i++) twice[i] = 2 * rdinp->v[i];
  CHECK_ERR(tu_rel_err_fd(dinp, twice, (size_t)rdinp->n), REF_TOL, "%s backward adds: dinp", what);
  for (int64_t i = 0; i < rdw->n; i++) twice[i] = 2 * rdw->v[i];
  CHECK_ERR(tu_rel_err_fd(dw, twice, (size_t)rdw->n), REF_TOL, "%s backward adds: dw", what);
  for (int64_t i = 0; i < rdb->n; i++) twice[i] = 2 * rdb->v[i];
  CHECK_ERR(tu_rel_err_fd(db, twice, (size_t)rdb->n), REF_TOL, "%s backward adds: db", what);

  /* dinp and db may be NULL; the bias may be NULL */
  memset(dw, 0, (size_t)OC * IC * sizeof(float));
  CHECK(mt_linear_backward(NULL, dw, NULL, dout, inp, w, B, IC, OC, NULL) == 0,
        "%s backward with dinp = db = NULL returns 0", what);
  CHECK_CLOSE_REF(dw, rdw, REF_TOL, "%s backward dw alone", what);
  CHECK(mt_linear_forward(out, inp, w, NULL, B, IC, OC, NULL) == 0, "%s forward, no bias", what);
  for (int i = 0; i < B; i++)
    for (int o = 0; o < OC; o++) twice[i * OC + o] = rout->v[i * OC + o] - b[o];
  CHECK_ERR(tu_rel_err_fd(out, twice, (size_t)B * OC), REF_TOL, "%s forward without bias", what);

  free(inp), free(w), free(b), free(dout), free(out), free(dinp), free(dw), free(db), free(twice);
  tu_ref_free(&r);
}

/* What mt_linear_*_ex fuse equals the separate passes bit for bit: the
 * ReLU after the bias; its mask on dout; and with MT_LINEAR_SET_* the
 * gradients written over buffers of NaN (an element left unwritten, or a
 * GEMM with beta 0 that still reads its output, shows as NaN) as when
 * added to zeros. 8 x 512 x 256 takes the packed kernel for dinp where
 * it is built (nn/gemm.c). */
static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

static void test_linear_fused(int B, int IC, int OC) {
  char what[64];
  snprintf(what, sizeof(what), "fused linear B=%d IC=%d OC=%d", B, IC, OC);
  const size_t nx = (size_t)B * IC, nw = (size_t)OC * IC, ny = (size_t)B * OC;
  uint64_t st = 0x5eed + (uint64_t)B * 131 + (uint64_t)IC * 7 + (uint64_t)OC;
  float *inp = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
  float *b = malloc((size_t)OC * sizeof(float)), *g = malloc(ny * sizeof(float));
  float *y1 = malloc(ny * sizeof(float)), *y2 = malloc(ny * sizeof(float));
  float *d1 = malloc(ny * sizeof(float)), *d2 = malloc(ny * sizeof(float));
  float *dx1 = calloc(nx, sizeof(float)), *dx2 = malloc(nx * sizeof(float));
  float *dw1 = calloc(nw, sizeof(float)), *dw2 = malloc(nw * sizeof(float));
  float *db1 = calloc((size_t)OC, sizeof(float)), *db2 = malloc((size_t)OC * sizeof(float));
  tu_fill(inp, nx, &st, 1.0f);
  tu_fill(w, nw, &st, 1.0f);
  tu_fill(b, (size_t)OC, &st, 0.5f);
  tu_fill(g, ny, &st, 1.0f);
  /* forward: bias + ReLU in one pass, or two */
  CHECK(mt_linear_forward(y1, inp, w, b, B, IC, OC, NULL) == 0, "%s: forward", what);
  mt_relu_forward(y1, y1, (int64_t)ny);
  CHECK(mt_linear_forward_ex(y2, inp, w, b, B, IC, OC, MT_LINEAR_RELU, NULL) == 0,
        "%s: forward_ex returns 0", what);
  int neg = 0;
  for (size_t i = 0; i < ny; i++) neg += y1[i] == 0;
  CHECK(neg > 0 && neg < (int)ny, "%s: the ReLU cuts some outputs (%d of %zu)", what, neg, ny);
  CHECK(same_bits(y1, y2, ny), "%s: forward with MT_LINEAR_RELU == forward, relu", what);
  /* backward: the mask, then the gradients added to zeros */
  memcpy(d1, g, ny * sizeof(float));
  mt_relu_backward(d1, d1, y1, (int64_t)ny);
  CHECK(mt_linear_backward(dx1, dw1, db1, d1, inp, w, B, IC, OC, NULL) == 0, "%s: backward", what);
  /* fused, written over NaN */
  memcpy(d2, g, ny * sizeof(float));
  for (size_t i = 0; i < nx; i++) dx2[i] = NAN;
  for (size_t i = 0; i < nw; i++) dw2[i] = NAN;
  for (int i = 0; i < OC; i++) db2[i] = NAN;
  CHECK(mt_linear_backward_ex(dx2, dw2, db2, d2, y2, inp, w, B, IC, OC,
                              MT_LINEAR_RELU | MT_LINEAR_SET_GRADS | MT_LINEAR_SET_DINP, NULL) == 0,
        "%s: backward_ex returns 0", what);
  CHECK(same_bits(d1, d2, ny), "%s: MT_LINEAR_RELU masks dout in place", what);
  CHECK(same_bits(dx1, dx2, nx), "%s: MT_LINEAR_SET_DINP writes dinp", what);
  CHECK(same_bits(dw1, dw2, nw), "%s: MT_LINEAR_SET_GRADS writes dw", what);
  CHECK(same_bits(db1, db2, (size_t)OC), "%s: MT_LINEAR_SET_GRADS writes db", what);
  /* without SET_*: added (the mask again changes nothing: d2 is masked) */
  CHECK(mt_linear_backward_ex(dx2, dw2, db2, d2, y2, inp, w, B, IC, OC, MT_LINEAR_RELU, NULL) == 0,
        "%s: backward_ex adding returns 0", what);
  mt_linear_backward(dx1, dw1, db1, d1, inp, w, B, IC, OC, NULL);
  CHECK(same_bits(dx1, dx2, nx) && same_bits(dw1, dw2, nw) && same_bits(db1, db2, (size_t)OC),
        "%s: without MT_LINEAR_SET_* it adds, as mt_linear_backward", what);
  CHECK(mt_linear_backward_ex(NULL, dw2, NULL, d2, NULL, inp, w, B, IC, OC, MT_LINEAR_RELU,
                              NULL) != 0,
        "%s: MT_LINEAR_RELU without the output is refused", what);
  mt_error_clear();
  free(inp), free(w), free(b), free(g), free(y1), free(y2), free(d1), free(d2);
  free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
}

/* The backward's mask and bias pass, shared by the threads in blocks of
 * columns once B x OC > 65536: at 1 and 2 threads the bits of a plain
 * loop (each db[j] summed over the rows in order in float), OC not a
 * multiple of the block. */
static void test_linear_threads(int B, int IC, int OC) {
  char what[64];
  snprintf(what, sizeof(what), "linear backward B=%d OC=%d", B, OC);
  const size_t nx = (size_t)B * IC, nw = (size_t)OC * IC, ny = (size_t)B * OC;
  uint64_t st = 0x7ead;
  float *inp = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
  float *y = malloc(ny * sizeof(float)), *g = malloc(ny * sizeof(float));
  float *d = malloc(ny * sizeof(float)), *dw = malloc(nw * sizeof(float));
  float *db = malloc((size_t)OC * sizeof(float)), *want = calloc((size_t)OC, sizeof(float));
  float *dmask = malloc(ny * sizeof(float));
  tu_fill(inp, nx, &st, 1.0f);
  tu_fill(w, nw, &st, 1.0f);
  tu_fill(y, ny, &st, 1.0f);
  tu_fill(g, ny, &st, 1.0f);
  for (size_t i = 0; i < ny; i++) dmask[i] = y[i] > 0 ? g[i] : 0.0f;
  for (int i = 0; i < B; i++)
    for (int j = 0; j < OC; j++) want[j] += dmask[(size_t)i * OC + j];
  const int nt = omp_get_max_threads();
  for (int t = 1; t <= 2; t++) {
    omp_set_num_threads(t);
    memcpy(d, g, ny * sizeof(float));
    for (int j = 0; j < OC; j++) db[j] = NAN;
    CHECK(mt_linear_backward_ex(NULL, dw, db, d, y, inp, w, B, IC, OC,
                                MT_LINEAR_RELU | MT_LINEAR_SET_GRADS, NULL) == 0,
          "%s, %d threads: returns 0", what, t);
    CHECK(same_bits(d, dmask, ny), "%s, %d threads: dout masked", what, t);
    CHECK(same_bits(db, want, (size_t)OC), "%s, %d threads: db the rows' sum in order", what, t);
  }
  omp_set_num_threads(nt);
  free(inp), free(w), free(y), free(g), free(d), free(dw), free(db), free(want), free(dmask);
}

typedef struct {
  float *out, *inp, *w, *b, *R;
  int B, IC, OC;
} linear_ctx;

static double linear_loss(void *p) {
  linear_ctx *c = p;
  mt_linear_forward(c->out, c->inp, c->w, c->b, c->B, c->IC, c->OC, NULL);
  return weighted_sum(c->out, c->R, (int64_t)c->B * c->OC);
}

static void test_linear_fd(int B, int IC, int OC, uint64_t seed) {
  uint64_t rng = seed;
  linear_ctx c = {0};
  c.B = B, c.IC = IC, c.OC = OC;
  int64_t ni = (int64_t)B * IC, nw = (int64_t)OC * IC, no = (int64_t)B * OC;
  c.out = calloc((size_t)no, sizeof(float));
  c.inp = malloc((size_t)ni * sizeof(float));
  c.w = malloc((size_t)nw * sizeof(float));
  c.b = malloc((size_t)OC * sizeof(float));
  c.R = malloc((size_t)no * sizeof(float));
  tu_fill(c.inp, (size_t)ni, &rng, 1.0f);
  tu_fill(c.w, (size_t)nw, &rng, 1.0f);
  tu_fill(c.b, (size_t)OC, &rng, 1.0f);
  tu_fill(c.R, (size_t)no, &rng, 1.0f);
  float *dinp = calloc((size_t)ni, sizeof(float));
  float *dw = calloc((size_t)nw, sizeof(float));
  float *db = calloc((size_t)OC, sizeof(float));
  double *g = malloc((size_t)(ni > nw ? ni : nw) * sizeof(double));
  mt_linear_backward(dinp, dw, db, c.R, c.inp, c.w, B, IC, OC, NULL);
  /* the loss is affine in each argument: central differences are exact up
   * to rounding, so a large step keeps the rounding error small */
  const float h = 0.25f;
  const double tol = 1e-5;
  char what[64];
  snprintf(what, sizeof(what), "linear B=%d IC=%d OC=%d vs finite differences", B, IC, OC);
  fd_grad(g, c.inp, ni, h, linear_loss, &c);
  CHECK_ERR(tu_rel_err_fd(dinp, g, (size_t)ni), tol, "%s: dinp", what);
  fd_grad(g, c.w, nw, h, linear_loss, &c);
  CHECK_ERR(tu_rel_err_fd(dw, g, (size_t)nw), tol, "%s: dw", what);
  fd_grad(g, c.b, OC, h, linear_loss, &c);
  CHECK_ERR(tu_rel_err_fd(db, g, (size_t)OC), tol, "%s: db", what);
  free(c.out), free(c.inp), free(c.w), free(c.b), free(c.R);
  free(dinp), free(dw), free(db), free(g);
}

/* ------------------------------------------------------------------ relu */

static void test_relu_ref(void) {
  tu_ref r;
  tu_ref_load(&r, "relu.txt");
  const tu_tensor *rinp = tu_ref_get(&r, "inp", -1);
  int64_t n = rinp->n;
  float *inp = tu_ref_floats(&r, "inp", n);
  float *dout = tu_ref_floats(&r, "dout", n);
  float *rout = tu_ref_floats(&r, "out", n);
  float *rdinp = tu_ref_floats(&r, "dinp", n);
  float *out = calloc((size_t)n, sizeof(float));
  float *dinp = calloc((size_t)n, sizeof(float));
  float *twice = malloc((size_t)n * sizeof(float));

  /* relu only selects values: compare bit for bit with the float32 refs */
  mt_relu_forward(out, inp, n);
  CHECK_CLOSE_F(out, rout, (size_t)n, 0.0, "relu forward (exact)");
  mt_relu_backward(dinp, dout, out, n);
  CHECK_CLOSE_F(dinp, rdinp, (size_t)n, 0.0, "relu backward (exact, no gradient at 0)");
  mt_relu_backward(dinp, dout, out, n);
  for (int64_t i = 0; i < n; i++) twice[i] = 2 * rdinp[i];
  CHECK_CLOSE_F(dinp, twice, (size_t)n, 0.0, "relu backward adds (twice gives twice)");

  /* in place: dinp == dout is overwritten with the masked gradient */
  memcpy(dinp, dout, (size_t)n * sizeof(float));
  mt_relu_backward(dinp, dinp, out, n);
  CHECK_CLOSE_F(dinp, rdinp, (size_t)n, 0.0, "relu backward in place (dinp == dout)");
  /* in place forward: out == inp */
  memcpy(dinp, inp, (size_t)n * sizeof(float));
  mt_relu_forward(dinp, dinp, n);
  CHECK_CLOSE_F(dinp, rout, (size_t)n, 0.0, "relu forward in place (out == inp)");

  free(inp), free(dout), free(out), free(dinp), free(twice), free(rout), free(rdinp);
  tu_ref_free(&r);
}

typedef struct {
  float *out, *inp, *R;
  int64_t n;
} relu_ctx;

static double relu_loss(void *p) {
  relu_ctx *c = p;
  mt_relu_forward(c->out, c->inp, c->n);
  return weighted_sum(c->out, c->R, c->n);
}

static void test_relu_fd(void) {
  uint64_t rng = 21;
  relu_ctx c = {0};
  c.n = 37;
  c.out = calloc((size_t)c.n, sizeof(float));
  c.inp = malloc((size_t)c.n * sizeof(float));
  c.R = malloc((size_t)c.n * sizeof(float));
  tu_fill(c.inp, (size_t)c.n, &rng, 1.0f);
  tu_fill(c.R, (size_t)c.n, &rng, 1.0f);
  /* keep every input at least 0.1 from the kink: with a step of 0.05 the
   * loss is linear over the stencil and the differences are exact */
  for (int64_t i = 0; i < c.n; i++)
    if (fabsf(c.inp[i]) < 0.1f) c.inp[i] = c.inp[i] < 0 ? c.inp[i] - 0.1f : c.inp[i] + 0.1f;
  float *dinp = calloc((size_t)c.n, sizeof(float));
  double *g = malloc((size_t)c.n * sizeof(double));
  mt_relu_forward(c.out, c.inp, c.n);
  mt_relu_backward(dinp, c.R, c.out, c.n);
  fd_grad(g, c.inp, c.n, 0.05f, relu_loss, &c);
  CHECK_ERR(tu_rel_err_fd(dinp, g, (size_t)c.n), 1e-5, "relu n=37 vs finite differences");
  free(c.out), free(c.inp), free(c.R), free(dinp), free(g);
}

/* ---------------------------------------------------- softmax cross-entropy */

static void test_xent_ref(int B, int C) {
  char file[64], what[64];
  snprintf(file, sizeof(file), "xent_%d_%d.txt", B, C);
  snprintf(what, sizeof(what), "softmax xent B=%d C=%d", B, C);
  tu_ref r;
  tu_ref_load(&r, file);
  int64_t n = (int64_t)B * C;
  float *logits = tu_ref_floats(&r, "logits", n);
  const tu_tensor *ry = tu_ref_get(&r, "y", B);
  float scale = (float)tu_ref_scalar(&r, "scale");
  const tu_tensor *rprobs = tu_ref_get(&r, "probs", n);
  const tu_tensor *rlosses = tu_ref_get(&r, "losses", B);
  const tu_tensor *rdl = tu_ref_get(&r, "dlogits", n);
  double loss_ref = tu_ref_scalar(&r, "loss_sum");
  int64_t correct_ref = (int64_t)tu_ref_scalar(&r, "correct");
  int32_t *y = malloc((size_t)B * sizeof(int32_t));
  for (int i = 0; i < B; i++) y[i] = (int32_t)ry->v[i];
  float *probs = calloc((size_t)n, sizeof(float));
  float *losses = calloc((size_t)B, sizeof(float));
  float *dl = calloc((size_t)n, sizeof(float));
  double *twice = malloc((size_t)n * sizeof(double));

  int64_t correct = 7; /* forward adds to it */
  double loss = mt_softmax_xent_forward(probs, losses, &correct, logits, y, B, C);
  CHECK_ERR(fabs(loss - loss_ref) / fmax(fabs(loss_ref), 1e-30), REF_TOL,
            "%s forward loss sum %.9g", what, loss);
  CHECK_CLOSE_REF(probs, rprobs, REF_TOL, "%s forward probs", what);
  CHECK_CLOSE_REF(losses, rlosses, REF_TOL, "%s forward per-sample losses", what);
  CHECK(correct == 7 + correct_ref, "%s forward adds %lld hits to correct (got %lld)", what,
        (long long)correct_ref, (long long)(correct - 7));
  mt_softmax_xent_backward(dl, probs, y, scale, B, C);
  CHECK_CLOSE_REF(dl, rdl, REF_TOL, "%s backward (scale %g)", what, scale);
  mt_softmax_xent_backward(dl, probs, y, scale, B, C);
  for (int64_t i = 0; i < n; i++) twice[i] = 2 * rdl->v[i];
  CHECK_ERR(tu_rel_err_fd(dl, twice, (size_t)n), REF_TOL, "%s backward adds", what);

  correct = 0;
  double loss2 = mt_softmax_xent_forward(probs, NULL, &correct, logits, y, B, C);
  CHECK(fabs(loss2 - loss) <= 1e-12 * fabs(loss) && correct == correct_ref, "%s forward with losses = NULL", what);

  free(logits), free(y), free(probs), free(losses), free(dl), free(twice);
  tu_ref_free(&r);
}

typedef struct {
  float *probs, *logits;
  int32_t *y;
  float scale;
  int B, C;
} xent_ctx;

static double xent_loss(void *p) {
  xent_ctx *c = p;
  int64_t correct = 0;
  return c->scale * mt_softmax_xent_forward(c->probs, NULL, &correct, c->logits, c->y, c->B, c->C);
}

static void test_xent_fd(int B, int C, float scale, float logit_scale, uint64_t seed) {
  uint64_t rng = seed;
  xent_ctx c = {0};
  c.B = B, c.C = C, c.scale = scale;
  int64_t n = (int64_t)B * C;
  c.probs = calloc((size_t)n, sizeof(float));
  c.logits = malloc((size_t)n * sizeof(float));
  c.y = malloc((size_t)B * sizeof(int32_t));
  tu_fill(c.logits, (size_t)n, &rng, logit_scale);
  for (int i = 0; i < B; i++) c.y[i] = (int32_t)((tu_uniform(&rng) + 1) * 0.5 * C) % C;
  float *dl = calloc((size_t)n, sizeof(float));
  double *g = malloc((size_t)n * sizeof(double));
  int64_t correct = 0;
  mt_softmax_xent_forward(c.probs, NULL, &correct, c.logits, c.y, B, C);
  mt_softmax_xent_backward(dl, c.probs, c.y, scale, B, C);
  /* smooth loss: Richardson-extrapolated central differences; the error left
   * is mostly float rounding of the loss (~1e-7 relative) over the step */
  fd_grad_rich(g, c.logits, n, 0.05f, xent_loss, &c);
  CHECK_ERR(tu_rel_err_fd(dl, g, (size_t)n), 1e-4,
            "softmax xent B=%d C=%d scale=%g vs finite differences", B, C, scale);
  free(c.probs), free(c.logits), free(c.y), free(dl), free(g);
}

/* ------------------------------------------------------------------ exp */

static void test_vexp(void) {
  double worst = 0;
  float at = 0;
  for (int s = 0; s < 2; s++) /* [0, 88], then [-87, 0) */
    for (uint32_t u = 0; u <= mt_f32_bits(s ? 87.0f : 88.0f); u += 31) {
      const float x = s ? -mt_f32_from_bits(u) : mt_f32_from_bits(u);
      const double ref = exp((double)x), rel = fabs(mt_vexp(x) - ref) / ref;
      if (rel > worst) worst = rel, at = x;
    }
  CHECK(worst <= 2e-7, "mt_vexp relative error %.3g <= 2e-7 on [-87, 88] (worst at x = %.9g)",
        worst, at);
  CHECK(mt_vexp(0.0f) == 1.0f && mt_vexp(-0.0f) == 1.0f, "mt_vexp(+-0) = 1");
  CHECK(mt_vexp(-87.01f) == 0.0f && mt_vexp(-INFINITY) == 0.0f, "mt_vexp below -87 is 0");
  CHECK(isinf(mt_vexp(88.01f)) && isinf(mt_vexp(INFINITY)), "mt_vexp above 88 is +inf");
  CHECK(isnan(mt_vexp(NAN)), "mt_vexp(NaN) is NaN");
  /* in vector lanes (how GELU and the softmaxes run it) as one at a time */
  enum { NV = 64 };
  float xs[NV], vec[NV];
  const float ends[] = {-INFINITY, -1e30f, -87.01f, -87.0f, -86.99f, -0.0f, 0.0f, 1e-30f,
                        88.0f,     88.01f, 1e30f,   INFINITY, NAN,    -NAN, 3.5f,  -3.5f};
  for (int i = 0; i < NV; i++) xs[i] = i < 16 ? ends[i] : (float)(i - 40) * 2.75f;
#pragma omp simd
  for (int i = 0; i < NV; i++) vec[i] = mt_vexp(xs[i]);
  int same = 1;
  for (int i = 0; i < NV; i++) {
    const float one = mt_vexp(xs[i]);
    same &= isnan(one) ? isnan(vec[i]) : mt_f32_bits(one) == mt_f32_bits(vec[i]);
  }
  CHECK(same, "mt_vexp in vector lanes = one at a time, bit for bit, at the range's ends too");
}

int main(void) {
  test_gemm();

  test_linear_ref(4, 7, 5);
  test_linear_ref(1, 3, 2);
  test_linear_ref(16, 33, 17);
  test_linear_ref(3, 1, 4);
  test_linear_fused(5, 7, 3);
  test_linear_fused(8, 512, 256);
  test_linear_threads(131, 3, 1030);
  test_linear_fd(3, 4, 5, 31);
  test_linear_fd(1, 6, 3, 32);

  test_relu_ref();
  test_relu_fd();

  test_xent_ref(1, 10);
  test_xent_ref(1, 3);
  test_xent_ref(4, 3);
  test_xent_ref(16, 10);
  test_xent_ref(5, 10);
  test_xent_fd(3, 10, 1.0f, 2.0f, 41);
  test_xent_fd(1, 3, 0.5f, 1.0f, 42);
  test_xent_fd(4, 5, 0.25f, 4.0f, 43);

  test_vexp();

  return tu_finish("test_nn");
}
