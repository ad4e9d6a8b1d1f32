/* Integer-only functions that the GPU must compute exactly as the CPU does,
 * written once for host and device (CUDA __host__ __device__ under nvcc,
 * plain static inline in C, so tests/test_cuda_bits.c checks them on the
 * host against the CPU's functions, without a GPU: every 16-bit input, and
 * 286 million 32-bit patterns, all of those where the rules change):
 *  - the counter-based generator of src/core (mt_rand64, mt_randu, mt_key
 *    of core/util.c and core/core.h): dropout masks drawn on the device are
 *    the CPU's, bit for bit;
 *  - the bf16 and fp16 rules of nn/precision.h (mt_bf16_from_float,
 *    mt_float_from_bf16, mt_fp16_from_float, mt_float_from_fp16): round to
 *    nearest even on the bits, NaN canonicalisation, subnormals.
 * Integer arithmetic only (bit casts, shifts, adds), so neither the
 * floating-point environment nor the device's flush-to-zero modes matter.
 * Also the index arithmetic of the kernels that gather instead of scatter
 * (pooling's and conv2d's backward) and the optimizer's tensor lookup,
 * which the same test checks against brute force. */
#ifndef MT_CUDA_BITS_H
#define MT_CUDA_BITS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MT_HD static __host__ __device__ __forceinline__
#else
#define MT_HD static inline
#endif

MT_HD uint32_t mt_cu_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

MT_HD float mt_cu_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/* ------------------------------------------------------------ generator */

/* splitmix64's finaliser */
MT_HD uint64_t mt_cu_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* mt_rand64: a bijection of the counter for each key */
MT_HD uint64_t mt_cu_rand64(uint64_t key, uint64_t counter) {
  const uint64_t z = counter * 0x9e3779b97f4a7c15ULL + mt_cu_mix64(key ^ 0x632be59bd9b4e019ULL);
  return mt_cu_mix64(mt_cu_mix64(z) ^ key);
}

/* mt_randu: the top 24 bits as a float in [0,1) (exact: an integer below
 * 2^24 converts exactly, and the scale is a power of two) */
MT_HD float mt_cu_randu(uint64_t key, uint64_t counter) {
  return (float)(uint32_t)(mt_cu_rand64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

/* mt_key */
MT_HD uint64_t mt_cu_key(uint64_t seed, uint64_t purpose, uint64_t a) {
  return mt_cu_mix64(mt_cu_mix64(mt_cu_mix64(seed) ^ (purpose * 0xd6e8feb86659fd93ULL)) ^ a);
}

/* ---------------------------------------------------------------- bf16 */

/* fp32 -> bf16 bits: round to nearest even (0x7FFF plus the lowest kept
 * bit, so a tie rounds up only from an odd value); every NaN -> 0x7FC0 */
MT_HD uint16_t mt_cu_bf16_from_float(float f) {
  const uint32_t u = mt_cu_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)0x7FC0u;
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* bf16 bits -> fp32: exact, the bits become the top half */
MT_HD float mt_cu_float_from_bf16(uint16_t h) { return mt_cu_f32_from_bits((uint32_t)h << 16); }

/* ---------------------------------------------------------------- fp16 */

/* fp32 -> fp16 bits, c10's rule: NaN -> sign | 0x7E00; from 65520 up
 * (the tie above the largest finite, 65504) inf; normals rebiased and
 * rounded to nearest even; subnormals counted in units of 2^-24 and
 * rounded to nearest even; up to 2^-25 inclusive (the tie goes to the even
 * zero) and every fp32 subnormal +-0 */
MT_HD uint16_t mt_cu_fp16_from_float(float f) {
  const uint32_t u = mt_cu_f32_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
  if (a >= 0x38800000u) { /* 2^-14 and up: a normal fp16 */
    const uint32_t r = a - 0x38000000u; /* exponent bias 127 -> 15 */
    return (uint16_t)(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;
  /* |f| = m 2^(e-150) with the implicit bit in m; in units of 2^-24 that
   * is m >> (126 - e), 14 to 23 bits dropped; a carry into 0x400 is the
   * smallest normal, which has the same encoding */
  const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, sh = 126u - e;
  const uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
  const uint32_t up = rem > half || (rem == half && (q & 1u));
  return (uint16_t)(sign | (q + up));
}

/* fp16 bits -> fp32: exact; inf stays inf; a NaN keeps sign and payload
 * and is made quiet (bit 22); subnormals normalised */
MT_HD float mt_cu_float_from_fp16(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu)
    return mt_cu_f32_from_bits(sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0u));
  if (e) return mt_cu_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  if (!m) return mt_cu_f32_from_bits(sign);
  int p = 9; /* the leading bit of m: m 2^-24 = 1.f 2^(p-24) */
  while (!(m & (1u << p))) p--;
  return mt_cu_f32_from_bits(sign | ((uint32_t)(p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFFu));
}

/* ------------------------------------------------------ index arithmetic */

/* Pooling along one axis: output o's window is [o*stride - pad, o*stride -
 * pad + k). The outputs whose window holds input index x are [*lo, *hi]
 * (empty when *lo > *hi); nout outputs. */
MT_HD void mt_cu_pool_cover(int x, int k, int stride, int pad, int nout, int *lo, int *hi) {
  const int a = x + pad - k + 1; /* o*stride >= a */
  const int l = a > 0 ? (a + stride - 1) / stride : -((-a) / stride);
  const int h = (x + pad) / stride; /* o*stride <= x + pad, x + pad >= 0 */
  *lo = l > 0 ? l : 0;
  *hi = h < nout - 1 ? h : nout - 1;
}

/* Convolution along one axis: output o reads input o*stride - pad +
 * kk*dil for kernel tap kk. The output that reads input x through tap kk,
 * or -1 when none of the nout does. */
MT_HD int mt_cu_conv_out(int x, int kk, int stride, int pad, int dil, int nout) {
  const int t = x + pad - kk * dil;
  if (t < 0 || t % stride) return -1;
  return t / stride < nout ? t / stride : -1;
}

/* A tensor of a parameter table: offset and element count in the flat
 * buffers, weight decay or not (cuda/cuda_optim.h puts a table on the
 * device as an array of these, in increasing offset). */
typedef struct {
  uint64_t offset, numel;
  int32_t decay, pad;
} mt_cuda_seg;

/* The tensor holding flat element i (binary search over the n >= 1
 * tensors): the last one starting at or before i, or -1 when i is padding
 * after it or lies before the first. */
MT_HD int mt_cu_find_seg(const mt_cuda_seg *seg, int n, int64_t i) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if ((int64_t)seg[mid].offset <= i) lo = mid;
    else hi = mid - 1;
  }
  const int64_t off = (int64_t)seg[lo].offset;
  return i >= off && i < off + (int64_t)seg[lo].numel ? lo : -1;
}

#endif
