/* NCCL bootstrap without a GPU (built only with CUDA; tests/test_nccl_id.sh
 * runs it at 2 and 4 ranks):
 *  - the unique id made on one rank reaches every rank of the world, node
 *    and cross-node communicators byte for byte (a hash compared with
 *    MPI_Allreduce min/max), and is not all zeros;
 *  - -device selection: cpu, auto, cuda and a bad word, against the devices
 *    this machine has;
 *  - with no CUDA device, NCCL communicator creation fails on every rank
 *    with a message naming the device, within its time limit (no hang).
 * Every check is agreed over the ranks; rank 0 prints one line per check. */
#include "comm/comm.h"
#include "core/core.h"
#include "cuda/device.h"
#include "cuda/mt_nccl.h"

#include <stdio.h>
#include <string.h>

static int rank_, size_, nfailed_, nchecks_;

static void check(int ok, const char *what) {
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  nchecks_++;
  if (!all) nfailed_++;
  if (rank_ == 0) {
    printf("%s %s (%d ranks)\n", all ? "ok  " : "FAIL", what, size_);
    fflush(stdout);
  }
}

/* The id of an exchange over comm is the same on every rank of comm. */
static void check_id(MPI_Comm comm, int root, const char *name, ncclUniqueId *id) {
  char what[160];
  memset(id, 0, sizeof(*id));
  int e = mt_nccl_id_exchange(comm, root, id);
  if (e) printf("rank %d: %s\n", rank_, mt_error_message());
  snprintf(what, sizeof(what), "%s: id exchange from root %d succeeds", name, root);
  check(e == 0, what);
  uint64_t h = mt_hash_bytes(id, sizeof(*id), 1469598103934665603ULL), lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
  snprintf(what, sizeof(what), "%s: every rank holds the same %zu id bytes", name, sizeof(*id));
  check(lo == hi, what);
  int nonzero = 0;
  for (size_t i = 0; i < sizeof(*id); i++) nonzero |= ((const unsigned char *)id)[i] != 0;
  snprintf(what, sizeof(what), "%s: the id is not all zeros", name);
  check(nonzero, what);
}

static void test_ids(const mt_comm *c) {
  ncclUniqueId w0, wl, nd, cr;
  check_id(c->world, 0, "world", &w0);
  check_id(c->world, c->size - 1, "world", &wl);
  check(memcmp(&w0, &wl, sizeof(w0)) != 0, "world: two exchanges give two different ids");
  check_id(c->node, 0, "node", &nd);
  MPI_Comm cross = MPI_COMM_NULL;
  int e = mt_comm_cross_node(c, &cross);
  check(e == 0, "cross-node communicator made");
  if (e) return;
  int csize = 0;
  MPI_Comm_size(cross, &csize);
  check(csize == c->nnodes, "cross-node communicator has one rank per node");
  check_id(cross, 0, "cross-node", &cr);
  MPI_Comm_free(&cross);
}

static void test_select(const mt_comm *c) {
  char msg[512], why[256] = "";
  int dev = 7, n = mt_device_count(why, sizeof(why));
  if (rank_ == 0) printf("# %d CUDA device%s%s%s\n", n, n == 1 ? "" : "s", n ? "" : ": ", why);
  check(mt_device_built_with_cuda() == 1, "built with CUDA");
  int lr = mt_device_local_rank(c->node);
  check(lr == c->local_rank, "local rank from the node communicator");
  int e = mt_device_select("cpu", lr, &dev, msg, sizeof(msg));
  check(e == 0 && dev == -1, "-device cpu selects the CPU");
  e = mt_device_select("auto", lr, &dev, msg, sizeof(msg));
  check(e == 0 && dev == (n > 0 ? lr % n : -1), "-device auto: cuda when a device exists, else cpu");
  e = mt_device_select("cuda", lr, &dev, msg, sizeof(msg));
  if (n > 0)
    check(e == 0 && dev == lr % n, "-device cuda: local rank mod device count");
  else
    check(e == MT_ERR_OPTION && strstr(msg, "-device cuda") && strstr(msg, "no CUDA device"),
          "-device cuda without a device: an error naming the option");
  mt_error_clear();
  e = mt_device_select("gpu", lr, &dev, msg, sizeof(msg));
  check(e == MT_ERR_OPTION && strstr(msg, "-device"), "-device gpu: an error naming the option");
  mt_error_clear();
  /* the pure rule for a node of 4 devices */
  e = mt_device_choose("cuda", 6, 4, 1, NULL, &dev, msg, sizeof(msg));
  check(e == 0 && dev == 2, "local rank 6 on 4 devices gets device 2");
}

static void test_init_without_device(const mt_comm *c) {
  char why[256];
  if (mt_device_count(why, sizeof(why)) > 0) {
    if (rank_ == 0) printf("# a CUDA device exists: the no-device failure path is not tested\n");
    return;
  }
  ncclComm_t nc = NULL;
  double t0 = mt_now();
  int e = mt_nccl_comm_init(&nc, c->world, 0, 20);
  double dt = mt_now() - t0;
  const char *m = mt_error_message();
  if (rank_ == 0) printf("# rank 0 error: %s\n", m);
  check(e != 0 && nc == NULL, "NCCL init without a device fails on every rank");
  check(rank_ != 0 || (strstr(m, "CUDA device 0") != NULL),
        "the message names the device that could not be used");
  check(dt < 20, "and does so within its time limit");
  mt_error_clear();
  e = mt_nccl_comms_create(&(mt_nccl_comms){0}, c, 0, 1, 20);
  check(e != 0, "hybrid NCCL communicators without a device fail on every rank");
  mt_error_clear();
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  mt_comm c;
  if (mt_comm_create(&c)) {
    printf("rank %d: mt_comm_create: %s\n", rank_, mt_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  test_ids(&c);
  test_select(&c);
  test_init_without_device(&c);
  mt_comm_destroy(&c);
  if (rank_ == 0)
    printf("test_nccl_id on %d ranks: %d checks, %d failed\n", size_, nchecks_, nfailed_);
  MPI_Finalize();
  return nfailed_ ? 1 : 0;
}
