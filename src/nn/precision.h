/* Low-precision number formats: bfloat16 and IEEE binary16 (fp16) on the CPU.
 *
 * The building blocks of the mixed-precision backends: conversions of single
 * values and of arrays, "round an fp32 array through bf16/fp16 in place"
 * (autocast emulation: the value a low-precision tensor would hold, kept in
 * an fp32 buffer), and a fast test for inf/NaN in a gradient buffer.
 *
 * Bits, not just values, match PyTorch (1.13, CPU):
 *  - fp32 -> bf16 is c10::BFloat16's round-to-nearest-even on the bits;
 *    every NaN becomes the quiet NaN 0x7FC0 (sign dropped). (PyTorch's
 *    contiguous CPU copy kernel writes 0xFFFF for NaN instead; c10's scalar
 *    rule is the one followed here. Either is a NaN.) fp32 subnormals are
 *    rounded, never flushed.
 *  - bf16 -> fp32 is exact (the 16 bits become the top half; NaN payloads
 *    and signalling NaNs are kept as they are).
 *  - fp32 -> fp16 is c10's fp16_ieee_from_fp32_value: round to nearest even,
 *    fp16 subnormals produced exactly, fp32 subnormals and anything below
 *    2^-25 (inclusive: the tie goes to the even zero) become +-0, anything
 *    from 65520 up (the tie above 65504, max finite) becomes +-inf, and every
 *    NaN becomes sign | 0x7E00.
 *  - fp16 -> fp32 is exact; a NaN keeps its sign and payload and is made
 *    quiet (bit 22 set), as c10's fp16_ieee_to_fp32_value does on x86.
 *
 * The scalar functions use integer arithmetic only, so they do not depend on
 * the floating-point environment (rounding mode, FTZ/DAZ). The array
 * functions use AVX-512 (F: integer bf16 rounding and vcvtps2ph/vcvtph2ps
 * with a NaN fix-up) when the build targets it (-march=native on such a
 * machine), else the scalar code; both give identical bits (tests/test_amp.c
 * checks every fp16 value and millions of fp32 patterns). Arrays above 256 Ki
 * elements are split over OpenMP threads. dst and src must not overlap
 * (except for the in-place round helpers). Nothing here allocates. */
#ifndef MT_PRECISION_H
#define MT_PRECISION_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The precision of a buffer or of a backend's compute. */
typedef enum { MT_PREC_FP32 = 0, MT_PREC_BF16, MT_PREC_FP16, MT_PREC_NKINDS } mt_precision;

/* "fp32", "bf16", "fp16" ("?" for a bad value); parse also accepts
 * "float32", "bfloat16", "float16", "half" and returns MT_ERR_OPTION (with a
 * message naming what and the choices) for anything else. */
const char *mt_precision_name(mt_precision p);
int mt_precision_parse(const char *name, const char *what, mt_precision *p);

/* ----------------------------------------------------------- single values */

static inline uint32_t mt_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float mt_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* fp32 -> bf16 bits, round to nearest even, NaN -> 0x7FC0. */
static inline uint16_t mt_bf16_from_float(float f) {
  const uint32_t u = mt_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  /* 0x7FFF plus the lowest kept bit: a tie rounds up only from an odd value */
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* bf16 bits -> fp32, exact. */
static inline float mt_float_from_bf16(uint16_t h) {
  return mt_f32_from_bits((uint32_t)h << 16);
}

/* fp32 -> fp16 bits, round to nearest even (see the top of this file). */
uint16_t mt_fp16_from_float(float f);
/* fp16 bits -> fp32, exact (NaN made quiet). */
float mt_float_from_fp16(uint16_t h);

/* ------------------------------------------------------------------ arrays */

void mt_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void mt_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
/* The templates' (core/real_t.h) conversion of a piece of an output into
 * bf16 (mt_layernorm_forward_ex, mt_gelu_forward_ex): float's values as
 * mt_f32_to_bf16 converts them; double's rounded to float first. A piece
 * is MT_BF16_PIECE values at most (a buffer in L1). */
#define MT_BF16_PIECE 256
static inline void mt_to_bf16(uint16_t *dst, const float *src, int n) {
  mt_f32_to_bf16(dst, src, (size_t)n);
}
static inline void mt_to_bf16_f64(uint16_t *dst, const double *src, int n) {
  for (int i = 0; i < n; i++) dst[i] = mt_bf16_from_float((float)src[i]);
}
void mt_f32_to_fp16(uint16_t *dst, const float *src, size_t n);
void mt_fp16_to_f32(float *dst, const uint16_t *src, size_t n);

/* x[i] = the fp32 value of x[i] rounded to bf16 / fp16 (one pass, in place):
 * what x.to(torch.bfloat16).float() gives, except that every NaN comes out
 * as the fp32 quiet NaN (0x7FC00000 for bf16; sign | 0x7FC00000 for fp16).
 * fp16 overflow gives +-inf. */
void mt_round_bf16(float *x, size_t n);
void mt_round_fp16(float *x, size_t n);
/* Either of the two by precision; MT_PREC_FP32 leaves x as it is. */
void mt_round_to(mt_precision p, float *x, size_t n);

/* 1 when any of the n floats is inf or NaN, else 0 (n == 0: 0). Reads the
 * whole array at memory speed (an integer max over |bits|, no branches in
 * the loop), threaded above 256 Ki elements. A gradient check for the loss
 * scaler: call it on the reduced gradients, or on each rank's part and
 * combine the flags with MPI_LOR / MPI_MAX so every rank agrees. */
int mt_has_nonfinite(const float *x, size_t n);

/* The same test for n fp16 or bf16 values (bits). */
int mt_has_nonfinite_fp16(const uint16_t *x, size_t n);
int mt_has_nonfinite_bf16(const uint16_t *x, size_t n);

#endif
