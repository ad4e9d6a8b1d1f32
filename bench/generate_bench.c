/* Tokens/s of gpt text generation at batch 1 (src/models/gpt_generate.c),
 * the mpitrain side of bench/bench_generate.sh.
 *
 *   bench/generate_bench LAYERS EMBD HEADS BLOCK PROMPT NEW [REPS [NOCACHE]]
 *
 * A gpt of vocabulary 256 (bytes) with GPT-2's initialisation (seed 1),
 * greedy decoding of NEW tokens after a prompt of PROMPT bytes, REPS times
 * after one untimed run. One line per timed run:
 *
 *   RESULT mpitrain tokens_per_s=X prefill_ms=P prefill_1by1_ms=Q nocache_tokens_per_s=Y
 *
 * tokens_per_s: NEW over the time of the whole generation (prefill
 * included, as the torch peer times it); prefill_ms: the prompt in one
 * pass, prefill_1by1_ms: token by token (the choice gpt_generate makes);
 * nocache_tokens_per_s: what decoding costs without a cache, one full
 * forward of the model (the whole window, gpt_t.h) per new token, timed
 * over NOCACHE tokens (default min(NEW, 8); 0: not measured, the field
 * is 0). Threads: OMP_NUM_THREADS. */
#include "models/gpt_generate.h"
#include "models/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what) {
  fprintf(stderr, "generate_bench: %s: %s\n", what, mt_error_message());
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s LAYERS EMBD HEADS BLOCK PROMPT NEW [REPS [NOCACHE]]\n", argv[0]);
    return 2;
  }
  const int L = atoi(argv[1]), C = atoi(argv[2]), NH = atoi(argv[3]), T = atoi(argv[4]);
  const int P = atoi(argv[5]), N = atoi(argv[6]), reps = argc > 7 ? atoi(argv[7]) : 5, V = 256;
  const int nf = argc > 8 ? atoi(argv[8]) : N < 8 ? N : 8;
  const mt_model_hparams hp = {.gpt = {.layers = L, .heads = NH, .embd = C, .block = T,
                                       .gelu_tanh = 1}};
  mt_data_spec sp = {.ndim = 1, .shape = {T}, .sample_numel = T, .nclasses = V, .tokens = 1};
  mt_model *m = NULL;
  mt_gpt_gen *g = NULL;
  if (mt_model_create_hp("gpt", &hp, &sp, 1, MT_FP32, &m)) return die("model");
  float *p = calloc(m->params.total, sizeof(float)), *lg = calloc((size_t)V, sizeof(float));
  float *full = calloc((size_t)T * V, sizeof(float));
  int32_t *seq = calloc((size_t)T + 1, sizeof(int32_t));
  if (!p || !lg || !full || !seq) return 1;
  if (mt_model_init(m, p, 1) || mt_gpt_gen_create(m, &g)) return die("init");
  const char *text = "The quick brown fox jumps over the lazy dog. ";
  for (int i = 0; i < P; i++) seq[i] = (unsigned char)text[i % (int)strlen(text)];
  const mt_gen_opts o = {.max_new_tokens = N, .temperature = 0, .top_k = 0, .seed = 1};
  for (int r = 0; r <= reps; r++) {
    double t0 = mt_now();
    if (mt_gpt_generate(g, p, seq, P, &o, seq + P, NULL)) return die("generate");
    const double gen_s = mt_now() - t0;
    mt_gpt_gen_reset(g);
    t0 = mt_now();
    if (mt_gpt_gen_feed(g, p, seq, P, lg)) return die("prefill");
    const double pre = mt_now() - t0;
    mt_gpt_gen_reset(g);
    t0 = mt_now();
    for (int i = 0; i < P; i++)
      if (mt_gpt_gen_feed(g, p, seq + i, 1, lg)) return die("prefill");
    const double pre1 = mt_now() - t0;
    t0 = mt_now();
    for (int i = 0; i < nf; i++) { /* the window holds the sequence so far */
      mt_batch bt = {.n = 1, .tokens = seq, .tokens_len = T + 1};
      mt_batch_stats st = {0};
      st.logits = full, st.logits_len = T * V;
      if (m->ops->forward(m, p, &bt, NULL, &st)) return die("full forward");
    }
    const double nocache = mt_now() - t0;
    if (r) /* the first run warms caches and oneDNN's kernels */
      printf("RESULT mpitrain tokens_per_s=%.1f prefill_ms=%.3f prefill_1by1_ms=%.3f "
             "nocache_tokens_per_s=%.1f\n", N / gen_s, 1e3 * pre, 1e3 * pre1, nf ? nf / nocache : 0.0);
  }
  mt_gpt_gen_destroy(&g);
  mt_model_destroy(&m);
  free(p), free(lg), free(full), free(seq);
  return 0;
}
