/* Optimizers, learning-rate schedules and gradient clipping on flat buffers. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include "mpitrain/mpitrain.h"

typedef struct {
  double momentum, dampening, weight_decay;
  int nesterov;
} mt_sgd_hparams;

/* One step of torch.optim.SGD on the whole flat buffer, PyTorch's rule:
 *   g = grad + wd * p                    (wd only where t->p[i].decay or all_decay)
 *   buf = g on the first step, else momentum * buf + (1 - dampening) * g
 *   g = g + momentum * buf if nesterov, else buf
 *   p -= lr * g
 * buf may be NULL when momentum == 0. */
int mt_sgd_step(const mt_param_table *t, float *params, const float *grads, float *buf,
                int first_step, const mt_sgd_hparams *h, int all_decay, double lr);

typedef enum { MT_LR_CONSTANT, MT_LR_STEP, MT_LR_COSINE } mt_lr_kind;

typedef struct {
  mt_lr_kind kind;
  double base, gamma, min;
  long step_size, warmup, total;
} mt_lr_schedule;

/* Learning rate used by optimizer step t (0-based). With warmup W, the
 * schedule runs on u = max(t - W, 0) and is multiplied by (t + 1) / W while
 * t < W. step: base * gamma^floor(u / step_size). cosine: anneals from base
 * to min over S = total - W steps, min + (base - min)(1 + cos(pi u / S)) / 2,
 * and stays at min after S (PyTorch's CosineAnnealingLR would rise again). */
double mt_lr_at(const mt_lr_schedule *s, long t);

/* Global L2 norm of n floats (accumulated in double). */
double mt_l2_norm(const float *g, size_t n);
/* torch.nn.utils.clip_grad_norm_: scales g by max / (norm + 1e-6) when that
 * is below 1; returns the norm before clipping. */
double mt_clip_grad_norm(float *g, size_t n, double max_norm);

#endif
