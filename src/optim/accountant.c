/* RDP accountant of the sampled Gaussian mechanism (see accountant.h). */
#include "optim/accountant.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------ log-space helpers */

/* log(exp(a) + exp(b)) */
static double log_add(double a, double b) {
  double hi = a > b ? a : b, lo = a > b ? b : a;
  if (lo == -INFINITY) return hi;
  return hi + log1p(exp(lo - hi));
}

/* log(exp(a) - exp(b)) for a >= b; NaN when a < b */
static double log_sub(double a, double b) {
  if (a < b) return NAN;
  if (b == -INFINITY) return a;
  if (a == b) return -INFINITY;
  return a + log(-expm1(b - a));
}

/* log(erfc(x)), accurate where erfc(x) underflows: erfc is accurate to a
 * few ulps relative down to about 1e-300 (x ~ 26); beyond that the
 * asymptotic series erfc(x) ~ exp(-x^2) / (x sqrt(pi)) * (1 - 1/(2x^2)
 * + 3/(4x^4) - ...), taken in log form, has an error below x^-10 ~ 1e-14. */
static double log_erfc(double x) {
  if (x < 25.0) return log(erfc(x));
  double r = 1.0 / (x * x);
  return -0.5 * log(M_PI) - log(x) - x * x
         + r * (-0.5 + r * (0.625 + r * (-37.0 / 24.0 + r * (353.0 / 64.0))));
}

/* ------------------------------------------------------------ log A_alpha */

/* Integer alpha >= 2, 0 < q < 1: A = sum_i C(alpha, i) q^i (1-q)^(alpha-i)
 * exp((i^2 - i) / (2 sigma^2)). The binomial weights sum to 1 and the terms
 * i = 0, 1 have exponent 0, so A = 1 + B with
 *   B = sum_{i>=2} C(alpha, i) q^i (1-q)^(alpha-i) expm1((i^2 - i) / (2 sigma^2)),
 * all terms positive: log A = log(1 + B) keeps full relative accuracy where
 * A is close to 1 (small q), which summing A itself in log space does not.
 * B is summed as max + log(sum exp(t - max)). */
static double log_a_int(double q, double sigma, long alpha) {
  const double lq = log(q), l1q = log1p(-q), inv2s2 = 1.0 / (2.0 * sigma * sigma);
  const double lga = lgamma((double)alpha + 1.0);
  double mx = -INFINITY, sum = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (long i = 2; i <= alpha; i++) {
      double di = (double)i, c = (di * di - di) * inv2s2;
      /* log(expm1(c)) = c + log(1 - exp(-c)) */
      double t = lga - lgamma(di + 1.0) - lgamma((double)(alpha - i) + 1.0) + di * lq
                 + (double)(alpha - i) * l1q + c + log(-expm1(-c));
      if (pass == 0)
        mx = t > mx ? t : mx;
      else
        sum += exp(t - mx);
    }
  }
  if (mx == -INFINITY) return 0; /* every exponent underflowed: A = 1 */
  return log_add(0.0, mx + log(sum));
}

/* Terms of a fractional series beyond alpha before giving up: about 4e4
 * are needed for sigma = 1000 at q = 1/2, the slowest case. */
#define MAX_TERMS 100000L

/* Fractional alpha > 1, 0 < q < 1: the two series of Mironov et al. 2019,
 * section 3.3, over the generalized binomial coefficients C(alpha, i),
 * whose sign alternates once i > alpha. Positive and negative terms are
 * summed apart in log space and subtracted at the end; NaN when the
 * difference is not positive or the series do not converge. */
static double log_a_frac(double q, double sigma, double alpha) {
  const double lq = log(q), l1q = log1p(-q), inv2s2 = 1.0 / (2.0 * sigma * sigma);
  const double z0 = sigma * sigma * log(1.0 / q - 1.0) + 0.5;
  const double scale = 1.0 / (M_SQRT2 * sigma);
  double pos = -INFINITY, neg = -INFINITY;
  double log_coef = 0; /* log|C(alpha, i)|, by C(alpha, i+1) = C(alpha, i) (alpha - i) / (i + 1) */
  int sign = 1;
  const long imax = (long)alpha + MAX_TERMS;
  for (long i = 0;; i++) {
    double di = (double)i, j = alpha - di;
    double log_t0 = log_coef + di * lq + j * l1q;
    double log_t1 = log_coef + j * lq + di * l1q;
    double log_e0 = log(0.5) + log_erfc((di - z0) * scale);
    double log_e1 = log(0.5) + log_erfc((z0 - j) * scale);
    double log_s0 = log_t0 + (di * di - di) * inv2s2 + log_e0;
    double log_s1 = log_t1 + (j * j - j) * inv2s2 + log_e1;
    double s = log_add(log_s0, log_s1);
    if (sign > 0)
      pos = log_add(pos, s);
    else
      neg = log_add(neg, s);
    if ((log_s0 > log_s1 ? log_s0 : log_s1) < -30.0) break;
    if (i >= imax || isnan(s)) return NAN;
    double f = alpha - di; /* next coefficient */
    if (f == 0) return NAN; /* integer alpha: not this function */
    if (f < 0) sign = -sign;
    log_coef += log(fabs(f)) - log(di + 1.0);
  }
  return log_sub(pos, neg);
}

/* RDP of one step at order alpha, >= 0 (a rounding-negative log A of a
 * mechanism that reveals almost nothing is 0). Where the fractional series
 * does not converge in MAX_TERMS terms (q near 1/2 with a very large sigma:
 * the terms then decay only like i^-(alpha+1)), the RDP at ceil(alpha) is
 * used instead: RDP is nondecreasing in the order (van Erven and Harremoës
 * 2014, theorem 3), so it is a valid, slightly larger bound. */
static double rdp_one(double q, double sigma, double alpha) {
  if (q == 0) return 0;
  /* below 1e-50 the RDP is beyond 1e99 at every order > 1 (and squares of
   * the series' arguments would overflow): no privacy */
  if (sigma < 1e-50) return INFINITY;
  if (q == 1) return alpha / (2.0 * sigma * sigma);
  double a = alpha, la = NAN;
  if (floor(alpha) != alpha) la = log_a_frac(q, sigma, alpha);
  if (isnan(la)) {
    a = ceil(alpha);
    la = log_a_int(q, sigma, (long)a);
  }
  if (isnan(la)) return NAN;
  return la > 0 ? la / (a - 1.0) : 0;
}

/* ----------------------------------------------------------- public RDP */

void mt_acc_default_orders(double out[MT_ACC_NORDERS]) {
  int k = 0;
  for (int x = 1; x < 100; x++) out[k++] = 1.0 + (double)x / 10.0;
  for (int x = 12; x < 64; x++) out[k++] = (double)x;
}

/* Resolves (orders, norders): NULL gives the defaults in buf. */
static int resolve_orders(const double **orders, int *norders, double buf[MT_ACC_NORDERS]) {
  if (!*orders) {
    mt_acc_default_orders(buf);
    *orders = buf;
    *norders = MT_ACC_NORDERS;
    return 0;
  }
  MT_CHECK(*norders > 0, MT_ERR_ARG, "accountant: %d orders", *norders);
  for (int k = 0; k < *norders; k++) {
    double a = (*orders)[k];
    MT_CHECK(isfinite(a) && a > 1.0 && a <= MT_ACC_MAX_ORDER, MT_ERR_ARG,
             "accountant: order %g is not in (1, %g]", a, MT_ACC_MAX_ORDER);
  }
  return 0;
}

static int check_mechanism(double q, double sigma, int64_t steps) {
  MT_CHECK(isfinite(q) && q >= 0 && q <= 1, MT_ERR_ARG,
           "accountant: sampling rate %g is not in [0, 1]", q);
  MT_CHECK(isfinite(sigma) && sigma >= 0, MT_ERR_ARG,
           "accountant: noise multiplier %g is not finite and >= 0", sigma);
  MT_CHECK(steps >= 0 && steps <= MT_ACC_MAX_STEPS, MT_ERR_ARG,
           "accountant: %lld steps is not in [0, 2^53]", (long long)steps);
  return 0;
}

/* rdp[k] (+)= steps * RDP(q, sigma, orders[k]); orders already checked */
static int rdp_add(double q, double sigma, int64_t steps, const double *orders, int n,
                   double *rdp, int add) {
  for (int k = 0; k < n; k++) {
    double r = steps == 0 ? 0 : rdp_one(q, sigma, orders[k]);
    MT_CHECK(!isnan(r), MT_ERR_NUMERIC,
             "accountant: RDP series for q=%g sigma=%g order %g did not converge", q, sigma,
             orders[k]);
    r = r == 0 ? 0 : (double)steps * r; /* 0 * inf is 0 steps: nothing */
    rdp[k] = add ? rdp[k] + r : r;
  }
  return 0;
}

int mt_acc_rdp_sgm(double q, double sigma, int64_t steps, const double *orders, int norders,
                   double *rdp) {
  double buf[MT_ACC_NORDERS];
  MT_CHECK(rdp, MT_ERR_ARG, "accountant: no output");
  MT_CALL(check_mechanism(q, sigma, steps));
  MT_CALL(resolve_orders(&orders, &norders, buf));
  MT_CALL(rdp_add(q, sigma, steps, orders, norders, rdp, 0));
  return 0;
}

int mt_acc_rdp_to_eps(const double *orders, const double *rdp, int norders, double delta,
                      mt_acc_conversion conv, double *eps, double *best_order) {
  double buf[MT_ACC_NORDERS];
  MT_CHECK(rdp && eps, MT_ERR_ARG, "accountant: no rdp or output");
  MT_CHECK(conv == MT_ACC_IMPROVED || conv == MT_ACC_CLASSIC, MT_ERR_ARG,
           "accountant: unknown conversion %d", (int)conv);
  MT_CHECK(delta > 0 && delta < 1, MT_ERR_ARG, "accountant: delta %g is not in (0, 1)", delta);
  MT_CALL(resolve_orders(&orders, &norders, buf));
  const double ld = log(delta), kl_cut = -log1p(-delta * delta);
  double best = INFINITY, best_a = orders[0];
  for (int k = 0; k < norders; k++) {
    double a = orders[k], r = rdp[k], e;
    MT_CHECK(!isnan(r), MT_ERR_NUMERIC, "accountant: RDP at order %g is NaN", a);
    MT_CHECK(r >= 0, MT_ERR_ARG, "accountant: RDP %g at order %g is negative", r, a);
    if (r < kl_cut) /* delta^2 > 1 - exp(-r): delta >= TV distance */
      e = 0;
    else if (conv == MT_ACC_IMPROVED)
      e = r - (ld + log(a)) / (a - 1.0) + log1p(-1.0 / a);
    else
      e = r - ld / (a - 1.0);
    if (e < best) best = e, best_a = a;
  }
  *eps = best < 0 ? 0 : best;
  if (best_order) *best_order = best_a;
  return 0;
}

/* ----------------------------------------------------------- accountant */

void mt_acc_free(mt_accountant *a) {
  if (!a) return;
  mt_free(&a->seg);
  a->n = a->cap = 0;
}

int mt_acc_step(mt_accountant *a, double q, double sigma, int64_t steps) {
  MT_CHECK(a, MT_ERR_ARG, "accountant: none");
  MT_CALL(check_mechanism(q, sigma, steps));
  if (steps == 0) return 0;
  if (a->n > 0) {
    mt_acc_segment *last = &a->seg[a->n - 1];
    if (last->q == q && last->sigma == sigma) {
      MT_CHECK(steps <= MT_ACC_MAX_STEPS - last->steps, MT_ERR_ARG,
               "accountant: more than 2^53 steps at (q %g, sigma %g)", q, sigma);
      last->steps += steps;
      return 0;
    }
  }
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 8;
    mt_acc_segment *seg = NULL;
    MT_CALL(mt_calloc(&seg, (size_t)cap, sizeof(*seg), "privacy accountant history"));
    if (a->n) memcpy(seg, a->seg, (size_t)a->n * sizeof(*seg));
    mt_free(&a->seg);
    a->seg = seg;
    a->cap = cap;
  }
  a->seg[a->n++] = (mt_acc_segment){.q = q, .sigma = sigma, .steps = steps};
  return 0;
}

int64_t mt_acc_total_steps(const mt_accountant *a) {
  int64_t t = 0;
  for (int i = 0; a && i < a->n; i++) t += a->seg[i].steps;
  return t;
}

int mt_acc_rdp(const mt_accountant *a, const double *orders, int norders, double *rdp) {
  double buf[MT_ACC_NORDERS];
  MT_CHECK(a && rdp, MT_ERR_ARG, "accountant: none or no output");
  MT_CALL(resolve_orders(&orders, &norders, buf));
  for (int k = 0; k < norders; k++) rdp[k] = 0;
  for (int i = 0; i < a->n; i++)
    MT_CALL(rdp_add(a->seg[i].q, a->seg[i].sigma, a->seg[i].steps, orders, norders, rdp, 1));
  return 0;
}

int mt_acc_epsilon_after(const mt_accountant *a, double q, double sigma, int64_t more_steps,
                         const double *orders, int norders, double delta,
                         mt_acc_conversion conv, double *eps, double *best_order) {
  double buf[MT_ACC_NORDERS], rdp[MT_ACC_NORDERS], *r = rdp;
  MT_CHECK(a && eps, MT_ERR_ARG, "accountant: none or no output");
  MT_CALL(check_mechanism(q, sigma, more_steps));
  MT_CALL(resolve_orders(&orders, &norders, buf));
  if (norders > MT_ACC_NORDERS) MT_CALL(mt_calloc(&r, (size_t)norders, sizeof(double), "RDP"));
  int rc = mt_acc_rdp(a, orders, norders, r);
  if (!rc) rc = rdp_add(q, sigma, more_steps, orders, norders, r, 1);
  if (!rc) rc = mt_acc_rdp_to_eps(orders, r, norders, delta, conv, eps, best_order);
  if (r != rdp) mt_free(&r);
  MT_CALL(rc);
  return 0;
}

int mt_acc_epsilon(const mt_accountant *a, const double *orders, int norders, double delta,
                   mt_acc_conversion conv, double *eps, double *best_order) {
  MT_CALL(mt_acc_epsilon_after(a, 0, 0, 0, orders, norders, delta, conv, eps, best_order));
  return 0;
}

/* epsilon of one segment (q, sigma, steps) */
static int eps_of(double q, double sigma, int64_t steps, const double *orders, int norders,
                  double delta, mt_acc_conversion conv, double *eps) {
  mt_accountant none = {0};
  MT_CALL(mt_acc_epsilon_after(&none, q, sigma, steps, orders, norders, delta, conv, eps, NULL));
  return 0;
}

int mt_acc_noise_multiplier(double target_eps, double delta, double q, int64_t steps,
                            const double *orders, int norders, mt_acc_conversion conv,
                            double eps_tol, double *sigma) {
  MT_CHECK(sigma, MT_ERR_ARG, "accountant: no output");
  MT_CHECK(isfinite(target_eps) && target_eps > 0, MT_ERR_ARG,
           "accountant: target epsilon %g is not finite and > 0", target_eps);
  MT_CHECK(isfinite(eps_tol) && eps_tol > 0, MT_ERR_ARG,
           "accountant: epsilon tolerance %g is not finite and > 0", eps_tol);
  MT_CALL(check_mechanism(q, 0, steps));
  if (q == 0 || steps == 0) {
    *sigma = 0;
    return 0;
  }
  double lo = 0, hi = 10, eps_hi = INFINITY;
  while (eps_hi > target_eps) {
    hi *= 2;
    MT_CALL(eps_of(q, hi, steps, orders, norders, delta, conv, &eps_hi));
    /* as Opacus: past MAX_SIGMA is an error even if it reached the target */
    MT_CHECK(hi <= MT_ACC_MAX_SIGMA, MT_ERR_OPTION,
             "privacy budget epsilon %g (delta %g) cannot be reached in %lld steps at sampling "
             "rate %g: epsilon is still %g with noise multiplier %g",
             target_eps, delta, (long long)steps, q, eps_hi, hi);
  }
  /* eps is continuous and decreasing in sigma, so this ends; the cap only
   * guards against a bracket that cannot shrink any further */
  for (int it = 0; target_eps - eps_hi > eps_tol; it++) {
    MT_CHECK(it < 200 && lo < hi, MT_ERR_NUMERIC,
             "accountant: noise multiplier search for epsilon %g did not converge (sigma in "
             "[%.17g, %.17g], epsilon %g)", target_eps, lo, hi, eps_hi);
    double mid = 0.5 * (lo + hi), e;
    MT_CALL(eps_of(q, mid, steps, orders, norders, delta, conv, &e));
    if (e < target_eps)
      hi = mid, eps_hi = e;
    else
      lo = mid;
  }
  *sigma = hi;
  return 0;
}

/* ----------------------------------------------------------- checkpoint */

size_t mt_acc_pack_len(const mt_accountant *a) { return 2 + 3 * (size_t)(a ? a->n : 0); }

int mt_acc_pack(const mt_accountant *a, double *out, size_t len) {
  MT_CHECK(a && out, MT_ERR_ARG, "accountant: none or no output");
  MT_CHECK(len >= mt_acc_pack_len(a), MT_ERR_ARG, "accountant: %zu doubles for %zu", len,
           mt_acc_pack_len(a));
  out[0] = MT_ACC_PACK_VERSION;
  out[1] = a->n;
  for (int i = 0; i < a->n; i++) {
    out[2 + 3 * i] = a->seg[i].q;
    out[3 + 3 * i] = a->seg[i].sigma;
    out[4 + 3 * i] = (double)a->seg[i].steps;
  }
  return 0;
}

int mt_acc_unpack(mt_accountant *a, const double *in, size_t len) {
  MT_CHECK(a && in, MT_ERR_ARG, "accountant: none or no input");
  MT_CHECK(len >= 2 && in[0] == MT_ACC_PACK_VERSION, MT_ERR_DATA,
           "privacy accountant state: not version %d (%zu values)", MT_ACC_PACK_VERSION, len);
  double dn = in[1];
  MT_CHECK(dn >= 0 && dn <= 1e8 && floor(dn) == dn && len == 2 + 3 * (size_t)dn, MT_ERR_DATA,
           "privacy accountant state: %g segments in %zu values", dn, len);
  const double max_steps = (double)MT_ACC_MAX_STEPS;
  for (size_t i = 0; i < (size_t)dn; i++) {
    double q = in[2 + 3 * i], s = in[3 + 3 * i], st = in[4 + 3 * i];
    MT_CHECK(q >= 0 && q <= 1 && isfinite(s) && s >= 0 && st >= 1 && st <= max_steps
                 && floor(st) == st,
             MT_ERR_DATA, "privacy accountant state: segment %zu (q %g, sigma %g, steps %g)", i,
             q, s, st);
  }
  mt_accountant t = {0};
  if (dn > 0) {
    MT_CALL(mt_calloc(&t.seg, (size_t)dn, sizeof(*t.seg), "privacy accountant history"));
    t.n = t.cap = (int)dn;
  }
  for (int i = 0; i < t.n; i++)
    t.seg[i] = (mt_acc_segment){.q = in[2 + 3 * i], .sigma = in[3 + 3 * i],
                                .steps = (int64_t)in[4 + 3 * i]};
  mt_acc_free(a);
  *a = t;
  return 0;
}
