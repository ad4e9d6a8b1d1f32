/* Unit tests of AdamW, the schedules beyond step/cosine and clipping by
 * value, against PyTorch references written by validation/gen_refs_optim.py
 * (validation/refs/o_*.txt):
 *  - mt_adamw_step over 12 steps against torch.optim.AdamW in six
 *    configurations (defaults, weight decay, amsgrad, weight decay skipped
 *    on the 1-d bias, a changing lr with a large eps, and all of those at
 *    once): parameters after every step and the final state, 1e-6;
 *  - mt_sgd_step with all_decay = 0 against SGD with a no-decay param group;
 *  - mt_lr_at against MultiStepLR, LinearLR, OneCycleLR, and
 *    mt_lr_plateau_step against ReduceLROnPlateau on scripted metrics
 *    (cooldown, min_lr, eps, NaN, mode max; a save/restore half way), 1e-9
 *    relative per step; warm-up combined with each kind; bad settings;
 *  - mt_clip_grad_value against clip_grad_value_, exactly (NaN, inf, -0);
 *  - the OpenMP paths (tensors above 256 Ki elements) against small ones.
 * Prints one line per check; exits non-zero when any check fails. */
#include "optim/optim.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT_TOL 1e-6
#define LR_TOL 1e-9
#define NSTEPS 12
#define OC 5
#define IC 7

/* ------------------------------------------------------------- helpers */

/* A (5,7) weight and a (5) bias in one flat buffer (offsets 0 and 48). */
static int make_table(mt_param_table *t) {
  const int64_t wshape[2] = {OC, IC}, bshape[1] = {OC};
  memset(t, 0, sizeof(*t));
  int rc = mt_param_table_add(t, "fc.weight", 2, wshape, 0);
  rc |= mt_param_table_add(t, "fc.bias", 1, bshape, 0);
  return rc || t->n != 2;
}

static void scatter(float *flat, const mt_param_table *t, const double *w, const double *b) {
  for (size_t i = 0; i < t->p[0].numel; i++) flat[t->p[0].offset + i] = (float)w[i];
  for (size_t i = 0; i < t->p[1].numel; i++) flat[t->p[1].offset + i] = (float)b[i];
}

/* Steps an optimizer through a reference file's gradients and lrs and
 * checks w and b after every step. step(s) runs optimizer step s. */
typedef struct {
  const char *what;
  mt_param_table t;
  float *params, *grads;
  tu_ref r;
} run_ctx;

typedef int (*step_fn)(run_ctx *c, int s, double lr, void *arg);

static void run_and_check(run_ctx *c, step_fn step, void *arg) {
  const tu_ref *r = &c->r;
  const tu_tensor *gw = tu_ref_get(r, "gw", NSTEPS * OC * IC);
  const tu_tensor *gb = tu_ref_get(r, "gb", NSTEPS * OC);
  const tu_tensor *lr = tu_ref_get(r, "lr", NSTEPS);
  const tu_tensor *rw = tu_ref_get(r, "w", NSTEPS * OC * IC);
  const tu_tensor *rb = tu_ref_get(r, "b", NSTEPS * OC);
  scatter(c->params, &c->t, tu_ref_get(r, "w0", OC * IC)->v, tu_ref_get(r, "b0", OC)->v);
  double err_w = 0, err_b = 0;
  int worst_w = 0, worst_b = 0, rc = 0;
  for (int s = 0; s < NSTEPS; s++) {
    scatter(c->grads, &c->t, gw->v + (size_t)s * OC * IC, gb->v + (size_t)s * OC);
    rc |= step(c, s, lr->v[s], arg);
    double e = tu_rel_err_fd(c->params + c->t.p[0].offset, rw->v + (size_t)s * OC * IC, OC * IC);
    if (!(e <= err_w)) err_w = e, worst_w = s;
    e = tu_rel_err_fd(c->params + c->t.p[1].offset, rb->v + (size_t)s * OC, OC);
    if (!(e <= err_b)) err_b = e, worst_b = s;
  }
  CHECK(rc == 0, "%s: every step returns 0", c->what);
  CHECK_ERR(err_w, OPT_TOL, "%s: weight after each of %d steps (worst step %d)", c->what,
            NSTEPS, worst_w + 1);
  CHECK_ERR(err_b, OPT_TOL, "%s: bias after each of %d steps (worst step %d)", c->what, NSTEPS,
            worst_b + 1);
}

static int ctx_open(run_ctx *c, const char *file, const char *what) {
  memset(c, 0, sizeof(*c));
  c->what = what;
  tu_ref_load(&c->r, file);
  int bad = make_table(&c->t);
  CHECK(!bad, "%s: parameter table of two tensors", what);
  if (bad) return 1;
  c->params = tu_xmalloc(c->t.total * sizeof(float));
  c->grads = tu_xmalloc(c->t.total * sizeof(float));
  memset(c->params, 0, c->t.total * sizeof(float));
  memset(c->grads, 0, c->t.total * sizeof(float));
  return 0;
}

static void ctx_close(run_ctx *c) {
  free(c->params), free(c->grads);
  mt_param_table_free(&c->t);
  tu_ref_free(&c->r);
}

/* ---------------------------------------------------------------- AdamW */

typedef struct {
  mt_adamw_hparams h;
  mt_adamw_state st;
  int all_decay;
} adamw_arg;

static int adamw_step(run_ctx *c, int s, double lr, void *arg) {
  (void)s;
  adamw_arg *a = arg;
  return mt_adamw_step(&c->t, c->params, c->grads, &a->st, &a->h, a->all_decay, lr);
}

/* the final state of one buffer, both tensors, against the reference */
static void check_state(run_ctx *c, const char *name, const float *buf) {
  char nw[64], nb[64];
  snprintf(nw, sizeof(nw), "%s_w", name);
  snprintf(nb, sizeof(nb), "%s_b", name);
  const tu_tensor *w = tu_ref_get(&c->r, nw, OC * IC), *b = tu_ref_get(&c->r, nb, OC);
  double e = fmax(tu_rel_err_fd(buf + c->t.p[0].offset, w->v, OC * IC),
                  tu_rel_err_fd(buf + c->t.p[1].offset, b->v, OC));
  CHECK_ERR(e, OPT_TOL, "%s: %s after %d steps", c->what, name, NSTEPS);
}

static void test_adamw(const char *name) {
  char file[64], what[96];
  snprintf(file, sizeof(file), "o_adamw_%s.txt", name);
  snprintf(what, sizeof(what), "adamw %s", name);
  run_ctx c;
  if (ctx_open(&c, file, what)) return;
  const double *hp = tu_ref_get(&c.r, "hparams", 6)->v;
  adamw_arg a = {.h = {.beta1 = hp[0], .beta2 = hp[1], .eps = hp[2], .weight_decay = hp[3],
                       .amsgrad = hp[4] != 0},
                 .all_decay = hp[5] == 0};
  int rc = mt_adamw_state_init(&a.st, c.t.total, a.h.amsgrad);
  CHECK(rc == 0 && a.st.step == 0, "%s: state of %zu floats, step 0", what, c.t.total);
  if (rc == 0) {
    run_and_check(&c, adamw_step, &a);
    CHECK(a.st.step == (long)tu_ref_scalar(&c.r, "step"), "%s: step count %ld", what,
          a.st.step);
    check_state(&c, "exp_avg", a.st.exp_avg);
    check_state(&c, "exp_avg_sq", a.st.exp_avg_sq);
    if (a.h.amsgrad) check_state(&c, "max_exp_avg_sq", a.st.max_exp_avg_sq);
  }
  mt_adamw_state_free(&a.st);
  ctx_close(&c);
}

/* Misuse is refused before anything changes. */
static void test_adamw_errors(void) {
  mt_param_table t;
  if (make_table(&t)) return;
  float *p = calloc(t.total, sizeof(float)), *g = calloc(t.total, sizeof(float));
  for (size_t i = 0; i < t.total; i++) p[i] = 1.0f, g[i] = 0.5f;
  mt_adamw_hparams h = mt_adamw_defaults();
  mt_adamw_state st = {0};
  int rc1 = mt_adamw_step(&t, p, g, &st, &h, 1, 1e-3); /* no buffers */
  mt_adamw_state_init(&st, t.total, 0);
  h.amsgrad = 1;
  int rc2 = mt_adamw_step(&t, p, g, &st, &h, 1, 1e-3); /* no max buffer */
  h = mt_adamw_defaults();
  h.beta2 = 1.0;
  int rc3 = mt_adamw_step(&t, p, g, &st, &h, 1, 1e-3);
  h = mt_adamw_defaults();
  int rc4 = mt_adamw_step(&t, p, g, &st, &h, 1, NAN);
  int same = 1;
  for (size_t i = 0; i < t.total; i++) same &= p[i] == 1.0f && st.exp_avg[i] == 0.0f;
  CHECK(rc1 == MT_ERR_ARG && rc2 == MT_ERR_ARG && rc3 == MT_ERR_OPTION && rc4 == MT_ERR_ARG &&
            same && st.step == 0,
        "adamw: refuses a missing state, amsgrad without its buffer, beta2 = 1, lr NaN "
        "(codes %d %d %d %d), changing nothing",
        rc1, rc2, rc3, rc4);
  mt_error_clear();
  h.beta1 = -0.1;
  int rc5 = mt_adamw_check(&h); /* before CHECK, which formats its message first */
  CHECK(rc5 == MT_ERR_OPTION && strstr(mt_error_message(), "-adam_beta1"),
        "adamw: beta1 < 0 names -adam_beta1 (\"%s\")", mt_error_message());
  mt_error_clear();
  mt_adamw_state_free(&st);
  mt_adamw_state_free(&st); /* twice is fine */
  free(p), free(g);
  mt_param_table_free(&t);
}

/* A tensor above the OpenMP threshold against the same numbers as 12 small
 * tensors (no padding between them, so the flat layouts are the same). */
static void test_adamw_large(int amsgrad) {
  const int64_t big[2] = {600, 512}, small[2] = {50, 512};
  mt_param_table tb = {0}, ts = {0};
  int rc = mt_param_table_add(&tb, "big", 2, big, 0);
  for (int i = 0; i < 12; i++) {
    char name[16];
    snprintf(name, sizeof(name), "s%d", i);
    rc |= mt_param_table_add(&ts, name, 2, small, 0);
  }
  const size_t n = tb.total;
  CHECK(rc == 0 && ts.total == n && n == 307200, "adamw large: %zu floats both ways", n);
  if (rc || ts.total != n) return;
  float *p1 = tu_xmalloc(n * sizeof(float)), *p2 = tu_xmalloc(n * sizeof(float));
  float *g = tu_xmalloc(n * sizeof(float));
  uint64_t seed = 42;
  tu_fill(p1, n, &seed, 1.0f);
  memcpy(p2, p1, n * sizeof(float));
  mt_adamw_hparams h = mt_adamw_defaults();
  h.amsgrad = amsgrad;
  mt_adamw_state s1, s2;
  rc = mt_adamw_state_init(&s1, n, amsgrad) | mt_adamw_state_init(&s2, n, amsgrad);
  for (int k = 0; k < 3 && !rc; k++) {
    tu_fill(g, n, &seed, k == 1 ? 0.1f : 1.0f);
    rc |= mt_adamw_step(&tb, p1, g, &s1, &h, 1, 0.01);
    rc |= mt_adamw_step(&ts, p2, g, &s2, &h, 1, 0.01);
  }
  double e = rc ? INFINITY : tu_rel_err_f(p1, p2, n);
  if (!rc) e = fmax(e, tu_rel_err_f(s1.exp_avg_sq, s2.exp_avg_sq, n));
  CHECK_ERR(e, OPT_TOL, "adamw large%s: one tensor of %zu (threads) == 12 small tensors",
            amsgrad ? " amsgrad" : "", n);
  mt_adamw_state_free(&s1), mt_adamw_state_free(&s2);
  free(p1), free(p2), free(g);
  mt_param_table_free(&tb), mt_param_table_free(&ts);
}

/* ------------------------------------------------------------------- SGD */

typedef struct {
  mt_sgd_hparams h;
  float *buf;
} sgd_arg;

static int sgd_step(run_ctx *c, int s, double lr, void *arg) {
  sgd_arg *a = arg;
  return mt_sgd_step(&c->t, c->params, c->grads, a->buf, s == 0, &a->h, 0, lr);
}

static void test_sgd_skip1d(void) {
  run_ctx c;
  if (ctx_open(&c, "o_sgd_skip1d.txt", "sgd nesterov wd, skip 1-d (all_decay=0)")) return;
  const double *hp = tu_ref_get(&c.r, "hparams", 4)->v;
  sgd_arg a = {.h = {.momentum = hp[0], .dampening = hp[1], .weight_decay = hp[2],
                     .nesterov = hp[3] != 0},
               .buf = tu_xmalloc(c.t.total * sizeof(float))};
  run_and_check(&c, sgd_step, &a);
  free(a.buf);
  ctx_close(&c);
}

/* ------------------------------------------------------------- schedules */

/* max over steps of |got - want| / |want| (exact match wanted where want = 0) */
static void check_lrs(const char *what, const mt_lr_schedule *s, const tu_tensor *want) {
  double err = 0;
  long worst = 0;
  for (long t = 0; t < want->n; t++) {
    double d = fabs(mt_lr_at(s, t) - want->v[t]) / fmax(fabs(want->v[t]), 1e-300);
    if (!(d <= err)) err = d, worst = t;
  }
  CHECK_ERR(err, LR_TOL, "%s: lr at steps 0..%lld (worst step %ld)", what,
            (long long)want->n - 1, worst);
}

static void test_closed_form(const tu_ref *r) {
  char name[48], what[160];
  mt_lr_schedule s;
  for (int i = 0; i < 2; i++) {
    snprintf(name, sizeof(name), "multistep%d_cfg", i);
    const double *c = tu_ref_get(r, name, 2)->v;
    snprintf(name, sizeof(name), "multistep%d_milestones", i);
    const tu_tensor *ms = tu_ref_get(r, name, -1);
    snprintf(name, sizeof(name), "multistep%d_lr", i);
    mt_lr_schedule_defaults(&s, MT_LR_MULTISTEP, c[0]);
    s.gamma = c[1];
    s.nmilestones = (int)ms->n;
    for (int k = 0; k < s.nmilestones; k++) s.milestones[k] = (long)ms->v[k];
    int rc = mt_lr_schedule_setup(&s);
    snprintf(what, sizeof(what), "MultiStepLR(lr=%g, %d milestones, gamma=%g)%s", c[0],
             s.nmilestones, c[1], rc ? " setup FAILED" : "");
    check_lrs(what, &s, tu_ref_get(r, name, -1));
  }
  for (int i = 0; i < 3; i++) {
    snprintf(name, sizeof(name), "linear%d_cfg", i);
    const double *c = tu_ref_get(r, name, 3)->v;
    snprintf(name, sizeof(name), "linear%d_lr", i);
    mt_lr_schedule_defaults(&s, MT_LR_LINEAR, c[0]);
    s.end_factor = c[1];
    s.total = (long)c[2];
    int rc = mt_lr_schedule_setup(&s);
    snprintf(what, sizeof(what), "LinearLR(lr=%g, end_factor=%g, total_iters=%ld)%s", c[0],
             c[1], s.total, rc ? " setup FAILED" : "");
    check_lrs(what, &s, tu_ref_get(r, name, -1));
  }
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof(name), "onecycle%d_cfg", i);
    const double *c = tu_ref_get(r, name, 5)->v;
    snprintf(name, sizeof(name), "onecycle%d_lr", i);
    mt_lr_schedule_defaults(&s, MT_LR_ONECYCLE, c[0]);
    s.total = (long)c[1];
    if (i > 0) s.pct_start = c[2], s.div_factor = c[3], s.final_div_factor = c[4];
    int rc = mt_lr_schedule_setup(&s);
    snprintf(what, sizeof(what),
             "OneCycleLR(max_lr=%g, total=%ld, pct_start=%g, div=%g, final_div=%g)%s", c[0],
             s.total, s.pct_start, s.div_factor, s.final_div_factor, rc ? " setup FAILED" : "");
    check_lrs(what, &s, tu_ref_get(r, name, (int64_t)c[1]));
  }
}

static void plateau_from_cfg(mt_lr_schedule *s, const double *c) {
  mt_lr_schedule_defaults(s, MT_LR_PLATEAU, c[0]);
  s->gamma = c[1];
  s->patience = (long)c[2];
  s->cooldown = (long)c[3];
  s->threshold = c[4];
  s->min = c[5];
  s->mode_max = c[6] != 0;
}

static void test_plateau(const tu_ref *r) {
  char name[48];
  for (int i = 0; i < 4; i++) {
    snprintf(name, sizeof(name), "plateau%d_cfg", i);
    const double *c = tu_ref_get(r, name, 7)->v;
    snprintf(name, sizeof(name), "plateau%d_metric", i);
    const tu_tensor *m = tu_ref_get(r, name, -1);
    snprintf(name, sizeof(name), "plateau%d_lr", i);
    const tu_tensor *lr = tu_ref_get(r, name, m->n + 1);
    snprintf(name, sizeof(name), "plateau%d_best", i);
    const tu_tensor *best = tu_ref_get(r, name, m->n);
    mt_lr_schedule s;
    plateau_from_cfg(&s, c);
    int rc = mt_lr_schedule_setup(&s), nred = 0, red;
    double err = fabs(mt_lr_at(&s, 1000) - lr->v[0]) / lr->v[0], err_best = 0;
    long worst = 0, half = (long)m->n / 2;
    for (long e = 0; e < m->n; e++) {
      if (e == half) { /* checkpoint and restart into a fresh schedule */
        double saved[MT_LR_STATE_N];
        mt_lr_state_pack(&s, saved);
        plateau_from_cfg(&s, c);
        rc |= mt_lr_schedule_setup(&s);
        rc |= mt_lr_state_unpack(&s, saved);
      }
      rc |= mt_lr_plateau_step(&s, m->v[e], &red);
      nred += red;
      double d = fabs(mt_lr_at(&s, 1000 + e) - lr->v[e + 1]) / lr->v[e + 1];
      if (!(d <= err)) err = d, worst = e + 1;
      double b = best->v[e];
      if (!(s.plateau.best == b || fabs(s.plateau.best - b) <= LR_TOL * fabs(b))) err_best = 1;
    }
    CHECK(rc == 0 && s.plateau.last_epoch == m->n, "plateau %d: %lld metrics accepted", i,
          (long long)m->n);
    CHECK_ERR(err, LR_TOL,
              "ReduceLROnPlateau(lr=%g, %s, factor=%g, patience=%g, cooldown=%g, threshold=%g, "
              "min_lr=%g): lr after each of %lld epochs, %d reductions, restored at epoch %ld "
              "(worst %ld)",
              c[0], c[6] != 0 ? "max" : "min", c[1], c[2], c[3], c[4], c[5], (long long)m->n,
              nred, half, worst);
    CHECK(err_best == 0, "plateau %d: best metric after every epoch", i);
  }
}

static void test_warmup_and_checks(void) {
  mt_lr_schedule s;
  double err = 0;
  /* multistep after a 4-step warm-up: milestones count from its end */
  mt_lr_schedule_defaults(&s, MT_LR_MULTISTEP, 0.1);
  s.gamma = 0.5, s.warmup = 4, s.nmilestones = 2, s.milestones[0] = 3, s.milestones[1] = 6;
  int rc = mt_lr_schedule_setup(&s);
  for (long t = 0; t < 20; t++) {
    long u = t < 4 ? 0 : t - 4;
    double want = 0.1 * pow(0.5, (u >= 3) + (u >= 6)) * (t < 4 ? (double)(t + 1) / 4.0 : 1.0);
    err = fmax(err, fabs(mt_lr_at(&s, t) - want) / want);
  }
  CHECK(rc == 0 && err <= LR_TOL, "multistep + warm-up 4: ramp, then decays at t = 7 and 10");
  /* linear after warm-up: the decay spans total - warmup */
  mt_lr_schedule_defaults(&s, MT_LR_LINEAR, 0.2);
  s.end_factor = 0.1, s.warmup = 5, s.total = 20;
  rc = mt_lr_schedule_setup(&s);
  err = 0;
  for (long t = 0; t < 25; t++) {
    double want = t < 5 ? 0.2 * (double)(t + 1) / 5.0
                        : 0.2 * (1.0 - 0.9 * fmin((double)(t - 5), 15.0) / 15.0);
    err = fmax(err, fabs(mt_lr_at(&s, t) - want) / want);
  }
  CHECK(rc == 0 && err <= LR_TOL, "linear + warm-up 5 over 20 steps: 0.04 .. 0.2, then to 0.02");
  /* plateau during warm-up: the ramp multiplies the current plateau lr */
  mt_lr_schedule_defaults(&s, MT_LR_PLATEAU, 0.1);
  s.warmup = 10, s.patience = 0, s.gamma = 0.5;
  rc = mt_lr_schedule_setup(&s);
  double before = mt_lr_at(&s, 1);
  rc |= mt_lr_plateau_step(&s, 1.0, NULL) | mt_lr_plateau_step(&s, 1.0, NULL);
  CHECK(rc == 0 && fabs(before - 0.02) < 1e-15 && fabs(mt_lr_at(&s, 1) - 0.01) < 1e-15 &&
            fabs(mt_lr_at(&s, 50) - 0.05) < 1e-15,
        "plateau + warm-up 10: step 1 gets 0.02, after a reduction 0.01; 0.05 after warm-up");

  /* settings refused by setup, with MT_ERR_OPTION */
  struct {
    mt_lr_kind kind;
    const char *why;
  } bad[] = {{MT_LR_ONECYCLE, "onecycle with warm-up"}, {MT_LR_ONECYCLE, "pct_start 1.5"},
             {MT_LR_LINEAR, "end_factor 1.5"},        {MT_LR_PLATEAU, "factor 1"},
             {MT_LR_MULTISTEP, "33 milestones"},      {MT_LR_STEP, "step_size 0"},
             {MT_LR_MULTISTEP, "milestone -1"}};
  for (int i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
    mt_lr_schedule_defaults(&s, bad[i].kind, 0.1);
    s.total = 100;
    if (i == 0) s.warmup = 5;
    if (i == 1) s.pct_start = 1.5;
    if (i == 2) s.end_factor = 1.5;
    if (i == 3) s.gamma = 1.0;
    if (i == 4) s.nmilestones = MT_LR_MAX_MILESTONES + 1;
    if (i == 5) s.step_size = 0;
    if (i == 6) s.nmilestones = 1, s.milestones[0] = -1;
    rc = mt_lr_schedule_setup(&s);
    CHECK(rc == MT_ERR_OPTION, "setup refuses %s: \"%s\"", bad[i].why, mt_error_message());
    mt_error_clear();
  }

  /* names, and the plateau calls refused out of place */
  int names_ok = 1;
  for (int k = 0; k < MT_LR_NKINDS; k++) {
    mt_lr_kind got;
    names_ok &= mt_lr_kind_parse(mt_lr_kind_name((mt_lr_kind)k), &got) == 0 && (int)got == k;
  }
  mt_lr_kind got;
  rc = mt_lr_kind_parse("cosin", &got);
  CHECK(names_ok && rc == MT_ERR_OPTION,
        "kind names round-trip; \"cosin\" is refused: \"%s\"", mt_error_message());
  mt_error_clear();
  mt_lr_schedule_defaults(&s, MT_LR_COSINE, 0.1);
  int rc_kind = mt_lr_plateau_step(&s, 1.0, NULL);
  mt_lr_schedule_defaults(&s, MT_LR_PLATEAU, 0.1);
  int rc_setup = mt_lr_plateau_step(&s, 1.0, NULL);
  CHECK(rc_kind == MT_ERR_ARG && rc_setup == MT_ERR_STATE && mt_lr_at(&s, 0) == 0.1,
        "plateau step: refused for cosine and before setup; lr before setup = base");
  mt_error_clear();
  rc = mt_lr_schedule_setup(&s);
  double st[MT_LR_STATE_N], bad_st[MT_LR_STATE_N];
  mt_lr_state_pack(&s, st);
  memcpy(bad_st, st, sizeof(st));
  bad_st[2] = 1.5;
  int rc_bad = mt_lr_state_unpack(&s, bad_st);
  bad_st[2] = 0, bad_st[0] = NAN;
  rc_bad |= mt_lr_state_unpack(&s, bad_st) << 8;
  CHECK(rc == 0 && rc_bad == (MT_ERR_DATA | MT_ERR_DATA << 8) && s.plateau.lr == 0.1 &&
            s.plateau.best == INFINITY,
        "state unpack refuses a fractional counter and a NaN lr, leaving the state alone");
  mt_error_clear();
}

static void test_schedules(void) {
  tu_ref r;
  tu_ref_load(&r, "o_schedules.txt");
  test_closed_form(&r);
  test_plateau(&r);
  tu_ref_free(&r);
  test_warmup_and_checks();
}

/* -------------------------------------------------------------- clipping */

/* b is a float32 value written with 9 digits: it is exact only once
 * rounded back to float. Equal, with NaN equal to NaN and 0 != -0. */
static int same_float(float a, double b) {
  const float f = (float)b;
  return isnan(f) ? isnan(a) : (a == f && !signbit(a) == !signbit(f));
}

static void test_clip_value(void) {
  tu_ref r;
  tu_ref_load(&r, "o_clip_value.txt");
  const tu_tensor *g = tu_ref_get(&r, "g", -1);
  const size_t n = (size_t)g->n;
  float *x = tu_xmalloc(n * sizeof(float));
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof(name), "clip%d", i);
    double clip = tu_ref_scalar(&r, name);
    snprintf(name, sizeof(name), "g%d", i);
    const tu_tensor *want = tu_ref_get(&r, name, g->n);
    for (size_t k = 0; k < n; k++) x[k] = (float)g->v[k];
    int rc = mt_clip_grad_value(x, n, clip);
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) bad += !same_float(x[k], want->v[k]);
    CHECK(rc == 0 && bad == 0,
          "clip_grad_value %g: %zu values equal clip_grad_value_'s exactly (NaN, inf, -0 "
          "included); %zu differ",
          clip, n, bad);
  }
  x[0] = 5.0f;
  int rc0 = mt_clip_grad_value(x, n, 0.0), rcn = mt_clip_grad_value(x, n, NAN);
  CHECK(rc0 == MT_ERR_ARG && rcn == MT_ERR_ARG && x[0] == 5.0f,
        "clip_grad_value refuses 0 and NaN, leaving g alone");
  mt_error_clear();
  free(x);
  tu_ref_free(&r);

  /* the threaded path: 300,000 values against a plain loop */
  const size_t big = 300000;
  float *y = tu_xmalloc(big * sizeof(float)), *z = tu_xmalloc(big * sizeof(float));
  uint64_t seed = 7;
  tu_fill(y, big, &seed, 2.0f);
  for (size_t k = 0; k < big; k++) z[k] = y[k] > 0.75f ? 0.75f : (y[k] < -0.75f ? -0.75f : y[k]);
  int rc = mt_clip_grad_value(y, big, 0.75);
  CHECK(rc == 0 && memcmp(y, z, big * sizeof(float)) == 0,
        "clip_grad_value over %zu values (threads) equals a plain loop", big);
  free(y), free(z);
}

int main(void) {
  const char *configs[] = {"default", "wd", "amsgrad", "skip1d", "lr_eps", "amsgrad_skip1d_lr"};
  for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) test_adamw(configs[i]);
  test_adamw_errors();
  test_adamw_large(0);
  test_adamw_large(1);
  test_sgd_skip1d();
  test_schedules();
  test_clip_value();
  return tu_finish("test_optim2");
}
