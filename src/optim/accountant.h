/* Privacy accountant of DP-SGD: Rényi differential privacy (RDP) of the
 * sampled Gaussian mechanism, composed over the steps of a run and turned
 * into an (epsilon, delta) guarantee.
 *
 * One step of DP-SGD is the sampled Gaussian mechanism: every sample enters
 * the batch independently with probability q (Poisson sampling), the summed
 * clipped gradients get Gaussian noise of standard deviation sigma times the
 * clipping norm (sigma is the noise multiplier). Its RDP at order alpha > 1
 * is log(A_alpha) / (alpha - 1) with A_alpha the alpha-th moment of
 * (1 - q) + q exp((2z - 1) / (2 sigma^2)), z ~ N(0, sigma^2) (Mironov,
 * Talwar, Zhang 2019, "Rényi Differential Privacy of the Sampled Gaussian
 * Mechanism", section 3.3), computed as TF-Privacy's rdp_accountant and
 * Opacus's accountants/analysis/rdp.py do:
 *  - integer alpha: the binomial expansion, summed in log space;
 *  - fractional alpha: the two convergent series split at
 *    z0 = sigma^2 log(1/q - 1) + 1/2, summed until a term is below e^-30;
 *  - q = 0: 0; sigma = 0 (q > 0): +inf (also below 1e-50, where it is
 *    beyond 1e99 anyway); q = 1: alpha / (2 sigma^2).
 * RDP composes by addition: a run is a history of (q, sigma, steps)
 * segments, and its RDP at each order is the sum of steps * RDP(q, sigma).
 *
 * The orders are Opacus's by default (MT_ACC_NORDERS of them):
 * 1.1, 1.2, ..., 10.9 (1 + x/10 for x = 1..99) and 12, 13, ..., 63.
 * Every function that takes (orders, norders) uses those when orders is
 * NULL; given orders must be finite, > 1 and <= MT_ACC_MAX_ORDER (the cost of
 * one order grows with it).
 *
 * Everything is in double precision and is a pure function of its inputs:
 * every rank computes the same numbers with no communication. */
#ifndef MT_ACCOUNTANT_H
#define MT_ACCOUNTANT_H

#include "mpitrain/mpitrain.h"

#include <stddef.h>
#include <stdint.h>

#define MT_ACC_NORDERS 151
#define MT_ACC_MAX_ORDER 1e5
/* Opacus's get_noise_multiplier tolerance on epsilon. */
#define MT_ACC_EPS_TOL 0.01
/* Largest noise multiplier the solver tries before declaring the target
 * unreachable (Opacus's MAX_SIGMA). */
#define MT_ACC_MAX_SIGMA 1e6
/* Steps of one segment are at most 2^53, so a packed double holds them
 * exactly. */
#define MT_ACC_MAX_STEPS ((int64_t)1 << 53)

/* RDP -> (epsilon, delta) conversions, at each order, minimised over the
 * orders (both are upper bounds, so the smallest is a valid epsilon):
 *  improved  eps = rdp - (log(delta) + log(alpha)) / (alpha - 1)
 *                      + log((alpha - 1) / alpha)
 *            (Balle et al. 2020, "Hypothesis testing interpretations and
 *            Rényi differential privacy", theorem 21; what Opacus >= 1.0 and
 *            Google's dp_accounting use)
 *  classic   eps = rdp - log(delta) / (alpha - 1)
 *            (Mironov 2017, proposition 3; TF-Privacy before 2020)
 * Both then apply dp_accounting's two refinements, which only make epsilon
 * smaller where it is already near 0: an order whose rdp r has
 * delta^2 > 1 - exp(-r) gives eps = 0 (delta <= sqrt(1 - exp(-KL)) and
 * KL <= r), and a negative bound is reported as 0. */
typedef enum { MT_ACC_IMPROVED = 0, MT_ACC_CLASSIC = 1 } mt_acc_conversion;

/* Opacus's default orders into out (MT_ACC_NORDERS values, ascending). */
void mt_acc_default_orders(double out[MT_ACC_NORDERS]);

/* rdp[k] = steps * RDP of one sampled Gaussian step (q, sigma) at order
 * orders[k]. q in [0, 1], sigma >= 0, both finite; steps >= 0. Where the
 * fractional series does not converge (q near 1/2 and sigma above ~1e3),
 * the RDP at ceil(order) is used, a valid and slightly larger bound.
 * MT_ERR_ARG for bad arguments, MT_ERR_NUMERIC if a result is NaN. */
int mt_acc_rdp_sgm(double q, double sigma, int64_t steps, const double *orders, int norders,
                   double *rdp);

/* The smallest epsilon over the orders for rdp[k] at orders[k] and
 * 0 < delta < 1, with the order that gives it (best_order may be NULL).
 * rdp may hold +inf (eps is then +inf where every order is +inf, and
 * best_order the first order); NaN rdp is MT_ERR_NUMERIC, a negative one
 * MT_ERR_ARG. */
int mt_acc_rdp_to_eps(const double *orders, const double *rdp, int norders, double delta,
                      mt_acc_conversion conv, double *eps, double *best_order);

/* ------------------------------------------------------------ accountant */

typedef struct {
  double q;      /* sampling rate, in [0, 1]                                */
  double sigma;  /* noise multiplier, >= 0                                  */
  int64_t steps; /* steps taken with these (q, sigma), > 0                  */
} mt_acc_segment;

/* The history of a run: segments in the order they were taken. Zero-fill
 * it ({0}) to start empty; free with mt_acc_free (accepts a zeroed or freed
 * one). */
typedef struct {
  mt_acc_segment *seg;
  int n, cap;
} mt_accountant;

void mt_acc_free(mt_accountant *a);

/* Records steps more steps at (q, sigma): added to the last segment when q
 * and sigma are the same (as Opacus's RDPAccountant.step), else a new
 * segment. steps == 0 records nothing. MT_ERR_ARG for bad values (a is then
 * unchanged), MT_ERR_MEM. */
int mt_acc_step(mt_accountant *a, double q, double sigma, int64_t steps);

/* Steps recorded over all segments. */
int64_t mt_acc_total_steps(const mt_accountant *a);

/* rdp[k] = RDP of the whole history at orders[k] (the sum over segments). */
int mt_acc_rdp(const mt_accountant *a, const double *orders, int norders, double *rdp);

/* epsilon spent so far for delta, and the best order (may be NULL). An empty
 * history gives 0. */
int mt_acc_epsilon(const mt_accountant *a, const double *orders, int norders, double delta,
                   mt_acc_conversion conv, double *eps, double *best_order);

/* epsilon the run would have spent after more_steps further steps at
 * (q, sigma), a left unchanged: training stops before a step for which
 * this, with more_steps = 1, exceeds the budget. */
int mt_acc_epsilon_after(const mt_accountant *a, double q, double sigma, int64_t more_steps,
                         const double *orders, int norders, double delta,
                         mt_acc_conversion conv, double *eps, double *best_order);

/* The noise multiplier that keeps a run of steps steps at rate q within
 * (target_eps, delta), by Opacus's get_noise_multiplier: sigma_high is
 * doubled from 20 until epsilon <= target_eps, then [0, sigma_high] is
 * bisected until target_eps - eps_tol <= epsilon(sigma_high) <= target_eps;
 * sigma_high is returned (epsilon never exceeds the target). q = 0 or
 * steps = 0 spends nothing: *sigma = 0. MT_ERR_OPTION, with a message giving
 * the epsilon reached, when sigma_high must pass MT_ACC_MAX_SIGMA (as in
 * Opacus; with the default orders and delta 1e-5, targets below about 0.1
 * are out of reach); MT_ERR_ARG for bad arguments (target_eps and
 * eps_tol > 0). */
int mt_acc_noise_multiplier(double target_eps, double delta, double q, int64_t steps,
                            const double *orders, int norders, mt_acc_conversion conv,
                            double eps_tol, double *sigma);

/* ------------------------------------------------------------ checkpoint */

/* The history as doubles, for one checkpoint attribute:
 *   MT_ACC_PACK_VERSION, n, then q, sigma, steps of each segment
 * (steps are exact in a double up to 2^53). mt_acc_pack_len gives the
 * length; pack fails with MT_ERR_ARG when len is too small. unpack replaces
 * a's history (a may hold one already) after checking every value
 * (MT_ERR_DATA when they cannot come from pack; a is then unchanged), so a
 * restarted run goes on spending the same budget. */
#define MT_ACC_PACK_VERSION 1
size_t mt_acc_pack_len(const mt_accountant *a);
int mt_acc_pack(const mt_accountant *a, double *out, size_t len);
int mt_acc_unpack(mt_accountant *a, const double *in, size_t len);

#endif
