/* Built-in models. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "mpitrain/mpitrain.h"

#include <stdint.h>

extern const mt_model_ops mt_mlp_ops;
extern const mt_model_ops mt_cnn_ops;
extern const mt_model_ops mt_gpt_ops;

/* Hidden sizes and dropout the mlp model uses (from -mlp_hidden and
 * -mlp_dropout, before create). */
int mt_mlp_set(const int *sizes, int n, double dropout);
/* Blocks' channels, kernel size, hidden units, batch norm on/off and the
 * classifier's dropout of the cnn model. */
int mt_cnn_set(const int *channels, int n, int kernel, int hidden, int batchnorm, double dropout);
/* Blocks, heads, width, context length, GELU form and dropout of the gpt
 * model. */
int mt_gpt_set(int layers, int heads, int embd, int block, int gelu_tanh, double dropout);

/* PyTorch's default for nn.Linear and nn.Conv2d: weight and bias uniform in
 * +-1/sqrt(fan_in), fan_in = the weight's dims after the first; each 1-d
 * tensor (bias) takes the fan-in of the weight just before it. Drawn from the
 * counter-based generator keyed by (seed, purpose, tensor index). (A 1-d
 * tensor after other 1-d ones takes the nearest weight before it: a model
 * with norms re-initialises theirs afterwards.) */
int mt_init_torch_default(const mt_model *m, float *params, uint64_t seed, uint64_t purpose);

/* Helpers of the models for float and double (registry_t.h): declared
 * once in models_decl_t.h, as nn.h does for the layers. */
#define MT_TEMPLATE "models/models_decl_t.h"
#include "core/real_t.h"

/* The model buffers (running statistics) of a model's element type. */
static inline float *mt_model_buf(const mt_model *m) { return m->buf; }
static inline double *mt_model_buf_f64(const mt_model *m) { return m->buf64; }

#endif
