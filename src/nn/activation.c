/* Element-wise activations for float and double (the template
 * activation_t.h, instantiated by core/real_t.h). */
#include "nn/nn.h"

#define MT_PAR_MIN 1048576

#define MT_TEMPLATE "nn/activation_t.h"
#include "core/real_t.h"
