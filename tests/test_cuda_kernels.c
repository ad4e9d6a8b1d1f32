/* CUDA kernels against their CPU versions (built only with CUDA):
 * GELU forward and backward (erf and tanh) and cuBLAS GEMM (all four
 * transposition cases) against mt_gelu_* and mt_gemm. Where this process
 * sees no CUDA device it prints "skipped: no CUDA device" and exits 77,
 * automake's SKIP. */
#include "cuda/kernels.h"
#include "nn/nn.h"
#include "testutil.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CUDA_OK(x)                                                                   \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("FAIL %s: %s [%s:%d]\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static void fill(float *x, size_t n, unsigned seed, float scale) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = scale * ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
}

static float *to_dev(const float *h, size_t n) {
  float *d = NULL;
  CUDA_OK(cudaMalloc((void **)&d, n * sizeof(float)));
  CUDA_OK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

static void to_host(float *h, const float *d, size_t n) {
  CUDA_OK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static void test_gelu(void) {
  const int64_t n = 100003; /* not a multiple of the block */
  float *x = tu_xmalloc(n * sizeof(float)), *dy = tu_xmalloc(n * sizeof(float));
  float *y = tu_xmalloc(n * sizeof(float)), *yg = tu_xmalloc(n * sizeof(float));
  float *dx = tu_xmalloc(n * sizeof(float)), *dxg = tu_xmalloc(n * sizeof(float));
  fill(x, (size_t)n, 1, 6.0f);
  fill(dy, (size_t)n, 2, 1.0f);
  for (int kind = 0; kind < 2; kind++) {
    const char *name = kind ? "tanh" : "erf";
    mt_gelu_forward(y, x, n, (mt_gelu_kind)kind);
    for (int64_t i = 0; i < n; i++) dx[i] = 0.5f;
    mt_gelu_backward(dx, dy, x, n, (mt_gelu_kind)kind);
    float *dxd = to_dev(x, (size_t)n), *dyd = to_dev(dy, (size_t)n), *dyo = to_dev(x, (size_t)n);
    for (int64_t i = 0; i < n; i++) dxg[i] = 0.5f;
    float *dgd = to_dev(dxg, (size_t)n);
    CHECK(mt_cuda_gelu_forward(dyo, dxd, n, kind, 0) == 0, "gelu %s forward launched", name);
    CHECK(mt_cuda_gelu_backward(dgd, dyd, dxd, n, kind, 0) == 0, "gelu %s backward launched", name);
    CUDA_OK(cudaDeviceSynchronize());
    to_host(yg, dyo, (size_t)n);
    to_host(dxg, dgd, (size_t)n);
    CHECK_CLOSE_F(yg, y, (size_t)n, 1e-5, "gelu %s forward, GPU vs CPU, %lld values", name,
                  (long long)n);
    CHECK_CLOSE_F(dxg, dx, (size_t)n, 1e-5, "gelu %s backward (adds into dinp), GPU vs CPU", name);
    cudaFree(dxd);
    cudaFree(dyd);
    cudaFree(dyo);
    cudaFree(dgd);
  }
  free(x), free(dy), free(y), free(yg), free(dx), free(dxg);
}

static void test_gemm(void) {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    CHECK(0, "cublasCreate");
    return;
  }
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); /* plain fp32, no TF32 */
  const int64_t M = 67, N = 45, K = 129;
  for (int c = 0; c < 4; c++) {
    const char ta = (c & 1) ? 'T' : 'N', tb = (c & 2) ? 'T' : 'N';
    /* A is (M,K) or stored (K,M); B is (K,N) or stored (N,K); padded rows */
    const int64_t lda = (ta == 'N' ? K : M) + 3, ldb = (tb == 'N' ? N : K) + 1, ldc = N + 2;
    const size_t na = (size_t)(ta == 'N' ? M : K) * lda, nb = (size_t)(tb == 'N' ? K : N) * ldb;
    const size_t nc = (size_t)M * ldc;
    float *A = tu_xmalloc(na * 4), *B = tu_xmalloc(nb * 4), *C = tu_xmalloc(nc * 4);
    float *Cg = tu_xmalloc(nc * 4);
    fill(A, na, 3 + c, 1.0f);
    fill(B, nb, 7 + c, 1.0f);
    fill(C, nc, 11 + c, 1.0f);
    float *Ad = to_dev(A, na), *Bd = to_dev(B, nb), *Cd = to_dev(C, nc);
    CHECK(mt_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, 0.5f, C, ldc) == 0, "CPU gemm %c%c", ta,
          tb);
    CHECK(mt_cuda_gemm(h, ta, tb, M, N, K, 0.75f, Ad, lda, Bd, ldb, 0.5f, Cd, ldc) == 0,
          "cuBLAS gemm %c%c", ta, tb);
    CUDA_OK(cudaDeviceSynchronize());
    to_host(Cg, Cd, nc);
    CHECK_CLOSE_F(Cg, C, nc, 1e-5, "gemm %c%c (%lldx%lldx%lld, alpha .75, beta .5), GPU vs CPU", ta,
                  tb, (long long)M, (long long)N, (long long)K);
    cudaFree(Ad), cudaFree(Bd), cudaFree(Cd);
    free(A), free(B), free(C), free(Cg);
  }
  cublasDestroy(h);
}

int main(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    printf("skipped: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "the runtime reports 0 devices");
    return 77;
  }
  CUDA_OK(cudaSetDevice(0));
  struct cudaDeviceProp p;
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  printf("# device 0: %s, cc %d.%d\n", p.name, p.major, p.minor);
  test_gelu();
  test_gemm();
  printf("test_cuda_kernels: %d checks, %d failed\n", tu_nchecks, tu_nfailed);
  return tu_nfailed ? 1 : 0;
}
