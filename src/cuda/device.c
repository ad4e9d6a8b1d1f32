/* The CUDA runtime side of device selection (only built with CUDA). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/device.h"
#include "mpitrain/mpitrain.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>

void mt_cuda_versions(char *buf, size_t len) {
  int rt = 0, drv = 0, nc = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0; /* 0: no driver */
  (void)cudaGetLastError();
  if (ncclGetVersion(&nc) != ncclSuccess) nc = 0;
  /* NCCL's code is major*10000 + minor*100 + patch since 2.9, major*1000
   * + minor*100 + patch before */
  const int nmaj = nc >= 20900 ? nc / 10000 : nc / 1000;
  const int nmin = nc >= 20900 ? nc % 10000 / 100 : nc % 1000 / 100;
  char d[32] = "none"; /* no driver on this node */
  if (drv > 0) snprintf(d, sizeof(d), "%d.%d", drv / 1000, drv % 1000 / 10);
  snprintf(buf, len, "CUDA runtime %d.%d, driver %s, NCCL %d.%d.%d", rt / 1000, rt % 1000 / 10, d,
           nmaj, nmin, nc % 100);
}

int mt_cuda_device_count(char *why, size_t len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why && len) snprintf(why, len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError(); /* clear the sticky-free error state */
    return 0;
  }
  if (n <= 0 && why && len) snprintf(why, len, "the CUDA runtime reports 0 devices");
  return n > 0 ? n : 0;
}

int mt_cuda_set_device(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return MT_ERR(MT_ERR_LIB, "cudaSetDevice(%d) failed: %s (%s)", device, cudaGetErrorString(e),
                  cudaGetErrorName(e));
  return 0;
}

int mt_cuda_device_describe(int device, char *buf, size_t len) {
  struct cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess)
    return MT_ERR(MT_ERR_LIB, "cudaGetDeviceProperties(%d) failed: %s", device,
                  cudaGetErrorString(e));
  snprintf(buf, len, "%s, cc %d.%d, %zu MiB", p.name, p.major, p.minor,
           (size_t)(p.totalGlobalMem >> 20));
  return 0;
}

int mt_cuda_device_pci(int device, char *buf, int len) {
  cudaError_t e = cudaDeviceGetPCIBusId(buf, len, device);
  if (e != cudaSuccess)
    return MT_ERR(MT_ERR_LIB, "cudaDeviceGetPCIBusId(%d) failed: %s", device,
                  cudaGetErrorString(e));
  return 0;
}

int mt_cuda_device_memory(int device, double *free_bytes, double *total_bytes) {
  size_t fr = 0, tot = 0;
  MT_CALL(mt_cuda_set_device(device));
  cudaError_t e = cudaMemGetInfo(&fr, &tot);
  if (e != cudaSuccess)
    return MT_ERR(MT_ERR_LIB, "cudaMemGetInfo on cuda:%d failed: %s (%s)", device,
                  cudaGetErrorString(e), cudaGetErrorName(e));
  *free_bytes = (double)fr;
  *total_bytes = (double)tot;
  return 0;
}
