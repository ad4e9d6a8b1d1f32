/* Softmax cross-entropy for float and double (the template loss_t.h). */
#include "nn/nn.h"

#include <math.h>

#define MT_TEMPLATE "nn/loss_t.h"
#include "core/real_t.h"
