/* -device at start-up (every build): which device the ranks compute on.
 * The run is on the GPU on every rank or on none; with one, gpu.c makes
 * the device state (CUDA builds). */
#include "trainer/gpu.h"
#include "cuda/device.h"

#include <string.h>

int mt_gpu_setup(mt_trainer *t) {
  const mt_config *c = t->cfg;
  const mt_comm *comm = t->comm;
  const char *want = c->device;
  char why[256], msg[512] = "";
  if (!strcmp(want, "auto") && mt_config_device_why(c, why, sizeof(why))) {
    /* auto never fails: the run stays on the CPU and says why */
    mt_print0("-device auto: cpu (%s)\n", why);
    return 0;
  }
  int device = -1;
  int err = mt_device_select(want, comm->local_rank, &device, msg, sizeof(msg));
  MT_CALL(mt_agree(comm->world, err));
  /* all ranks on a device or none: a mixed run would mix NCCL and MPI */
  int on = device >= 0, mm[2] = {-on, on};
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_INT, MPI_MAX, comm->world));
  if (-mm[0] != mm[1]) /* some rank has none: its message for all */
    return mt_agree(comm->world,
                    on ? 0
                       : MT_ERR(MT_ERR_OPTION,
                                "option -device %s: some ranks see a CUDA device and others none "
                                "(rank %d: %s); give -device cpu, or run on nodes that all have "
                                "GPUs", want, comm->rank, msg));
  if (strcmp(want, "cpu")) mt_print0("%s\n", msg);
  if (device < 0) return 0;
#ifdef MT_HAVE_CUDA
  MT_CALL(mt_gpu_create(t, device));
  return 0;
#else
  return MT_ERR(MT_ERR_STATE, "-device: a device chosen in a build without CUDA");
#endif
}
