/* Unit tests of the mixed-precision building blocks (nn/precision.h and the
 * loss scaler of optim/optim.h), against PyTorch references written by
 * validation/gen_refs_amp.py (validation/refs/amp_*.txt):
 *  - fp32 -> bf16 / fp16 and back, bit for bit, on ties (even and odd), the
 *    values just around them, fp32 and fp16 subnormals, +-0, +-inf, NaNs
 *    with payloads, max finite, overflow, and random patterns: the scalar
 *    functions, the array functions at every alignment and length mod 16,
 *    the in-place round helpers;
 *  - array (vector) against scalar code on every fp16 / bf16 pattern and 16
 *    Mi fp32 patterns spread over the whole range, also with FTZ/DAZ set;
 *  - mt_has_nonfinite and its 16-bit forms, threaded and not;
 *  - the scaler: GradScaler's scales, growth trackers, skipped steps and
 *    inverse scales for four flag sequences (growth after growth_interval
 *    clean steps, inexact factors, growth stopped short of inf, defaults);
 *    hysteresis > 1 against its rule (DeepSpeed's; no PyTorch reference),
 *    the stop at min_scale, static mode, option checks, pack/unpack.
 * Prints the conversion speed (informational, no timing assertion). */
#include "nn/lowp.h"
#include "nn/precision.h"
#include "optim/optim.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

static uint32_t fbits(float f) { return mt_f32_bits(f); }

/* ---------------------------------------------------- conversion refs */

/* Compares n 16-bit results with the reference bits; prints the first miss. */
static long diff16(const uint16_t *got, const double *ref, const double *in, long n,
                   const char *what) {
  long bad = 0;
  for (long i = 0; i < n; i++)
    if (got[i] != (uint16_t)ref[i] && bad++ == 0)
      printf("     %s: input 0x%08lx gives 0x%04x, PyTorch 0x%04x\n", what, (unsigned long)in[i],
             got[i], (unsigned)ref[i]);
  return bad;
}

static long diff32(const float *got, const double *ref, const double *in, long n,
                   const char *what) {
  long bad = 0;
  for (long i = 0; i < n; i++)
    if (fbits(got[i]) != (uint32_t)ref[i] && bad++ == 0)
      printf("     %s: input 0x%08lx gives 0x%08x, PyTorch 0x%08x\n", what, (unsigned long)in[i],
             fbits(got[i]), (unsigned)ref[i]);
  return bad;
}

static void test_convert_refs(void) {
  tu_ref r;
  tu_ref_load(&r, "amp_convert.txt");
  const tu_tensor *xb = tu_ref_get(&r, "x_bits", -1);
  const long n = (long)xb->n;
  const double *rbf = tu_ref_get(&r, "bf16_bits", n)->v, *rhf = tu_ref_get(&r, "fp16_bits", n)->v;
  const double *rrb = tu_ref_get(&r, "round_bf16_bits", n)->v;
  const double *rrh = tu_ref_get(&r, "round_fp16_bits", n)->v;
  const tu_tensor *hb = tu_ref_get(&r, "h_bits", -1);
  const long m = (long)hb->n;
  const double *rh2f = tu_ref_get(&r, "fp16_to_f32_bits", m)->v;
  const double *rb2f = tu_ref_get(&r, "bf16_to_f32_bits", m)->v;

  /* 16 spare elements in front: the arrays are tried at every offset */
  float *x = tu_xmalloc((size_t)(n + 16) * sizeof(float)), *y = tu_xmalloc((size_t)(n + 16) * 4);
  uint16_t *h = tu_xmalloc((size_t)(n + 16) * 2);
  uint16_t *hin = tu_xmalloc((size_t)(m + 16) * 2);
  float *w = tu_xmalloc((size_t)(m + 16) * sizeof(float));
  for (long i = 0; i < n; i++) x[i] = mt_f32_from_bits((uint32_t)xb->v[i]);
  for (long i = 0; i < m; i++) hin[i] = (uint16_t)hb->v[i];

  long b_sc = 0, h_sc = 0, rb_sc = 0, rh_sc = 0, hw_sc = 0, bw_sc = 0;
  for (long i = 0; i < n; i++) {
    uint16_t v = mt_bf16_from_float(x[i]);
    b_sc += v != (uint16_t)rbf[i];
    h_sc += mt_fp16_from_float(x[i]) != (uint16_t)rhf[i];
    rb_sc += fbits(mt_float_from_bf16(v)) != (uint32_t)rrb[i];
    rh_sc += fbits(mt_float_from_fp16(mt_fp16_from_float(x[i]))) != (uint32_t)rrh[i];
  }
  for (long i = 0; i < m; i++) {
    hw_sc += fbits(mt_float_from_fp16(hin[i])) != (uint32_t)rh2f[i];
    bw_sc += fbits(mt_float_from_bf16(hin[i])) != (uint32_t)rb2f[i];
  }
  CHECK(b_sc == 0, "scalar fp32 -> bf16 on %ld values: %ld differ from PyTorch", n, b_sc);
  CHECK(h_sc == 0, "scalar fp32 -> fp16 on %ld values: %ld differ from PyTorch", n, h_sc);
  CHECK(rb_sc == 0, "scalar round through bf16: %ld differ", rb_sc);
  CHECK(rh_sc == 0, "scalar round through fp16: %ld differ", rh_sc);
  CHECK(hw_sc == 0, "scalar fp16 -> fp32 on %ld patterns: %ld differ from PyTorch", m, hw_sc);
  CHECK(bw_sc == 0, "scalar bf16 -> fp32 on %ld patterns: %ld differ from PyTorch", m, bw_sc);

  /* the array functions at offsets 0..15 (alignment and vector tails) */
  long b_ar = 0, h_ar = 0, rb_ar = 0, rh_ar = 0, hw_ar = 0, bw_ar = 0;
  for (int off = 0; off < 16; off++) {
    const long k = n - off, k2 = m - off;
    memcpy(y + off, x, (size_t)k * sizeof(float));
    mt_f32_to_bf16(h + off, y + off, (size_t)k);
    b_ar += diff16(h + off, rbf, xb->v, k, "array fp32 -> bf16");
    mt_f32_to_fp16(h + off, y + off, (size_t)k);
    h_ar += diff16(h + off, rhf, xb->v, k, "array fp32 -> fp16");
    mt_round_bf16(y + off, (size_t)k);
    rb_ar += diff32(y + off, rrb, xb->v, k, "mt_round_bf16");
    memcpy(y + off, x, (size_t)k * sizeof(float));
    mt_round_to(MT_PREC_FP16, y + off, (size_t)k);
    rh_ar += diff32(y + off, rrh, xb->v, k, "mt_round_fp16");
    memcpy(h + off, hin, (size_t)k2 * 2);
    mt_fp16_to_f32(w + off, h + off, (size_t)k2);
    hw_ar += diff32(w + off, rh2f, hb->v, k2, "array fp16 -> fp32");
    mt_bf16_to_f32(w + off, h + off, (size_t)k2);
    bw_ar += diff32(w + off, rb2f, hb->v, k2, "array bf16 -> fp32");
  }
  CHECK(b_ar == 0, "array fp32 -> bf16 at 16 offsets: %ld differ from PyTorch", b_ar);
  CHECK(h_ar == 0, "array fp32 -> fp16 at 16 offsets: %ld differ from PyTorch", h_ar);
  CHECK(rb_ar == 0, "mt_round_bf16 at 16 offsets: %ld differ from x.to(bf16).float()", rb_ar);
  CHECK(rh_ar == 0, "mt_round_fp16 at 16 offsets: %ld differ from x.to(fp16).float()", rh_ar);
  CHECK(hw_ar == 0, "array fp16 -> fp32 at 16 offsets: %ld differ from PyTorch", hw_ar);
  CHECK(bw_ar == 0, "array bf16 -> fp32 at 16 offsets: %ld differ from PyTorch", bw_ar);

  /* fp32 stays fp32 */
  memcpy(y, x, (size_t)n * sizeof(float));
  mt_round_to(MT_PREC_FP32, y, (size_t)n);
  CHECK(!memcmp(x, y, (size_t)n * sizeof(float)), "mt_round_to(fp32) leaves the values alone");

  /* a few cases spelled out, so a reader sees the rules */
  CHECK(mt_bf16_from_float(mt_f32_from_bits(0x3F808000)) == 0x3F80 &&
            mt_bf16_from_float(mt_f32_from_bits(0x3F818000)) == 0x3F82 &&
            mt_bf16_from_float(mt_f32_from_bits(0xFFC12345)) == 0x7FC0 &&
            mt_bf16_from_float(FLT_MAX) == 0x7F80,
        "bf16: ties to even (1+2^-8 -> 1, odd -> up), NaN -> 0x7FC0, FLT_MAX -> inf");
  CHECK(mt_fp16_from_float(65504.0f) == 0x7BFF && mt_fp16_from_float(65519.99f) == 0x7BFF &&
            mt_fp16_from_float(65520.0f) == 0x7C00 && mt_fp16_from_float(-0x1p-25f) == 0x8000 &&
            mt_fp16_from_float(0x1.8p-24f) == 0x0002 &&
            mt_fp16_from_float(mt_f32_from_bits(0xFF812345)) == 0xFE00,
        "fp16: max 65504, 65520 -> inf, -2^-25 -> -0, 1.5*2^-24 -> 2*2^-24, -NaN -> 0xFE00");
  free(x), free(y), free(h), free(hin), free(w);
  tu_ref_free(&r);
}

/* ------------------------------------------- vector against scalar code */

/* 16 Mi fp32 patterns spread over all 2^32 (every 256th, low byte varied),
 * and all 65536 16-bit patterns, through the array functions and the
 * scalar ones. */
static void test_vector_vs_scalar(const char *label) {
  const size_t N = (size_t)1 << 24;
  float *x = tu_xmalloc(N * sizeof(float)), *y = tu_xmalloc(N * sizeof(float));
  uint16_t *h = tu_xmalloc(N * 2);
  for (size_t i = 0; i < N; i++)
    x[i] = mt_f32_from_bits((uint32_t)(i << 8) | (uint32_t)((i * 37u + (i >> 12)) & 0xFFu));
  long bad_b = 0, bad_h = 0, bad_rb = 0, bad_rh = 0;
  mt_f32_to_bf16(h, x, N);
  for (size_t i = 0; i < N; i++) bad_b += h[i] != mt_bf16_from_float(x[i]);
  mt_f32_to_fp16(h, x, N);
  for (size_t i = 0; i < N; i++) bad_h += h[i] != mt_fp16_from_float(x[i]);
  memcpy(y, x, N * sizeof(float));
  mt_round_bf16(y, N);
  for (size_t i = 0; i < N; i++)
    bad_rb += fbits(y[i]) != fbits(mt_float_from_bf16(mt_bf16_from_float(x[i])));
  memcpy(y, x, N * sizeof(float));
  mt_round_fp16(y, N);
  for (size_t i = 0; i < N; i++)
    bad_rh += fbits(y[i]) != fbits(mt_float_from_fp16(mt_fp16_from_float(x[i])));
  CHECK(bad_b == 0, "%s: array fp32 -> bf16 = scalar on %zu patterns (%ld differ)", label, N,
        bad_b);
  CHECK(bad_h == 0, "%s: array fp32 -> fp16 = scalar on %zu patterns (%ld differ)", label, N,
        bad_h);
  CHECK(bad_rb == 0 && bad_rh == 0, "%s: round helpers = scalar (%ld, %ld differ)", label,
        bad_rb, bad_rh);

  long bad_hw = 0, bad_bw = 0, bad_rt = 0;
  for (size_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
  mt_fp16_to_f32(y, h, 65536);
  for (size_t i = 0; i < 65536; i++) {
    const float s = mt_float_from_fp16((uint16_t)i);
    bad_hw += fbits(y[i]) != fbits(s);
    /* every non-NaN fp16 value comes back unchanged through fp32 */
    bad_rt += !isnan(s) && mt_fp16_from_float(s) != (uint16_t)i;
  }
  mt_bf16_to_f32(y, h, 65536);
  for (size_t i = 0; i < 65536; i++) bad_bw += fbits(y[i]) != ((uint32_t)i << 16);
  CHECK(bad_hw == 0 && bad_bw == 0,
        "%s: array fp16 / bf16 -> fp32 = scalar on all 65536 patterns (%ld, %ld differ)", label,
        bad_hw, bad_bw);
  CHECK(bad_rt == 0, "%s: fp16 -> fp32 -> fp16 is the identity on non-NaNs (%ld differ)", label,
        bad_rt);
  free(x), free(y), free(h);
}

/* ------------------------------------------------------- inf/NaN tests */

static void test_nonfinite(void) {
  const size_t N = 600000; /* above the threading threshold */
  float *x = tu_xmalloc(N * sizeof(float));
  uint16_t *h = tu_xmalloc(N * 2), *b = tu_xmalloc(N * 2);
  uint64_t st = 7;
  tu_fill(x, N, &st, 1e3f);
  for (size_t i = 0; i < N; i++) h[i] = mt_fp16_from_float(x[i]);
  h[1] = 0x7BFF, h[2] = 0xFBFF, h[3] = 0x0001, h[4] = 0x8000; /* +-max, subnormal, -0 */
  /* large but finite in bf16 too (FLT_MAX itself rounds to bf16 inf) */
  x[1] = 3e38f, x[2] = -3e38f, x[3] = 1e-45f, x[4] = -0.0f;
  mt_f32_to_bf16(b, x, N);
  CHECK(!mt_has_nonfinite(x, 0) && !mt_has_nonfinite(x, N) && !mt_has_nonfinite_fp16(h, N) &&
            !mt_has_nonfinite_bf16(b, N),
        "has_nonfinite: 0 on finite data (3e38, subnormal, -0 included) and n = 0");
  const float bad[3] = {INFINITY, -INFINITY, NAN};
  const size_t pos[] = {0, 5, 15, 16, 17, 1000, 16383, 16384, 262143, 262144, N - 1};
  int ok_small = 1, ok_big = 1, ok16 = 1;
  for (int k = 0; k < 3; k++)
    for (size_t j = 0; j < sizeof(pos) / sizeof(pos[0]); j++) {
      const size_t p = pos[j];
      const float keep = x[p];
      const uint16_t kh = h[p], kb = b[p];
      x[p] = bad[k];
      h[p] = mt_fp16_from_float(bad[k]);
      b[p] = mt_bf16_from_float(bad[k]);
      if (p < 1000) ok_small &= mt_has_nonfinite(x, 1000) == 1 && !mt_has_nonfinite(x + p + 1, 999 - p);
      ok_big &= mt_has_nonfinite(x, N) == 1 && mt_has_nonfinite(x, p + 1) == 1 &&
                mt_has_nonfinite(x, p) == 0;
      ok16 &= mt_has_nonfinite_fp16(h, N) == 1 && mt_has_nonfinite_bf16(b, N) == 1 &&
              !mt_has_nonfinite_fp16(h, p) && !mt_has_nonfinite_bf16(b, p);
      x[p] = keep, h[p] = kh, b[p] = kb;
    }
  CHECK(ok_small && ok_big, "has_nonfinite: one inf, -inf or NaN found at 11 places (threaded "
                            "and not), nothing found before it");
  CHECK(ok16, "has_nonfinite_fp16 / _bf16: the same on 16-bit data");
  free(x), free(h), free(b);
}

static void test_names(void) {
  mt_precision p = MT_PREC_FP32;
  int rc = mt_precision_parse("BFloat16", "-amp_dtype", &p);
  CHECK(rc == 0 && p == MT_PREC_BF16 && !strcmp(mt_precision_name(p), "bf16"),
        "precision names: bfloat16 parses to bf16");
  rc = mt_precision_parse("half", "-amp_dtype", &p);
  CHECK(rc == 0 && p == MT_PREC_FP16, "precision names: half is fp16");
  rc = mt_precision_parse("fp8", "-amp_dtype", &p);
  CHECK(rc == MT_ERR_OPTION && strstr(mt_error_message(), "-amp_dtype") && p == MT_PREC_FP16,
        "precision names: fp8 is MT_ERR_OPTION naming the option (\"%s\")", mt_error_message());
  mt_error_clear();
}

/* ---------------------------------------------------------------- scaler */

static void test_scaler_refs(void) {
  tu_ref r;
  tu_ref_load(&r, "amp_scaler.txt");
  const char *tags[] = {"a", "b", "c", "d"};
  for (int t = 0; t < 4; t++) {
    char nm[32];
    snprintf(nm, sizeof(nm), "%s_params", tags[t]);
    const double *prm = tu_ref_get(&r, nm, 4)->v;
    snprintf(nm, sizeof(nm), "%s_found_inf", tags[t]);
    const tu_tensor *f = tu_ref_get(&r, nm, -1);
    const long n = (long)f->n;
    snprintf(nm, sizeof(nm), "%s_scale", tags[t]);
    const double *sc = tu_ref_get(&r, nm, n)->v;
    snprintf(nm, sizeof(nm), "%s_tracker", tags[t]);
    const double *tr = tu_ref_get(&r, nm, n)->v;
    snprintf(nm, sizeof(nm), "%s_skip", tags[t]);
    const double *sk = tu_ref_get(&r, nm, n)->v;
    snprintf(nm, sizeof(nm), "%s_inv_scale", tags[t]);
    const double *inv = tu_ref_get(&r, nm, n)->v;

    mt_scaler_opts o = mt_scaler_defaults();
    o.init_scale = prm[0], o.growth_factor = prm[1], o.backoff_factor = prm[2];
    o.growth_interval = (long)prm[3];
    o.min_scale = FLT_MIN; /* PyTorch has no minimum */
    mt_scaler s;
    int rc = mt_scaler_init(&s, &o), bad = -1, nskip = 0;
    for (long i = 0; i < n && !rc; i++) {
      int skip = -1;
      rc = mt_scaler_update(&s, (int)f->v[i], &skip);
      nskip += skip;
      if (bad < 0 && (s.scale != (float)sc[i] || s.growth_tracker != (long)tr[i] ||
                      skip != (int)sk[i] || mt_scaler_inv_scale(&s) != (float)inv[i]))
        bad = (int)i;
    }
    if (bad >= 0)
      printf("     first difference at update %d: scale %.9g (PyTorch %.9g), tracker %ld (%ld)\n",
             bad + 1, (double)s.scale, sc[bad], s.growth_tracker, (long)tr[bad]);
    CHECK(rc == 0 && bad < 0 && s.nskipped == nskip && s.nupdates == n,
          "scaler %s (init %g, growth %g, backoff %g, interval %ld): %ld updates, scale, "
          "tracker, skip and inv_scale bit-identical to GradScaler",
          tags[t], prm[0], prm[1], prm[2], (long)prm[3], n);
  }
  tu_ref_free(&r);
}

/* Runs flags through s; fails on the first scale other than want[i]. */
static int run_seq(mt_scaler *s, const int *flags, const float *want, int n) {
  for (int i = 0; i < n; i++) {
    int skip = -1;
    if (mt_scaler_update(s, flags[i], &skip) || skip != flags[i] || s->scale != want[i]) {
      printf("     update %d: scale %g, expected %g\n", i + 1, (double)s->scale,
             (double)want[i]);
      return 1;
    }
  }
  return 0;
}

static void test_hysteresis(void) {
  /* H = 3, interval 4: overflows 1 and 3 (one clean step between) only
   * count down, 4 and 5 back off, four clean steps grow and refill, then
   * 10 and 11 count down and 12 backs off */
  const int flags[12] = {1, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
  const float want[12] = {1024, 1024, 1024, 512, 256, 256, 256, 256, 512, 512, 512, 256};
  /* consecutive: the clean step 2 refills, so 3 and 4 count down */
  const float want_c[12] = {1024, 1024, 1024, 1024, 512, 512, 512, 512, 1024, 1024, 1024, 512};
  mt_scaler_opts o = mt_scaler_defaults();
  o.init_scale = 1024, o.growth_interval = 4, o.hysteresis = 3;
  mt_scaler s;
  int rc = mt_scaler_init(&s, &o) || run_seq(&s, flags, want, 12);
  CHECK(!rc && s.nskipped == 7 && s.nbackoffs == 3,
        "hysteresis 3 (DeepSpeed rule): 2 overflows absorbed, then back-offs until growth");
  o.consecutive_hysteresis = 1;
  rc = mt_scaler_init(&s, &o) || run_seq(&s, flags, want_c, 12);
  CHECK(!rc && s.nbackoffs == 2, "hysteresis 3, consecutive: a clean step refills it");
  /* hysteresis 1 is PyTorch's rule: every overflow backs off */
  o.hysteresis = 1, o.consecutive_hysteresis = 0;
  const float want1[12] = {512, 512, 256, 128, 64, 64, 64, 64, 128, 64, 32, 16};
  rc = mt_scaler_init(&s, &o) || run_seq(&s, flags, want1, 12);
  CHECK(!rc, "hysteresis 1: every overflow backs off");
}

static void test_min_scale(void) {
  mt_scaler_opts o = mt_scaler_defaults();
  o.init_scale = 3, o.min_scale = 2;
  mt_scaler s;
  int skip = 0;
  int rc = mt_scaler_init(&s, &o) || mt_scaler_update(&s, 1, &skip);
  CHECK(!rc && s.scale == 2.0f && skip, "min_scale: 3 backs off to max(1.5, 2) = 2");
  mt_scaler before = s;
  skip = 0;
  rc = mt_scaler_update(&s, 1, &skip);
  CHECK(rc == MT_ERR_NUMERIC && skip == 1 && !memcmp(&s, &before, sizeof(s)) &&
            strstr(mt_error_message(), "update 2") && strstr(mt_error_message(), "minimum"),
        "min_scale: an overflow at the minimum is MT_ERR_NUMERIC naming the update, state "
        "unchanged (\"%s\")", mt_error_message());
  mt_error_clear();
  rc = mt_scaler_update(&s, 0, &skip);
  CHECK(rc == 0 && skip == 0, "min_scale: a clean step after it still works");

  /* defaults: 16 overflows take 65536 to 1, the 17th stops; with
   * hysteresis 2 at the minimum, one more overflow is absorbed first */
  rc = mt_scaler_init(&s, NULL);
  for (int i = 0; i < 16 && !rc; i++) rc = mt_scaler_update(&s, 1, NULL);
  CHECK(rc == 0 && s.scale == 1.0f, "defaults: 16 overflows reach min_scale 1");
  rc = mt_scaler_update(&s, 1, NULL);
  CHECK(rc == MT_ERR_NUMERIC && strstr(mt_error_message(), "update 17"),
        "defaults: the 17th overflow stops");
  mt_error_clear();
  o = mt_scaler_defaults();
  o.init_scale = 1, o.hysteresis = 2;
  rc = mt_scaler_init(&s, &o);
  int rc1 = mt_scaler_update(&s, 1, NULL), rc2 = mt_scaler_update(&s, 1, NULL);
  CHECK(!rc && rc1 == 0 && rc2 == MT_ERR_NUMERIC,
        "hysteresis 2 at min_scale: the first overflow is absorbed, the second stops");
  mt_error_clear();
}

static void test_static_and_checks(void) {
  mt_scaler_opts o = mt_scaler_defaults();
  o.dynamic = 0, o.init_scale = 128, o.growth_interval = 0; /* unused when static */
  mt_scaler s;
  int rc = mt_scaler_init(&s, &o), skips = 0, ok = 1;
  for (int i = 0; i < 50 && !rc; i++) {
    int skip;
    rc = mt_scaler_update(&s, i % 3 == 0, &skip);
    skips += skip;
    ok &= s.scale == 128.0f && skip == (i % 3 == 0);
  }
  CHECK(!rc && ok && skips == 17 && s.nskipped == 17 && mt_scaler_inv_scale(&s) == 1.0f / 128,
        "static scale: stays 128, overflowing steps skipped, never an error");

  const char *bad[] = {"-loss_scale_growth_factor", "-loss_scale_backoff_factor",
                       "-loss_scale_growth_interval", "-loss_scale_hysteresis",
                       "-loss_scale_min", "-loss_scale_init"};
  int nok = 0;
  for (int k = 0; k < 6; k++) {
    o = mt_scaler_defaults();
    switch (k) {
    case 0: o.growth_factor = 1.0; break;
    case 1: o.backoff_factor = 1.0; break;
    case 2: o.growth_interval = 0; break;
    case 3: o.hysteresis = 0; break;
    case 4: o.min_scale = 1e6; break;
    default: o.init_scale = 1e39; break;
    }
    memset(&s, 0x5a, sizeof(s));
    const mt_scaler keep = s;
    rc = mt_scaler_init(&s, &o);
    nok += rc == MT_ERR_OPTION && strstr(mt_error_message(), bad[k]) &&
           !memcmp(&s, &keep, sizeof(s));
    mt_error_clear();
  }
  CHECK(nok == 6, "option checks: 6 bad values are MT_ERR_OPTION naming the option, s untouched");
  memset(&s, 0, sizeof(s));
  rc = mt_scaler_update(&s, 0, NULL);
  CHECK(rc == MT_ERR_STATE, "update before init: MT_ERR_STATE");
  mt_error_clear();
}

static void test_pack(void) {
  const int flags[14] = {0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  mt_scaler_opts o = mt_scaler_defaults();
  o.init_scale = 4096, o.growth_interval = 3, o.hysteresis = 2;
  mt_scaler a, b;
  int rc = mt_scaler_init(&a, &o) | mt_scaler_init(&b, &o);
  for (int i = 0; i < 7; i++) rc |= mt_scaler_update(&a, flags[i], NULL);
  double st[MT_SCALER_STATE_N];
  mt_scaler_state_pack(&a, st);
  rc |= mt_scaler_state_unpack(&b, st);
  int same = 1;
  for (int i = 7; i < 14; i++) {
    rc |= mt_scaler_update(&a, flags[i], NULL) | mt_scaler_update(&b, flags[i], NULL);
    same &= !memcmp(&a, &b, sizeof(a));
  }
  CHECK(!rc && same && a.nupdates == 14,
        "pack/unpack after 7 updates: the resumed scaler continues identically");

  /* values that cannot come from pack are MT_ERR_DATA, b untouched */
  const double bads[][MT_SCALER_STATE_N] = {
      {-1, 0, 1, 0, 0, 0},  {NAN, 0, 1, 0, 0, 0},     {INFINITY, 0, 1, 0, 0, 0},
      {0.1, 0, 1, 0, 0, 0}, {64, 0.5, 1, 0, 0, 0},    {64, -1, 1, 0, 0, 0},
      {64, 0, 0, 0, 0, 0},  {64, 0, 1, 3, 4, 0},      {64, 0, 1, 3, 1, NAN}};
  int nok = 0;
  const int nbad = (int)(sizeof(bads) / sizeof(bads[0]));
  for (int k = 0; k < nbad; k++) {
    const mt_scaler keep = b;
    nok += mt_scaler_state_unpack(&b, bads[k]) == MT_ERR_DATA && !memcmp(&b, &keep, sizeof(b));
    mt_error_clear();
  }
  CHECK(nok == nbad, "unpack: %d impossible states are MT_ERR_DATA, scaler unchanged", nbad);

  /* changed options on resume: counters clamped to them */
  const double big[MT_SCALER_STATE_N] = {0.5, 1000, 9, 50, 10, 5};
  rc = mt_scaler_state_unpack(&b, big);
  CHECK(!rc && b.scale == 1.0f && b.growth_tracker == 2 && b.hysteresis_left == 2 &&
            b.nupdates == 50 && b.nskipped == 10 && b.nbackoffs == 5,
        "unpack: scale, tracker and hysteresis beyond the current options are clamped");
}

/* -------------------------------------------------------------- speed */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best of 5 over n elements; GB/s counts bytes read plus written. */
#define BENCH(label, bytes, CALL)                                            \
  do {                                                                       \
    double best_ = 1e30;                                                     \
    for (int r_ = 0; r_ < 5; r_++) {                                         \
      const double t0_ = now();                                              \
      CALL;                                                                  \
      const double dt_ = now() - t0_;                                        \
      if (dt_ < best_) best_ = dt_;                                          \
    }                                                                        \
    printf("info %-26s %6.1f GB/s  (%.2f ms, %zu floats)\n", label,            \
           (double)(bytes) / best_ * 1e-9, best_ * 1e3, n);                  \
  } while (0)

static void bench(size_t n, const char *tag) {
  float *x = tu_xmalloc(n * sizeof(float)), *y = tu_xmalloc(n * sizeof(float));
  uint16_t *h = tu_xmalloc(n * 2);
  uint64_t st = 3;
  tu_fill(x, n, &st, 100.0f);
  memcpy(y, x, n * sizeof(float));
  mt_f32_to_bf16(h, x, n); /* touch every page first */
  char l[64];
  snprintf(l, sizeof(l), "%s f32->bf16", tag);
  BENCH(l, 6 * n, mt_f32_to_bf16(h, x, n));
  snprintf(l, sizeof(l), "%s bf16->f32", tag);
  BENCH(l, 6 * n, mt_bf16_to_f32(y, h, n));
  snprintf(l, sizeof(l), "%s f32->fp16", tag);
  BENCH(l, 6 * n, mt_f32_to_fp16(h, x, n));
  snprintf(l, sizeof(l), "%s fp16->f32", tag);
  BENCH(l, 6 * n, mt_fp16_to_f32(y, h, n));
  snprintf(l, sizeof(l), "%s round bf16 in place", tag);
  BENCH(l, 8 * n, mt_round_bf16(y, n));
  snprintf(l, sizeof(l), "%s round fp16 in place", tag);
  BENCH(l, 8 * n, mt_round_fp16(y, n));
  volatile int any = 0;
  snprintf(l, sizeof(l), "%s has_nonfinite", tag);
  BENCH(l, 4 * n, any |= mt_has_nonfinite(x, n));
  size_t k = n < 65536 ? n : 65536;
  double t0 = now();
  volatile uint32_t sink = 0;
  for (size_t i = 0; i < k; i++) sink += mt_fp16_from_float(x[i]);
  printf("info %-26s %6.1f GB/s  (one value at a time)\n", "scalar f32->fp16",
         6.0 * (double)k / (now() - t0) * 1e-9);
  (void)sink;
  free(x), free(y), free(h);
}

/* bf16 GEMMs (every transposition, odd sizes, alpha and beta) against
 * double sums of the bf16-rounded operands: oneDNN's bf16 kernel where the
 * CPU has one, and the emulation (fp32 GEMM of the widened operands) that
 * runs where it has not, forced here so that both are checked on an
 * AVX-512 machine too. */
static void test_bf16_gemm(const char *how) {
  const int64_t M = 13, N = 21, K = 67;
  float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
  float *C = malloc(sizeof(float) * M * N), *R = malloc(sizeof(float) * M * N);
  for (int64_t i = 0; i < M * K; i++) A[i] = (float)sin(0.37 * (double)i) * 3.0f;
  for (int64_t i = 0; i < K * N; i++) B[i] = (float)cos(0.11 * (double)i + 0.5);
  const mt_nn_policy pol = mt_nn_policy_make(MT_PREC_BF16, 0);
  const char ops[4][2] = {{'N', 'N'}, {'N', 'T'}, {'T', 'N'}, {'T', 'T'}};
  for (int o = 0; o < 4; o++) {
    const char ta = ops[o][0], tb = ops[o][1];
    const int64_t lda = ta == 'N' ? K : M, ldb = tb == 'N' ? N : K;
    for (int64_t i = 0; i < M * N; i++) C[i] = R[i] = 0.25f * (float)(i % 7);
    int err = mt_gemm_lowp(ta, tb, M, N, K, 0.5f, A, lda, B, ldb, 2.0f, C, N, &pol);
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double sum = 0;
        for (int64_t k = 0; k < K; k++) {
          const float a = ta == 'N' ? A[i * lda + k] : A[k * lda + i];
          const float b = tb == 'N' ? B[k * ldb + j] : B[j * ldb + k];
          sum += (double)mt_float_from_bf16(mt_bf16_from_float(a)) *
                 (double)mt_float_from_bf16(mt_bf16_from_float(b));
        }
        R[i * N + j] = (float)(0.5 * sum + 2.0 * R[i * N + j]);
      }
    CHECK(!err, "bf16 GEMM %c%c (%s) runs", ta, tb, how);
    CHECK_CLOSE_F(C, R, (size_t)(M * N), 1e-5, "bf16 GEMM %c%c (%s) == double sums of bf16 operands",
                  ta, tb, how);
  }
  free(A), free(B), free(C), free(R);
}

/* oneDNN's bf16 GEMM counts as native where the CPU has bf16 instructions
 * only: on AVX-512 without AVX512_BF16 oneDNN 2.x runs an emulation of its
 * own, 4.5x slower than mt_gemm_lowp's widening (bench/README.md). AMX
 * CPUs have AVX512_BF16 too. Not where an ISA cap is set. */
static void test_bf16_native(void) {
  const char *cap = getenv("DNNL_MAX_CPU_ISA"), *cap1 = getenv("ONEDNN_MAX_CPU_ISA");
  printf("info oneDNN bf16 GEMM on this CPU: %s (oneDNN's ISA: %s)\n",
         mt_gemm_bf16_native() ? "yes" : "no (emulated)", mt_dnnl_isa_name());
  if ((cap && *cap) || (cap1 && *cap1)) return;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const int has = __builtin_cpu_supports("avx512bf16") != 0;
  CHECK(mt_gemm_bf16_native() == has, "bf16 GEMM native (%d) exactly where the CPU has "
        "AVX512_BF16 (%d)", mt_gemm_bf16_native(), has);
#endif
}

/* Held operands (nn/lowp.h): a GEMM whose operand lies inside a held
 * range (a sub-block with the range's leading dimension too) reads the
 * copy converted at the hold (the converted-elements counter moves only
 * for the other operand) and gives the same bits as without; after a clear
 * the GEMM sees changed values; a local table's holds stack; fp32 holds
 * nothing. */
static void test_holds(void) {
  enum { R = 9, L = 14, N = 5 };
  float X[R * L], W[L * N], C0[R * N], C1[R * N];
  for (int i = 0; i < R * L; i++) X[i] = (float)sin(0.3 * i) * 2.0f;
  for (int i = 0; i < L * N; i++) W[i] = (float)cos(0.7 * i);
  const mt_nn_policy pol = mt_nn_policy_make(MT_PREC_BF16, 0);
  mt_nn_holds t = {0};
  mt_nn_policy with;
  const mt_nn_policy *hp = mt_nn_with_holds(&pol, &t, &with);
  mt_nn_hold(&t, &pol, X, R * L);
  CHECK(t.n == 1, "bf16: x held");
  /* the 4 x 6 block at row 2, column 3 (leading dimension L), times W */
  const float *blk = X + 2 * L + 3;
  int err = mt_gemm_lowp('N', 'N', 4, N, 6, 1.0f, blk, L, W, N, 0.0f, C0, N, &pol);
  const uint64_t c0 = mt_nn_converted();
  err |= mt_gemm_lowp('N', 'N', 4, N, 6, 1.0f, blk, L, W, N, 0.0f, C1, N, hp);
  CHECK(!err && memcmp(C0, C1, sizeof(float) * 4 * N) == 0,
        "a block inside a held range: the same bits as converted at the GEMM");
  CHECK(mt_nn_converted() - c0 == 6 * N, "only the other operand converted (%llu of %d)",
        (unsigned long long)(mt_nn_converted() - c0), 6 * N);
  for (int i = 0; i < R * L; i++) X[i] += 1.0f;
  mt_nn_holds_clear(&t, 0);
  err = mt_gemm_lowp('N', 'N', 4, N, 6, 1.0f, blk, L, W, N, 0.0f, C0, N, &pol);
  err |= mt_gemm_lowp('N', 'N', 4, N, 6, 1.0f, blk, L, W, N, 0.0f, C1, N, hp);
  CHECK(!err && t.n == 0 && memcmp(C0, C1, sizeof(float) * 4 * N) == 0,
        "after a clear the GEMM reads the changed values");
  mt_nn_holds *loc = mt_nn_holds_local();
  const int n0 = loc->n;
  mt_nn_hold(loc, &pol, W, L * N);
  mt_nn_hold(loc, &pol, X, R * L);
  CHECK(loc->n == n0 + 2, "local holds stack (%d -> %d)", n0, loc->n);
  mt_nn_holds_clear(loc, n0 + 1);
  CHECK(loc->n == n0 + 1, "clearing from the second leaves the first");
  mt_nn_holds_clear(loc, n0);
  /* tables chain (a layer's local one, then the model's); a table already
   * in the chain is not linked again (no cycle: a GEMM outside every
   * range ends) */
  mt_nn_policy w2, w3;
  const mt_nn_policy *hp2 = mt_nn_with_holds(hp, loc, &w2);
  mt_nn_with_holds(hp2, &t, &w3);
  CHECK(loc->next == &t && t.next == NULL, "tables chain without a cycle");
  CHECK(mt_gemm_lowp('N', 'N', 4, N, 6, 1.0f, blk, L, W, N, 0.0f, C1, N, hp2) == 0 &&
            memcmp(C0, C1, sizeof(float) * 4 * N) == 0,
        "a GEMM through the chain, no operand held");
  const mt_nn_policy f32 = mt_nn_policy_make(MT_PREC_FP32, 0);
  mt_nn_hold(&t, &f32, X, R * L);
  mt_nn_hold(&t, NULL, X, 1);
  CHECK(t.n == 0, "fp32 and no policy hold nothing");
  mt_nn_holds_free(&t);
}

int main(void) {
  test_bf16_native();
  test_holds();
  test_bf16_gemm(mt_gemm_bf16_native() ? "oneDNN's kernel" : "emulated");
  mt_gemm_bf16_emulate(1);
  test_bf16_gemm("emulated");
  mt_gemm_bf16_emulate(0);
  test_convert_refs();
  test_vector_vs_scalar("default FP env");
#if defined(__SSE__)
  /* with flush-to-zero and denormals-are-zero set (as some libraries do),
   * every path must still give the same bits */
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);
  test_convert_refs();
  test_vector_vs_scalar("FTZ+DAZ");
  _mm_setcsr(csr);
#endif
  test_nonfinite();
  test_names();
  test_scaler_refs();
  test_hysteresis();
  test_min_scale();
  test_static_and_checks();
  test_pack();
  bench((size_t)1 << 16, "256 KiB");
  bench((size_t)1 << 25, "128 MiB");
  return tu_finish("test_amp");
}
