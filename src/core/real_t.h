/* Instantiates a type-generic template for float and for double.
 *
 * A file that defines MT_TEMPLATE (the template's header, e.g.
 * "nn/pool_t.h") and then includes this header gets the template twice:
 *
 *   REAL float,  MT_T(name) name,        MT_F64 0, MT_DT MT_FP32
 *   REAL double, MT_T(name) name ## _f64, MT_F64 1, MT_DT MT_FP64
 *
 * with the libm function of the type under one name: MT_EXP, MT_LOG,
 * MT_ERF, MT_SQRT (expf, ... for float; exp, ... for double). So one source
 * serves -precision fp32 (the functions keep their names, and the float
 * instance is the code that was written for float alone: same expressions;
 * when the templates were made, its object code was compared with the old
 * float-only code's, instruction by instruction) and -precision fp64 (the
 * `_f64` twins). A template writes its constants as (REAL)c: for the
 * constants used here (float)c is the value the `cf` literal had.
 *
 * No include guard: included once per template; MT_TEMPLATE and every
 * macro above are undefined again at the end. */
#ifndef MT_TEMPLATE
#error "define MT_TEMPLATE (the template header) before including core/real_t.h"
#endif

#define REAL float
#define MT_T(name) name
#define MT_F64 0
#define MT_DT MT_FP32
#define MT_EXP expf
#define MT_LOG logf
#define MT_ERF erff
#define MT_SQRT sqrtf
#include MT_TEMPLATE
#undef REAL
#undef MT_T
#undef MT_F64
#undef MT_DT
#undef MT_EXP
#undef MT_LOG
#undef MT_ERF
#undef MT_SQRT

#define REAL double
#define MT_T(name) name##_f64
#define MT_F64 1
#define MT_DT MT_FP64
#define MT_EXP exp
#define MT_LOG log
#define MT_ERF erf
#define MT_SQRT sqrt
#include MT_TEMPLATE
#undef REAL
#undef MT_T
#undef MT_F64
#undef MT_DT
#undef MT_EXP
#undef MT_LOG
#undef MT_ERF
#undef MT_SQRT

#undef MT_TEMPLATE
