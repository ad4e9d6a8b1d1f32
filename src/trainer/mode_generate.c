/* -mode generate -model_file F: text from a trained gpt (trainer/generate.h)
 *
 *   mpitrain -mode generate -model_file out/model_final.h5 -prompt "Once upon"
 *            -max_new_tokens 200 [-temperature 0.8 -top_k 40 -seed 7]
 *            [-output_dir DIR]
 *
 * Greedy decoding by default (-temperature 0); sampling at a temperature,
 * cut to -top_k, draws keyed by -seed and the position, so a seed gives
 * the same text at every run and rank count. Rank 0 generates (one
 * sequence at batch 1: more ranks would only repeat it); the others wait
 * for its result, so an error ends every rank. */
#include "trainer/generate.h"
#include "trainer/mode.h"

#include "io/io.h"
#include "io/modelfile.h"
#include "io/space.h"
#include "models/models.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mt_generate_read_options(mt_generate_opts *o) {
  long n = 0, k = 0;
  double temp = 0;
  int err = mt_option_string("-prompt", "generate: the prompt, its bytes the first tokens", "",
                             o->prompt, sizeof(o->prompt));
  err = mt_first_err(err, mt_option_string("-prompt_file", "generate: a file whose bytes are the "
                                           "prompt (instead of -prompt)", "", o->prompt_file,
                                           sizeof(o->prompt_file)));
  err = mt_first_err(err, mt_option_int("-max_new_tokens", "generate: tokens to generate (the "
                                        "prompt and they fit the block, -gpt_block)", 64, 1,
                                        1 << 24, &n));
  err = mt_first_err(err, mt_option_real("-temperature", "generate: 0 greedy decoding, > 0 "
                                         "sampling from softmax(logits / temperature)", 0, 0,
                                         1e6, &temp));
  err = mt_first_err(err, mt_option_int("-top_k", "generate: sample among the k most likely "
                                        "tokens (0: all; 1: greedy)", 0, 0, 1 << 24, &k));
  if (err) return err;
  o->gen.max_new_tokens = (int)n, o->gen.temperature = temp, o->gen.top_k = (int)k;
  return 0;
}

/* The prompt's bytes as tokens into *tok (made here), their count in *n;
 * what names it in messages. */
static int load_prompt(const mt_generate_opts *o, int32_t **tok, int *n, char *what, size_t len) {
  unsigned char *bytes = NULL;
  size_t nb = 0;
  if (o->prompt_file[0]) {
    snprintf(what, len, "option -prompt_file: %s", o->prompt_file);
    FILE *f = fopen(o->prompt_file, "rb");
    MT_CHECK(f, MT_ERR_FILE, "option -prompt_file: cannot read %s: %s", o->prompt_file,
             strerror(errno));
    size_t cap = 0;
    int err = 0;
    for (;;) {
      if (nb == cap) {
        cap = cap ? 2 * cap : 4096;
        unsigned char *b = realloc(bytes, cap);
        if (!b) {
          err = MT_ERR(MT_ERR_MEM, "option -prompt_file: %s: out of memory", o->prompt_file);
          break;
        }
        bytes = b;
      }
      size_t got = fread(bytes + nb, 1, cap - nb, f);
      nb += got;
      if (got == 0) break;
    }
    if (!err && ferror(f))
      err = MT_ERR(MT_ERR_FILE, "option -prompt_file: cannot read %s: %s", o->prompt_file,
                   strerror(errno));
    fclose(f);
    if (err) {
      free(bytes);
      return err;
    }
  } else {
    snprintf(what, len, "option -prompt");
    nb = strlen(o->prompt);
  }
  /* longer than any block: refused here, before its tokens are made */
  int err = nb > (size_t)1 << 24 ? MT_ERR(MT_ERR_OPTION, "%s: a prompt of %zu bytes is longer "
                                          "than any block (-gpt_block)", what, nb) : 0;
  if (!err) err = mt_calloc(tok, nb ? nb : 1, sizeof(int32_t), "the prompt's tokens");
  const unsigned char *src = o->prompt_file[0] ? bytes : (const unsigned char *)o->prompt;
  for (size_t i = 0; !err && i < nb; i++) (*tok)[i] = src[i];
  free(bytes);
  *n = (int)nb;
  return err;
}

/* tokens as text: bytes for a vocabulary of at most 256, else ids */
static int put(FILE *f, const int32_t *t, int n, int V) {
  for (int i = 0; i < n; i++)
    if ((V <= 256 ? fputc(t[i], f) : fprintf(f, "%d ", (int)t[i])) < 0) return -1;
  return 0;
}

static int write_file(const char *dir, const int32_t *t, int n, int V) {
  char path[MT_PATH_MAX + 32], tmp[MT_PATH_MAX + 40];
  MT_CALL(mt_mkdir_p(dir));
  snprintf(path, sizeof(path), "%s/generated.txt", dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return MT_WRITE_FAILED("opening", tmp, errno);
  /* a full disk or a quota: said naming the file, nothing half-written left */
  int bad = put(f, t, n, V) || fflush(f) != 0 || ferror(f), e = errno;
  if (fclose(f) != 0 && !bad) bad = 1, e = errno;
  if (bad || rename(tmp, path) != 0) {
    if (!bad) e = errno;
    unlink(tmp);
    return MT_WRITE_FAILED("writing", path, e);
  }
  return 0;
}

static int generate0(const mt_model *m, const float *params, const mt_generate_opts *o,
                     const char *output_dir, FILE *out) {
  char what[MT_PATH_MAX + 32];
  int32_t *seq = NULL;
  int P = 0;
  mt_gpt_gen *g = NULL;
  int err = load_prompt(o, &seq, &P, what, sizeof(what));
  if (!err) err = mt_gpt_gen_create(m, &g);
  if (!err) err = mt_gpt_gen_check(g, seq, P, &o->gen, what);
  int32_t *all = NULL; /* the prompt and what follows */
  const int N = o->gen.max_new_tokens;
  if (!err) err = mt_calloc(&all, (size_t)P + N, sizeof(int32_t), "the generated tokens");
  double secs = 0;
  if (!err) {
    memcpy(all, seq, (size_t)P * sizeof(int32_t));
    const double t0 = mt_now();
    err = mt_gpt_generate(g, params, seq, P, &o->gen, all + P, NULL);
    secs = mt_now() - t0;
  }
  const int V = g ? mt_gpt_gen_vocab(g) : 256;
  if (!err) {
    if (put(out, all, P + N, V) || fputc('\n', out) < 0 || fflush(out))
      err = MT_ERR(MT_ERR_WRITE, "generate: cannot write the text to standard output: %s",
                   strerror(errno));
  }
  if (!err && output_dir) err = write_file(output_dir, all, P + N, V);
  if (!err) {
    if (o->gen.temperature == 0 || o->gen.top_k == 1)
      fprintf(stderr, "generate: %d tokens after a prompt of %d in %.3f s (%.1f tokens/s), greedy\n",
              N, P, secs, N / (secs > 0 ? secs : 1e-9));
    else
      fprintf(stderr, "generate: %d tokens after a prompt of %d in %.3f s (%.1f tokens/s), "
              "temperature %g, top_k %d, seed %llu\n", N, P, secs, N / (secs > 0 ? secs : 1e-9),
              o->gen.temperature, o->gen.top_k, (unsigned long long)o->gen.seed);
  }
  mt_free(&all);
  mt_free(&seq);
  mt_gpt_gen_destroy(&g);
  return err;
}

int mt_generate_text(const mt_model *m, const float *params, MPI_Comm comm,
                     const mt_generate_opts *o, const char *output_dir, FILE *out) {
  int rank = 0;
  MT_MPI(MPI_Comm_rank(comm, &rank));
  /* checked here, not when read: -help lists the options without a prompt */
  int err = 0;
  if (o->prompt[0] && o->prompt_file[0])
    err = MT_ERR(MT_ERR_OPTION, "option -prompt_file: give -prompt or -prompt_file, not both");
  else if (!o->prompt[0] && !o->prompt_file[0])
    err = MT_ERR(MT_ERR_OPTION, "option -prompt: -mode generate needs a prompt (-prompt TEXT or "
                 "-prompt_file FILE)");
  else if (rank == 0)
    err = generate0(m, params, o, output_dir, out);
  return mt_agree(comm, err);
}

/* ------------------------------------------------------------ the mode */

static mt_generate_opts opts_; /* read before the configuration (mode.h) */

static int read_options(void) { return mt_generate_read_options(&opts_); }

/* besides mt_mode_common: its own (so that other modes name it as
 * generate's) and the seed of sampling */
static const char *const options_[] = {"-prompt", "-prompt_file", "-max_new_tokens", "-temperature",
                                       "-top_k", "-seed", NULL};

/* whether the user gave -output_dir (the file is written only then) */
static int output_dir_given(void) {
  for (int i = 0; i < mt_option_count(); i++) {
    const char *value;
    int set;
    const char *name = mt_option_read(i, &value, &set);
    if (name && !strcmp(name, "-output_dir")) return set;
  }
  return 0;
}

static int run(const mt_config *c, const mt_comm *comm, mt_mode_end *end) {
  (void)end;
  mt_data_spec spec;
  int found = 0;
  MT_CALL(mt_agree(comm->world, mt_model_file_spec(c->model_file, "-model_file", &spec, &found)));
  int err = 0;
  if (!found)
    err = MT_ERR(MT_ERR_OPTION, "option -model_file: %s does not describe its model (written "
                 "before model files did): -mode generate needs a gpt's file that does",
                 c->model_file);
  else if (!spec.tokens || strcmp(c->model, "gpt"))
    err = MT_ERR(MT_ERR_OPTION, "option -model_file: %s holds a model %s, not a gpt: -mode "
                 "generate needs one", c->model_file, c->model);
  MT_CALL(mt_agree(comm->world, err));
  mt_trainer *t = NULL;
  err = mt_trainer_create_use(&t, c, comm, &spec);
  /* an fp64 model generates in fp32: its parameters rounded */
  float *p32 = NULL;
  const size_t n = err ? 0 : t->model->params.total;
  if (!err && t->dtype == MT_FP64) err = mt_calloc(&p32, n ? n : 1, sizeof(float), "fp32 parameters");
  for (size_t i = 0; p32 && i < n; i++) p32[i] = (float)((const double *)t->params)[i];
  opts_.gen.seed = c->seed;
  if (!err)
    err = mt_generate_text(t->model, p32 ? p32 : t->params, comm->world, &opts_,
                           output_dir_given() ? c->output_dir : NULL, stdout);
  mt_free(&p32);
  mt_trainer_destroy(&t);
  return err;
}

const mt_mode_ops mt_mode_generate = {
    .name = "generate",
    .help = "text from -model_file's gpt after -prompt: greedy, or sampled (-temperature, -top_k, -seed)",
    .options = options_,
    .read_options = read_options,
    .run = run,
};
