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

#endif
