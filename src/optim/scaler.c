/* Dynamic loss scaler: GradScaler's update rule with DeepSpeed's hysteresis
 * and a minimum scale (the rule is in optim.h; the PyTorch references are
 * written by validation/gen_refs_amp.py). */
#include "optim/optim.h"

#include <float.h>
#include <math.h>
#include <string.h>

mt_scaler_opts mt_scaler_defaults(void) {
  mt_scaler_opts o;
  memset(&o, 0, sizeof(o));
  o.init_scale = 65536.0;
  o.growth_factor = 2.0;
  o.backoff_factor = 0.5;
  o.growth_interval = 2000;
  o.hysteresis = 1;
  o.consecutive_hysteresis = 0;
  o.min_scale = 1.0;
  o.dynamic = 1;
  return o;
}

/* A positive number that is finite as an fp32 and not below its normals. */
static int fp32_positive(double x) { return x >= FLT_MIN && x <= FLT_MAX; }

int mt_scaler_check(const mt_scaler_opts *o) {
  MT_CHECK(o, MT_ERR_ARG, "mt_scaler_check: NULL options");
  MT_CHECK(fp32_positive(o->init_scale), MT_ERR_OPTION,
           "-loss_scale_init %g: must be a positive finite fp32 number", o->init_scale);
  if (!o->dynamic) return 0; /* a static scale uses nothing else */
  MT_CHECK(o->growth_factor > 1.0 && o->growth_factor <= FLT_MAX, MT_ERR_OPTION,
           "-loss_scale_growth_factor %g: must be > 1", o->growth_factor);
  MT_CHECK(o->backoff_factor > 0.0 && o->backoff_factor < 1.0, MT_ERR_OPTION,
           "-loss_scale_backoff_factor %g: must be in (0, 1)", o->backoff_factor);
  MT_CHECK(o->growth_interval >= 1, MT_ERR_OPTION,
           "-loss_scale_growth_interval %ld: must be >= 1", o->growth_interval);
  MT_CHECK(o->hysteresis >= 1, MT_ERR_OPTION, "-loss_scale_hysteresis %ld: must be >= 1",
           o->hysteresis);
  MT_CHECK(fp32_positive(o->min_scale) && (float)o->min_scale <= (float)o->init_scale,
           MT_ERR_OPTION, "-loss_scale_min %g: must be a positive fp32 number <= "
           "-loss_scale_init %g", o->min_scale, o->init_scale);
  return 0;
}

int mt_scaler_init(mt_scaler *s, const mt_scaler_opts *o) {
  MT_CHECK(s, MT_ERR_ARG, "mt_scaler_init: NULL scaler");
  const mt_scaler_opts def = mt_scaler_defaults();
  if (!o) o = &def;
  MT_CALL(mt_scaler_check(o));
  memset(s, 0, sizeof(*s));
  s->o = *o;
  s->scale = (float)o->init_scale;
  s->hysteresis_left = o->dynamic ? o->hysteresis : 1;
  s->ready = 1;
  return 0;
}

float mt_scaler_scale(const mt_scaler *s) { return s->scale; }

float mt_scaler_inv_scale(const mt_scaler *s) { return (float)(1.0 / (double)s->scale); }

int mt_scaler_update(mt_scaler *s, int found_inf, int *skip_step) {
  if (skip_step) *skip_step = found_inf ? 1 : 0;
  MT_CHECK(s && s->ready, MT_ERR_STATE, "mt_scaler_update: scaler not initialized");
  const mt_scaler_opts *o = &s->o;
  const long u = s->nupdates + 1;
  if (!o->dynamic) {
    s->nupdates = u;
    if (found_inf) s->nskipped++;
    return 0;
  }
  if (found_inf) {
    const float minf = (float)o->min_scale;
    if (s->hysteresis_left > 1) {
      s->hysteresis_left--;
    } else if (s->scale <= minf) {
      /* nothing changes: the caller stops here */
      return MT_ERR(MT_ERR_NUMERIC,
                    "gradients are inf/NaN at optimizer update %ld with the loss scale at its "
                    "minimum %g (-loss_scale_min); %ld of %ld updates skipped so far: the model "
                    "diverged or needs a wider precision (bf16 / fp32)",
                    u, (double)s->scale, s->nskipped + 1, u);
    } else {
      const float next = (float)((double)s->scale * o->backoff_factor);
      s->scale = next > minf ? next : minf;
      s->nbackoffs++;
    }
    s->growth_tracker = 0;
    s->nskipped++;
  } else {
    if (o->consecutive_hysteresis) s->hysteresis_left = o->hysteresis;
    /* >= rather than PyTorch's ==: the same for every state PyTorch can
     * reach, and it still grows after a restart with a smaller interval */
    if (s->growth_tracker + 1 >= o->growth_interval) {
      const float next = (float)((double)s->scale * o->growth_factor);
      if (isfinite(next)) s->scale = next; /* never grow to inf */
      s->growth_tracker = 0;
      s->hysteresis_left = o->hysteresis;
    } else {
      s->growth_tracker++;
    }
  }
  s->nupdates = u;
  return 0;
}

void mt_scaler_state_pack(const mt_scaler *s, double out[MT_SCALER_STATE_N]) {
  out[0] = (double)s->scale;
  out[1] = (double)s->growth_tracker;
  out[2] = (double)s->hysteresis_left;
  out[3] = (double)s->nupdates;
  out[4] = (double)s->nskipped;
  out[5] = (double)s->nbackoffs;
}

/* A whole number in [lo, 2^53]. */
static int whole(double x, double lo) { return x >= lo && x <= 9007199254740992.0 && x == floor(x); }

int mt_scaler_state_unpack(mt_scaler *s, const double in[MT_SCALER_STATE_N]) {
  MT_CHECK(s && s->ready, MT_ERR_STATE, "mt_scaler_state_unpack: scaler not initialized");
  MT_CHECK(in, MT_ERR_ARG, "mt_scaler_state_unpack: NULL state");
  const double sc = in[0];
  MT_CHECK(fp32_positive(sc) && (double)(float)sc == sc, MT_ERR_DATA,
           "loss scaler state: scale %g is not a positive fp32 number", sc);
  MT_CHECK(whole(in[1], 0) && whole(in[2], 1) && whole(in[3], 0) && whole(in[4], 0) &&
               whole(in[5], 0) && in[4] <= in[3] && in[5] <= in[3],
           MT_ERR_DATA,
           "loss scaler state: bad counters (growth_tracker %g, hysteresis_left %g, updates "
           "%g, skipped %g, back-offs %g)",
           in[1], in[2], in[3], in[4], in[5]);
  const mt_scaler_opts *o = &s->o;
  if (o->dynamic) {
    float scale = (float)sc;
    if (scale < (float)o->min_scale) scale = (float)o->min_scale;
    long gt = (long)in[1], hl = (long)in[2];
    if (gt > o->growth_interval - 1) gt = o->growth_interval - 1;
    if (hl > o->hysteresis) hl = o->hysteresis;
    s->scale = scale;
    s->growth_tracker = gt;
    s->hysteresis_left = hl;
  }
  s->nupdates = (long)in[3];
  s->nskipped = (long)in[4];
  s->nbackoffs = (long)in[5];
  return 0;
}
