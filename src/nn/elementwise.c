/* Element-wise layers (GELU, residual add, dropout) and the row-wise losses
 * of the GPT and regression models (cross-entropy with an ignore label,
 * mean-squared error), for float and double (the template elementwise_t.h). */
#include "core/core.h"
#include "nn/fastmath.h"
#include "nn/precision.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>
#include <string.h>

#define EW_PAR 262144 /* elements below which a loop stays serial */

/* Purposes of mt_key in use: 1 sampler, 2 parameter init, 3 dropout. */
#define MT_PURPOSE_DROPOUT 3

uint64_t mt_dropout_key(uint64_t seed, uint64_t step, int rank, int layer) {
  const uint64_t k = mt_key(seed, MT_PURPOSE_DROPOUT, step);
  return mt_key(k, (uint64_t)(uint32_t)layer + 1, (uint64_t)(uint32_t)rank);
}

#define MT_TEMPLATE "nn/elementwise_t.h"
#include "core/real_t.h"
