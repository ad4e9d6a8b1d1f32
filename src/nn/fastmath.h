/* Inline float functions written so that a `#pragma omp simd` loop around
 * them becomes vector code: no calls, no branches (both sides computed and
 * selected), no float -> int conversions. glibc's expf and tanhf are scalar
 * calls; through them GELU and the softmaxes had taken a fifth of a GPT step.
 * Without AVX-512's masks GCC 12 turns the clamps below into branches and
 * vectorises the loops only with -fno-trapping-math (Makefile.am; checked
 * by tests/test_simd.sh): scalar, the gpt's GELU took 76 ms a step on an
 * AVX2 EPYC against 12.
 *
 * mt_vexp: e^x by Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a
 * degree-7 polynomial for e^r and 2^n put together from the bits of the
 * rounding constant (no conversion). Relative error below 2e-7 on [-87, 88]
 * (tests/test_nn.c sweeps it against double exp); 0 below -87 (the true
 * value is under 2e-38 there), +inf above 88 (0.72 before float's own
 * overflow), NaN stays NaN. mt_vexp_f64 is libm's exp, for the templates
 * (MT_T(mt_vexp)). */
#ifndef MT_FASTMATH_H
#define MT_FASTMATH_H

#include "nn/precision.h" /* mt_f32_bits, mt_f32_from_bits */

#include <math.h>
#include <stdint.h>

static inline float mt_vexp(float x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  const float c = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x; /* n in [-126, 127] */
  const float t = c * 1.44269504088896341f + magic;
  const float n = t - magic;
  const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
  /* e^r, Taylor to r^7 (the next term is below 3e-8) */
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* the low bits of t hold n: 2^n = (n + 127) << 23 */
  const float e = p * mt_f32_from_bits((mt_f32_bits(t) - mt_f32_bits(magic) + 127u) << 23);
  /* the range's ends as arithmetic, e * 1 + 0 = e exactly: with a select
   * (x < -87 ? 0 : x > 88 ? inf : e) the compiler copied the caller's
   * arithmetic into each case, and GELU's x / (1 + e) ran three vector
   * divisions. NaN keeps e (NaN): no comparison holds for it. */
  const float keep = x < -87.0f ? 0.0f : 1.0f, inf = x > 88.0f ? INFINITY : 0.0f;
  return e * keep + inf;
}

static inline double mt_vexp_f64(double x) { return exp(x); }

#endif
