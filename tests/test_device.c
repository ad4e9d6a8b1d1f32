/* -device cpu|cuda|auto selection (src/gpu/select.c), in every build: the
 * pure rule, the local rank from the launcher's variables, and what this
 * build and machine answer (a CPU-only build refuses -device cuda naming the
 * option; auto falls back to the CPU where there is no device). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/device.h"
#include "mpitrain/mpitrain.h"
#include "testutil.h"

int main(void) {
  char msg[400], why[256] = "";
  int dev = 5, e;
  /* the rule */
  e = mt_device_choose("cpu", 3, 4, 1, NULL, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == -1,
        "cpu: the CPU even with devices");
  e = mt_device_choose("auto", 5, 4, 1, NULL, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == 1,
        "auto with 4 devices: local rank 5 -> device 1 (%s)", msg);
  e = mt_device_choose(NULL, 0, 0, 1, NULL, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == -1,
        "auto (default) without a device: the CPU (%s)", msg);
  e = mt_device_choose("auto", 2, 8, 0, NULL, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == -1,
        "auto in a CPU-only build: the CPU");
  e = mt_device_choose("cuda", 9, 8, 1, NULL, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == 1,
        "cuda: local rank 9 on 8 devices -> device 1");
  e = mt_device_choose("cuda", 0, 0, 1, "no driver", &dev, msg, sizeof(msg));
  CHECK(e == MT_ERR_OPTION &&
            strstr(msg, "-device cuda") && strstr(msg, "no driver") && dev == -1,
        "cuda without a device: error naming -device and why (%s)", msg);
  mt_error_clear();
  e = mt_device_choose("cuda", 0, 2, 0, NULL, &dev, msg, sizeof(msg));
  CHECK(e == MT_ERR_OPTION &&
            strstr(msg, "-device cuda") && strstr(msg, "--with-cuda"),
        "cuda in a CPU-only build: error naming -device and --with-cuda (%s)", msg);
  mt_error_clear();
  e = mt_device_choose("gpu0", 0, 2, 1, NULL, &dev, msg, sizeof(msg));
  CHECK(e == MT_ERR_OPTION &&
            strstr(msg, "-device") && strstr(msg, "gpu0"),
        "unknown word: error naming -device and the word (%s)", msg);
  mt_error_clear();
  e = mt_device_choose("cuda", 0, 0, 1, NULL, &dev, NULL, 0);
  CHECK(e == MT_ERR_OPTION &&
            strstr(mt_error_message(), "-device cuda"),
        "the error is recorded too (msg NULL allowed)");
  mt_error_clear();

  /* local rank from the launcher without a node communicator */
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("MPI_LOCALRANKID");
  unsetenv("PMI_LOCAL_RANK");
  setenv("SLURM_LOCALID", "3", 1);
  CHECK(mt_device_local_rank(MPI_COMM_NULL) == 3, "local rank from SLURM_LOCALID");
  setenv("SLURM_LOCALID", "junk", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  CHECK(mt_device_local_rank(MPI_COMM_NULL) == 2, "a malformed SLURM_LOCALID is skipped");
  unsetenv("SLURM_LOCALID");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  CHECK(mt_device_local_rank(MPI_COMM_NULL) == 0, "no variable: local rank 0");

  /* this build on this machine */
  int n = mt_device_count(why, sizeof(why));
  printf("# built with CUDA: %d; devices: %d%s%s\n", mt_device_built_with_cuda(), n,
         n ? "" : ", ", why);
#ifdef MT_HAVE_CUDA
  CHECK(mt_device_built_with_cuda() == 1, "MT_HAVE_CUDA build says so");
#else
  CHECK(mt_device_built_with_cuda() == 0 && n == 0, "CPU-only build: no CUDA, no device");
  e = mt_device_select("cuda", 0, &dev, msg, sizeof(msg));
  CHECK(e == MT_ERR_OPTION &&
            strstr(msg, "-device cuda"),
        "CPU-only build refuses -device cuda (%s)", msg);
  mt_error_clear();
  CHECK(mt_device_use(0) == MT_ERR_OPTION, "CPU-only build cannot use device 0");
  mt_error_clear();
#endif
  e = mt_device_select("auto", 0, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == (n > 0 ? 0 : -1),
        "auto on this machine (%s)", msg);
  e = mt_device_select("cpu", 0, &dev, msg, sizeof(msg));
  CHECK(e == 0 && dev == -1 && mt_device_use(-1) == 0, "cpu on this machine");
  printf("test_device: %d checks, %d failed\n", tu_nchecks, tu_nfailed);
  return tu_nfailed ? 1 : 0;
}
