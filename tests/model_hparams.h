/* The built-in models' hyper-parameters given by a unit test rather than
 * read from their options (mt_model_create_hp), shared by the tests that
 * build models directly. */
#ifndef MT_TESTS_MODEL_HPARAMS_H
#define MT_TESTS_MODEL_HPARAMS_H

#include "models/models.h"

#include <string.h>

static inline mt_model_hparams mlp_hp(const int *sizes, int n, double dropout) {
  mt_model_hparams h = {.mlp = {.nhidden = n, .dropout = dropout}};
  memcpy(h.mlp.hidden, sizes, (size_t)n * sizeof(int));
  return h;
}
static inline mt_model_hparams cnn_hp(const int *channels, int n, int kernel, int hidden, int batchnorm,
                               double dropout) {
  mt_model_hparams h = {.cnn = {.nblocks = n, .kernel = kernel, .hidden = hidden,
                                .batchnorm = batchnorm, .dropout = dropout}};
  memcpy(h.cnn.channels, channels, (size_t)n * sizeof(int));
  return h;
}
static inline mt_model_hparams gpt_hp(int layers, int heads, int embd, int block, int gelu_tanh,
                               double dropout) {
  return (mt_model_hparams){.gpt = {.layers = layers, .heads = heads, .embd = embd, .block = block,
                                    .gelu_tanh = gelu_tanh, .dropout = dropout}};
}

#endif
