/* torch.optim.SGD on a flat buffer for float and double (the template
 * sgd_t.h). */
#include "optim/optim.h"

#define MT_TEMPLATE "optim/sgd_t.h"
#include "core/real_t.h"
