/* An exact sum of doubles (core.h, mt_xsum): every finite double is an
 * integer multiple of 2^-1074 below 2^1024, so the sum of any of them is
 * one big integer, kept in base 2^32 digits that are int64 (room for 2^31
 * additions between carries). The digits after a carry propagation are
 * unique for a value, so ranks, threads or batches that add the same
 * values in any grouping hold the same digits, and the one rounding at
 * the end gives the same double. Non-finite values are summed apart. */
#include "core/core.h"

#include <math.h>
#include <string.h>

#define EMIN 1074 /* the bit of digit 0's bit 0 is 2^-1074 */
#define RENORM_EVERY ((int64_t)1 << 30)

void mt_xsum_zero(mt_xsum *s) { memset(s, 0, sizeof(*s)); }

/* Carries out of every digit into the next: digits 0 .. n-2 in
 * [0, 2^32), the top one signed. */
static void carry(mt_xsum *s) {
  for (int k = 0; k < MT_XSUM_DIGITS - 1; k++) {
    int64_t c = s->d[k] >> 32; /* arithmetic: floor division by 2^32 */
    s->d[k] -= c * ((int64_t)1 << 32);
    s->d[k + 1] += c;
  }
  s->adds = 0;
}

void mt_xsum_add(mt_xsum *s, double v) {
  if (v == 0) return;
  if (!isfinite(v)) {
    s->special += v;
    return;
  }
  int e;
  double f = frexp(fabs(v), &e); /* |v| = f 2^e, f in [0.5, 1) */
  /* |v| = m 2^(e - 53), m < 2^53 an integer; position p of m's bit 0 above
   * 2^-1074 (subnormals: m is smaller, e - 53 = -1074 at least) */
  int p = e - 53 + EMIN;
  uint64_t m;
  if (p < 0) { /* below the normal range: scale down to the grid exactly */
    m = (uint64_t)ldexp(f, e + EMIN);
    p = 0;
  } else {
    m = (uint64_t)ldexp(f, 53);
  }
  const int k = p / 32, sh = p % 32;
  unsigned __int128 w = (unsigned __int128)m << sh; /* at most 85 bits */
  const int64_t sign = v < 0 ? -1 : 1;
  for (int j = 0; j < 3 && w; j++, w >>= 32) s->d[k + j] += sign * (int64_t)(uint64_t)(w & 0xffffffffu);
  if (++s->adds >= RENORM_EVERY) carry(s);
}

void mt_xsum_merge(mt_xsum *s, const mt_xsum *o) {
  carry(s);
  mt_xsum c = *o;
  carry(&c);
  for (int k = 0; k < MT_XSUM_DIGITS; k++) s->d[k] += c.d[k];
  s->special += o->special;
  carry(s);
}

int mt_xsum_allreduce(mt_xsum *s, MPI_Comm comm) {
  carry(s); /* each rank's digits below 2^32: their sum fits for 2^31 ranks */
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, s->d, MT_XSUM_DIGITS, MPI_INT64_T, MPI_SUM, comm));
  /* inf + -inf is NaN, NaN stays NaN: the same in any order */
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &s->special, 1, MPI_DOUBLE, MPI_SUM, comm));
  carry(s);
  return 0;
}

double mt_xsum_value(const mt_xsum *in) {
  if (in->special != 0 || isnan(in->special)) return in->special;
  mt_xsum s = *in;
  carry(&s);
  const int neg = s.d[MT_XSUM_DIGITS - 1] < 0;
  if (neg) { /* the magnitude: negate every digit and carry again */
    for (int k = 0; k < MT_XSUM_DIGITS; k++) s.d[k] = -s.d[k];
    carry(&s);
  }
  int h = MT_XSUM_DIGITS - 1;
  while (h >= 0 && s.d[h] == 0) h--;
  if (h < 0) return 0.0;
  /* the top four digits (at least 97 bits), the rest as a sticky bit, so
   * the conversion rounds once, to nearest even, as the exact sum would */
  unsigned __int128 w = 0;
  for (int j = h; j > h - 4; j--) w = (w << 32) | (uint64_t)(j >= 0 ? s.d[j] : 0);
  int sticky = 0;
  for (int j = h - 4; j >= 0 && !sticky; j--) sticky = s.d[j] != 0;
  if (sticky) w |= 1;
  double r = ldexp((double)w, 32 * (h - 3) - EMIN);
  return neg ? -r : r;
}
