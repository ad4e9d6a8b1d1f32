/* CUDA kernels against their CPU versions (built only with CUDA), part 1:
 *  - bf16/fp16: the conversions and in-place roundings bit for bit against
 *    nn/precision.h's (all 65536 16-bit inputs; specials, boundary sweeps
 *    and random fp32 patterns), the inf/NaN test;
 *  - GEMM: fp32 and fp64 (all four transposition cases, padded leading
 *    dimensions, edge shapes), strided batches, bf16 and fp16 operands
 *    against the CPU's low-precision GEMM, O2 output rounding;
 *  - the linear layer (cuBLASLt's fused bias and the plain path, fp32,
 *    bf16, fp16 policies, fp64), the element-wise layers, dropout (masks
 *    bit for bit), the losses (cuda_kernels_t.h, float and double);
 *  - a reduction run twice gives the same bits.
 * Tolerances (relative to the largest CPU value): fp32 1e-5 (GEMM-based
 * and transcendental results), 1e-6 (single expressions); fp64 1e-12 to
 * 1e-15; bf16/fp16 GEMMs 1e-4 (operands rounded identically, products
 * exact, fp32 sums in another order); exact where the GPU runs the CPU's
 * operations in the CPU's order (conversions, ReLU, residual, dropout).
 * Without a CUDA device: one line "skipped: no CUDA device", exit 77. */
#include "cudatest.h"
#include "models/models.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "nn/precision.h"

#define MT_TEMPLATE "tests/cuda_kernels_t.h"
#include "core/real_t.h"

static float from_bits(uint32_t u) { return mt_f32_from_bits(u); }

static void test_conversions(void) {
  /* every 16-bit pattern widened */
  const size_t n16 = 65536;
  uint16_t *h = tu_xmalloc(n16 * 2);
  float *f = tu_xmalloc(n16 * 4), *fg = tu_xmalloc(n16 * 4);
  for (size_t i = 0; i < n16; i++) h[i] = (uint16_t)i;
  uint16_t *hd = cu_dev(h, n16 * 2);
  float *fd = cu_dev(NULL, n16 * 4);
  mt_bf16_to_f32(f, h, n16);
  CU_CALL(mt_cuda_bf16_to_f32(fd, hd, n16, 0), "bf16 -> f32 launched");
  cu_get(fg, fd, n16 * 4);
  CHECK(same_bytes(f, fg, n16 * 4), "bf16 -> fp32: all 65536 inputs, the CPU's bits");
  mt_fp16_to_f32(f, h, n16);
  CU_CALL(mt_cuda_fp16_to_f32(fd, hd, n16, 0), "fp16 -> f32 launched");
  cu_get(fg, fd, n16 * 4);
  CHECK(same_bytes(f, fg, n16 * 4), "fp16 -> fp32: all 65536 inputs (NaNs made quiet), the CPU's bits");
  cudaFree(hd), cudaFree(fd), free(h), free(f), free(fg);

  /* fp32 patterns: specials, every pattern around the fp16 boundaries
   * (2^-25, 2^-24, 2^-14, 65504..65520), ties of both formats, random */
  const size_t n = (size_t)1 << 22;
  uint32_t *u = tu_xmalloc(n * 4);
  size_t k = 0;
  static const uint32_t special[] = {0, 0x80000000u, 1, 0x807FFFFFu, 0x7F800000u, 0xFF800000u,
                                     0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7FBFFFFFu,
                                     0x7F7FFFFFu, 0x477FE000u, 0x477FF000u, 0x477FEFFFu,
                                     0x33000000u, 0x33000001u, 0x33800000u, 0x38800000u,
                                     0x387FF000u, 0x3F808000u, 0x3F818000u, 0x3F801000u};
  for (size_t i = 0; i < sizeof(special) / 4; i++) u[k++] = special[i];
  static const uint32_t centre[] = {0x33000000u, 0x33800000u, 0x38800000u, 0x477FF000u};
  for (size_t c = 0; c < 4; c++)
    for (uint32_t d = 0; d < 8192; d++) u[k++] = centre[c] - 4096 + d, u[k++] = (centre[c] - 4096 + d) | 0x80000000u;
  for (uint32_t e = 0; e < 256; e++)
    for (uint32_t m = 0; m < 32; m++) u[k++] = (e << 23) | (m << 17) | 0x8000u, u[k++] = (e << 23) | (m << 14) | 0x1000u;
  uint64_t st = 5;
  while (k < n) u[k++] = (uint32_t)(tu_uniform(&st) * 2147483648.0 + 2147483648.0);
  const float *x = (const float *)u;
  uint16_t *c16 = tu_xmalloc(n * 2), *g16 = tu_xmalloc(n * 2);
  float *xd = cu_dev(x, n * 4);
  uint16_t *d16 = cu_dev(NULL, n * 2);
  mt_f32_to_bf16(c16, x, n);
  CU_CALL(mt_cuda_f32_to_bf16(d16, xd, n, 0), "f32 -> bf16 launched");
  cu_get(g16, d16, n * 2);
  CHECK(same_bytes(c16, g16, n * 2), "fp32 -> bf16: %zu patterns (specials, ties, random), the CPU's bits", n);
  mt_f32_to_fp16(c16, x, n);
  CU_CALL(mt_cuda_f32_to_fp16(d16, xd, n, 0), "f32 -> fp16 launched");
  cu_get(g16, d16, n * 2);
  CHECK(same_bytes(c16, g16, n * 2),
        "fp32 -> fp16: %zu patterns (subnormals, the 2^-25 flush, 65520 overflow, ties), the CPU's bits", n);
  float *r = tu_xmalloc(n * 4), *rg = tu_xmalloc(n * 4);
  for (int fp16 = 0; fp16 < 2; fp16++) {
    memcpy(r, x, n * 4);
    if (fp16) mt_round_fp16(r, n);
    else mt_round_bf16(r, n);
    cu_put(xd, x, n * 4);
    CU_CALL(fp16 ? mt_cuda_round_fp16(xd, n, 0) : mt_cuda_round_to(MT_PREC_BF16, xd, n, 0), "round launched");
    cu_get(rg, xd, n * 4);
    CHECK(same_bytes(r, rg, n * 4), "round through %s in place: the CPU's bits (NaN canonical)",
          fp16 ? "fp16" : "bf16");
  }
  cu_put(xd, x, n * 4);
  CU_CALL(mt_cuda_round_to(MT_PREC_FP32, xd, n, 0), "round fp32 launched");
  cu_get(rg, xd, n * 4);
  CHECK(same_bytes(x, rg, n * 4), "round to fp32 leaves the values");
  cudaFree(xd), cudaFree(d16), free(u), free(c16), free(g16), free(r), free(rg);
}

static void test_nonfinite(void) {
  const size_t n = 1500001;
  float *x = tu_xmalloc(n * 4);
  uint16_t *h = tu_xmalloc(n * 2);
  for (size_t i = 0; i < n; i++) x[i] = (float)i * 1e30f, h[i] = (uint16_t)(i & 0x3BFF);
  float *xd = cu_dev(x, n * 4);
  uint16_t *hd = cu_dev(h, n * 2);
  int *flag = cu_dev(NULL, sizeof(int)), got = -1;
  struct {
    size_t at;
    uint32_t bits;
    size_t len;
  } cases[] = {{0, 0, n}, {n - 1, 0x7F800000u, n}, {0, 0xFFC00000u, n}, {n / 2, 0xFF800000u, n}, {0, 0, 0}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    float *y = tu_xmalloc(n * 4);
    memcpy(y, x, n * 4);
    if (cases[c].bits) y[cases[c].at] = from_bits(cases[c].bits);
    cu_put(xd, y, n * 4);
    CU_CALL(mt_cuda_has_nonfinite(xd, cases[c].len, flag, 0), "nonfinite launched");
    cu_get(&got, flag, sizeof(int));
    CHECK(got == mt_has_nonfinite(y, cases[c].len), "inf/NaN test, case %zu (n=%zu): %d as on the CPU", c,
          cases[c].len, got);
    free(y);
  }
  for (int bf = 0; bf < 2; bf++)
    for (int bad = 0; bad < 2; bad++) {
      uint16_t *y = tu_xmalloc(n * 2);
      memcpy(y, h, n * 2);
      if (bad) y[n - 2] = bf ? 0xFF81u : 0x7C00u;
      cu_put(hd, y, n * 2);
      CU_CALL(bf ? mt_cuda_has_nonfinite_bf16(hd, n, flag, 0) : mt_cuda_has_nonfinite_fp16(hd, n, flag, 0),
              "launched");
      cu_get(&got, flag, sizeof(int));
      const int want = bf ? mt_has_nonfinite_bf16(y, n) : mt_has_nonfinite_fp16(y, n);
      CHECK(got == want && want == bad, "inf/NaN test of %s values (%s): %d", bf ? "bf16" : "fp16",
            bad ? "one bad" : "clean", got);
      free(y);
    }
  cudaFree(xd), cudaFree(hd), cudaFree(flag), free(x), free(h);
}

/* GEMMs with bf16/fp16 operands against the CPU's low-precision GEMM */
static void test_gemm_lowp(void) {
  const int64_t M = 67, N = 45, K = 129;
  uint64_t st = 21;
  for (int prec = MT_PREC_BF16; prec <= MT_PREC_FP16; prec++)
    for (int c = 0; c < 4; c++) {
      const char *pn = mt_precision_name((mt_precision)prec);
      const char ta = (c & 1) ? 'T' : 'N', tb = (c & 2) ? 'T' : 'N';
      const int64_t ar = ta == 'N' ? M : K, ac = ta == 'N' ? K : M, br = tb == 'N' ? K : N,
                    bc = tb == 'N' ? N : K;
      const size_t na = (size_t)(ar * ac), nb = (size_t)(br * bc), nc = (size_t)(M * N);
      float *A = cu_rand(na, &st, 1), *B = cu_rand(nb, &st, 1), *C0 = cu_rand(nc, &st, 1);
      float *C = cu_copy(C0, nc);
      float *Ad = cu_dev(A, na * 4), *Bd = cu_dev(B, nb * 4), *Cd = cu_dev(C0, nc * 4);
      uint16_t *a16 = cu_dev(NULL, na * 2), *b16 = cu_dev(NULL, nb * 2);
      const mt_nn_policy o1 = mt_nn_policy_make((mt_precision)prec, 0);
      const mt_nn_policy o2 = mt_nn_policy_make((mt_precision)prec, 1);
      CHECK(mt_gemm(ta, tb, M, N, K, 0.5f, A, ac, B, bc, 0.25f, C, N, &o1) == 0, "CPU %s gemm", pn);
      /* the operands converted on the device, the GEMM on 16-bit inputs */
      CU_CALL(prec == MT_PREC_BF16 ? mt_cuda_f32_to_bf16(a16, Ad, na, 0) : mt_cuda_f32_to_fp16(a16, Ad, na, 0),
              "convert");
      CU_CALL(prec == MT_PREC_BF16 ? mt_cuda_f32_to_bf16(b16, Bd, nb, 0) : mt_cuda_f32_to_fp16(b16, Bd, nb, 0),
              "convert");
      CU_CALL(mt_cuda_gemm_lowp(prec, ta, tb, M, N, K, 0.5f, a16, ac, b16, bc, 0.25f, Cd, N, &cu_cx),
              "%s gemm launched", pn);
      char what[96];
      snprintf(what, sizeof(what), "%s-operand gemm %c%c (fp32 accumulation) vs the CPU's", pn, ta, tb);
      cu_close(Cd, C, nc, 1e-4, what);
      /* the same through mt_cuda_gemm under a low-precision context */
      cu_put(Cd, C0, nc * 4);
      cu_cx.prec = prec;
      CU_CALL(mt_cuda_gemm(ta, tb, M, N, K, 0.5f, Ad, ac, Bd, bc, 0.25f, Cd, N, &cu_cx), "launched");
      snprintf(what, sizeof(what), "mt_cuda_gemm %c%c under a %s context vs mt_gemm under %s", ta, tb, pn, pn);
      cu_close(Cd, C, nc, 1e-4, what);
      /* O2: the output rounded too; every value on the 16-bit grid */
      memcpy(C, C0, nc * 4);
      cu_put(Cd, C0, nc * 4);
      CHECK(mt_gemm(ta, tb, M, N, K, 0.5f, A, ac, B, bc, 0.25f, C, N, &o2) == 0, "CPU O2 gemm");
      cu_cx.round_outputs = 1;
      CU_CALL(mt_cuda_gemm(ta, tb, M, N, K, 0.5f, Ad, ac, Bd, bc, 0.25f, Cd, N, &cu_cx), "launched");
      cu_cx.round_outputs = 0;
      cu_cx.prec = MT_PREC_FP32;
      float *g = tu_xmalloc(nc * 4), *gr = tu_xmalloc(nc * 4);
      cu_get(g, Cd, nc * 4);
      memcpy(gr, g, nc * 4);
      mt_round_to((mt_precision)prec, gr, nc);
      CHECK(same_bytes(g, gr, nc * 4), "O2 %s gemm %c%c: every output on the %s grid", pn, ta, tb, pn);
      CHECK_ERR(tu_rel_err_f(g, C, nc), prec == MT_PREC_BF16 ? 1.0 / 128 : 1.0 / 1024,
                "O2 %s gemm %c%c vs the CPU's (one %s step apart at most)", pn, ta, tb, pn);
      cudaFree(Ad), cudaFree(Bd), cudaFree(Cd), cudaFree(a16), cudaFree(b16);
      free(A), free(B), free(C0), free(C), free(g), free(gr);
    }
}

/* the linear layer under the bf16/fp16 policies (fused bias and plain) */
static void test_linear_lowp(void) {
  for (int prec = MT_PREC_BF16; prec <= MT_PREC_FP16; prec++)
    for (int lt = 1; lt >= 0; lt--) {
      char tag[64];
      snprintf(tag, sizeof(tag), "(%s, %s)", mt_precision_name((mt_precision)prec),
               lt ? "cuBLASLt bias" : "GEMM + bias kernel");
      const mt_nn_policy pol = mt_nn_policy_make((mt_precision)prec, 0);
      cu_cx.prec = prec;
      cu_cx.use_lt = lt;
      linear_case(37, 65, 33, 1, tag, 1e-4, &pol);
      linear_case(300, 7, 513, 1, tag, 1e-4, &pol);
    }
  cu_cx.prec = MT_PREC_FP32;
  cu_cx.use_lt = 1;
}

/* column sums: against double sums on the CPU, and the same bits twice */
static void test_sum_rows(void) {
  const int64_t rows = 5000, cols = 77;
  uint64_t st = 31;
  float *x = cu_rand((size_t)(rows * cols), &st, 1), *want = cu_rand((size_t)cols, &st, 1);
  float *xd = cu_dev(x, (size_t)(rows * cols) * 4), *a = cu_dev(want, (size_t)cols * 4);
  float *b = cu_dev(want, (size_t)cols * 4);
  for (int64_t j = 0; j < cols; j++) {
    double s = 0;
    for (int64_t i = 0; i < rows; i++) s += x[i * cols + j];
    want[j] = (float)(want[j] + s);
  }
  CU_CALL(mt_cuda_sum_rows(a, xd, rows, cols, &cu_cx), "sum rows launched");
  CU_CALL(mt_cuda_sum_rows(b, xd, rows, cols, &cu_cx), "sum rows launched");
  cu_close(a, want, (size_t)cols, 1e-6, "column sums of 5000 x 77 (adds, double sums)");
  float *ga = tu_xmalloc((size_t)cols * 4), *gb = tu_xmalloc((size_t)cols * 4);
  cu_get(ga, a, (size_t)cols * 4);
  cu_get(gb, b, (size_t)cols * 4);
  CHECK(same_bytes(ga, gb, (size_t)cols * 4), "column sums: two runs give the same bits");
  cudaFree(xd), cudaFree(a), cudaFree(b), free(x), free(want), free(ga), free(gb);
}

int main(void) {
  cu_start("test_cuda_kernels");
  test_conversions();
  test_nonfinite();
  test_gemm_lowp();
  test_linear_lowp();
  test_sum_rows();
  test_kernels();
  test_kernels_f64();
  return cu_finish("test_cuda_kernels");
}
