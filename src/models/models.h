/* Built-in models. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "mpitrain/mpitrain.h"

extern const mt_model_ops mt_mlp_ops;

/* Hidden sizes the mlp model uses (set from -mlp_hidden before create). */
int mt_mlp_set_hidden(const int *sizes, int n);

#endif
