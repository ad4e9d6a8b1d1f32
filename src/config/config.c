/* Options -> mt_config, through the PETSc options database only.
 *
 * Every option is registered with its help text and default between
 * PetscOptionsBegin/End, so -help documents the program. Values are read as
 * strings and parsed here, so a malformed or out-of-range value becomes one
 * line naming the option and the allowed range (PETSc's own messages are
 * multi-line tracebacks). Options nobody read are errors, not warnings. */
#include "config/mt_config.h"
#include "backends/backends.h"
#include "comm/shm_reduce.h"
#include "core/core.h"
#include "data/data.h"
#include "io/modelfile.h"
#include "models/models.h"
#include "mpitrain/mpitrain.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <petscsys.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The first problem found; parsing goes on so -help still lists everything. */
static char bad_[1024];

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...) {
  if (bad_[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(bad_, sizeof(bad_), fmt, ap);
  va_end(ap);
}

static PetscErrorCode opt_str(PetscOptionItems *PetscOptionsObject, const char *name,
                              const char *help, const char *def, char *out, size_t len,
                              PetscBool *set) {
  PetscBool s = PETSC_FALSE;
  snprintf(out, len, "%s", def);
  PetscCall(PetscOptionsString(name, help, "mpitrain", def, out, len, &s));
  mt_option_record(name, out, s == PETSC_TRUE); /* for mt_config_check_same's message */
  if (set) *set = s;
  PetscFunctionReturn(0);
}


static PetscErrorCode opt_int(PetscOptionItems *PetscOptionsObject, const char *name,
                              const char *help, long def, long lo, long hi, int *out) {
  char d[32], s[256];
  snprintf(d, sizeof(d), "%ld", def);
  PetscCall(opt_str(PetscOptionsObject, name, help, d, s, sizeof(s), NULL));
  long v;
  if (mt_parse_long(s, &v)) {
    bad("option %s: '%s' is not an integer (allowed: %ld..%ld)", name, s, lo, hi);
    v = def;
  } else if (v < lo || v > hi) {
    bad("option %s: %ld is out of range (allowed: %ld..%ld)", name, v, lo, hi);
    v = def;
  }
  *out = (int)v;
  PetscFunctionReturn(0);
}

/* lo_open: the lower bound itself is not allowed. */
static PetscErrorCode opt_real(PetscOptionItems *PetscOptionsObject, const char *name,
                               const char *help, double def, double lo, int lo_open, double hi,
                               double *out) {
  char d[64], s[256];
  snprintf(d, sizeof(d), "%g", def);
  PetscCall(opt_str(PetscOptionsObject, name, help, d, s, sizeof(s), NULL));
  double v;
  const char *lb = lo_open ? "(" : "[";
  if (mt_parse_double(s, &v)) {
    bad("option %s: '%s' is not a number (allowed: %s%g, %g])", name, s, lb, lo, hi);
    v = def;
  } else if (v < lo || (lo_open && v == lo) || v > hi) {
    bad("option %s: %g is out of range (allowed: %s%g, %g])", name, v, lb, lo, hi);
    v = def;
  }
  *out = v;
  PetscFunctionReturn(0);
}

/* A boolean option; def -1: also "auto" (its default), read as -1 */
static PetscErrorCode opt_bool(PetscOptionItems *PetscOptionsObject, const char *name,
                               const char *help, int def, int *out) {
  char s[64];
  PetscBool set;
  PetscCall(opt_str(PetscOptionsObject, name, help, def < 0 ? "auto" : def ? "1" : "0", s,
                    sizeof(s), &set));
  int w = set && !s[0] ? 1 : mt_config_bool_word(s); /* unset: def's word */
  if (w == -1 && def >= 0) w = -2;                     /* auto only where def is */
  *out = w >= -1 ? w : def;
  if (w < -1) {
    if (def < 0) bad("option %s: '%s' is not auto, 1 or 0", name, s);
    else
      bad("option %s: '%s' is not a boolean (allowed: 0, 1, true, false, yes, no, on, off)",
          name, s);
  }
  PetscFunctionReturn(0);
}

static PetscErrorCode opt_choice(PetscOptionItems *PetscOptionsObject, const char *name,
                                 const char *help, const char *const *choices, char *out,
                                 size_t len) {
  char s[256], all[256] = "";
  PetscCall(opt_str(PetscOptionsObject, name, help, choices[0], s, sizeof(s), NULL));
  for (int i = 0; choices[i]; i++) {
    if (!strcmp(s, choices[i]) && strlen(s) < len) {
      memcpy(out, s, strlen(s) + 1);
      PetscFunctionReturn(0);
    }
    size_t k = strlen(all);
    snprintf(all + k, sizeof(all) - k, "%s%s", i ? ", " : "", choices[i]);
  }
  bad("option %s: '%s' is not one of: %s", name, s, all);
  snprintf(out, len, "%s", choices[0]);
  PetscFunctionReturn(0);
}

/* Comma-separated list of positive integers. */
static void parse_int_list(const char *name, const char *s, int *v, int max, int *n) {
  char buf[512];
  *n = 0;
  if (strlen(s) >= sizeof(buf)) {
    bad("option %s: value too long", name);
    return;
  }
  if (mt_list_empty_entry(s)) {
    bad("option %s: '%s' has an empty entry", name, s);
    return;
  }
  memcpy(buf, s, strlen(s) + 1);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    long x;
    if (*n == max) {
      bad("option %s: more than %d values", name, max);
      return;
    }
    if (mt_parse_long(tok, &x) || x < 1 || x > (1L << 20)) {
      bad("option %s: '%s' is not a positive integer (allowed: 1..%ld)", name, tok, 1L << 20);
      return;
    }
    v[(*n)++] = (int)x;
  }
}

/* Comma-separated file names into out[0..*n) (at most MT_MAX_VAL). */
static void parse_files(const char *name, char *s, char out[][MT_PATH_MAX], int *n) {
  *n = 0;
  if (mt_list_empty_entry(s)) {
    bad("option %s: '%s' has an empty entry", name, s);
    return;
  }
  char *save = NULL;
  for (char *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (*n == MT_MAX_VAL) {
      bad("option %s: more than %d files", name, MT_MAX_VAL);
      return;
    }
    if (strlen(tok) >= MT_PATH_MAX) {
      bad("option %s: file name too long", name);
      return;
    }
    snprintf(out[(*n)++], MT_PATH_MAX, "%s", tok);
  }
}

/* -outputs: comma-separated words val, train, test (or none) into bits. */
static void parse_outputs(const char *s, int *mask) {
  static const char *const words[] = {"val", "train", "test"};
  static const int bits[] = {MT_OUTPUTS_VAL, MT_OUTPUTS_TRAIN, MT_OUTPUTS_TEST};
  char buf[256];
  *mask = 0;
  if (strlen(s) >= sizeof(buf)) {
    bad("option -outputs: value too long");
    return;
  }
  if (mt_list_empty_entry(s)) {
    bad("option -outputs: '%s' has an empty entry", s);
    return;
  }
  memcpy(buf, s, strlen(s) + 1);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (!strcmp(tok, "none")) continue;
    int k = 0;
    while (k < 3 && strcmp(tok, words[k])) k++;
    if (k == 3) {
      bad("option -outputs: '%s' is not one of: val, train, test (comma-separated) or none", tok);
      return;
    }
    *mask |= bits[k];
  }
}

/* read_all's parts, in the order -help lists them; each within read_all's
 * PetscOptionsBegin/End. */

/* The backend, the model and the data: what is trained on what, how long,
 * in which batches, and what validation decides. */
static PetscErrorCode read_run(PetscOptionItems *PetscOptionsObject, mt_config *c, int *micro) {
  char s[MT_PATH_MAX * MT_MAX_VAL];
  PetscBool set;
  char names[512], help[600];
  PetscCall(opt_str(PetscOptionsObject, "-mode",
                    "What the run does: train, or with a trained model (-model_file) evaluate "
                    "(-data_val), predict (-data), generate (a gpt: -prompt); doc/running.md",
                    "train", c->mode,
                    sizeof(c->mode), NULL));
  mt_backend_names(names, sizeof(names));
  snprintf(help, sizeof(help), "Training backend: %s", names);
  PetscCall(opt_str(PetscOptionsObject, "-backend", help, "sp", c->backend, sizeof(c->backend), NULL));
  /* the one place a backend's name is read: its strategy and policies */
  mt_backend_spec spec;
  if (mt_backend_parse(c->backend, &spec)) {
    bad("%s", mt_error_message());
    mt_error_clear();
  } else {
    c->backend_traits = spec.ops->traits;
    c->backend_fp64 = mt_backend_has_dtype(spec.ops, MT_FP64);
    c->amp = spec.amp;
    c->dp = spec.dp;
    c->fsdp = (spec.ops->traits & MT_TRAIT_SHARDED) != 0;
  }
  mt_model_names(names, sizeof(names));
  snprintf(help, sizeof(help), "Model: %s", names);
  PetscCall(opt_str(PetscOptionsObject, "-model", help, "mlp", c->model, sizeof(c->model), NULL));
  if (!mt_model_find(c->model)) bad("option -model: '%s' is not one of: %s", c->model, names);
  PetscCall(opt_str(PetscOptionsObject, "-data_train", "Training data set (HDF5: /x, /y)", "",
                    c->data_train, sizeof(c->data_train), NULL));
  PetscCall(opt_str(PetscOptionsObject, "-data_val",
                    "Validation data sets (HDF5), comma-separated", "", s, sizeof(s), &set));
  parse_files("-data_val", s, c->data_val, &c->nval);
  /* in mt_data_check's order */
  static const char *const checks[] = {"sample", "full", "none", NULL};
  char check[8];
  PetscCall(opt_choice(PetscOptionsObject, "-data_check",
                       "Rows of a float /x checked for NaN and Inf at open: sample (4096 rows "
                       "spread over the file), full (every row) or none",
                       checks, check, sizeof(check)));
  for (int i = 0; checks[i]; i++)
    if (!strcmp(check, checks[i])) c->data_check = i;
  PetscCall(opt_int(PetscOptionsObject, "-epochs",
                    "Number of epochs (0: only evaluate the validation and test sets)", 1, 0,
                    1000000, &c->epochs));
  PetscCall(opt_real(PetscOptionsObject, "-val_smoothing",
                     "Smoothed validation loss s = a s + (1 - a) loss over epochs (first set); "
                     "it drives -lr_schedule plateau, the best model and early stopping (0: raw)",
                     0, 0, 0, 0.999999, &c->val_smoothing));
  PetscCall(opt_int(PetscOptionsObject, "-early_stop_patience",
                    "Stop after this many epochs without a better smoothed validation loss (0: off)",
                    0, 0, INT_MAX, &c->early_stop_patience));
  PetscCall(opt_real(PetscOptionsObject, "-early_stop_min_delta",
                     "Improvement of the smoothed validation loss that counts as better", 0, 0, 0,
                     1e30, &c->early_stop_min_delta));
  PetscCall(opt_bool(PetscOptionsObject, "-restore_best",
                     "After training, continue with the best model (lowest smoothed validation "
                     "loss): test sets and model_final.h5 use it", 0, &c->restore_best));
  PetscCall(opt_int(PetscOptionsObject, "-batch_size", "Global batch size (all ranks, all micro-steps)",
                    128, 1, 1 << 24, &c->batch_size));
  PetscCall(opt_int(PetscOptionsObject, "-micro_batch_size",
                    "Samples per rank per micro-step (0: batch_size / ranks, no accumulation)", 0, 0,
                    1 << 24, micro));
  PetscCall(opt_int(PetscOptionsObject, "-val_batch_size", "Validation samples per rank per step",
                    500, 1, 1 << 24, &c->val_batch_size));
  PetscCall(opt_int(PetscOptionsObject, "-max_train_steps_per_epoch",
                    "Stop an epoch after this many global steps (0: all)", 0, 0, INT_MAX,
                    &c->max_train_steps));
  PetscCall(opt_int(PetscOptionsObject, "-max_val_steps_per_epoch",
                    "Validate on at most this many steps per set (0: all)", 0, 0, INT_MAX,
                    &c->max_val_steps));
  PetscFunctionReturn(0);
}

/* The optimizer and its hyper-parameters. */
static PetscErrorCode read_optimizer(PetscOptionItems *PetscOptionsObject, mt_config *c) {
  char names[512], help[600];
  mt_optimizer_names(names, sizeof(names));
  snprintf(help, sizeof(help), "Optimizer: %s", names);
  PetscCall(opt_str(PetscOptionsObject, "-optimizer", help, "sgd", c->optimizer,
                    sizeof(c->optimizer), NULL));
  const mt_optimizer_ops *oo = mt_optimizer_find(c->optimizer);
  if (!oo) bad("option -optimizer: '%s' is not one of: %s", c->optimizer, names);
  if (oo && oo->options && oo->options()) { /* the optimizer's own options */
    bad("%s", mt_error_message());
    mt_error_clear();
  }
  PetscCall(opt_real(PetscOptionsObject, "-lr", "Learning rate", 0.01, 0, 1, 1e6, &c->lr));
  PetscCall(opt_real(PetscOptionsObject, "-momentum", "SGD momentum", 0, 0, 0, 1, &c->momentum));
  PetscCall(opt_real(PetscOptionsObject, "-dampening", "SGD dampening", 0, 0, 0, 1, &c->dampening));
  PetscCall(opt_bool(PetscOptionsObject, "-nesterov", "SGD Nesterov momentum", 0, &c->nesterov));
  PetscCall(opt_real(PetscOptionsObject, "-weight_decay",
                     "Weight decay (sgd: added to the gradient; adamw: decoupled)", 0, 0, 0, 1e6,
                     &c->weight_decay));
  PetscCall(opt_bool(PetscOptionsObject, "-weight_decay_skip_1d",
                     "No weight decay for 1-d tensors (biases, norms)", 0, &c->weight_decay_skip_1d));
  PetscCall(opt_real(PetscOptionsObject, "-adam_beta1", "adamw: beta1", 0.9, 0, 0, 0.999999,
                     &c->adam_beta1));
  PetscCall(opt_real(PetscOptionsObject, "-adam_beta2", "adamw: beta2", 0.999, 0, 0, 0.999999999,
                     &c->adam_beta2));
  PetscCall(opt_real(PetscOptionsObject, "-adam_eps", "adamw: epsilon", 1e-8, 0, 1, 1,
                     &c->adam_eps));
  PetscCall(opt_bool(PetscOptionsObject, "-adam_amsgrad", "adamw: AMSGrad variant", 0,
                     &c->adam_amsgrad));
  PetscFunctionReturn(0);
}

/* The learning-rate schedule and gradient clipping. */
static PetscErrorCode read_schedule(PetscOptionItems *PetscOptionsObject, mt_config *c) {
  static const char *const schedules[] = {"constant", "step",   "multistep", "cosine",
                                           "linear",   "onecycle", "plateau",  NULL};
  char s[MT_PATH_MAX * MT_MAX_VAL];
  PetscBool set;
  PetscCall(opt_choice(PetscOptionsObject, "-lr_schedule", "Learning-rate schedule", schedules,
                       c->lr_schedule, sizeof(c->lr_schedule)));
  PetscCall(opt_int(PetscOptionsObject, "-warmup_steps", "Linear warm-up steps (any schedule)", 0,
                    0, INT_MAX, &c->warmup_steps));
  PetscCall(opt_int(PetscOptionsObject, "-lr_step_size", "step schedule: global steps per decay",
                    1000, 1, INT_MAX, &c->lr_step_size));
  PetscCall(opt_real(PetscOptionsObject, "-lr_gamma",
                     "step, multistep: decay factor; plateau: reduction factor", 0.1, 0, 1, 1,
                     &c->lr_gamma));
  PetscCall(opt_real(PetscOptionsObject, "-lr_min",
                     "cosine: final learning rate; plateau: lowest learning rate", 0, 0, 0, 1e6,
                     &c->lr_min));
  PetscCall(opt_str(PetscOptionsObject, "-lr_milestones",
                    "multistep: global steps (after warm-up) where lr *= lr_gamma, comma-separated",
                    "", s, sizeof(s), &set));
  if (s[0]) parse_int_list("-lr_milestones", s, c->lr_milestones, 32, &c->lr_nmilestones);
  PetscCall(opt_real(PetscOptionsObject, "-lr_end_factor",
                     "linear: final lr as a fraction of -lr", 0, 0, 0, 1, &c->lr_end_factor));
  PetscCall(opt_real(PetscOptionsObject, "-onecycle_pct_start",
                     "onecycle: share of the run spent increasing lr", 0.3, 0, 1, 1,
                     &c->onecycle_pct_start));
  PetscCall(opt_real(PetscOptionsObject, "-onecycle_div_factor",
                     "onecycle: initial lr = lr / div_factor", 25, 1, 0, 1e9, &c->onecycle_div_factor));
  PetscCall(opt_real(PetscOptionsObject, "-onecycle_final_div_factor",
                     "onecycle: final lr = initial lr / final_div_factor", 1e4, 1, 0, 1e12,
                     &c->onecycle_final_div_factor));
  PetscCall(opt_int(PetscOptionsObject, "-plateau_patience",
                    "plateau: epochs without improvement before lr is reduced", 10, 0, INT_MAX,
                    &c->plateau_patience));
  PetscCall(opt_int(PetscOptionsObject, "-plateau_cooldown",
                    "plateau: epochs to wait after a reduction", 0, 0, INT_MAX, &c->plateau_cooldown));
  PetscCall(opt_real(PetscOptionsObject, "-plateau_threshold",
                     "plateau: relative improvement that counts", 1e-4, 0, 0, 1, &c->plateau_threshold));
  PetscCall(opt_real(PetscOptionsObject, "-clip_grad_norm",
                     "Clip gradients to this global L2 norm (0: off)", 0, 0, 0, 1e30,
                     &c->clip_grad_norm));
  PetscCall(opt_real(PetscOptionsObject, "-clip_grad_value",
                     "Clip every gradient element to [-v, v] (0: off)", 0, 0, 0, 1e30,
                     &c->clip_grad_value));
  PetscFunctionReturn(0);
}

/* Seed and threads; logging, files written, checkpoints and restart;
 * ddp's communication; test sets and per-sample outputs. */
static PetscErrorCode read_outputs(PetscOptionItems *PetscOptionsObject, mt_config *c) {
  static const char *const splits[] = {"auto", "batch", "gemm", NULL};
  char s[MT_PATH_MAX * MT_MAX_VAL];
  int seed = 0;
  PetscCall(opt_int(PetscOptionsObject, "-seed", "Seed of initialisation and data order", 42, 0,
                    INT_MAX, &seed));
  c->seed = (uint64_t)seed;
  PetscCall(opt_int(PetscOptionsObject, "-threads",
                    "Threads per rank (0: the cores the node's ranks may use / its ranks, at "
                    "most the rank's own)",
                    0, 0, 4096, &c->threads));
  PetscCall(opt_choice(PetscOptionsObject, "-thread_split",
                       "How a rank's threads share work: batch (each thread its rows), gemm "
                       "(oneDNN threads every GEMM) or auto (by the step's FLOPs a byte of "
                       "gradients)", splits, c->thread_split, sizeof(c->thread_split)));
  PetscCall(opt_int(PetscOptionsObject, "-log_every", "Progress line every this many steps (0: off)",
                    50, 0, INT_MAX, &c->log_every));
  PetscCall(opt_str(PetscOptionsObject, "-output_dir", "Directory for the learning curve",
                    "mpitrain-out", c->output_dir, sizeof(c->output_dir), NULL));
  PetscCall(opt_str(PetscOptionsObject, "-init_from",
                    "Start from the tensors of this HDF5 file (PyTorch names and layouts)", "",
                    c->init_from, sizeof(c->init_from), NULL));
  PetscCall(opt_bool(PetscOptionsObject, "-log_step_losses",
                     "Write every global step's mean loss and lr to OUTPUT_DIR/steps.csv", 0,
                     &c->log_step_losses));
  PetscCall(opt_str(PetscOptionsObject, "-log_gemm_shapes",
                    "Write the GEMM shapes of the run's second step (convolutions as im2col GEMMs; "
                    "rank 0's) to this file, for bench/gemm_shapes.c", "", c->log_gemm_shapes,
                    sizeof(c->log_gemm_shapes), NULL));
  PetscCall(opt_bool(PetscOptionsObject, "-plot",
                     "Draw OUTPUT_DIR/curve.png after every epoch with gnuplot (MT_GNUPLOT: the "
                     "program; without it one warning)", 1, &c->plot));
  PetscCall(opt_real(PetscOptionsObject, "-plot_timeout",
                     "Seconds gnuplot may take per picture before it is stopped", 30, 0, 1, 1e6,
                     &c->plot_timeout));
  PetscCall(opt_str(PetscOptionsObject, "-checkpoint_dir",
                    "Directory of checkpoints (default: OUTPUT_DIR/checkpoints)", "",
                    c->checkpoint_dir, sizeof(c->checkpoint_dir), NULL));
  PetscCall(opt_int(PetscOptionsObject, "-checkpoint_every_steps",
                    "Checkpoint every this many global steps (0: off)", 0, 0, INT_MAX,
                    &c->checkpoint_every_steps));
  PetscCall(opt_int(PetscOptionsObject, "-checkpoint_every_epochs",
                    "Checkpoint every this many epochs (0: off)", 0, 0, INT_MAX,
                    &c->checkpoint_every_epochs));
  PetscCall(opt_real(PetscOptionsObject, "-checkpoint_every_minutes",
                     "Checkpoint when this many minutes passed since the last (0: off)", 0, 0, 0,
                     1e9, &c->checkpoint_every_minutes));
  PetscCall(opt_int(PetscOptionsObject, "-checkpoint_keep", "Keep the newest K checkpoints (0: all)",
                    3, 0, INT_MAX, &c->checkpoint_keep));
  PetscCall(opt_bool(PetscOptionsObject, "-checkpoint_at_end", "Checkpoint when training ends", 1,
                     &c->checkpoint_at_end));
  static const char *const write_errors[] = {"stop", "continue", NULL};
  char we[16];
  PetscCall(opt_choice(PetscOptionsObject, "-checkpoint_write_error",
                       "When a checkpoint, model_best.h5 or the curve cannot be written (disk "
                       "full, quota, I/O error): stop (exit 74) or continue and try again at the "
                       "next one", write_errors, we, sizeof(we)));
  c->checkpoint_write_continue = !strcmp(we, "continue");
  PetscCall(opt_bool(PetscOptionsObject, "-checkpoint_overwrite",
                     "A fresh run (-restart none) removes the checkpoints an earlier run left in "
                     "-checkpoint_dir (without it such a run is refused)", 0,
                     &c->checkpoint_overwrite));
  PetscCall(opt_str(PetscOptionsObject, "-restart",
                    "none, auto (the newest checkpoint of -checkpoint_dir that verifies, if any) or "
                    "a checkpoint FILE",
                    "none", c->restart, sizeof(c->restart), NULL));
  PetscCall(opt_real(PetscOptionsObject, "-ddp_bucket_mb", "ddp: all-reduce bucket size in MiB",
                     16, 0, 1, 4096, &c->ddp_bucket_mb));
  PetscCall(opt_real(PetscOptionsObject, "-comm_timeout",
                     "Hang guard: abort, naming the ranks that did not arrive, after this many "
                     "seconds without progress (0: off)", 300, 0, 0, 1e9, &c->comm_timeout));
  PetscCall(opt_real(PetscOptionsObject, "-signal_grace",
                     "Seconds the launcher leaves between SIGTERM and SIGKILL; a first checkpoint "
                     "that takes longer is warned about (0: Slurm's KillWait, mpirun's "
                     "odls_base_sigkill_timeout)", 0, 0, 0, 1e9, &c->signal_grace));
  PetscCall(opt_real(PetscOptionsObject, "-ddp_first_bucket_mb",
                     "ddp: size of the first bucket (the last layers', reduced first) in MiB", 1,
                     0, 1, 4096, &c->ddp_first_bucket_mb));
  PetscCall(opt_bool(PetscOptionsObject, "-ddp_overlap",
                     "ddp: start each bucket's all-reduce during the backward pass as soon as "
                     "its layers are done (1), or all after it (0); auto: 1 on a GPU, across "
                     "nodes, or with a core no rank computes on, else 0 (the in-node all-reduce "
                     "is then the computing cores' own work; bench/README.md)",
                     -1, &c->ddp_overlap));
  PetscCall(opt_bool(PetscOptionsObject, "-ddp_comm_thread",
                     "ddp with -ddp_overlap 1: a communication thread per rank runs each "
                     "ready bucket's blocking all-reduce (0: non-blocking all-reduces "
                     "driven by MPI_Test between layers; measured slower, bench/README.md)",
                     1, &c->ddp_comm_thread));
  PetscCall(opt_real(PetscOptionsObject, "-peak_gflops",
                     "A core's fp32 peak in GFLOP/s, for the achieved share printed per epoch "
                     "(0: one core's fp32 GEMM measured on this machine at the first epoch line)",
                     0, 0, 0, 1e9, &c->peak_gflops));
  PetscCall(opt_bool(PetscOptionsObject, "-prefetch", "Read the next batch while this one computes",
                     1, &c->prefetch));
  PetscCall(opt_str(PetscOptionsObject, "-data_test",
                    "Test data sets (HDF5), comma-separated: evaluated once after training "
                    "(OUTPUT_DIR/test.csv)", "", s, sizeof(s), NULL));
  parse_files("-data_test", s, c->data_test, &c->ntest);
  PetscCall(opt_str(PetscOptionsObject, "-outputs",
                    "Per-sample outputs (index, label, prediction, loss) written to "
                    "OUTPUT_DIR/outputs/: val, train, test, comma-separated, or none",
                    "none", s, sizeof(s), NULL));
  parse_outputs(s, &c->outputs);
  PetscCall(opt_bool(PetscOptionsObject, "-outputs_logits",
                     "Add each sample's logits to the outputs (class data only)", 0,
                     &c->outputs_logits));
  PetscCall(opt_str(PetscOptionsObject, "-model_file",
                    "-mode evaluate, predict: the trained model (model_final.h5, model_best.h5, a "
                    "checkpoint), which says what model it is", "", c->model_file,
                    sizeof(c->model_file), NULL));
  PetscCall(opt_str(PetscOptionsObject, "-data", "-mode predict: the samples (HDF5 /x; /y not "
                    "needed)", "", c->data, sizeof(c->data), NULL));
  PetscCall(opt_str(PetscOptionsObject, "-predictions",
                    "-mode predict: the predictions file (default OUTPUT_DIR/predictions.h5)", "",
                    c->predictions, sizeof(c->predictions), NULL));
  PetscCall(opt_bool(PetscOptionsObject, "-outputs_probs",
                     "-mode predict: add each sample's softmax probabilities (class data)", 0,
                     &c->outputs_probs));
  PetscFunctionReturn(0);
}

static PetscErrorCode read_all(MPI_Comm comm, mt_config *c) {
  int micro = 0;
  PetscOptionsBegin(comm, NULL, "mpitrain options", "mpitrain");
  PetscCall(read_run(PetscOptionsObject, c, &micro));
  PetscCall(read_optimizer(PetscOptionsObject, c));
  PetscCall(read_schedule(PetscOptionsObject, c));
  PetscCall(read_outputs(PetscOptionsObject, c));
  PetscOptionsEnd();
  c->micro_batch_size = micro;
  PetscFunctionReturn(0);
}

/* Options PETSc itself reads (at initialize or finalize) are not ours to flag. */
static int petsc_own(const char *name) {
  static const char *const own[] = {"help", "options_file", "options_left", "log_view",
                                    "log_view_memory", "malloc_debug", "malloc_dump",
                                    "malloc_view", "info", "on_error_abort", "no_signal_handler",
                                    "options_view", "version", "check_pointer_intensity",
                                    "log_trace", "mt_traceback", NULL};
  for (int i = 0; own[i]; i++)
    if (!strcmp(name, own[i])) return 1;
  return 0;
}

static void check_unused(void) {
  PetscInt n = 0;
  char **names = NULL, **values = NULL;
  if (PetscOptionsLeftGet(NULL, &n, &names, &values)) {
    bad("cannot read the options database");
    return;
  }
  for (PetscInt i = 0; i < n; i++) {
    if (petsc_own(names[i])) continue;
    bad("unknown option -%s (see -help for the options)", names[i]);
    break;
  }
  PetscOptionsLeftRestore(NULL, &n, &names, &values);
}

static void derive(mt_config *c) {
  int W = c->world_size;
  if (!c->checkpoint_dir[0]) {
    static const char sub[] = "/checkpoints";
    size_t k = strlen(c->output_dir);
    if (k + sizeof(sub) > sizeof(c->checkpoint_dir)) {
      bad("option -output_dir: too long");
    } else {
      memcpy(c->checkpoint_dir, c->output_dir, k);
      memcpy(c->checkpoint_dir + k, sub, sizeof(sub));
    }
  }
  if (strcmp(c->mode, "train")) { /* a trained model's modes (config_mode.c) */
    if (mt_config_mode(c)) {
      bad("%s", mt_error_message());
      mt_error_clear();
    }
    return;
  }
  /* options of the other modes (trainer/mode.h) */
  if (c->model_file[0])
    bad("option -model_file: only -mode evaluate, predict and generate read it (training starts "
        "from a model file with -init_from)");
  if (c->data[0] || c->predictions[0] || c->outputs_probs)
    bad("option %s: only -mode predict uses it, not -mode train",
        c->data[0] ? "-data" : c->predictions[0] ? "-predictions" : "-outputs_probs");
  if (!c->data_train[0]) bad("option -data_train: a training data file is required");
  if (c->checkpoint_overwrite && strcmp(c->restart, "none"))
    bad("option -checkpoint_overwrite: removes an earlier run's checkpoints at a fresh start; "
        "this run continues one (-restart %s)", c->restart);
  if (c->micro_batch_size == 0) {
    if (c->batch_size % W)
      bad("option -batch_size: %d is not divisible by the number of ranks (%d)", c->batch_size, W);
    else
      c->micro_batch_size = c->batch_size / W;
  }
  if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
    bad("option -nesterov: needs -momentum > 0 and -dampening 0");
  if (!strcmp(c->lr_schedule, "plateau") && c->nval == 0)
    bad("option -lr_schedule plateau: needs a validation set (-data_val) to watch");
  if ((c->outputs & MT_OUTPUTS_VAL) && c->nval == 0)
    bad("option -outputs: 'val' needs validation sets (-data_val)");
  if ((c->outputs & MT_OUTPUTS_TEST) && c->ntest == 0)
    bad("option -outputs: 'test' needs test sets (-data_test)");
  if ((c->early_stop_patience > 0 || c->restore_best) && c->nval == 0)
    bad("option %s: needs a validation set (-data_val) to watch",
        c->restore_best ? "-restore_best" : "-early_stop_patience");
  PetscBool thread_given = PETSC_FALSE;
  int level = MPI_THREAD_SINGLE;
  if (PetscOptionsHasName(NULL, NULL, "-ddp_comm_thread", &thread_given)) thread_given = PETSC_FALSE;
  if (thread_given && c->ddp_comm_thread && !c->ddp_overlap)
    bad("option -ddp_comm_thread: runs the overlapped all-reduce; needs -ddp_overlap 1");
  /* asking for the thread asks for what it runs */
  if (thread_given && c->ddp_comm_thread && c->ddp_overlap < 0) c->ddp_overlap = 1;
  /* the thread's MPI calls run beside the main thread's and the loader's */
  if (c->ddp_comm_thread && (MPI_Query_thread(&level) != MPI_SUCCESS || level < MPI_THREAD_MULTIPLE)) {
    if (thread_given)
      bad("option -ddp_comm_thread: this MPI library does not provide MPI_THREAD_MULTIPLE");
    c->ddp_comm_thread = 0; /* the default falls back to MPI_Test's progress */
  }
  if (c->outputs_logits && !c->outputs)
    bad("option -outputs_logits: needs -outputs (val, train or test)");
  if (c->micro_batch_size == 0) return; /* reported above */
  if ((long)W * c->micro_batch_size > c->batch_size ||
      c->batch_size % (W * c->micro_batch_size))
    bad("option -batch_size: %d is not divisible by ranks (%d) x -micro_batch_size (%d)",
        c->batch_size, W, c->micro_batch_size);
  else
    c->accum_steps = c->batch_size / (W * c->micro_batch_size);
}

/* The model file of the run (-model_file, else -init_from; NULL: none): a
 * file that describes its model (io/modelfile.h) sets the model's options
 * the user did not give before anything reads them. */
static const char *model_file(char *path, size_t len) {
  static const char *const opts[] = {"-model_file", "-init_from"};
  for (int i = 0; i < 2; i++) {
    PetscBool set = PETSC_FALSE;
    if (!PetscOptionsGetString(NULL, NULL, opts[i], path, len, &set) && set && path[0])
      return opts[i];
  }
  return NULL;
}

/* The option groups read after the others are derived, in this order
 * (each checks against the ones before it). */
static int read_allreduce(mt_config *c) { return mt_allreduce_option(&c->ddp_allreduce); }
static int (*const later_[])(mt_config *) = {read_allreduce, mt_config_amp, mt_config_dp,
                                             mt_config_fsdp, mt_config_precision,
                                             mt_config_device, mt_config_zero};
#define NLATER ((int)(sizeof(later_) / sizeof(later_[0])))

int mt_config_from_options(MPI_Comm comm, mt_config *cfg, int *help) {
  PetscBool h = PETSC_FALSE;
  int size;
  memset(cfg, 0, sizeof(*cfg));
  bad_[0] = '\0';
  MT_MPI(MPI_Comm_size(comm, &size));
  cfg->world_size = size;
  if (PetscOptionsHasHelp(NULL, &h)) return MT_ERR(MT_ERR_LIB, "PETSc options database failed");
  char mfile[MT_PATH_MAX];
  const char *mopt = h ? NULL : model_file(mfile, sizeof(mfile));
  MT_CALL(mt_agree(comm, mopt ? mt_model_file_options(mfile, mopt) : 0));
  if (read_all(comm, cfg)) return MT_ERR(MT_ERR_LIB, "PETSc options database failed");
  *help = h ? 1 : 0;
  if (*help) { /* the options of every registered model that has some */
    char names[512], *save = NULL;
    mt_model_names(names, sizeof(names));
    for (char *tok = strtok_r(names, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
      const mt_model_ops *mo = mt_model_find(tok);
      if (!mo || !mo->options) continue;
      mt_print0("Options of model %s:\n", tok);
      mo->options();
      mt_error_clear();
    }
    for (int i = 0; i < NLATER; i++) { /* their options' help lines */
      later_[i](cfg);
      mt_error_clear();
    }
    return 0;
  }
  derive(cfg);
  int err = bad_[0] ? mt_error_set(__FILE__, __LINE__, __func__, MT_ERR_OPTION, "%s", bad_) : 0;
  /* the models read their own options before unknown ones are looked for:
   * every built-in's (an option of another built-in than -model is
   * accepted and checked, as when they were read here), and -model's */
  /* options the backend would ignore; the other modes refuse training's */
  if (!err && !strcmp(cfg->mode, "train")) err = mt_config_applies(cfg);
  if (!err) err = mt_model_read_options(cfg->model);
  if (!err && mopt) err = mt_model_file_check(mfile, mopt); /* the user's against the file's */
  for (int i = 0; !err && i < NLATER; i++) err = later_[i](cfg);
  if (!err) {
    check_unused();
    if (bad_[0]) err = mt_error_set(__FILE__, __LINE__, __func__, MT_ERR_OPTION, "%s", bad_);
  }
  MT_CALL(mt_agree(comm, err));
  return 0;
}

void mt_config_print(const mt_config *c, FILE *f) {
  if (strcmp(c->mode, "train")) {
    mt_config_mode_print(c, f);
    return;
  }
  fprintf(f, "mpitrain %s: backend %s, precision %s, model %s", MPITRAIN_VERSION, c->backend,
          c->dtype == MT_FP64 ? "fp64" : "fp32", c->model);
  mt_model_print(c->model, f, 0); /* the hyper-parameters its options read */
  fprintf(f, ", %d rank%s x %d thread%s\n", c->world_size, c->world_size > 1 ? "s" : "",
          c->threads, c->threads > 1 ? "s" : "");
  fprintf(f, "  data: train %s", c->data_train);
  for (int i = 0; i < c->nval; i++) fprintf(f, "%s%s", i ? ", " : "; val ", c->data_val[i]);
  fprintf(f, "\n  batch: global %d = micro %d x accumulation %d x ranks %d; epochs %d\n",
          c->batch_size, c->micro_batch_size, c->accum_steps, c->world_size, c->epochs);
  fprintf(f,
          "  optimizer: %s lr %g momentum %g dampening %g nesterov %d weight_decay %g; "
          "schedule %s warmup %d; clip_grad_norm %g; seed %llu\n",
          c->optimizer, c->lr, c->momentum, c->dampening, c->nesterov, c->weight_decay,
          c->lr_schedule, c->warmup_steps, c->clip_grad_norm, (unsigned long long)c->seed);
  mt_model_print(c->model, f, 1);
  if (c->val_smoothing > 0 || c->early_stop_patience > 0 || c->restore_best)
    fprintf(f, "  validation: smoothing %g, early stop patience %d (min delta %g), restore best %d\n",
            c->val_smoothing, c->early_stop_patience, c->early_stop_min_delta, c->restore_best);
  fprintf(f, "  output_dir %s", c->output_dir);
  for (int i = 0; i < c->ntest; i++) fprintf(f, "%s%s", i ? ", " : "; test ", c->data_test[i]);
  if (c->outputs)
    fprintf(f, "; outputs%s%s%s%s", c->outputs & MT_OUTPUTS_VAL ? " val" : "",
            c->outputs & MT_OUTPUTS_TRAIN ? " train" : "", c->outputs & MT_OUTPUTS_TEST ? " test" : "",
            c->outputs_logits ? " with logits" : "");
  fprintf(f, "\n");
  mt_config_dp_print(c, f);
  mt_config_fsdp_print(c, f);
  if (strcmp(c->device, "cpu")) fprintf(f, "  device: %s\n", c->device);
}
