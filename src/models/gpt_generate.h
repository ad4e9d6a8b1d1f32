/* Text generation with the built-in gpt (models/gpt.c): a decoder over the
 * model's own flat parameters with a key/value cache, so each new token
 * costs one position's forward through every block instead of the whole
 * window's (Hugging Face's past_key_values, nanoGPT's generate without the
 * recomputation). It computes in fp32 on float parameters in the model's
 * layout (an fp64 model's rounded by the caller), whatever policy the
 * model was trained under.
 *
 * Decoding: greedy (the first of equal maxima) when temperature is 0 or
 * top_k is 1; otherwise the logits divided by the temperature, cut to the
 * top_k largest (0: all; a value tied with the k-th stays), a softmax in
 * double and one uniform draw from the counter-based generator keyed by
 * (seed, position of the token drawn) (core.h: mt_key / mt_rand64), so a
 * seed gives the same text at every run, at any rank and thread count. */
#ifndef MT_GPT_GENERATE_H
#define MT_GPT_GENERATE_H

#include "core/core.h"

#include <stdint.h>

/* random numbers of generation: mt_key(seed, MT_PURPOSE_GENERATE, 0) */
#define MT_PURPOSE_GENERATE 31

typedef struct {
  int max_new_tokens; /* tokens to generate (>= 1)                          */
  double temperature; /* 0: greedy; > 0: sampling                           */
  int top_k;          /* 0: the whole vocabulary; 1: greedy                 */
  uint64_t seed;      /* the draws of sampling                              */
} mt_gen_opts;

/* The decoder of one gpt: its shape, the key/value cache of every block
 * (keys and values of positions [0, pos)) and scratch rows. */
typedef struct mt_gpt_gen mt_gpt_gen;

/* Makes a decoder for m (a gpt, float or fp64; MT_ERR_ARG for another
 * model). Allocates the cache for the model's whole window. */
int mt_gpt_gen_create(const mt_model *m, mt_gpt_gen **g);
void mt_gpt_gen_destroy(mt_gpt_gen **g);
/* The model's window T (-gpt_block) and vocabulary V. */
int mt_gpt_gen_block(const mt_gpt_gen *g);
int mt_gpt_gen_vocab(const mt_gpt_gen *g);
/* Empties the cache: the next token fed is position 0. */
void mt_gpt_gen_reset(mt_gpt_gen *g);
/* Positions in the cache (tokens fed since the last reset). */
int mt_gpt_gen_pos(const mt_gpt_gen *g);

/* Feeds n >= 1 tokens at positions [pos, pos + n) in one pass (their
 * rows go through each GEMM together: the prompt's prefill), appends their
 * keys and values to the cache and writes the logits (V) of the last one
 * into logits. params: m's flat parameters. A position past the window is
 * MT_ERR_ARG (callers check lengths first, naming their options), a token
 * outside [0, V) MT_ERR_DATA. */
int mt_gpt_gen_feed(mt_gpt_gen *g, const float *params, const int32_t *tokens, int n,
                    float *logits);

/* The next token from logits (V) by o's rule (see above); pos is the
 * position of the token drawn (the counter of its draw). scratch holds 2V
 * doubles. NaN or infinite logits are MT_ERR_NUMERIC. */
int mt_gpt_pick(const float *logits, int V, const mt_gen_opts *o, int64_t pos, double *scratch,
                int32_t *token);

/* Checks a prompt against the model: not empty, every token in [0, V)
 * (MT_ERR_DATA naming the byte and its position), and prompt plus
 * o->max_new_tokens within the window T (MT_ERR_OPTION naming
 * -max_new_tokens and -gpt_block). what names the prompt in messages
 * ("-prompt", or the file of -prompt_file). */
int mt_gpt_gen_check(const mt_gpt_gen *g, const int32_t *prompt, int P, const mt_gen_opts *o,
                     const char *what);

/* The whole generation: checks (mt_gpt_gen_check), resets the cache,
 * prefills the prompt (P tokens) and writes o->max_new_tokens tokens into
 * out; logits (max_new_tokens, V) receives the logits each one was picked
 * from (NULL: not wanted). */
int mt_gpt_generate(mt_gpt_gen *g, const float *params, const int32_t *prompt, int P,
                    const mt_gen_opts *o, int32_t *out, float *logits);

#endif
