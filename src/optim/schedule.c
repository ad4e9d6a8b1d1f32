/* Learning-rate schedules. All but plateau are evaluated in closed form from
 * the step number, so a restart needs only the step; plateau keeps a small
 * state that a checkpoint saves (mt_lr_state_pack). */
#include "optim/optim.h"

#include <math.h>
#include <string.h>

static const char *kind_names_[] = {"constant", "step",     "cosine", "multistep",
                                    "linear",   "onecycle", "plateau"};
_Static_assert(sizeof(kind_names_) / sizeof(kind_names_[0]) == MT_LR_NKINDS,
               "schedule names out of step with mt_lr_kind");

const char *mt_lr_kind_name(mt_lr_kind k) {
  return ((int)k >= 0 && k < MT_LR_NKINDS) ? kind_names_[k] : "?";
}

int mt_lr_kind_parse(const char *name, mt_lr_kind *k) {
  for (int i = 0; i < MT_LR_NKINDS; i++)
    if (name && !strcmp(name, kind_names_[i])) {
      *k = (mt_lr_kind)i;
      return 0;
    }
  return MT_ERR(MT_ERR_OPTION,
                "-lr_schedule %s: unknown; choose constant, step, cosine, multistep, linear, "
                "onecycle or plateau",
                name ? name : "(null)");
}

void mt_lr_schedule_defaults(mt_lr_schedule *s, mt_lr_kind kind, double base) {
  memset(s, 0, sizeof(*s));
  s->kind = kind;
  s->base = base;
  s->gamma = 0.1;
  s->step_size = 1;
  s->end_factor = 0.0;
  s->pct_start = 0.3;
  s->div_factor = 25.0;
  s->final_div_factor = 1e4;
  s->threshold = 1e-4;
  s->patience = 10;
}

static void plateau_reset(mt_lr_schedule *s) {
  mt_lr_plateau_state *p = &s->plateau;
  p->lr = s->base;
  p->best = s->mode_max ? -INFINITY : INFINITY;
  p->num_bad_epochs = 0;
  p->cooldown_counter = 0;
  p->last_epoch = 0;
  p->ready = 1;
}

int mt_lr_schedule_setup(mt_lr_schedule *s) {
  const char *name = mt_lr_kind_name(s->kind);
  MT_CHECK((int)s->kind >= 0 && s->kind < MT_LR_NKINDS, MT_ERR_OPTION,
           "unknown learning-rate schedule kind %d", (int)s->kind);
  MT_CHECK(isfinite(s->base) && s->base >= 0.0, MT_ERR_OPTION,
           "lr schedule %s: learning rate %g must be >= 0", name, s->base);
  MT_CHECK(s->warmup >= 0, MT_ERR_OPTION, "lr schedule %s: warm-up of %ld steps", name,
           s->warmup);
  switch (s->kind) {
  case MT_LR_CONSTANT: break;
  case MT_LR_STEP:
    MT_CHECK(s->step_size >= 1, MT_ERR_OPTION, "lr schedule step: step_size %ld must be >= 1",
             s->step_size);
    MT_CHECK(s->gamma > 0.0 && isfinite(s->gamma), MT_ERR_OPTION,
             "lr schedule step: gamma %g must be > 0", s->gamma);
    break;
  case MT_LR_MULTISTEP:
    MT_CHECK(s->nmilestones >= 0 && s->nmilestones <= MT_LR_MAX_MILESTONES, MT_ERR_OPTION,
             "lr schedule multistep: %d milestones (at most %d)", s->nmilestones,
             MT_LR_MAX_MILESTONES);
    for (int i = 0; i < s->nmilestones; i++)
      MT_CHECK(s->milestones[i] >= 0, MT_ERR_OPTION,
               "lr schedule multistep: milestone %ld must be >= 0", s->milestones[i]);
    MT_CHECK(s->gamma > 0.0 && isfinite(s->gamma), MT_ERR_OPTION,
             "lr schedule multistep: gamma %g must be > 0", s->gamma);
    break;
  case MT_LR_COSINE:
    MT_CHECK(isfinite(s->min) && s->min >= 0.0, MT_ERR_OPTION,
             "lr schedule cosine: min %g must be >= 0", s->min);
    break;
  case MT_LR_LINEAR:
    MT_CHECK(s->end_factor >= 0.0 && s->end_factor <= 1.0, MT_ERR_OPTION,
             "lr schedule linear: end factor %g must be in [0, 1]", s->end_factor);
    MT_CHECK(s->total >= 1, MT_ERR_OPTION, "lr schedule linear: %ld steps in the run", s->total);
    break;
  case MT_LR_ONECYCLE:
    MT_CHECK(s->warmup == 0, MT_ERR_OPTION,
             "lr schedule onecycle: no separate warm-up (its first phase is one); set "
             "pct_start instead of %ld warm-up steps",
             s->warmup);
    MT_CHECK(s->total >= 1, MT_ERR_OPTION, "lr schedule onecycle: %ld steps in the run",
             s->total);
    MT_CHECK(s->pct_start >= 0.0 && s->pct_start <= 1.0, MT_ERR_OPTION,
             "lr schedule onecycle: pct_start %g must be in [0, 1]", s->pct_start);
    MT_CHECK(s->div_factor > 0.0 && isfinite(s->div_factor), MT_ERR_OPTION,
             "lr schedule onecycle: div_factor %g must be > 0", s->div_factor);
    MT_CHECK(s->final_div_factor > 0.0 && isfinite(s->final_div_factor), MT_ERR_OPTION,
             "lr schedule onecycle: final_div_factor %g must be > 0", s->final_div_factor);
    break;
  case MT_LR_PLATEAU:
    MT_CHECK(s->gamma > 0.0 && s->gamma < 1.0, MT_ERR_OPTION,
             "lr schedule plateau: factor %g must be in (0, 1)", s->gamma);
    MT_CHECK(s->patience >= 0 && s->cooldown >= 0, MT_ERR_OPTION,
             "lr schedule plateau: patience %ld and cooldown %ld must be >= 0", s->patience,
             s->cooldown);
    MT_CHECK(s->threshold >= 0.0 && isfinite(s->threshold), MT_ERR_OPTION,
             "lr schedule plateau: threshold %g must be >= 0", s->threshold);
    MT_CHECK(isfinite(s->min) && s->min >= 0.0, MT_ERR_OPTION,
             "lr schedule plateau: min lr %g must be >= 0", s->min);
    break;
  case MT_LR_NKINDS: break;
  }
  plateau_reset(s);
  return 0;
}

/* OneCycleLR's _annealing_cos, term for term. */
static double anneal_cos(double start, double end, double pct) {
  double cos_out = cos(M_PI * pct) + 1.0;
  return end + (start - end) / 2.0 * cos_out;
}

/* OneCycleLR.get_lr with three_phase = False: phase one ends at step
 * pct_start * total - 1 (a real number), phase two at total - 1. */
static double onecycle_at(const mt_lr_schedule *s, long t) {
  const double max_lr = s->base, initial = max_lr / s->div_factor;
  const double final = initial / s->final_div_factor;
  const double end1 = s->pct_start * (double)s->total - 1.0, end2 = (double)s->total - 1.0;
  const double x = (double)t;
  double start_lr, end_lr, pct;
  if (x <= end1) {
    start_lr = initial, end_lr = max_lr;
    pct = end1 > 0.0 ? x / end1 : 1.0; /* PyTorch divides by zero there */
  } else {
    start_lr = max_lr, end_lr = final;
    pct = end2 > end1 ? (x - end1) / (end2 - end1) : 1.0;
  }
  if (pct > 1.0) pct = 1.0; /* past the run: hold the final lr */
  return anneal_cos(start_lr, end_lr, pct);
}

double mt_lr_at(const mt_lr_schedule *s, long t) {
  long w = s->warmup > 0 ? s->warmup : 0;
  long u = t >= w ? t - w : 0; /* steps since the end of warm-up */
  long span = s->total - w;    /* cosine and linear run over the rest */
  if (span < 1) span = 1;
  double lr = s->base;
  switch (s->kind) {
  case MT_LR_CONSTANT: break;
  case MT_LR_STEP:
    lr = s->base * pow(s->gamma, (double)(u / (s->step_size > 0 ? s->step_size : 1)));
    break;
  case MT_LR_COSINE: {
    double f = u >= span ? 1.0 : (double)u / (double)span;
    lr = s->min + (s->base - s->min) * 0.5 * (1.0 + cos(M_PI * f));
    break;
  }
  case MT_LR_MULTISTEP: {
    int k = 0, n = s->nmilestones < MT_LR_MAX_MILESTONES ? s->nmilestones : MT_LR_MAX_MILESTONES;
    for (int i = 0; i < n; i++) k += s->milestones[i] <= u;
    lr = s->base * pow(s->gamma, (double)k);
    break;
  }
  case MT_LR_LINEAR: {
    double f = u >= span ? 1.0 : (double)u / (double)span;
    lr = s->base * (1.0 + (s->end_factor - 1.0) * f);
    break;
  }
  case MT_LR_ONECYCLE: return onecycle_at(s, t); /* no warm-up ramp (setup checks) */
  case MT_LR_PLATEAU: lr = s->plateau.ready ? s->plateau.lr : s->base; break;
  case MT_LR_NKINDS: break;
  }
  if (t < w) lr *= (double)(t + 1) / (double)w;
  return lr;
}

/* ReduceLROnPlateau.is_better, threshold_mode 'rel'. */
static int plateau_better(const mt_lr_schedule *s, double a, double best) {
  return s->mode_max ? a > best * (1.0 + s->threshold) : a < best * (1.0 - s->threshold);
}

int mt_lr_plateau_step(mt_lr_schedule *s, double metric, int *reduced) {
  if (reduced) *reduced = 0;
  MT_CHECK(s->kind == MT_LR_PLATEAU, MT_ERR_ARG, "a metric for the %s schedule",
           mt_lr_kind_name(s->kind));
  mt_lr_plateau_state *p = &s->plateau;
  MT_CHECK(p->ready, MT_ERR_STATE, "plateau schedule used before mt_lr_schedule_setup");
  p->last_epoch++;
  if (plateau_better(s, metric, p->best)) {
    p->best = metric;
    p->num_bad_epochs = 0;
  } else {
    p->num_bad_epochs++;
  }
  if (p->cooldown_counter > 0) {
    p->cooldown_counter--;
    p->num_bad_epochs = 0; /* bad epochs in cooldown do not count */
  }
  if (p->num_bad_epochs > s->patience) {
    double old_lr = p->lr, new_lr = fmax(old_lr * s->gamma, s->min);
    if (old_lr - new_lr > MT_LR_PLATEAU_EPS) {
      p->lr = new_lr;
      if (reduced) *reduced = 1;
    }
    p->cooldown_counter = s->cooldown;
    p->num_bad_epochs = 0;
  }
  return 0;
}

void mt_lr_state_pack(const mt_lr_schedule *s, double out[MT_LR_STATE_N]) {
  const mt_lr_plateau_state *p = &s->plateau;
  out[0] = p->lr;
  out[1] = p->best;
  out[2] = (double)p->num_bad_epochs;
  out[3] = (double)p->cooldown_counter;
  out[4] = (double)p->last_epoch;
  out[5] = (double)p->ready;
}

/* a count that pack can have written: a whole number in [0, 2^53] */
static int is_count(double x) { return x >= 0.0 && x <= 9007199254740992.0 && x == floor(x); }

int mt_lr_state_unpack(mt_lr_schedule *s, const double in[MT_LR_STATE_N]) {
  MT_CHECK(isfinite(in[0]) && in[0] >= 0.0, MT_ERR_DATA, "lr schedule state: lr %g", in[0]);
  MT_CHECK(!isnan(in[1]), MT_ERR_DATA, "lr schedule state: best metric is NaN");
  MT_CHECK(is_count(in[2]) && is_count(in[3]) && is_count(in[4]), MT_ERR_DATA,
           "lr schedule state: counters %g %g %g are not counts", in[2], in[3], in[4]);
  MT_CHECK(in[5] == 0.0 || in[5] == 1.0, MT_ERR_DATA, "lr schedule state: ready flag %g",
           in[5]);
  mt_lr_plateau_state *p = &s->plateau;
  p->lr = in[0];
  p->best = in[1];
  p->num_bad_epochs = (long)in[2];
  p->cooldown_counter = (long)in[3];
  p->last_epoch = (long)in[4];
  p->ready = (int)in[5];
  return 0;
}
