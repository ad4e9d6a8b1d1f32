/* Built-in models. */
#ifndef MT_MODELS_H
#define MT_MODELS_H

#include "mpitrain/mpitrain.h"

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

/* The per-sample outputs st asks for (pred = argmax, logits) from a
 * classifier's logits (B, C); model names the model in errors. */
int mt_model_put_outputs(const char *model, mt_batch_stats *st, const float *logits, int B, int C);

/* Dropout of a batch's rows x (b->n, row_len), in place, only in a training
 * pass (b->train) with p > 0: row i's mask is drawn from the key
 * (b->key, layer, b->ids[i]) (see mt_batch), so it is the same for a sample
 * whatever rank, thread or micro-batch computes it; mask (b->n, row_len)
 * records it. Backward in place on the gradient d: d = d * mask / (1 - p)
 * (a no-op for p <= 0; call it only after a training forward). */
void mt_model_dropout(float *x, uint8_t *mask, float p, const mt_batch *b, int layer,
                      int64_t row_len);
void mt_model_dropout_backward(float *d, const uint8_t *mask, float p, int64_t n);

#endif
