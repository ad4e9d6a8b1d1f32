/* Unit tests of the privacy accountant (src/optim/accountant.c).
 *
 * Published reference values, each with its source and the RDP -> DP
 * conversion it was made with (improved = Balle et al. 2020, what Opacus and
 * dp_accounting use; classic = rdp - log(delta)/(alpha - 1)):
 *  - TF-Privacy tensorflow_privacy/privacy/analysis/rdp_accountant_test.py
 *    and its successor, Google's dp_accounting rdp_privacy_accountant_test.py;
 *  - Opacus opacus/tests/accountants_test.py;
 *  - Abadi et al. 2016, "Deep Learning with Differential Privacy", sect. 3.1.
 * Generated references (validation/refs/accountant.txt, written by
 * validation/gen_refs_accountant.py from Opacus 1.6.0's analysis/rdp.py and
 * mpmath quadrature): epsilon for 20 (q, sigma, steps, delta) in both
 * conversions with the best order, RDP at all default orders, log A_alpha.
 * Then: the noise multiplier solver, history segments, pack/unpack, edge
 * cases and argument errors. One line per check; exit status 1 on failure. */
#include "optim/accountant.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double rel(double a, double b) {
  if (a == b) return 0;
  double d = fabs(a - b) / fmax(fabs(b), 1e-300);
  return d != d ? INFINITY : d;
}

/* epsilon of one segment */
static double eps1(double q, double sigma, int64_t steps, const double *orders, int n,
                   double delta, mt_acc_conversion conv, double *best) {
  mt_accountant a = {0};
  double e = NAN;
  int rc = mt_acc_step(&a, q, sigma, steps);
  rc |= mt_acc_epsilon(&a, orders, n, delta, conv, &e, best);
  mt_acc_free(&a);
  return rc ? NAN : e;
}

/* ----------------------------------------------------- published values */

static void test_published_rdp(void) {
  double r[6];
  /* TF-Privacy rdp_accountant_test.py test_compute_rdp_scalar:
   * compute_rdp(q=0.1, sigma=2, steps=10, order 5) = 0.07737 (places=5) */
  const double o5 = 5;
  int rc = mt_acc_rdp_sgm(0.1, 2, 10, &o5, 1, r);
  CHECK(rc == 0 && fabs(r[0] - 0.07737) < 5e-6, "TF-Privacy test_compute_rdp_scalar: %.7f (0.07737)",
        r[0]);

  /* q 0.01, sigma 2.5, 50 steps at orders 1.5, 2.5, 5, 50, 100:
   * TF-Privacy test_compute_rdp_sequence gives 0.00065, 0.001085,
   * 0.00218075, 0.023846, 167.416307 (assertSequenceAlmostEqual, delta
   * 1e-5); dp_accounting test_compute_rdp_poisson_sampled_gaussian gives
   * 2.18075656e-03, 2.38460375e-02, 1.67416308e02 at the integer orders
   * (rtol 1e-4; checked here to 1e-6). Its fractional values (6.70579741e-04,
   * 1.08548710e-03) are larger: dp_accounting now adds the absolute values
   * of the series' terms (an upper bound), where TF-Privacy and Opacus sum
   * them with their signs, as here; quadrature (mpmath) gives 6.5007090e-04
   * at 1.5, so the check at those two orders is only "below dp_accounting". */
  const double o[5] = {1.5, 2.5, 5, 50, 100};
  const double tf[5] = {0.00065, 0.001085, 0.00218075, 0.023846, 167.416307};
  const double dpa[5] = {6.70579741e-04, 1.08548710e-03, 2.18075656e-03, 2.38460375e-02,
                         1.67416308e02};
  rc = mt_acc_rdp_sgm(0.01, 2.5, 50, o, 5, r);
  int ok = rc == 0;
  for (int k = 0; k < 5; k++) {
    ok &= fabs(r[k] - tf[k]) <= 1e-5;
    ok &= k < 2 ? r[k] < dpa[k] : rel(r[k], dpa[k]) < 1e-6;
  }
  CHECK(ok, "TF-Privacy test_compute_rdp_sequence, dp_accounting integer orders: %.8g %.8g "
        "%.8g %.8g %.8g", r[0], r[1], r[2], r[3], r[4]);
  double e = rel(r[0], 6.5007089718803971e-04);
  CHECK_ERR(e, 1e-8, "order 1.5 vs mpmath quadrature");

  /* TF-Privacy test_compute_rdp_no_data (q = 0 gives 0) and
   * test_compute_rdp_no_sampling (q = 1: alpha / (2 sigma^2) = 0.1) */
  const double o20 = 20;
  rc = mt_acc_rdp_sgm(0, 10, 1, &o20, 1, r);
  rc |= mt_acc_rdp_sgm(1, 10, 1, &o20, 1, r + 1);
  CHECK(rc == 0 && r[0] == 0 && rel(r[1], 0.1) < 1e-15,
        "TF-Privacy test_compute_rdp_no_data / no_sampling: %g %g", r[0], r[1]);

  /* TF-Privacy test_compute_heterogeneous_rdp_different_sampling_probabilities:
   * segments (q 0, sigma 10, 1 step) + (q 1, sigma 10, 1 step) at order 20 */
  mt_accountant a = {0};
  rc = mt_acc_step(&a, 0, 10, 1) | mt_acc_step(&a, 1, 10, 1);
  rc |= mt_acc_rdp(&a, &o20, 1, r);
  CHECK(rc == 0 && a.n == 2 && rel(r[0], 0.1) < 1e-15,
        "TF-Privacy test_compute_heterogeneous_rdp: %g (0.1), %d segments", r[0], a.n);
  mt_acc_free(&a);
}

static void test_published_eps(void) {
  double e = NAN, best = NAN;
  /* TF-Privacy test_get_privacy_spent_check_target_delta, dp_accounting
   * test_compute_epsilon_delta_pure_dp (improved conversion): constant
   * rdp 1.1 at orders 2..32, delta 1e-5 -> 1.32783806176 at order 32 */
  double o[31], r[31];
  for (int k = 0; k < 31; k++) o[k] = 2 + k, r[k] = 1.1;
  int rc = mt_acc_rdp_to_eps(o, r, 31, 1e-5, MT_ACC_IMPROVED, &e, &best);
  CHECK(rc == 0 && rel(e, 1.32783806176) < 1e-10 && best == 32,
        "TF-Privacy check_target_delta, pure DP: eps %.11f (1.32783806176) order %g (32)", e,
        best);

  /* same test, second part (improved): no subsampling, sigma 4.530877117,
   * orders 1.001 .. 99.999 step 0.001, delta 1e-6 -> eps 1 (places=7) */
  static double of[98999];
  for (int k = 0; k < 98999; k++) of[k] = 0.001 * (1001 + k);
  e = eps1(1, 4.530877117, 1, of, 98999, 1e-6, MT_ACC_IMPROVED, &best);
  CHECK(fabs(e - 1) < 1e-7, "TF-Privacy check_target_delta, Gaussian: eps %.9f (1) at order %g",
        e, best);

  /* TF-Privacy test_check_composition (classic conversion; the assertion
   * kept, commented, since the switch to the improved one): (q 1e-4,
   * sigma 0.4, 40000 steps) then (q 0.1, sigma 2, 100 steps), delta 1e-5 ->
   * 8.509656 (places=5) at order 2.5; the improved one must be below it */
  const double oc[21] = {1.25, 1.5, 1.75, 2., 2.5, 3., 4., 5., 6., 7., 8.,
                         10., 12., 14., 16., 20., 24., 28., 32., 64., 256.};
  mt_accountant a = {0};
  double ei = NAN;
  rc = mt_acc_step(&a, 1e-4, 0.4, 40000) | mt_acc_step(&a, 0.1, 2, 100);
  rc |= mt_acc_epsilon(&a, oc, 21, 1e-5, MT_ACC_CLASSIC, &e, &best);
  rc |= mt_acc_epsilon(&a, oc, 21, 1e-5, MT_ACC_IMPROVED, &ei, NULL);
  CHECK(rc == 0 && fabs(e - 8.509656) < 5e-6 && best == 2.5 && ei <= 8.509656,
        "TF-Privacy test_check_composition (classic): eps %.6f (8.509656) order %g (2.5), "
        "improved %.6f", e, best, ei);
  mt_acc_free(&a);

  /* Opacus accountants_test.py test_rdp_accountant (improved, default
   * orders): sigma 1.5, q 0.04, int(90 / 0.04) = 2250 steps, delta 1e-5 */
  e = eps1(0.04, 1.5, 2250, NULL, 0, 1e-5, MT_ACC_IMPROVED, &best);
  CHECK_ERR(rel(e, 7.32911117143), 1e-9, "Opacus test_rdp_accountant: eps %.11f (7.32911117143)",
            e);

  /* Abadi et al. 2016, section 3.1: q 0.01, sigma 4, T 10000, delta 1e-5
   * -> "eps ~ 1.26" with the moments accountant, i.e. the classic
   * conversion over integer orders (lambda = alpha - 1 <= 32); given to 3
   * digits, so checked to +-0.005 */
  double oi[31];
  for (int k = 0; k < 31; k++) oi[k] = 2 + k;
  e = eps1(0.01, 4, 10000, oi, 31, 1e-5, MT_ACC_CLASSIC, &best);
  CHECK(fabs(e - 1.26) <= 0.005, "Abadi et al. 2016 sect. 3.1 (classic): eps %.4f (1.26) order %g",
        e, best);
}

/* Opacus accountants_test.py test_get_noise_multiplier_rdp_epochs / _steps:
 * target eps 8, delta 1e-5, q 0.04, 2250 (90 epochs) or 2000 steps ->
 * 1.416 and 1.3562 (places=4); improved conversion, eps tolerance 0.01 */
static void test_noise_multiplier(void) {
  double s = NAN, e = NAN;
  int rc = mt_acc_noise_multiplier(8, 1e-5, 0.04, 2250, NULL, 0, MT_ACC_IMPROVED,
                                   MT_ACC_EPS_TOL, &s);
  CHECK(rc == 0 && fabs(s - 1.416) < 5e-5, "Opacus get_noise_multiplier 90 epochs: %.6f (1.416)",
        s);
  rc = mt_acc_noise_multiplier(8, 1e-5, 0.04, 2000, NULL, 0, MT_ACC_IMPROVED, MT_ACC_EPS_TOL, &s);
  CHECK(rc == 0 && fabs(s - 1.3562) < 5e-5,
        "Opacus get_noise_multiplier 2000 steps: %.6f (1.3562)", s);

  /* round trip: the sigma found spends at most the target, and within the
   * tolerance of it, for both conversions and a spread of settings */
  const double cases[][4] = {{1.0, 1e-5, 0.01, 1000}, {3.0, 1e-6, 0.004, 14062},
                             {0.5, 1e-5, 0.1, 100},   {10, 1e-5, 0.5, 50},
                             {2.0, 1e-3, 1.0, 20}};
  for (int c = 0; c < 5; c++) {
    for (int conv = 0; conv < 2; conv++) {
      const double *p = cases[c];
      rc = mt_acc_noise_multiplier(p[0], p[1], p[2], (int64_t)p[3], NULL, 0, conv,
                                   MT_ACC_EPS_TOL, &s);
      e = eps1(p[2], s, (int64_t)p[3], NULL, 0, p[1], conv, NULL);
      double e_lo = eps1(p[2], s * 0.999, (int64_t)p[3], NULL, 0, p[1], conv, NULL);
      CHECK(rc == 0 && e <= p[0] && e >= p[0] - MT_ACC_EPS_TOL && e_lo > e,
            "noise multiplier round trip %s: target %g q %g steps %g -> sigma %.6f eps %.6f",
            conv ? "classic" : "improved", p[0], p[2], p[3], s, e);
    }
  }

  /* nothing spent: q = 0 or no steps need no noise */
  rc = mt_acc_noise_multiplier(1, 1e-5, 0, 100, NULL, 0, MT_ACC_IMPROVED, MT_ACC_EPS_TOL, &s);
  CHECK(rc == 0 && s == 0, "noise multiplier q = 0: %g", s);

  /* unreachable: with default orders the improved conversion cannot go
   * below about 0.1 at delta 1e-5 for any sigma */
  mt_error_clear();
  s = -1;
  rc = mt_acc_noise_multiplier(0.01, 1e-5, 0.5, 1000, NULL, 0, MT_ACC_IMPROVED, MT_ACC_EPS_TOL,
                               &s);
  CHECK(rc == MT_ERR_OPTION && s == -1 && strstr(mt_error_message(), "cannot be reached"),
        "unreachable target is an error: %s", mt_error_message());
  mt_error_clear();
}

/* ----------------------------------------------- generated (Opacus 1.6.0) */

static void test_generated(void) {
  tu_ref r;
  tu_ref_load(&r, "accountant.txt");
  const tu_tensor *cases = tu_ref_get(&r, "cases", -1);
  int n = (int)cases->dims[0];
  const double *ei = tu_ref_get(&r, "eps_improved", n)->v;
  const double *oi = tu_ref_get(&r, "order_improved", n)->v;
  const double *ec = tu_ref_get(&r, "eps_classic", n)->v;
  const double *oc = tu_ref_get(&r, "order_classic", n)->v;
  double worst_i = 0, worst_c = 0;
  int orders_ok = 1;
  for (int c = 0; c < n; c++) {
    const double *p = cases->v + 4 * c;
    double bi, bc;
    double e_i = eps1(p[0], p[1], (int64_t)p[2], NULL, 0, p[3], MT_ACC_IMPROVED, &bi);
    double e_c = eps1(p[0], p[1], (int64_t)p[2], NULL, 0, p[3], MT_ACC_CLASSIC, &bc);
    worst_i = fmax(worst_i, rel(e_i, ei[c]));
    worst_c = fmax(worst_c, rel(e_c, ec[c]));
    if (bi != oi[c] || bc != oc[c]) {
      orders_ok = 0;
      printf("     case %d: best orders %g %g, Opacus %g %g\n", c, bi, bc, oi[c], oc[c]);
    }
  }
  CHECK_ERR(worst_i, 1e-6, "Opacus 1.6.0 epsilon, improved conversion, %d cases", n);
  CHECK_ERR(worst_c, 1e-6, "Opacus 1.6.0 RDP, classic conversion, %d cases", n);
  CHECK(orders_ok, "best orders equal Opacus's in all %d cases", n);

  const tu_tensor *rc_ = tu_ref_get(&r, "rdp_cases", -1);
  int m = (int)rc_->dims[0];
  const double *want = tu_ref_get(&r, "rdp", (int64_t)m * MT_ACC_NORDERS)->v;
  for (int c = 0; c < m; c++) {
    const double *p = rc_->v + 3 * c;
    double got[MT_ACC_NORDERS], orders[MT_ACC_NORDERS];
    mt_acc_default_orders(orders);
    int rc = mt_acc_rdp_sgm(p[0], p[1], (int64_t)p[2], NULL, 0, got);
    double e = 0, at = 0;
    for (int k = 0; k < MT_ACC_NORDERS; k++) {
      double d = rel(got[k], want[(size_t)c * MT_ACC_NORDERS + k]);
      if (d > e) e = d, at = orders[k];
    }
    CHECK_ERR(rc ? INFINITY : e, 1e-6, "Opacus RDP at 151 orders, q %g sigma %g steps %g (worst order %g)",
              p[0], p[1], p[2], at);
  }

  /* log A_alpha against quadrature of its integral (TF-Privacy's
   * test_compute_log_a_equals_mp cases, which use rtol 1e-4): RDP of one
   * step is log A / (alpha - 1) */
  const tu_tensor *mc = tu_ref_get(&r, "mp_cases", -1);
  int k = (int)mc->dims[0];
  const double *la = tu_ref_get(&r, "mp_log_a", k)->v;
  for (int c = 0; c < k; c++) {
    const double *p = mc->v + 3 * c;
    double got = NAN;
    int rc = mt_acc_rdp_sgm(p[0], p[1], 1, &p[2], 1, &got);
    double tol = floor(p[2]) == p[2] ? 1e-10 : 1e-5;
    CHECK_ERR(rc ? INFINITY : rel(got * (p[2] - 1), la[c]), tol,
              "log A vs mpmath quadrature, q %g sigma %g order %g", p[0], p[1], p[2]);
  }
  tu_ref_free(&r);
}

/* ------------------------------------------------ history and checkpoint */

static void test_history(void) {
  const double delta = 1e-5;
  mt_accountant a = {0}, b = {0};
  /* step by step merges into one segment; 0 steps records nothing */
  int rc = 0;
  for (int i = 0; i < 100; i++) rc |= mt_acc_step(&a, 0.01, 1.1, 1);
  rc |= mt_acc_step(&a, 0.01, 1.1, 0);
  CHECK(rc == 0 && a.n == 1 && mt_acc_total_steps(&a) == 100, "100 equal steps: %d segment(s)",
        a.n);
  double e_a, e_b;
  rc = mt_acc_epsilon(&a, NULL, 0, delta, MT_ACC_IMPROVED, &e_a, NULL);
  e_b = eps1(0.01, 1.1, 100, NULL, 0, delta, MT_ACC_IMPROVED, NULL);
  CHECK(rc == 0 && rel(e_a, e_b) < 1e-12, "steps one at a time equal one segment: %.12g %.12g",
        e_a, e_b);

  /* a change of sigma and of q: the RDP is the sum over segments */
  rc = mt_acc_step(&a, 0.01, 2.0, 300) | mt_acc_step(&a, 0.02, 2.0, 50);
  double orders[MT_ACC_NORDERS], r_all[MT_ACC_NORDERS], r1[MT_ACC_NORDERS], r2[MT_ACC_NORDERS],
      r3[MT_ACC_NORDERS];
  mt_acc_default_orders(orders);
  rc |= mt_acc_rdp(&a, NULL, 0, r_all);
  rc |= mt_acc_rdp_sgm(0.01, 1.1, 100, NULL, 0, r1) | mt_acc_rdp_sgm(0.01, 2.0, 300, NULL, 0, r2);
  rc |= mt_acc_rdp_sgm(0.02, 2.0, 50, NULL, 0, r3);
  double err = 0;
  for (int k = 0; k < MT_ACC_NORDERS; k++) {
    r1[k] += r2[k] + r3[k];
    err = fmax(err, rel(r_all[k], r1[k]));
  }
  CHECK(rc == 0 && a.n == 3 && mt_acc_total_steps(&a) == 450 && err < 1e-14,
        "three segments: RDP is the sum (rel err %.2g)", err);
  double e_sum, e_sum_best;
  rc = mt_acc_rdp_to_eps(NULL, r1, 0, delta, MT_ACC_IMPROVED, &e_sum, &e_sum_best);
  rc |= mt_acc_epsilon(&a, NULL, 0, delta, MT_ACC_IMPROVED, &e_a, NULL);
  CHECK(rc == 0 && e_a == e_sum && e_a > e_b, "epsilon of the history %.6f (first segment %.6f)",
        e_a, e_b);

  /* epsilon after k more steps = epsilon once they are taken */
  double e_after;
  rc = mt_acc_epsilon_after(&a, 0.02, 2.0, 25, NULL, 0, delta, MT_ACC_IMPROVED, &e_after, NULL);
  CHECK(rc == 0 && a.n == 3 && mt_acc_total_steps(&a) == 450 && e_after > e_a,
        "epsilon after 25 more steps leaves the history alone: %.6f", e_after);
  rc = mt_acc_step(&a, 0.02, 2.0, 25) | mt_acc_epsilon(&a, NULL, 0, delta, MT_ACC_IMPROVED, &e_a, NULL);
  CHECK(rc == 0 && rel(e_a, e_after) < 1e-14, "... and equals epsilon once taken: %.12g %.12g",
        e_a, e_after);

  /* pack / unpack: the same history and the same epsilon */
  double buf[64];
  size_t len = mt_acc_pack_len(&a);
  rc = mt_acc_pack(&a, buf, len);
  rc |= mt_acc_step(&b, 0.5, 0.5, 7); /* unpack replaces what b holds */
  rc |= mt_acc_unpack(&b, buf, len);
  rc |= mt_acc_epsilon(&b, NULL, 0, delta, MT_ACC_IMPROVED, &e_b, NULL);
  int same = b.n == a.n;
  for (int i = 0; same && i < a.n; i++) same = !memcmp(&a.seg[i], &b.seg[i], sizeof(a.seg[i]));
  CHECK(rc == 0 && len == 11 && same && e_b == e_a,
        "pack (%zu doubles) / unpack: same history, epsilon %.12g", len, e_b);
  /* a restarted run goes on where it stopped */
  rc = mt_acc_step(&a, 0.02, 2.0, 10) | mt_acc_step(&b, 0.02, 2.0, 10);
  rc |= mt_acc_epsilon(&a, NULL, 0, delta, MT_ACC_IMPROVED, &e_a, NULL);
  rc |= mt_acc_epsilon(&b, NULL, 0, delta, MT_ACC_IMPROVED, &e_b, NULL);
  CHECK(rc == 0 && e_a == e_b && b.n == 3, "restarted history continues the same budget");

  /* corrupt states are MT_ERR_DATA and leave b as it was */
  double bad[11];
  const int idx[] = {0, 1, 2, 3, 4, 4};
  const double val[] = {2, 4, 1.5, -1, 0, 2.5};
  for (int t = 0; t < 6; t++) {
    memcpy(bad, buf, sizeof(bad));
    bad[idx[t]] = val[t];
    rc = mt_acc_unpack(&b, bad, 11);
    CHECK(rc == MT_ERR_DATA && b.n == 3 && mt_acc_total_steps(&b) == 485,
          "corrupt state (value %d = %g) rejected: %s", idx[t], val[t], mt_error_message());
    mt_error_clear();
  }
  rc = mt_acc_unpack(&b, buf, 10);
  CHECK(rc == MT_ERR_DATA, "truncated state rejected");
  mt_error_clear();
  /* an empty history packs to 2 doubles and spends nothing */
  mt_accountant z = {0};
  double zb[2];
  rc = mt_acc_pack(&z, zb, 2) | mt_acc_unpack(&b, zb, 2);
  rc |= mt_acc_epsilon(&b, NULL, 0, delta, MT_ACC_IMPROVED, &e_b, NULL);
  CHECK(rc == 0 && b.n == 0 && e_b == 0, "empty history: epsilon %g", e_b);
  mt_acc_free(&a);
  mt_acc_free(&b);
  mt_acc_free(&b); /* twice is fine */
}

/* ------------------------------------------------------------ edge cases */

static void test_edges(void) {
  double r[MT_ACC_NORDERS], orders[MT_ACC_NORDERS], best;
  mt_acc_default_orders(orders);
  CHECK(orders[0] == 1.1 && orders[98] == 1.0 + 99 / 10.0 && orders[99] == 12 &&
            orders[MT_ACC_NORDERS - 1] == 63,
        "default orders 1.1 .. 10.9, 12 .. 63");
  for (int conv = 0; conv < 2; conv++) {
    const char *cn = conv ? "classic" : "improved";
    /* q = 0: nothing is revealed */
    double e = eps1(0, 1.0, 1000, NULL, 0, 1e-5, conv, NULL);
    CHECK(e == 0, "%s: q = 0 gives eps %g", cn, e);
    /* sigma = 0: no privacy */
    e = eps1(0.01, 0, 1, NULL, 0, 1e-5, conv, &best);
    CHECK(isinf(e) && e > 0, "%s: sigma = 0 gives eps %g", cn, e);
    /* q = 1: the Gaussian mechanism, rdp = steps * alpha / (2 sigma^2) */
    int rc = mt_acc_rdp_sgm(1, 3.0, 7, NULL, 0, r);
    double err = 0;
    for (int k = 0; k < MT_ACC_NORDERS; k++)
      err = fmax(err, rel(r[k], 7 * orders[k] / 18.0));
    CHECK(rc == 0 && err < 1e-15, "%s: q = 1 gives steps * alpha / (2 sigma^2)", cn);
    /* sigma = 0 in one segment makes the whole history infinite */
    mt_accountant a = {0};
    rc = mt_acc_step(&a, 0.01, 1.0, 10) | mt_acc_step(&a, 0.01, 0, 1);
    rc |= mt_acc_epsilon(&a, NULL, 0, 1e-5, conv, &e, NULL);
    CHECK(rc == 0 && isinf(e), "%s: a sigma = 0 segment gives eps %g", cn, e);
    mt_acc_free(&a);
  }
  /* epsilon grows with steps and shrinks with sigma and delta */
  double e1 = eps1(0.01, 1.0, 100, NULL, 0, 1e-5, MT_ACC_IMPROVED, NULL);
  double e2 = eps1(0.01, 1.0, 1000, NULL, 0, 1e-5, MT_ACC_IMPROVED, NULL);
  double e3 = eps1(0.01, 1.5, 1000, NULL, 0, 1e-5, MT_ACC_IMPROVED, NULL);
  double e4 = eps1(0.01, 1.5, 1000, NULL, 0, 1e-3, MT_ACC_IMPROVED, NULL);
  CHECK(e1 < e2 && e3 < e2 && e4 < e3, "monotone: %.4f < %.4f, %.4f < %.4f, %.4f < %.4f", e1, e2,
        e3, e2, e4, e3);
  /* tiny sigma and huge orders stay finite (no overflow in log space) */
  const double big[3] = {1.5, 256, 1000.5};
  int rc = mt_acc_rdp_sgm(0.3, 0.05, 1, big, 3, r);
  CHECK(rc == 0 && isfinite(r[0]) && isfinite(r[1]) && isfinite(r[2]) && r[0] < r[1] &&
            r[1] < r[2],
        "sigma 0.05: rdp %g %g %g finite and increasing", r[0], r[1], r[2]);
  /* sigma 1e-3 and 1e-60: finite, and infinite (treated as 0) */
  rc = mt_acc_rdp_sgm(0.01, 1e-3, 1, big, 3, r);
  CHECK(rc == 0 && isfinite(r[0]) && r[0] > 1e4, "sigma 1e-3: rdp %g at order 1.5", r[0]);
  rc = mt_acc_rdp_sgm(0.01, 1e-60, 1, big, 3, r);
  CHECK(rc == 0 && isinf(r[0]) && isinf(r[1]) && isinf(r[2]), "sigma 1e-60: rdp %g", r[0]);
  /* q = 1/2 and sigma 1e5: the fractional series is cut, ceil(order) used */
  const double o11 = 1.1, o2 = 2;
  double r11, r2;
  rc = mt_acc_rdp_sgm(0.5, 1e5, 1, &o11, 1, &r11) | mt_acc_rdp_sgm(0.5, 1e5, 1, &o2, 1, &r2);
  CHECK(rc == 0 && r11 == r2 && r2 > 0, "q 0.5 sigma 1e5: order 1.1 bounded by order 2: %g %g",
        r11, r2);
  /* huge sigma: RDP underflows gracefully to ~0, eps to 0 via the KL bound */
  double e = eps1(0.01, 1e7, 10, NULL, 0, 1e-5, MT_ACC_IMPROVED, NULL);
  CHECK(e == 0, "sigma 1e7: eps %g", e);

  /* argument errors */
  mt_error_clear();
  struct {
    double q, sigma, order, delta;
    long steps;
  } bad[] = {{-0.1, 1, 2, 1e-5, 1}, {1.1, 1, 2, 1e-5, 1}, {NAN, 1, 2, 1e-5, 1},
             {0.1, -1, 2, 1e-5, 1}, {0.1, INFINITY, 2, 1e-5, 1}, {0.1, 1, 1, 1e-5, 1},
             {0.1, 1, 0.5, 1e-5, 1}, {0.1, 1, INFINITY, 1e-5, 1}, {0.1, 1, 2, 0, 1},
             {0.1, 1, 2, 1, 1},     {0.1, 1, 2, 1e-5, -1}};
  for (size_t t = 0; t < sizeof(bad) / sizeof(bad[0]); t++) {
    double rr = 0, ee = 0;
    int rc1 = mt_acc_rdp_sgm(bad[t].q, bad[t].sigma, bad[t].steps, &bad[t].order, 1, &rr);
    if (!rc1) rc1 = mt_acc_rdp_to_eps(&bad[t].order, &rr, 1, bad[t].delta, MT_ACC_IMPROVED, &ee,
                                     NULL);
    CHECK(rc1 == MT_ERR_ARG, "bad arguments %zu (q %g sigma %g order %g delta %g steps %ld): %s",
          t, bad[t].q, bad[t].sigma, bad[t].order, bad[t].delta, bad[t].steps,
          mt_error_message());
    mt_error_clear();
  }
  mt_accountant a = {0};
  rc = mt_acc_step(&a, 2, 1, 1);
  CHECK(rc == MT_ERR_ARG && a.n == 0, "bad step leaves the history alone");
  mt_error_clear();
}

int main(void) {
  test_published_rdp();
  test_published_eps();
  test_noise_multiplier();
  test_generated();
  test_history();
  test_edges();
  return tu_finish("test_accountant");
}
