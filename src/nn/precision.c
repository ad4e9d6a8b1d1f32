/* bf16 / fp16 conversions, in-place rounding and the inf/NaN test (see
 * precision.h for the rules). Each array function is one kernel over a range
 * [i0, i1): AVX-512F when the compiler targets it, else F16C for the fp16
 * conversions, else the scalar code; every path gives the same bits. Large
 * arrays are cut into blocks that OpenMP threads take in static order. */
#include "nn/precision.h"

#include "mpitrain/mpitrain.h"

#include <float.h>
#include <strings.h>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#define PAR_MIN 262144 /* elements: below this, one thread (as in optim/)      */
#define BLOCK 16384    /* elements per block handed to a thread               */

/* ------------------------------------------------------------------- names */

const char *mt_precision_name(mt_precision p) {
  switch (p) {
  case MT_PREC_FP32: return "fp32";
  case MT_PREC_BF16: return "bf16";
  case MT_PREC_FP16: return "fp16";
  default: return "?";
  }
}

int mt_precision_parse(const char *name, const char *what, mt_precision *p) {
  static const struct {
    const char *s;
    mt_precision p;
  } names[] = {{"fp32", MT_PREC_FP32},     {"float32", MT_PREC_FP32}, {"bf16", MT_PREC_BF16},
               {"bfloat16", MT_PREC_BF16}, {"fp16", MT_PREC_FP16},    {"float16", MT_PREC_FP16},
               {"half", MT_PREC_FP16}};
  MT_CHECK(name && p, MT_ERR_ARG, "mt_precision_parse: NULL argument");
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (!strcasecmp(name, names[i].s)) {
      *p = names[i].p;
      return 0;
    }
  return MT_ERR(MT_ERR_OPTION, "%s '%s': unknown precision (choose fp32, bf16 or fp16)",
                what ? what : "precision", name);
}

/* ------------------------------------------------------------ scalar fp16 */

uint16_t mt_fp16_from_float(float f) {
  const uint32_t u = mt_f32_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u; /* NaN: canonical quiet NaN   */
  if (a >= 0x477FF000u) return sign | 0x7C00u; /* >= 65520 (and inf): inf   */
  if (a >= 0x38800000u) {                      /* >= 2^-14: an fp16 normal  */
    /* rebias the exponent (127 -> 15), then round the 23-bit mantissa to 10
     * bits: add 0xFFF plus the lowest kept bit, so a tie rounds up only from
     * an odd value; a carry moves into the exponent, as it should */
    const uint32_t r = a - 0x38000000u;
    return sign | (uint16_t)((r + 0xFFFu + ((r >> 13) & 1u)) >> 13);
  }
  if (a <= 0x33000000u) return sign; /* <= 2^-25 (the tie to 0): +-0        */
  /* an fp16 subnormal, in units of 2^-24: |f| = m * 2^(e - 150) with the
   * implicit bit in m, so the count is m >> (126 - e), rounded to even; a
   * round-up to 0x400 is the smallest normal, encoded the same way */
  const uint32_t e = a >> 23; /* 103 .. 112 */
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t sh = 126u - e; /* 14 .. 23 */
  uint32_t q = m >> sh;
  const uint32_t rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return sign | (uint16_t)q;
}

float mt_float_from_fp16(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) /* inf, or NaN made quiet with its payload */
    return mt_f32_from_bits(sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0u));
  if (e) return mt_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  if (!m) return mt_f32_from_bits(sign);
  /* subnormal m * 2^-24: normalize, the leading bit at position p (0..9) */
  int p = 9;
  while (!(m & (1u << p))) p--;
  return mt_f32_from_bits(sign | ((uint32_t)(p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFFu));
}

/* --------------------------------------------------------- range kernels */

static void bf16_from_f32_range(uint16_t *dst, const float *src, size_t i, size_t i1) {
#ifdef __AVX512F__
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
  const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i qnan = _mm512_set1_epi32(0x7FC0);
  for (; i + 16 <= i1; i += 16) {
    const __m512i u = _mm512_loadu_si512((const void *)(src + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), inf);
    r = _mm512_mask_mov_epi32(r, nan, qnan);
    _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm512_cvtepi32_epi16(r));
  }
#endif
#pragma omp simd
  for (size_t j = i; j < i1; j++) dst[j] = mt_bf16_from_float(src[j]);
}

static void f32_from_bf16_range(float *dst, const uint16_t *src, size_t i, size_t i1) {
#ifdef __AVX512F__
  for (; i + 16 <= i1; i += 16) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
    _mm512_storeu_si512((void *)(dst + i), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#endif
#pragma omp simd
  for (size_t j = i; j < i1; j++) dst[j] = mt_float_from_bf16(src[j]);
}

/* vcvtps2ph rounds exactly like mt_fp16_from_float (nearest even under the
 * immediate, whatever MXCSR says) except for NaN, whose payload it keeps: a
 * NaN lane is first replaced by the quiet NaN of its sign, which converts to
 * sign | 0x7E00. */
static void fp16_from_f32_range(uint16_t *dst, const float *src, size_t i, size_t i1) {
#if defined(__AVX512F__)
  const __m512i signm = _mm512_set1_epi32((int)0x80000000u), qnan = _mm512_set1_epi32(0x7FC00000);
  for (; i + 16 <= i1; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i canon = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(x), signm), qnan);
    const __m512 y = _mm512_mask_mov_ps(x, nan, _mm512_castsi512_ps(canon));
    const __m256i h = _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256((__m256i *)(void *)(dst + i), h);
  }
#elif defined(__F16C__) && defined(__AVX__)
  const __m256 signm = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
  for (; i + 8 <= i1; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 canon = _mm256_or_ps(_mm256_and_ps(x, signm), qnan);
    const __m256 y = _mm256_blendv_ps(x, canon, nan);
    _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < i1; i++) dst[i] = mt_fp16_from_float(src[i]);
}

/* vcvtph2ps is exact, ignores MXCSR.DAZ for fp16 subnormals, and makes a
 * signalling NaN quiet: the same bits as mt_float_from_fp16. */
static void f32_from_fp16_range(float *dst, const uint16_t *src, size_t i, size_t i1) {
#if defined(__AVX512F__)
  for (; i + 16 <= i1; i += 16) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
#elif defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= i1; i += 8) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < i1; i++) dst[i] = mt_float_from_fp16(src[i]);
}

/* In place: each float becomes its bf16 value widened back (NaN -> the
 * quiet NaN 0x7FC00000). */
static void round_bf16_range(float *x, size_t i, size_t i1) {
#ifdef __AVX512F__
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
  const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i qnan = _mm512_set1_epi32(0x7FC00000), hi = _mm512_set1_epi32((int)0xFFFF0000u);
  for (; i + 16 <= i1; i += 16) {
    const __m512i u = _mm512_loadu_si512((const void *)(x + i));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), hi);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), inf);
    r = _mm512_mask_mov_epi32(r, nan, qnan);
    _mm512_storeu_si512((void *)(x + i), r);
  }
#endif
#pragma omp simd
  for (size_t j = i; j < i1; j++) x[j] = mt_float_from_bf16(mt_bf16_from_float(x[j]));
}

static void round_fp16_range(float *x, size_t i, size_t i1) {
  uint16_t tmp[256];
  while (i < i1) {
    const size_t k = i1 - i < 256 ? i1 - i : 256;
    fp16_from_f32_range(tmp, x + i, 0, k);
    f32_from_fp16_range(x + i, tmp, 0, k);
    i += k;
  }
}

/* --------------------------------------------------------- array drivers */

/* Runs CALL (a range kernel on [i0, i1)) over [0, n): one range when small,
 * else BLOCK-sized ranges on OpenMP threads. */
#define FOR_BLOCKS(n, CALL)                                                   \
  do {                                                                        \
    const size_t n_ = (n);                                                    \
    if (n_ <= PAR_MIN) {                                                      \
      const size_t i0 = 0, i1 = n_;                                           \
      CALL;                                                                   \
    } else {                                                                  \
      const size_t nb_ = (n_ + BLOCK - 1) / BLOCK;                            \
      _Pragma("omp parallel for schedule(static)")                            \
      for (size_t b_ = 0; b_ < nb_; b_++) {                                   \
        const size_t i0 = b_ * BLOCK, i1 = i0 + BLOCK < n_ ? i0 + BLOCK : n_; \
        CALL;                                                                 \
      }                                                                       \
    }                                                                         \
  } while (0)

void mt_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
  FOR_BLOCKS(n, bf16_from_f32_range(dst, src, i0, i1));
}
void mt_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
  FOR_BLOCKS(n, f32_from_bf16_range(dst, src, i0, i1));
}
void mt_f32_to_fp16(uint16_t *dst, const float *src, size_t n) {
  FOR_BLOCKS(n, fp16_from_f32_range(dst, src, i0, i1));
}
void mt_fp16_to_f32(float *dst, const uint16_t *src, size_t n) {
  FOR_BLOCKS(n, f32_from_fp16_range(dst, src, i0, i1));
}
void mt_round_bf16(float *x, size_t n) { FOR_BLOCKS(n, round_bf16_range(x, i0, i1)); }
void mt_round_fp16(float *x, size_t n) { FOR_BLOCKS(n, round_fp16_range(x, i0, i1)); }

void mt_round_to(mt_precision p, float *x, size_t n) {
  if (p == MT_PREC_BF16) mt_round_bf16(x, n);
  else if (p == MT_PREC_FP16) mt_round_fp16(x, n);
}

/* ------------------------------------------------------------ inf / NaN */

/* !(|x| <= FLT_MAX) holds exactly for inf and NaN; OR-ing the flags has no
 * branch, so the loop vectorizes. Blocks end early on the first hit when
 * single-threaded. */
static int nonfinite_range(const float *x, size_t i0, size_t i1) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t i = i0; i < i1; i++) bad |= !(__builtin_fabsf(x[i]) <= FLT_MAX);
  return bad;
}

static int nonfinite16_range(const uint16_t *x, size_t i0, size_t i1, uint16_t expm) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t i = i0; i < i1; i++) bad |= (x[i] & expm) == expm;
  return bad;
}

#define NONFINITE(n, RANGE)                                                   \
  do {                                                                        \
    const size_t nb_ = ((n) + BLOCK - 1) / BLOCK;                             \
    int bad = 0;                                                              \
    if ((n) <= PAR_MIN) {                                                     \
      for (size_t b_ = 0; b_ < nb_ && !bad; b_++) {                           \
        const size_t i0 = b_ * BLOCK, i1 = i0 + BLOCK < (n) ? i0 + BLOCK : (n); \
        bad = RANGE;                                                          \
      }                                                                       \
    } else {                                                                  \
      _Pragma("omp parallel for schedule(static) reduction(| : bad)")         \
      for (size_t b_ = 0; b_ < nb_; b_++) {                                   \
        const size_t i0 = b_ * BLOCK, i1 = i0 + BLOCK < (n) ? i0 + BLOCK : (n); \
        bad |= RANGE;                                                         \
      }                                                                       \
    }                                                                         \
    return bad;                                                               \
  } while (0)

int mt_has_nonfinite(const float *x, size_t n) { NONFINITE(n, nonfinite_range(x, i0, i1)); }
int mt_has_nonfinite_fp16(const uint16_t *x, size_t n) {
  NONFINITE(n, nonfinite16_range(x, i0, i1, 0x7C00));
}
int mt_has_nonfinite_bf16(const uint16_t *x, size_t n) {
  NONFINITE(n, nonfinite16_range(x, i0, i1, 0x7F80));
}
