/* NCCL bootstrap over MPI: id from one rank by MPI_Bcast, non-blocking
 * communicator creation under a time limit (only built with CUDA). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/mt_nccl.h"
#include "core/core.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define NCCL_DEFAULT_TIMEOUT 300.0

/* A failure notice: the sending rank's error code. */
#define TAG_FAILED 1

int mt_nccl_id_exchange(MPI_Comm comm, int root, ncclUniqueId *id) {
  int rank, size;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_MPI(MPI_Comm_size(comm, &size));
  MT_CHECK(root >= 0 && root < size, MT_ERR_ARG, "mt_nccl_id_exchange: root %d of %d ranks", root,
           size);
  /* the status travels with the bytes, so a failed ncclGetUniqueId fails
   * every rank in the same broadcast (no second collective, no hang) */
  struct {
    int32_t status;
    char bytes[sizeof(ncclUniqueId)];
  } msg;
  memset(&msg, 0, sizeof(msg));
  if (rank == root) {
    ncclUniqueId mine;
    memset(&mine, 0, sizeof(mine));
    ncclResult_t r = ncclGetUniqueId(&mine);
    msg.status = (int32_t)r;
    memcpy(msg.bytes, &mine, sizeof(mine));
  }
  MT_MPI(MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, root, comm));
  if (msg.status != ncclSuccess)
    return MT_ERR(MT_ERR_LIB,
                  "ncclGetUniqueId failed on rank %d: %s (check NCCL_SOCKET_IFNAME and that "
                  "the node has a usable network interface; NCCL_DEBUG=INFO tells more)",
                  root, ncclGetErrorString((ncclResult_t)msg.status));
  memcpy(id, msg.bytes, sizeof(*id));
  return 0;
}

static void nap(void) {
  struct timespec ts = {0, 1000000}; /* 1 ms */
  nanosleep(&ts, NULL);
}

/* Polls a non-blocking communicator until it leaves ncclInProgress, the
 * time limit passes or (ctl != MPI_COMM_NULL) another rank reports a
 * failure. Returns the final state; *peer is set when a notice came. */
static ncclResult_t wait_ready(ncclComm_t nc, double t0, double timeout_s, MPI_Comm ctl,
                               int *peer, int *timed_out) {
  ncclResult_t state = ncclInProgress;
  *peer = 0;
  *timed_out = 0;
  for (;;) {
    ncclResult_t r = ncclCommGetAsyncError(nc, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (ctl != MPI_COMM_NULL) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, TAG_FAILED, ctl, &flag, MPI_STATUS_IGNORE);
      if (flag) {
        *peer = 1;
        return ncclInProgress;
      }
    }
    if (mt_now() - t0 > timeout_s) {
      *timed_out = 1;
      return ncclInProgress;
    }
    nap();
  }
}

int mt_nccl_comm_init(ncclComm_t *out, MPI_Comm comm, int device, double timeout_s) {
  *out = NULL;
  if (timeout_s <= 0) timeout_s = NCCL_DEFAULT_TIMEOUT;
  int rank, size;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  MT_MPI(MPI_Comm_size(comm, &size));
  ncclUniqueId id;
  MT_CALL(mt_nccl_id_exchange(comm, 0, &id));

  /* failure notices travel on a communicator of their own */
  MPI_Comm ctl;
  MT_MPI(MPI_Comm_dup(comm, &ctl));
  const double t0 = mt_now();
  int err = 0, by_peer = 0;
  ncclComm_t nc = NULL;
  cudaError_t ce = device >= 0 ? cudaSetDevice(device) : cudaErrorInvalidDevice;
  if (ce != cudaSuccess) {
    err = MT_ERR(MT_ERR_LIB,
                 "NCCL init: cannot use CUDA device %d on rank %d: %s (%s); -device cpu runs "
                 "without a GPU",
                 device, rank, cudaGetErrorString(ce), cudaGetErrorName(ce));
  } else {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&nc, size, id, rank, &config);
    if (r == ncclSuccess || r == ncclInProgress) {
      int timed_out = 0;
      r = wait_ready(nc, t0, timeout_s, size > 1 ? ctl : MPI_COMM_NULL, &by_peer, &timed_out);
      if (timed_out)
        err = MT_ERR(MT_ERR_LIB,
                     "NCCL init of %d ranks did not complete within %g s on rank %d (device "
                     "%d); aborted (NCCL_DEBUG=INFO shows where it stopped)",
                     size, timeout_s, rank, device);
      else if (!by_peer && r != ncclSuccess)
        err = MT_ERR(MT_ERR_LIB, "NCCL init of %d ranks failed on rank %d (device %d): %s (%s)",
                     size, rank, device, ncclGetErrorString(r), ncclGetLastError(nc));
    } else {
      err = MT_ERR(MT_ERR_LIB, "ncclCommInitRankConfig failed on rank %d (device %d): %s (%s)",
                   rank, device, ncclGetErrorString(r), ncclGetLastError(nc));
    }
  }

  /* a failed rank tells the others, so they stop waiting at once */
  MPI_Request *reqs = NULL;
  int nreq = 0, code = err;
  if (err && size > 1) {
    if (mt_calloc(&reqs, (size_t)size, sizeof(MPI_Request), "NCCL failure notices") == 0)
      for (int p = 0; p < size; p++)
        if (p != rank) MPI_Isend(&code, 1, MPI_INT, p, TAG_FAILED, ctl, &reqs[nreq++]);
  }
  int failed = err != 0, nfailed = 0;
  int mrc = MPI_Allreduce(&failed, &nfailed, 1, MPI_INT, MPI_SUM, ctl);
  if (mrc == MPI_SUCCESS) /* drain the notices sent to this rank */
    for (int k = 0; k < nfailed - failed; k++) {
      int dummy;
      MPI_Recv(&dummy, 1, MPI_INT, MPI_ANY_SOURCE, TAG_FAILED, ctl, MPI_STATUS_IGNORE);
    }
  if (nreq) MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
  mt_free(&reqs);
  MPI_Comm_free(&ctl);
  if (mrc != MPI_SUCCESS) err = mt_mpi_error(__FILE__, __LINE__, __func__, mrc, "MPI_Allreduce");

  /* by_peer ranks have no error of their own: the agreement reports the
   * lowest rank that had one */
  int e = mt_agree(comm, err);
  if (e || nfailed) {
    if (nc) ncclCommAbort(nc);
    return e ? e : MT_ERR(MT_ERR_STATE, "NCCL init: a rank failed");
  }
  *out = nc;
  return 0;
}

void mt_nccl_comm_destroy(ncclComm_t *c, double timeout_s) {
  if (!c || !*c) return;
  if (timeout_s <= 0) timeout_s = NCCL_DEFAULT_TIMEOUT;
  ncclComm_t nc = *c;
  *c = NULL;
  const double t0 = mt_now();
  ncclResult_t r = ncclCommFinalize(nc);
  if (r == ncclSuccess || r == ncclInProgress) {
    int peer, timed_out;
    r = wait_ready(nc, t0, timeout_s, MPI_COMM_NULL, &peer, &timed_out);
    if (!timed_out && r == ncclSuccess) {
      ncclCommDestroy(nc);
      return;
    }
  }
  ncclCommAbort(nc);
}

int mt_nccl_settle(ncclComm_t nc, ncclResult_t r, const char *what, size_t n, double timeout_s) {
  if (timeout_s <= 0) timeout_s = NCCL_DEFAULT_TIMEOUT;
  if (r == ncclInProgress) {
    int peer, timed_out;
    r = wait_ready(nc, mt_now(), timeout_s, MPI_COMM_NULL, &peer, &timed_out);
    if (timed_out)
      return MT_ERR(MT_ERR_LIB, "%s of %zu values was not enqueued within %g s", what, n,
                    timeout_s);
  }
  if (r != ncclSuccess)
    return MT_ERR(MT_ERR_LIB, "%s of %zu values failed: %s (%s)", what, n, ncclGetErrorString(r),
                  ncclGetLastError(nc));
  return 0;
}

int mt_nccl_allreduce_sum(ncclComm_t nc, float *buf, size_t n, cudaStream_t stream,
                          double timeout_s) {
  return mt_nccl_settle(nc, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nc, stream), "ncclAllReduce",
                n, timeout_s);
}

int mt_nccl_bcast(ncclComm_t nc, float *buf, size_t n, int root, cudaStream_t stream,
                  double timeout_s) {
  return mt_nccl_settle(nc, ncclBroadcast(buf, buf, n, ncclFloat, root, nc, stream), "ncclBroadcast", n,
                timeout_s);
}

int mt_nccl_async_check(ncclComm_t nc, const char *what) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(nc, &state);
  if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress)) return 0;
  return MT_ERR(MT_ERR_LIB, "NCCL error while waiting for %s: %s (%s)", what,
                ncclGetErrorString(r != ncclSuccess ? r : state), ncclGetLastError(nc));
}

int mt_comm_cross_node(const mt_comm *c, MPI_Comm *cross) {
  MT_MPI(MPI_Comm_split(c->world, c->local_rank, c->node_id, cross));
  return 0;
}

void mt_nccl_comms_destroy(mt_nccl_comms *nc) {
  mt_nccl_comm_destroy(&nc->cross, 0);
  mt_nccl_comm_destroy(&nc->node, 0);
  mt_nccl_comm_destroy(&nc->world, 0);
  if (nc->cross_mpi != MPI_COMM_NULL) MPI_Comm_free(&nc->cross_mpi);
}

int mt_nccl_comms_create(mt_nccl_comms *nc, const mt_comm *c, int device, int hybrid,
                         double timeout_s) {
  memset(nc, 0, sizeof(*nc));
  nc->cross_mpi = MPI_COMM_NULL;
  nc->device = device;
  int e = mt_nccl_comm_init(&nc->world, c->world, device, timeout_s);
  if (!e && hybrid) {
    e = mt_nccl_comm_init(&nc->node, c->node, device, timeout_s);
    /* every rank takes part in the split, whatever its node comm did */
    int e2 = mt_agree(c->world, e);
    if (!e2) e2 = mt_comm_cross_node(c, &nc->cross_mpi);
    if (!e2) e2 = mt_nccl_comm_init(&nc->cross, nc->cross_mpi, device, timeout_s);
    e = mt_agree(c->world, e2);
  }
  if (e) {
    mt_nccl_comms_destroy(nc);
    MT_CALL(e);
  }
  return 0;
}
