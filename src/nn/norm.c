/* LayerNorm over the last dimension and BatchNorm2d (training and eval),
 * for float and double (the template norm_t.h).
 * Statistics and the reductions of the backward are summed in double: a
 * BatchNorm channel of a 128-image batch of 28x28 maps sums 10^5 values. */
#include "nn/precision.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>

#define MT_TEMPLATE "nn/norm_t.h"
#include "core/real_t.h"
