/* The device runtime's ground floor (only built with CUDA): CUDA's status
 * as an mpitrain error, device allocation, and the streams' ordering and
 * waits (gpu_impl.h). The other gpu/ files call these; these call none of
 * them. */
#include "gpu/gpu_impl.h"
#include "cuda/mt_nccl.h"

#include <time.h>

int mt_gpu_cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  return MT_ERR(MT_ERR_LIB, "-device cuda: %s: %s (%s)", what, cudaGetErrorString(e),
                cudaGetErrorName(e));
}

int mt_gpu_alloc(void *p, size_t bytes, const char *what) {
  void **pp = p;
  cudaError_t e = cudaMalloc(pp, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *pp = NULL;
    return MT_ERR(MT_ERR_MEM, "-device cuda: cannot allocate %.1f MiB of device memory for %s: %s",
                  (double)bytes / 1048576.0, what, cudaGetErrorString(e));
  }
  return mt_gpu_cuda_ok(cudaMemset(*pp, 0, bytes ? bytes : 1), what);
}

/* Waits for event ev without blocking in the driver: polls it and the NCCL
 * communicator (an error there, or no progress within -comm_timeout, ends
 * the wait with a message instead of a hang). */
int mt_gpu_sync(struct mt_gpu *g, const char *what) {
  CU(cudaEventRecord(g->step_done, g->stream));
  return mt_gpu_wait(g, g->step_done, what);
}

int mt_gpu_comm_begin(struct mt_gpu *g) {
  CU(cudaEventRecord(g->stepped, g->stream));
  CU(cudaStreamWaitEvent(g->comm_stream, g->stepped, 0));
  return 0;
}

int mt_gpu_comm_end(struct mt_gpu *g) {
  CU(cudaEventRecord(g->synced, g->comm_stream));
  CU(cudaStreamWaitEvent(g->stream, g->synced, 0));
  return 0;
}

int mt_gpu_wait(struct mt_gpu *g, cudaEvent_t ev, const char *what) {
  const double t0 = mt_now();
  for (;;) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) return mt_gpu_cuda_ok(e, what);
    if (g->nccl) MT_CALL(mt_nccl_async_check(g->nc.world, what));
    if (g->gnc) MT_CALL(mt_nccl_async_check(g->gnc, what));
    if (g->rnc) MT_CALL(mt_nccl_async_check(g->rnc, what));
    /* one GPU alone waits as long as its work takes */
    if (g->nccl && g->timeout > 0 && mt_now() - t0 > g->timeout) {
      ncclComm_t *cs[] = {&g->nc.world, &g->gnc, &g->rnc};
      for (int i = 0; i < 3; i++)
        if (*cs[i]) ncclCommAbort(*cs[i]), *cs[i] = NULL;
      g->nccl = 0;
      return MT_ERR(MT_ERR_STATE, "-device cuda: %s did not complete within -comm_timeout %g s "
                    "(a rank stopped or NCCL hangs; NCCL_DEBUG=INFO tells more)", what,
                    g->timeout);
    }
    struct timespec ts = {0, 20000}; /* 20 us */
    nanosleep(&ts, NULL);
  }
}
