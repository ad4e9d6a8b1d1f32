/* The -amp policy's low-precision gradient all-reduce (amp.c), wrapped by
 * mt_backend_setup around a strategy with MT_TRAIT_LOWP_REDUCE (ddp) when
 * b->reduce_dtype is bf16 or fp16 and the run has several ranks: the
 * gradients are rounded to that type, summed in fp32 and rounded at each
 * step of the sum (an MPI user operation, or -ddp_allreduce shm's window
 * with the same rounding), and converted back to fp32, halving the bytes
 * sent. The strategy's own sync and data are kept. The
 * precision policy itself is the trainer's (src/trainer/amp.c). */
#ifndef MT_BACKENDS_AMP_H
#define MT_BACKENDS_AMP_H

#include "mpitrain/mpitrain.h"
#include "nn/precision.h"

extern const mt_backend_ops mt_lowp_reduce_ops;

#endif
