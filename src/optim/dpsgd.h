/* DP-SGD building blocks (Abadi et al. 2016, "Deep Learning with
 * Differential Privacy"; Opacus's semantics): exact per-sample gradient
 * clipping, the Gaussian noise of a step, Poisson sampling of a step's
 * members. The trainer's use of them is src/trainer/dp.c.
 *
 * Per-sample gradients are model-agnostic and exact: each sample runs its
 * own forward and backward as a batch of one, into a scratch buffer that is
 * zeroed first, so any model that supports batches works unchanged. That
 * costs one small (GEMV-shaped) pass per sample instead of one batched
 * pass: it is slow (bench/README.md), not an approximation. A model that
 * finds its per-sample norms itself (mt_model_ops.backward_clipped: the mlp
 * and the cnn) clips in batched passes instead (mt_dp_clip_batched).
 * Everything is a pure function of its inputs. */
#ifndef MT_DPSGD_H
#define MT_DPSGD_H

#include "core/core.h"
#include "mpitrain/mpitrain.h"

#include <stddef.h>
#include <stdint.h>

/* Random-key purposes (mt_key) of the DP streams. */
#define MT_PURPOSE_DP_SAMPLE 21
#define MT_PURPOSE_DP_NOISE 22

/* Added to a per-sample norm before the clip factor C / (norm + eps), as in
 * Opacus. */
#define MT_DP_NORM_EPS 1e-6

/* For each of the b->n samples of b: scratch = the gradient of that
 * sample's loss alone (one forward and backward of a batch of 1, scratch
 * zeroed first), then sum += min(1, max_norm / (||scratch||_2 + 1e-6)) *
 * scratch, the norm taken over the whole flat buffer (all parameters).
 * st's sums (loss, correct) accumulate over the samples and its per-sample
 * outputs, if asked for, are filled row by row. *nclipped counts the
 * samples whose norm exceeded max_norm (may be NULL). scratch and sum hold
 * m->params.total floats. No allocation. */
int mt_dp_clip_accumulate(mt_model *m, const float *params, const mt_batch *b, double max_norm,
                          float *scratch, float *sum, mt_batch_stats *st, int64_t *nclipped);

/* The same sum for a model with mt_model_ops.backward_clipped (Opacus's
 * ghost clipping: the per-sample norms from the layers' inputs and output
 * gradients, then one batched backward of the scaled output gradients):
 * batched forwards and backwards of up to m->max_batch samples instead of
 * one per sample. norms holds m->max_batch doubles (each piece's ||g_i||).
 * Equal to mt_dp_clip_accumulate up to float rounding; MT_ERR_ARG for a
 * model without the op. */
int mt_dp_clip_batched(mt_model *m, const float *params, const mt_batch *b, double max_norm,
                       double *norms, float *sum, mt_batch_stats *st, int64_t *nclipped);

/* For the B rows of a linear layer's output gradients dout (width n) and
 * inputs in (width k): norms[i] += ||dout_i||^2 (||in_i||^2 + 1), the
 * squared norm of sample i's gradient of the layer's weight and bias (the
 * outer product dout_i in_i^T, and dout_i), without making it. */
static inline void mt_dp_linear_norms2(double *norms, const float *dout, int n, const float *in,
                                       int k, int B) {
  for (int i = 0; i < B; i++) {
    const float *d = dout + (size_t)i * n, *a = in + (size_t)i * k;
    double dd = 0, aa = 0;
#pragma omp simd reduction(+ : dd)
    for (int j = 0; j < n; j++) dd += (double)d[j] * (double)d[j];
#pragma omp simd reduction(+ : aa)
    for (int j = 0; j < k; j++) aa += (double)a[j] * (double)a[j];
    norms[i] += dd * (aa + 1.0);
  }
}

/* g[i] += std * z_i with z_i ~ N(0, 1) from the counter-based stream key:
 * pairs (2j, 2j+1) take the two Box-Muller values of the uniforms drawn at
 * counters 2j and 2j+1, so z_i depends on (key, i) only (not on n, the
 * threads or the rank). threads > 1 splits the loop. std == 0: no-op. */
void mt_dp_add_noise(float *g, size_t n, double std, uint64_t key, int threads);

/* The key of the Poisson draws of global step `step` of `epoch`. */
static inline uint64_t mt_dp_step_key(uint64_t seed, int epoch, int64_t step) {
  return mt_key(seed, MT_PURPOSE_DP_SAMPLE, ((uint64_t)(uint32_t)epoch << 32) ^ (uint64_t)step);
}

/* Whether sample i is a member of the step whose key is step_key: a draw
 * uniform in [0, 1) (53 bits) below q. Every sample joins every step
 * independently with probability q. */
int mt_dp_poisson_member(uint64_t step_key, int64_t i, double q);

/* -dp_delta's default: 1/n rounded down to a power of ten (n = 60000 gives
 * 1e-5), as commonly used (delta well below 1/n). */
double mt_dp_default_delta(int64_t n);

#endif
