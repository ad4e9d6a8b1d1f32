/* Device selection (-device cpu|cuda|auto) and, in a CUDA build, the CUDA
 * runtime calls behind it.
 *
 * The selection logic (src/gpu/select.c) is compiled in every build; the
 * CUDA side (src/cuda/device.c) only with CUDA (configure --with-cuda,
 * config.h defines MT_HAVE_CUDA). A CPU-only build answers "no CUDA" and
 * refuses -device cuda with a message naming the option. */
#ifndef MT_CUDA_DEVICE_H
#define MT_CUDA_DEVICE_H

#include <mpi.h>
#include <stddef.h>

/* 1 when this library was built with CUDA (and cuBLAS, NCCL), else 0. */
int mt_device_built_with_cuda(void);

/* Number of CUDA devices this process sees (honours CUDA_VISIBLE_DEVICES);
 * 0 in a CPU-only build or where the runtime finds none (no driver, no GPU).
 * Never fails: why there is no device is written to why (may be NULL). */
int mt_device_count(char *why, size_t len);

/* The rank of this process among the ranks of its node: its rank in node
 * when node is not MPI_COMM_NULL (mt_comm's node communicator, made with
 * MPI_COMM_TYPE_SHARED), else the launcher's variable SLURM_LOCALID,
 * OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or PMI_LOCAL_RANK, else 0. */
int mt_device_local_rank(MPI_Comm node);

/* Pure selection rule, no runtime calls (tests): want is "cpu", "cuda" or
 * "auto" (NULL or "" mean auto); ndevices the devices seen; built the
 * result of mt_device_built_with_cuda; why the reason there are none (or
 * NULL). On success *device is -1 for the CPU or local_rank mod ndevices,
 * msg says what was chosen, and 0 is returned. "cuda" without a CUDA build
 * or without a device, or an unknown word, return MT_ERR_OPTION with a
 * message naming -device in msg. */
int mt_device_choose(const char *want, int local_rank, int ndevices, int built, const char *why,
                     int *device, char *msg, size_t len);

/* mt_device_choose with this build and the devices of this process:
 * auto is cuda when a device exists, else cpu. Does not switch devices;
 * call mt_device_use(*device) with the result (a no-op for -1). Local per
 * rank: agree over the ranks (mt_agree) before acting on an error. */
int mt_device_select(const char *want, int local_rank, int *device, char *msg, size_t len);

/* The CUDA runtime's, driver's and NCCL's versions ("CUDA runtime 12.4,
 * driver 12.6, NCCL 2.21.5"; driver none where the node has none) into buf for mpitrain -version; "" in a
 * CPU-only build. */
void mt_device_versions(char *buf, size_t len);

/* Makes device the current CUDA device of the calling thread (-1: nothing).
 * MT_ERR_LIB with the CUDA error where it fails; MT_ERR_OPTION for a
 * device >= 0 in a CPU-only build. */
int mt_device_use(int device);

#ifdef MT_HAVE_CUDA
/* The CUDA side (src/cuda/device.c). */
int mt_cuda_device_count(char *why, size_t len);
int mt_cuda_set_device(int device);
void mt_cuda_versions(char *buf, size_t len);
/* "NAME, cc X.Y, N MiB" of a device into buf. */
int mt_cuda_device_describe(int device, char *buf, size_t len);
/* The device's PCI bus id ("0000:3b:00.0"), the same in every process
 * whatever CUDA_VISIBLE_DEVICES makes its number. */
int mt_cuda_device_pci(int device, char *buf, int len);
/* The device's free and total memory in bytes (cudaMemGetInfo, on it). */
int mt_cuda_device_memory(int device, double *free_bytes, double *total_bytes);
#endif

#endif
