/* Helpers shared by the tests of the CUDA kernels (built only with CUDA):
 * the skip rule, device buffers, copies, one context. Each test program
 * starts with cu_start(): where this process sees no CUDA device it prints
 * the one line "skipped: no CUDA device (why)" and exits 77, automake's
 * SKIP. Every CUDA call is checked; a failure ends the program (exit 1). */
#ifndef MT_CUDATEST_H
#define MT_CUDATEST_H

#include "cuda/kernels.h"
#include "mpitrain/mpitrain.h"
#include "testutil.h"

#include <cuda_runtime.h>

#define CUDA_OK(x)                                                                      \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      printf("FAIL %s: %s [%s:%d]\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__);  \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

/* An entry point returned 0; else the check fails with mpitrain's message. */
#define CU_CALL(x, ...)                                                                 \
  do {                                                                                  \
    int rc_ = (x);                                                                      \
    if (rc_) printf("     (%s: %s)\n", #x, mt_error_message());                        \
    CHECK(rc_ == 0, __VA_ARGS__);                                                       \
    mt_error_clear();                                                                   \
  } while (0)

static mt_cuda_ctx cu_cx; /* the tests' context (stream 0) */

/* Skips (exit 77) without a device; else device 0 and the context. */
static inline void cu_start(const char *prog) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    printf("skipped: no CUDA device (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "the runtime reports 0 devices");
    exit(77);
  }
  CUDA_OK(cudaSetDevice(0));
  struct cudaDeviceProp p;
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  printf("# %s on device 0: %s, cc %d.%d\n", prog, p.name, p.major, p.minor);
  if (mt_cuda_ctx_create(&cu_cx, 0)) {
    printf("FAIL mt_cuda_ctx_create: %s\n", mt_error_message());
    exit(1);
  }
}

static inline int cu_finish(const char *prog) {
  mt_cuda_ctx_destroy(&cu_cx);
  return tu_finish(prog);
}

/* A device copy of bytes bytes at h (h NULL: zeroed). */
static inline void *cu_dev(const void *h, size_t bytes) {
  void *d = NULL;
  CUDA_OK(cudaMalloc(&d, bytes ? bytes : 1));
  if (h) CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
  else CUDA_OK(cudaMemset(d, 0, bytes ? bytes : 1));
  return d;
}

/* The device's bytes into h, after everything queued (default stream). */
static inline void cu_get(void *h, const void *d, size_t bytes) {
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

static inline void cu_put(void *d, const void *h, size_t bytes) {
  CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
}

/* 1 when the n bytes at a and b are the same */
static inline int same_bytes(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* The typed helpers: cu_rand, cu_copy, cu_err, cu_close, cu_exact (and
 * their _f64 twins), TY and TOLR. */
#define MT_TEMPLATE "tests/cudatest_t.h"
#include "core/real_t.h"

#endif
