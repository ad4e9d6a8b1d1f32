/* -device cpu|cuda|auto: which device a rank computes on (the selection rule
 * of cuda/device.h, beside the trainer's device runtime). Compiled in every
 * build; the CUDA runtime calls sit in src/cuda/device.c (CUDA builds). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/device.h"
#include "mpitrain/mpitrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_device_built_with_cuda(void) {
#ifdef MT_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

void mt_device_versions(char *buf, size_t len) {
  if (len) buf[0] = '\0';
#ifdef MT_HAVE_CUDA
  mt_cuda_versions(buf, len);
#endif
}

int mt_device_count(char *why, size_t len) {
#ifdef MT_HAVE_CUDA
  return mt_cuda_device_count(why, len);
#else
  if (why && len) snprintf(why, len, "mpitrain was built without CUDA (configure --with-cuda)");
  return 0;
#endif
}

static int env_int(const char *name, int *v) {
  const char *s = getenv(name);
  if (!s || !*s) return 0;
  char *end;
  long x = strtol(s, &end, 10);
  if (*end || x < 0 || x > 1 << 20) return 0;
  *v = (int)x;
  return 1;
}

int mt_device_local_rank(MPI_Comm node) {
  int r = 0;
  if (node != MPI_COMM_NULL && MPI_Comm_rank(node, &r) == MPI_SUCCESS) return r;
  static const char *vars[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                               "PMI_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (env_int(vars[i], &r)) return r;
  return 0;
}

int mt_device_choose(const char *want, int local_rank, int ndevices, int built, const char *why,
                     int *device, char *msg, size_t len) {
  char local[512];
  if (!msg || !len) msg = local, len = sizeof(local);
  if (!want || !*want) want = "auto";
  *device = -1;
  if (!why || !*why) why = built ? "no CUDA device found" : "mpitrain was built without CUDA";
  if (local_rank < 0) local_rank = 0;
  if (!strcmp(want, "cpu")) {
    snprintf(msg, len, "-device cpu");
    return 0;
  }
  if (!strcmp(want, "auto")) {
    if (built && ndevices > 0) {
      *device = local_rank % ndevices;
      snprintf(msg, len, "-device auto: cuda:%d (local rank %d, %d device%s)", *device, local_rank,
               ndevices, ndevices > 1 ? "s" : "");
    } else {
      snprintf(msg, len, "-device auto: cpu (%s)", why);
    }
    return 0;
  }
  if (!strcmp(want, "cuda")) {
    if (!built) {
      snprintf(msg, len,
               "-device cuda: this mpitrain was built without CUDA (reconfigure with "
               "--with-cuda), use -device cpu or auto");
      return MT_ERR(MT_ERR_OPTION, "%s", msg);
    }
    if (ndevices <= 0) {
      snprintf(msg, len, "-device cuda: no CUDA device available on this node (%s); use -device "
                         "cpu or auto", why);
      return MT_ERR(MT_ERR_OPTION, "%s", msg);
    }
    *device = local_rank % ndevices;
    snprintf(msg, len, "-device cuda: cuda:%d (local rank %d, %d device%s)", *device, local_rank,
             ndevices, ndevices > 1 ? "s" : "");
    return 0;
  }
  snprintf(msg, len, "-device: unknown value '%s' (cpu, cuda or auto)", want);
  return MT_ERR(MT_ERR_OPTION, "%s", msg);
}

int mt_device_select(const char *want, int local_rank, int *device, char *msg, size_t len) {
  char why[256] = "";
  int n = 0;
  /* no runtime call for cpu, nor for a word that is not known */
  if (!want || !*want || !strcmp(want, "cuda") || !strcmp(want, "auto"))
    n = mt_device_count(why, sizeof(why));
  return mt_device_choose(want, local_rank, n, mt_device_built_with_cuda(), why, device, msg, len);
}

int mt_device_use(int device) {
  if (device < 0) return 0;
#ifdef MT_HAVE_CUDA
  MT_CALL(mt_cuda_set_device(device));
  return 0;
#else
  return MT_ERR(MT_ERR_OPTION, "-device cuda: mpitrain was built without CUDA");
#endif
}
