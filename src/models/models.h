/* Built-in models. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "mpitrain/mpitrain.h"

extern const mt_model_ops mt_mlp_ops;
extern const mt_model_ops mt_cnn_ops;
extern const mt_model_ops mt_gpt_ops;

/* Hidden sizes the mlp model uses (set from -mlp_hidden before create). */
int mt_mlp_set_hidden(const int *sizes, int n);
/* Blocks' channels, kernel size and hidden units of the cnn model. */
int mt_cnn_set(const int *channels, int n, int kernel, int hidden);
/* Blocks, heads, width, context length and GELU form of the gpt model. */
int mt_gpt_set(int layers, int heads, int embd, int block, int gelu_tanh);

/* PyTorch's default for nn.Linear and nn.Conv2d: weight and bias uniform in
 * +-1/sqrt(fan_in), fan_in = the weight's dims after the first; each 1-d
 * tensor (bias) takes the fan-in of the weight just before it. Drawn from the
 * counter-based generator keyed by (seed, purpose, tensor index). */
int mt_init_torch_default(const mt_model *m, float *params, uint64_t seed, uint64_t purpose);

/* The per-sample outputs st asks for (pred = argmax, logits) from a
 * classifier's logits (B, C); model names the model in errors. */
int mt_model_put_outputs(const char *model, mt_batch_stats *st, const float *logits, int B, int C);

#endif
