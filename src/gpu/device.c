/* -device at start-up (every build): which device the ranks compute on.
 * The run is on GPUs on every rank or on none, one GPU per rank (NCCL
 * refuses two ranks of a communicator on one device); with GPUs, gpu.c
 * makes the device state (CUDA builds). */
#include "gpu/gpu.h"
#include "cuda/device.h"

#include <string.h>

/* -device auto stays on the CPU: fine, unless the run asked for offload.
 * Every rank comes here alike: agreed. */
static int stay_on_cpu(mt_trainer *t, const char *why) {
  mt_print0("-device auto: cpu (%s)\n", why);
  return mt_agree(t->comm->world,
                  t->cfg->fsdp_cpu_offload
                      ? MT_ERR(MT_ERR_OPTION, "option -fsdp_cpu_offload: needs a GPU, and "
                               "-device auto chose the CPU (%s)", why)
                      : 0);
}

int mt_gpu_choose(mt_trainer *t) {
  const mt_config *c = t->cfg;
  t->device = -1;
  const mt_comm *comm = t->comm;
  const char *want = c->device;
  const int is_auto = !strcmp(want, "auto");
  char why[256], msg[512] = "";
  /* auto stays on the CPU where the run has no GPU path, and says why */
  if (is_auto && mt_config_device_why(c, why, sizeof(why))) return stay_on_cpu(t, why);
  int device = -1;
  int err = mt_device_select(want, comm->local_rank, &device, msg, sizeof(msg));
  MT_CALL(mt_agree(comm->world, err));
  /* a device of its own for every rank of the node: compared by PCI bus
   * id, since each process numbers the devices it sees (one rank per GPU
   * through CUDA_VISIBLE_DEVICES sees its own as cuda:0) */
  int shares = -1; /* the lower local rank on the same device, if any */
  if (comm->local_size > 1) {
    char id[32] = "", *all = NULL;
#ifdef MT_HAVE_CUDA
    err = device >= 0 ? mt_cuda_device_pci(device, id, (int)sizeof(id)) : 0;
    MT_CALL(mt_agree(comm->world, err));
#endif
    err = mt_calloc(&all, (size_t)comm->local_size, sizeof(id), "devices of the node");
    MT_CALL(mt_agree(comm->world, err));
    err = MPI_Allgather(id, (int)sizeof(id), MPI_CHAR, all, (int)sizeof(id), MPI_CHAR, comm->node);
    for (int r = 0; !err && id[0] && r < comm->local_rank; r++)
      if (!strncmp(all + (size_t)r * sizeof(id), id, sizeof(id))) shares = r;
    mt_free(&all);
    MT_MPI(err);
  }
  const int on = device >= 0;
  int v[3] = {-on, on, shares >= 0};
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT, MPI_MAX, comm->world));
  const int mixed = -v[0] != v[1], shared = v[2];
  if (is_auto && (mixed || shared))
    return stay_on_cpu(t, mixed ? "not every rank sees a CUDA device"
                                : "a node has more ranks than CUDA devices");
  if (mixed) /* some rank has none: its message for all */
    return mt_agree(comm->world,
                    on ? 0
                       : MT_ERR(MT_ERR_OPTION,
                                "option -device %s: some ranks see a CUDA device and others none "
                                "(rank %d: %s); give -device cpu, or run on nodes that all have "
                                "GPUs", want, comm->rank, msg));
  if (shared)
    return mt_agree(comm->world,
                    shares < 0 ? 0
                               : MT_ERR(MT_ERR_OPTION,
                                        "option -device %s: rank %d would share cuda:%d with "
                                        "local rank %d: a node runs more ranks than it has GPUs "
                                        "(NCCL needs one GPU per rank: srun --gpus-per-task=1, "
                                        "mpirun -npernode, or -device cpu)",
                                        want, comm->rank, device, shares));
  if (strcmp(want, "cpu")) mt_print0("%s\n", msg);
  if (!on && c->fsdp_cpu_offload) /* auto without a device (printed above) */
    return mt_agree(comm->world, MT_ERR(MT_ERR_OPTION, "option -fsdp_cpu_offload: needs a GPU "
                                        "(%s)", msg));
  t->device = device;
  return 0;
}

int mt_gpu_device_memory(const mt_trainer *t, double *free_bytes, double *total_bytes) {
  *free_bytes = *total_bytes = 0;
  if (t->device < 0) return 0;
#ifdef MT_HAVE_CUDA
  MT_CALL(mt_cuda_device_memory(t->device, free_bytes, total_bytes));
  return 0;
#else
  return MT_ERR(MT_ERR_STATE, "-device: a device chosen in a build without CUDA");
#endif
}

int mt_gpu_setup(mt_trainer *t) {
  if (t->device < 0) return 0;
#ifdef MT_HAVE_CUDA
  MT_CALL(mt_gpu_create(t, t->device));
  return 0;
#else
  return MT_ERR(MT_ERR_STATE, "-device: a device chosen in a build without CUDA");
#endif
}
