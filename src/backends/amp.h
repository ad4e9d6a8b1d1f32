/* The mixed-precision backends (amp.c): sp-amp, ddp-amp (autocast-style,
 * O1) and sp-amp-apex, ddp-amp-apex (O2). They share sp's and ddp's rules
 * for parameters and gradients; the precision policy itself is the
 * trainer's (src/trainer/amp.c). ddp-amp* all-reduce the gradients in the
 * type set by mt_backend_amp_reduce_dtype (before setup; default fp32):
 * bf16/fp16 halve the bytes sent, each sum formed in fp32 and rounded to
 * that type (an MPI user operation), then converted back to fp32. */
#ifndef MT_BACKENDS_AMP_H
#define MT_BACKENDS_AMP_H

#include "mpitrain/mpitrain.h"
#include "nn/precision.h"

extern const mt_backend_ops mt_sp_amp_ops, mt_sp_amp_apex_ops;
extern const mt_backend_ops mt_ddp_amp_ops, mt_ddp_amp_apex_ops;

void mt_backend_amp_reduce_dtype(mt_precision p);

#endif
