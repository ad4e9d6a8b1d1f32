/* Learning-rate schedules, evaluated in closed form from the step number so
 * a restart needs only the step. */
#include "optim/optim.h"

#include <math.h>

double mt_lr_at(const mt_lr_schedule *s, long t) {
  long w = s->warmup > 0 ? s->warmup : 0;
  long u = t >= w ? t - w : 0; /* steps since the end of warm-up */
  double lr = s->base;
  switch (s->kind) {
  case MT_LR_CONSTANT: break;
  case MT_LR_STEP: lr = s->base * pow(s->gamma, (double)(u / (s->step_size > 0 ? s->step_size : 1))); break;
  case MT_LR_COSINE: {
    long span = s->total - w;
    if (span < 1) span = 1;
    double f = u >= span ? 1.0 : (double)u / (double)span;
    lr = s->min + (s->base - s->min) * 0.5 * (1.0 + cos(M_PI * f));
    break;
  }
  }
  if (t < w) lr *= (double)(t + 1) / (double)w;
  return lr;
}
