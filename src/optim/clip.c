/* Norms and clipping of flat gradient buffers for float and double (the
 * template clip_t.h). */
#include "optim/optim.h"

#include <math.h>

#define MT_TEMPLATE "optim/clip_t.h"
#include "core/real_t.h"
