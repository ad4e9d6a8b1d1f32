/* Fully connected layer for float and double (the template linear_t.h). */
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#define MT_TEMPLATE "nn/linear_t.h"
#include "core/real_t.h"
