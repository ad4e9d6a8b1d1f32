/* Built-in models. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "core/core.h"
#include "nn/lowp.h"
#include "mpitrain/mpitrain.h"

#include <stdint.h>
#include <stdio.h>

/* The layers' compute-precision policy (nn/lowp.h). */
typedef struct mt_nn_policy mt_nn_policy;

extern const mt_model_ops mt_mlp_ops;
extern const mt_model_ops mt_cnn_ops;
extern const mt_model_ops mt_gpt_ops;

/* ------------------------------------------- the built-ins' hyper-parameters
 *
 * Each built-in model reads its own options (-mlp_*, -cnn_*, -gpt_*) in its
 * options op into a block of hyper-parameters that the registry keeps, one
 * per built-in (the defaults until the options are read); its setup op
 * copies that block into the model (m->data), where the accessors below
 * find it. No model file holds state of its own. */

#define MT_CNN_MAX_BLOCKS 8

typedef struct {
  int hidden[MT_MAX_HIDDEN]; /* -mlp_hidden: the hidden layers' sizes       */
  int nhidden;
  double dropout;            /* -mlp_dropout                                */
} mt_mlp_hparams;

typedef struct {
  int channels[MT_CNN_MAX_BLOCKS]; /* -cnn_channels: one conv block each    */
  int nblocks;
  int kernel;    /* -cnn_kernel (odd)                                       */
  int hidden;    /* -cnn_hidden: the classifier's hidden units              */
  int batchnorm; /* -cnn_batchnorm                                          */
  double dropout; /* -cnn_dropout                                           */
} mt_cnn_hparams;

typedef struct {
  int layers, heads, embd; /* -gpt_layers, -gpt_heads, -gpt_embd           */
  int block;     /* -gpt_block: the context length T, the token window     */
  int gelu_tanh; /* -gpt_gelu: 1 tanh (GPT-2), 0 exact erf                 */
  double dropout; /* -gpt_dropout                                          */
} mt_gpt_hparams;

typedef union {
  mt_mlp_hparams mlp;
  mt_cnn_hparams cnn;
  mt_gpt_hparams gpt;
} mt_model_hparams;

/* A built-in model beside its ops: its default hyper-parameters, a setup
 * from an explicit block of them and the compute-precision policy its
 * layers follow (ops->setup is this with the registry's block and no
 * policy: fp32), the token window it reads a token data set in (NULL: it
 * takes no tokens) and its part of the configuration printed at start
 * (line 0: what follows the model's name on the first line; 1: lines of
 * its own). */
typedef struct {
  const mt_model_ops *ops;
  void (*defaults)(mt_model_hparams *hp);
  int (*setup)(mt_model *m, const mt_model_hparams *hp, const mt_data_spec *spec, int max_batch,
               const mt_nn_policy *pol);
  int (*window)(const mt_model_hparams *hp);
  void (*print)(const mt_model_hparams *hp, FILE *f, int line);
  /* its options that change only how it trains (dropout), not what it
   * computes: a model file records them, but a later run may give others
   * (io/modelfile.h); NULL-terminated, may be NULL */
  const char *const *train_only;
} mt_model_builtin;

extern const mt_model_builtin mt_mlp_builtin;
extern const mt_model_builtin mt_cnn_builtin;
extern const mt_model_builtin mt_gpt_builtin;

/* The registry's block of hyper-parameters of the built-in whose ops are
 * ops (what its options op read, else the defaults); NULL for any other
 * ops (a user's model). */
mt_model_hparams *mt_model_builtin_hparams(const mt_model_ops *ops);
/* The built-in description of ops, or NULL. */
const mt_model_builtin *mt_model_builtin_of(const mt_model_ops *ops);

/* Reads the model options of a run: every built-in model's (so that an
 * option of another built-in than -model, e.g. -mlp_hidden with -model
 * cnn, is accepted and checked as it was when mt_config read them all),
 * then the options op of the model named name if it is not one of them (a
 * user's). An error names the option (MT_ERR_OPTION). */
int mt_model_read_options(const char *name);
/* The options the options op of ops read at its first reading above, in
 * the order read: names[0, n) (the option records' own strings, kept for
 * the process's life) and shapes[i] 0 for one that changes only how the
 * model trains (the built-ins' train_only; a user's model: all shape it);
 * the count, at most max. */
int mt_model_options_of(const mt_model_ops *ops, const char **names, int *shapes, int max);

/* Creates the built-in model named name from the hyper-parameters hp
 * rather than from its options (unit tests, tools): as
 * mt_model_create_as otherwise; MT_ERR_ARG for a model that is not a
 * built-in. hp is checked as the options are. */
int mt_model_create_hp(const char *name, const mt_model_hparams *hp, const mt_data_spec *spec,
                       int max_batch, mt_dtype dtype, mt_model **m);

/* As mt_model_create_as, the layers of a built-in model computing under
 * the policy pol (nn/lowp.h; NULL: fp32): the model keeps the pointer and
 * passes it to each GEMM, linear layer and attention it calls, and its
 * convolutions fix their precision from it when they are made, so pol is
 * given here, not later. pol must outlive the model; its weight cache may
 * be filled and cleared between the model's calls (the trainer does, per
 * step). A user's model never sees pol (mt_model_ops has no place for
 * it) and computes as it always does. */
int mt_model_create_policy(const char *name, const mt_data_spec *spec, int max_batch,
                           mt_dtype dtype, const mt_nn_policy *pol, mt_model **m);

/* The token window T (samples of T + 1 tokens) of a token data set read
 * for the model named name, known before the model is made: a built-in's
 * own (gpt: -gpt_block); for a model without one, gpt's -gpt_block, the
 * window mpitrain has always given token data (a class model then refuses
 * the token set by name; a user's token model reads windows of it). */
int mt_model_window(const char *name);

/* Prints the hyper-parameters of the model named name (a built-in; what its
 * options read) into f, part line of mt_model_builtin.print: the
 * configuration printed at start. */
void mt_model_print(const char *name, FILE *f, int line);

/* The hyper-parameters a made model m was set up with (its own copy, in
 * m->data), or NULL when m is not that built-in: for the device twins
 * (src/cuda/dmodel_*.c) and whoever reads a model's shape. */
const mt_mlp_hparams *mt_mlp_hparams_of(const mt_model *m);
const mt_cnn_hparams *mt_cnn_hparams_of(const mt_model *m);
const mt_gpt_hparams *mt_gpt_hparams_of(const mt_model *m);

/* The options readers of the built-ins beside mt_option_* (registry.c),
 * with mt_config's messages: a comma-separated list of at most max
 * positive integers into v[0..*n); a boolean (given without a value: 1;
 * 0/1, true/false, yes/no, on/off); one of the NULL-terminated choices
 * (the first is the default) into out. */
int mt_model_option_ints(const char *name, const char *help, const char *def, int *v, int max,
                         int *n);
int mt_model_option_bool(const char *name, const char *help, int def, int *out);
int mt_model_option_choice(const char *name, const char *help, const char *const *choices,
                           char *out, size_t len);
/* err if it is an error, else e: reading goes on after a bad option (so
 * -help lists every one) and the first error is the one reported. */
static inline int mt_first_err(int err, int e) { return err ? err : e; }

/* PyTorch's default for nn.Linear and nn.Conv2d: weight and bias uniform in
 * +-1/sqrt(fan_in), fan_in = the weight's dims after the first; each 1-d
 * tensor (bias) takes the fan-in of the weight just before it. Drawn from the
 * counter-based generator keyed by (seed, purpose, tensor index). (A 1-d
 * tensor after other 1-d ones takes the nearest weight before it: a model
 * with norms re-initialises theirs afterwards.) */
int mt_init_torch_default(const mt_model *m, float *params, uint64_t seed, uint64_t purpose);

/* Held activations (nn/lowp.h): a training forward under a low precision
 * holds the activations that feed a GEMM of its own and one of the
 * backward, converted, in a table of the model's, and both passes compute
 * under a policy that looks in it (mt_model_policy); the backward clears
 * it. Begin (at the forward's start) clears what an earlier forward left
 * and answers whether this one holds. */
static inline int mt_model_holds_begin(mt_nn_holds *t, const mt_batch *bt,
                                       const mt_nn_policy *pol) {
  mt_nn_holds_clear(t, 0);
  return bt->train && mt_nn_compute(pol) != MT_PREC_FP32;
}
static inline void mt_model_holds_end(mt_nn_holds *t, int *held) {
  mt_nn_holds_clear(t, 0);
  *held = 0;
}
static inline const mt_nn_policy *mt_model_policy(int held, const mt_nn_policy *p, mt_nn_holds *t,
                                                  mt_nn_policy *copy) {
  return held ? mt_nn_with_holds(p, t, copy) : p;
}

/* Helpers of the models for float and double (registry_t.h): declared
 * once in models_decl_t.h, as nn.h does for the layers. */
#define MT_TEMPLATE "models/models_decl_t.h"
#include "core/real_t.h"

/* The model buffers (running statistics) of a model's element type. */
static inline float *mt_model_buf(const mt_model *m) { return m->buf; }
static inline double *mt_model_buf_f64(const mt_model *m) { return m->buf64; }

#endif
