/* Optimizers, learning-rate schedules and gradient clipping on flat buffers.
 *
 * Every buffer here has the layout of the parameter table (one flat float
 * buffer, or double under -precision fp64; tensors at t->p[i].offset);
 * optimizer state uses the same layout, so a step is one loop per tensor. Loops over large tensors run on OpenMP
 * threads (above 256 Ki elements) and are written to vectorize; the AdamW
 * loop needs -fno-math-errno for its sqrtf to become a vector instruction. */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include "mpitrain/mpitrain.h"

/* ------------------------------------------------------------------- SGD */

typedef struct {
  double momentum, dampening, weight_decay;
  int nesterov;
} mt_sgd_hparams;

/* ----------------------------------------------------------------- AdamW */

typedef struct {
  double beta1, beta2, eps, weight_decay;
  int amsgrad;
} mt_adamw_hparams;

/* The optimizer object's hyper-parameters as each step's own struct. */
mt_sgd_hparams mt_optim_sgd_hparams(const mt_optim_hparams *hp);
mt_adamw_hparams mt_optim_adamw_hparams(const mt_optim_hparams *hp);

/* torch.optim.AdamW's defaults: betas (0.9, 0.999), eps 1e-8, weight_decay
 * 1e-2, amsgrad off. */
mt_adamw_hparams mt_adamw_defaults(void);

/* 0 when 0 <= beta1, beta2 < 1, eps >= 0 and weight_decay >= 0 (PyTorch's
 * checks); else MT_ERR_OPTION naming the option (-adam_beta1, ...). */
int mt_adamw_check(const mt_adamw_hparams *h);

/* --------------------------------------------------------------- schedules */

typedef enum {
  MT_LR_CONSTANT,
  MT_LR_STEP,      /* StepLR                                                */
  MT_LR_COSINE,    /* CosineAnnealingLR (held at min after the run)         */
  MT_LR_MULTISTEP, /* MultiStepLR                                           */
  MT_LR_LINEAR,    /* LinearLR(start_factor=1, end_factor, total_iters)     */
  MT_LR_ONECYCLE,  /* OneCycleLR, cos annealing, two phases                 */
  MT_LR_PLATEAU,   /* ReduceLROnPlateau, threshold_mode rel                 */
  MT_LR_NKINDS
} mt_lr_kind;

#define MT_LR_MAX_MILESTONES 32
/* ReduceLROnPlateau's eps: a reduction smaller than this is skipped. */
#define MT_LR_PLATEAU_EPS 1e-8

/* The state of the plateau schedule (the only one with state); a checkpoint
 * saves it (see mt_lr_state_pack) and a restart puts it back. */
typedef struct {
  double lr;             /* current learning rate, before any warm-up ramp  */
  double best;           /* best metric so far (+inf / -inf at the start)   */
  long num_bad_epochs;   /* epochs without improvement                      */
  long cooldown_counter; /* epochs of cooldown left                         */
  long last_epoch;       /* metrics seen                                    */
  int ready;             /* set by mt_lr_schedule_setup                     */
} mt_lr_plateau_state;

typedef struct {
  mt_lr_kind kind;
  double base;    /* lr; max_lr for onecycle                                 */
  double gamma;   /* step, multistep: decay factor; plateau: factor (< 1)    */
  double min;     /* cosine: eta_min; plateau: min_lr                        */
  long step_size; /* step: period in steps                                   */
  long warmup;    /* linear warm-up steps (see mt_lr_at)                     */
  long total;     /* steps in the run: cosine, linear, onecycle              */
  /* multistep: decay by gamma at each milestone (steps after warm-up; any
   * order; a repeated milestone decays once per repeat, as in PyTorch) */
  int nmilestones;
  long milestones[MT_LR_MAX_MILESTONES];
  double end_factor; /* linear: lr goes from base to base * end_factor       */
  /* onecycle: pct_start, div_factor (initial = base / div_factor),
   * final_div_factor (final = initial / final_div_factor) */
  double pct_start, div_factor, final_div_factor;
  /* plateau: threshold (relative), patience and cooldown in epochs, and
   * mode_max = 1 when a larger metric is better (accuracy) */
  double threshold;
  long patience, cooldown;
  int mode_max;
  mt_lr_plateau_state plateau;
} mt_lr_schedule;

/* Name <-> kind: "constant", "step", "cosine", "multistep", "linear",
 * "onecycle", "plateau". parse returns MT_ERR_OPTION naming -lr_schedule
 * and the choices for an unknown name; kind_name gives "?" for a bad kind. */
const char *mt_lr_kind_name(mt_lr_kind k);
int mt_lr_kind_parse(const char *name, mt_lr_kind *k);

/* A schedule of the given kind and base lr with PyTorch's defaults for the
 * rest: gamma 0.1, step_size 1, pct_start 0.3, div_factor 25,
 * final_div_factor 1e4, threshold 1e-4, patience 10, cooldown 0, min 0, no
 * warm-up, no milestones; end_factor 0 (LinearLR's default end is 1.0, a
 * constant; decay to zero is the useful default here). */
void mt_lr_schedule_defaults(mt_lr_schedule *s, mt_lr_kind kind, double base);

/* Checks the fields the kind uses (MT_ERR_OPTION with a message naming the
 * field) and resets the plateau state to the start (lr = base). Call it once
 * after filling the struct, before mt_lr_at / mt_lr_plateau_step, and before
 * mt_lr_state_unpack on restart. Rejects onecycle with warm-up > 0 (its
 * first phase is a warm-up already). */
int mt_lr_schedule_setup(mt_lr_schedule *s);

/* Learning rate used by optimizer step t (0-based), in closed form for every
 * kind but plateau. Warm-up W: the schedule runs on u = max(t - W, 0) (so
 * step_size, milestones, the cosine and linear spans, all count from the end
 * of warm-up, and those spans are total - W) and is multiplied by
 * (t + 1) / W while t < W:
 *   constant  base
 *   step      base * gamma^floor(u / step_size)
 *   multistep base * gamma^(number of milestones <= u)
 *   cosine    min + (base - min)(1 + cos(pi u / S)) / 2, S = total - W, and
 *             min after S (PyTorch's CosineAnnealingLR would rise again)
 *   linear    base * (1 + (end_factor - 1) * min(u, S) / S), S = total - W
 *   onecycle  (W must be 0) from base/div_factor up to base over the first
 *             pct_start * total - 1 steps, then down to
 *             base/div_factor/final_div_factor at step total - 1, both by
 *             cosine annealing; held there after (PyTorch raises instead).
 *             PyTorch also cycles momentum; mpitrain does not.
 *   plateau   the current plateau.lr (base before setup), times the ramp.
 * The step counter and the lr are independent of the plateau epochs. */
double mt_lr_at(const mt_lr_schedule *s, long t);

/* ReduceLROnPlateau.step(metric), once per epoch: a metric better than
 * best * (1 -/+ threshold) becomes best and clears the bad-epoch count,
 * else the count grows; during cooldown the count is cleared and cooldown
 * counts down; when the count exceeds patience, lr = max(lr * gamma, min)
 * (skipped when it would change lr by <= 1e-8), cooldown starts, the count
 * is cleared. NaN is never better. *reduced (may be NULL) tells whether lr
 * changed. MT_ERR_ARG for another kind, MT_ERR_STATE before setup. */
int mt_lr_plateau_step(mt_lr_schedule *s, double metric, int *reduced);

/* The schedule's state as MT_LR_STATE_N doubles (for one checkpoint
 * attribute): lr, best, num_bad_epochs, cooldown_counter, last_epoch,
 * ready. Unpack checks the values (MT_ERR_DATA when they cannot come from
 * pack) and leaves s unchanged on error. Kinds other than plateau pack
 * their (unused) plateau state the same way; only the step matters there. */
#define MT_LR_STATE_N 6
void mt_lr_state_pack(const mt_lr_schedule *s, double out[MT_LR_STATE_N]);
int mt_lr_state_unpack(mt_lr_schedule *s, const double in[MT_LR_STATE_N]);

/* ------------------------------------------------------------ loss scaler */

/* Dynamic loss scaling for fp16 training, torch.cuda.amp.GradScaler's rule
 * (PyTorch 1.13, _amp_update_scale_), with DeepSpeed's hysteresis and a
 * minimum scale added. The trainer multiplies the loss by mt_scaler_scale(),
 * unscales the gradients by mt_scaler_inv_scale(), asks mt_has_nonfinite()
 * (nn/precision.h) whether they overflowed (agreed over all ranks), then
 * calls mt_scaler_update once per optimizer step, which says whether to skip
 * that step. The scale is an fp32 number, as in PyTorch.
 *
 * Update with found_inf (after u = ++nupdates):
 *   found_inf: the step is skipped (nskipped++) and growth_tracker = 0;
 *     then if hysteresis_left > 1 it only counts down, else the scale backs
 *     off (hysteresis_left stays 1, so further overflows back off at once):
 *       at min_scale already: MT_ERR_NUMERIC (see below);
 *       else scale = max((float)(scale * backoff_factor), min_scale).
 *   clean: with consecutive_hysteresis, hysteresis_left = hysteresis;
 *     growth_tracker++ and when it reaches growth_interval it is reset to 0,
 *     hysteresis_left = hysteresis and scale = (float)(scale *
 *     growth_factor) unless that is inf (the scale then stays).
 * (Products in double rounded to float, as PyTorch's kernel does.) With
 * hysteresis 1 (the default) this is exactly PyTorch's sequence of scales
 * as long as the scale stays >= min_scale; PyTorch has no minimum. With
 * hysteresis H > 1 it is DeepSpeed's DynamicLossScaler(delayed_shift = H,
 * consecutive_hysteresis): the first H - 1 overflows (since the last growth;
 * in a row with consecutive_hysteresis) keep the scale, every one after
 * backs off; every overflow skips its step. (DeepSpeed divides by its
 * scale_factor; here it is multiplied by backoff_factor.)
 *
 * An overflow that would back off a scale already at min_scale cannot be
 * cured: mt_scaler_update returns MT_ERR_NUMERIC with a message naming the
 * update number, sets *skip_step and leaves the state unchanged (stop
 * there; DeepSpeed raises the same way). Static mode (dynamic = 0) keeps
 * the scale at init_scale forever and only skips steps that overflow.
 *
 * Option names in messages: -loss_scale_init, -loss_scale_growth_factor,
 * -loss_scale_backoff_factor, -loss_scale_growth_interval,
 * -loss_scale_hysteresis, -loss_scale_min. */
typedef struct {
  double init_scale;          /* 65536 (2^16)                                */
  double growth_factor;       /* 2, > 1                                      */
  double backoff_factor;      /* 0.5, in (0, 1)                              */
  long growth_interval;       /* 2000 clean steps before growth, >= 1        */
  long hysteresis;            /* 1 (PyTorch); overflows before a back-off    */
  int consecutive_hysteresis; /* 0 (DeepSpeed's default); 1: clean refills   */
  double min_scale;           /* 1, in (0, init_scale]                       */
  int dynamic;                /* 1; 0: static scale init_scale               */
} mt_scaler_opts;

typedef struct {
  mt_scaler_opts o;
  float scale;          /* the current loss scale                          */
  long growth_tracker;  /* clean steps since the last overflow or growth   */
  long hysteresis_left; /* overflows still absorbed before a back-off      */
  long nupdates;        /* mt_scaler_update calls (optimizer steps tried)  */
  long nskipped;        /* steps skipped for inf/NaN gradients             */
  long nbackoffs;       /* times the scale was reduced                     */
  int ready;            /* set by mt_scaler_init                           */
} mt_scaler;

/* GradScaler's defaults plus hysteresis 1, min_scale 1, dynamic. */
mt_scaler_opts mt_scaler_defaults(void);
/* MT_ERR_OPTION naming the option when a value is out of range (above), or
 * init_scale / min_scale are not finite fp32 numbers. */
int mt_scaler_check(const mt_scaler_opts *o);
/* Checks o (NULL: the defaults) and starts at scale = (float)init_scale,
 * hysteresis_left = hysteresis, counters 0. s is unchanged on error. */
int mt_scaler_init(mt_scaler *s, const mt_scaler_opts *o);
/* One update per optimizer step (rule above). found_inf: nonzero when any
 * gradient of the step, on any rank, was inf or NaN. *skip_step (may be
 * NULL) is set to 1 when the optimizer must not step, else 0. Returns 0,
 * MT_ERR_NUMERIC at the minimum scale (above), MT_ERR_STATE before init. */
int mt_scaler_update(mt_scaler *s, int found_inf, int *skip_step);
/* The scale, and 1/scale as PyTorch's unscale_ forms it:
 * (float)(1.0 / (double)scale). */
float mt_scaler_scale(const mt_scaler *s);
float mt_scaler_inv_scale(const mt_scaler *s);

/* The state as MT_SCALER_STATE_N doubles (one checkpoint attribute): scale,
 * growth_tracker, hysteresis_left, nupdates, nskipped, nbackoffs. Unpack
 * needs an initialized s (its options stay: those of the resumed run),
 * checks the values (MT_ERR_DATA when they cannot come from pack; a scale
 * below the current min_scale, a growth_tracker or hysteresis_left beyond
 * the current options are clamped to them, so changed options take effect
 * at once) and leaves s unchanged on error. In static mode only the
 * counters are restored; the scale stays init_scale. */
#define MT_SCALER_STATE_N 6
void mt_scaler_state_pack(const mt_scaler *s, double out[MT_SCALER_STATE_N]);
int mt_scaler_state_unpack(mt_scaler *s, const double in[MT_SCALER_STATE_N]);

/* ------------------------------------------- float and double (templates) */

/* SGD's and AdamW's steps, AdamW's state and the clipping functions, for
 * float (the plain names) and double (the _f64 names, -precision fp64),
 * declared once in optim_decl_t.h and implemented by the templates
 * sgd_t.h, adamw_t.h and clip_t.h. */
#define MT_TEMPLATE "optim/optim_decl_t.h"
#include "core/real_t.h"

#endif
