/* Built-in backends. */
#ifndef MT_BACKENDS_H
#define MT_BACKENDS_H

#include "mpitrain/mpitrain.h"

extern const mt_backend_ops mt_sp_ops;
extern const mt_backend_ops mt_ddp_ops;

#endif
