/* -mode generate's body (mode_generate.c): text from a trained gpt with
 * the key/value cache of models/gpt_generate.h. Tokens are bytes: the
 * prompt's bytes are its tokens, and a model of at most 256 tokens writes
 * its tokens as bytes (a larger vocabulary as decimal ids, one space
 * after each). */
#ifndef MT_TRAINER_GENERATE_H
#define MT_TRAINER_GENERATE_H

#include "core/core.h"
#include "models/gpt_generate.h"

#include <stdio.h>

#define MT_PROMPT_MAX 4096 /* -prompt's bytes with the NUL (the options database's) */

typedef struct {
  char prompt[MT_PROMPT_MAX];     /* -prompt TEXT                             */
  char prompt_file[MT_PATH_MAX];  /* -prompt_file F: its bytes are the prompt */
  mt_gen_opts gen;                /* -max_new_tokens, -temperature, -top_k;
                                     gen.seed is the run's -seed            */
} mt_generate_opts;

/* Reads -prompt, -prompt_file, -max_new_tokens, -temperature and -top_k
 * with mt_option_* (errors name the option). o->gen.seed is left to the
 * caller. */
int mt_generate_read_options(mt_generate_opts *o);

/* Rank 0 of comm generates from model m (a gpt) with float parameters
 * params in its layout (rank 0's are read), prints prompt and continuation to out, and,
 * when output_dir is not NULL, writes them to OUTPUT_DIR/generated.txt
 * (made if missing); a line of figures (tokens, seconds, tokens/s) goes
 * to stderr. Exactly one of o->prompt and o->prompt_file is given (else
 * MT_ERR_OPTION naming them). The prompt file's and the prompt's errors name them
 * (io: MT_ERR_FILE; a byte outside the vocabulary: MT_ERR_DATA naming the
 * byte and its position; too long for the block: MT_ERR_OPTION naming
 * -max_new_tokens or the prompt). Collective over comm: every rank
 * returns rank 0's error. */
int mt_generate_text(const mt_model *m, const float *params, MPI_Comm comm,
                     const mt_generate_opts *o, const char *output_dir, FILE *out);

#endif
