/* -device cpu | cuda | auto: read with mt_option_string (so -help lists it
 * and the configuration hash covers it) and checked against what the device
 * path of the trainer (src/gpu/gpu.c) supports. Which device a rank
 * gets is decided at start-up (src/gpu/device.c), where the node's
 * devices are known. */
#include "backends/fsdp.h"
#include "comm/shm_reduce.h"
#include "config/mt_config.h"
#include "core/core.h"
#include "nn/precision.h"

#include <stdio.h>
#include <string.h>

const char *mt_config_device_why(const mt_config *c, char *buf, size_t len) {
  if (strcmp(c->model, "mlp") && strcmp(c->model, "cnn") && strcmp(c->model, "gpt"))
    snprintf(buf, len, "model %s has no CUDA version (mlp, cnn and gpt have)", c->model);
  else if (!(c->backend_traits & MT_TRAIT_CUDA))
    snprintf(buf, len, "-backend %s has no CUDA path (sp, ddp, fsdp and their -amp have)",
             c->backend);
  else if (c->dp)
    snprintf(buf, len, "DP-SGD (-backend %s) has no CUDA path yet", c->backend);
  else if (c->amp && c->ddp_reduce_dtype != MT_PREC_FP32)
    snprintf(buf, len, "-ddp_reduce_dtype %s has no CUDA path yet (fp32 has)",
             mt_precision_name((mt_precision)c->ddp_reduce_dtype));
  else if (c->dtype != MT_FP32)
    snprintf(buf, len, "-precision fp64 has no CUDA path yet");
  else if (c->ddp_allreduce == MT_ALLREDUCE_SHM)
    snprintf(buf, len, "-ddp_allreduce shm sums host buffers (the CUDA path's buckets go "
             "through NCCL)");
  else
    return NULL;
  return buf;
}

int mt_config_device(mt_config *c) {
  MT_CALL(mt_option_string("-device",
                           "cpu (default) | cuda (one GPU per rank: local rank mod the node's "
                           "devices) | auto (cuda where the run's ranks see a device and the "
                           "run has a CUDA path, else cpu)",
                           "cpu", c->device, sizeof(c->device)));
  MT_CHECK(!strcmp(c->device, "cpu") || !strcmp(c->device, "cuda") || !strcmp(c->device, "auto"),
           MT_ERR_OPTION, "option -device: '%s' is not one of: cpu, cuda, auto", c->device);
  char why[256];
  if (!strcmp(c->device, "cuda") && mt_config_device_why(c, why, sizeof(why)))
    return MT_ERR(MT_ERR_OPTION, "option -device cuda: %s; -device cpu runs it", why);
  MT_CHECK(!c->fsdp_cpu_offload || strcmp(c->device, "cpu"), MT_ERR_OPTION,
           "option -fsdp_cpu_offload: keeps the sharded parameters and optimizer state of a GPU "
           "run in host memory; this run computes on the CPU (-device cpu), where they are in "
           "host memory already");
  MT_CHECK(!c->fsdp_cpu_offload || c->fsdp_strategy == MT_FSDP_SHARD_GRAD_OP, MT_ERR_OPTION,
           "option -fsdp_cpu_offload: needs -fsdp_sharding_strategy shard_grad_op (shards to "
           "offload)");
  return 0;
}
