/* Unit test of text generation with the gpt's key/value cache
 * (src/models/gpt_generate.c):
 *  (a) greedy decoding with the cache picks, at each position, the argmax
 *      of the model's own full forward (gpt_t.h, per-token logits through
 *      st.logits) over the sequence so far, and the cached logits equal
 *      the full forward's (1e-5 of their largest); a prompt prefilled in
 *      one pass gives the logits of one fed token by token; the double
 *      model's per-token logits are the float one's;
 *  (b) sampling: the same seed gives the same tokens twice, another seed
 *      other ones; top-k keeps every draw among the k largest; the draws
 *      follow the softmax (frequencies of 20000 draws);
 *  (c) top_k 1 is greedy at any temperature;
 *  (d) errors: a prompt too long, -max_new_tokens past the block, a token
 *      outside the vocabulary (naming the byte and its position), an empty
 *      prompt, a model that is not a gpt;
 *  (e) PyTorch (validation/gen_refs_generate.py, refs/generate.txt): the
 *      same gpt with the same weights (a formula both sides compute, see
 *      fill_params) decodes the same greedy tokens, with the same logits
 *      (1e-4 of their largest), and, sampled by the same rule from the
 *      same generator, the same tokens;
 *  (f) -mode generate's body (trainer/mode_generate.c): the text printed
 *      and written to OUTPUT_DIR/generated.txt is the prompt and the greedy
 *      tokens, from -prompt and from -prompt_file; a missing prompt file,
 *      a byte outside the vocabulary and -max_new_tokens past the block
 *      are refused naming them.
 * Prints one line per check; exits non-zero when any check fails. */
#include "models/gpt_generate.h"
#include "models/models.h"
#include "model_hparams.h"
#include "testutil.h"
#include "trainer/generate.h"

#include <mpi.h>
#include <unistd.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FULL_TOL 1e-5
#define TORCH_TOL 1e-5

/* The weights both sides compute (gen_refs_generate.py's fill_params):
 * tensor k of the table, element i: x = ((mt_rand64(mt_key(seed, 0x67656e,
 * k), i) >> 44) - 2^19) / 2^19 in [-1, 1), exact in float; LayerNorm
 * weights 1 + x/8, biases x/8, embeddings x/2, other weights x / 2^e with
 * 2^e about sqrt(fan_in), so activations stay near unit scale and the
 * logits' top two are well apart (greedy is then no coin toss between
 * rounding errors). */
static void fill_params(const mt_model *m, float *p, uint64_t seed) {
  for (int k = 0; k < m->params.n; k++) {
    const mt_param *q = &m->params.p[k];
    const char *nm = q->name;
    const size_t len = strlen(nm);
    const int bias = len > 5 && !strcmp(nm + len - 5, ".bias");
    const int ln = strstr(nm, "ln_") != NULL;
    const int emb = strstr(nm, "wte") || strstr(nm, "wpe");
    int e = 0; /* 2^e ~ sqrt(fan_in) */
    if (!bias && !ln && !emb)
      for (int64_t f = q->shape[1]; f >= 4; f /= 4) e++;
    const uint64_t key = mt_key(seed, 0x67656e, (uint64_t)k);
    for (size_t i = 0; i < q->numel; i++) {
      const float x = (float)((int64_t)(mt_rand64(key, i) >> 44) - (1 << 19)) / (float)(1 << 19);
      p[q->offset + i] = ln && !bias ? 1.0f + x / 8 : bias || ln ? x / 8 : emb ? x / 2 : ldexpf(x, -e);
    }
  }
}

static void expect_err(int err, int code, const char *part, const char *what);

typedef struct {
  mt_model *m;
  float *p;
  mt_gpt_gen *g;
  int T, V;
} net;

static int make(net *n, int V, int T, int L, int NH, int C, int gelu_tanh, uint64_t seed) {
  memset(n, 0, sizeof(*n));
  const mt_model_hparams hp = gpt_hp(L, NH, C, T, gelu_tanh, 0);
  mt_data_spec sp = {.ndim = 1, .shape = {T}, .sample_numel = T, .nclasses = V, .tokens = 1};
  int err = mt_model_create_hp("gpt", &hp, &sp, 1, MT_FP32, &n->m);
  if (!err) n->p = calloc(n->m->params.total, sizeof(float));
  if (!err) fill_params(n->m, n->p, seed);
  if (!err) err = mt_gpt_gen_create(n->m, &n->g);
  n->T = T, n->V = V;
  CHECK(!err, "gpt V=%d T=%d L=%d NH=%d C=%d made%s%s", V, T, L, NH, C, err ? ": " : "",
        err ? mt_error_message() : "");
  return err;
}

static void unmake(net *n) {
  mt_gpt_gen_destroy(&n->g);
  mt_model_destroy(&n->m);
  free(n->p);
}

/* The model's forward over seq[0, len) (padded with token 0 to a window
 * of T + 1; causal, so the padding does not reach positions < len): the
 * per-token logits (T, V). */
static int full_forward(net *n, const int32_t *seq, int len, float *logits) {
  int32_t *win = calloc((size_t)n->T + 1, sizeof(int32_t));
  memcpy(win, seq, (size_t)len * sizeof(int32_t));
  mt_batch bt = {.n = 1, .tokens = win, .tokens_len = n->T + 1};
  mt_batch_stats st = {0};
  st.logits = logits;
  st.logits_len = n->T * n->V;
  int err = n->m->ops->forward(n->m, n->p, &bt, NULL, &st);
  free(win);
  return err;
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* the gap between the largest and the second largest */
static double top_gap(const float *x, int n) {
  const int b = argmax(x, n);
  double second = -INFINITY;
  for (int i = 0; i < n; i++)
    if (i != b && x[i] > second) second = x[i];
  return x[b] - second;
}

/* (a) */
static void test_greedy_vs_full(int V, int T, int L, int NH, int C, int gelu_tanh, int P) {
  net n;
  if (make(&n, V, T, L, NH, C, gelu_tanh, 11)) return;
  const int N = T - P;
  int32_t *seq = calloc((size_t)T, sizeof(int32_t));
  for (int i = 0; i < P; i++) seq[i] = (int32_t)((7 * i + 3) % V);
  float *lg = calloc((size_t)N * V, sizeof(float)), *full = calloc((size_t)T * V, sizeof(float));
  const mt_gen_opts o = {.max_new_tokens = N, .temperature = 0, .top_k = 0, .seed = 1};
  int err = mt_gpt_generate(n.g, n.p, seq, P, &o, seq + P, lg);
  CHECK(!err, "greedy generate %d after %d: %s", N, P, err ? mt_error_message() : "");
  int same = 1, ferr = 0;
  double rel = 0, gap = INFINITY;
  for (int i = 0; !err && i < N && !ferr; i++) {
    ferr = full_forward(&n, seq, P + i, full);
    const float *row = full + (int64_t)(P + i - 1) * V; /* the position that predicts P + i */
    same &= argmax(row, V) == seq[P + i];
    rel = fmax(rel, tu_rel_err_f(lg + (int64_t)i * V, row, (size_t)V));
    gap = fmin(gap, top_gap(row, V));
  }
  CHECK(!ferr, "full forward with per-token logits: %s", ferr ? mt_error_message() : "");
  char what[96];
  snprintf(what, sizeof(what), "V=%d T=%d L=%d NH=%d C=%d gelu %s, prompt %d", V, T, L, NH, C,
           gelu_tanh ? "tanh" : "erf", P);
  CHECK(same, "%s: greedy token = argmax of the full forward at each of %d positions", what, N);
  CHECK_ERR(rel, FULL_TOL, "%s: cached logits vs the full forward's", what);
  CHECK(gap > 100 * FULL_TOL, "%s: the top two logits are %.3g apart at least (a meaningful argmax)",
        what, gap);
  /* the prompt fed token by token: the same logits as the one-pass prefill */
  float *one = calloc((size_t)V, sizeof(float));
  mt_gpt_gen_reset(n.g);
  for (int i = 0; !err && i < P; i++) err = mt_gpt_gen_feed(n.g, n.p, seq + i, 1, one);
  CHECK(!err && mt_gpt_gen_pos(n.g) == P, "%s: prompt fed token by token", what);
  CHECK_ERR(tu_rel_err_f(one, lg, (size_t)V), FULL_TOL, "%s: token-by-token prefill vs one pass", what);
  free(one), free(seq), free(lg), free(full);
  unmake(&n);
}

/* the per-token logits of the double model (forward64, st.logits64) are
 * the float model's to float rounding */
static void test_fp64_logits(void) {
  net n;
  if (make(&n, 30, 8, 1, 2, 8, 1, 13)) return;
  const mt_model_hparams hp = gpt_hp(1, 2, 8, 8, 1, 0);
  mt_data_spec sp = {.ndim = 1, .shape = {8}, .sample_numel = 8, .nclasses = 30, .tokens = 1};
  mt_model *m = NULL;
  int err = mt_model_create_hp("gpt", &hp, &sp, 1, MT_FP64, &m);
  double *p = err ? NULL : calloc(m->params.total, sizeof(double));
  double *l64 = calloc(8 * 30, sizeof(double));
  float *l32 = calloc(8 * 30, sizeof(float)), *w = calloc(8 * 30, sizeof(float));
  int32_t seq[8] = {1, 5, 9, 2, 29, 0, 3, 3}, win[9] = {1, 5, 9, 2, 29, 0, 3, 3, 0};
  for (size_t i = 0; p && i < m->params.total; i++) p[i] = n.p[i];
  if (!err) {
    mt_batch bt = {.n = 1, .tokens = win, .tokens_len = 9};
    mt_batch_stats st = {0};
    st.logits64 = l64, st.logits_len = 8 * 30;
    err = m->ops->forward64(m, p, &bt, NULL, &st);
  }
  if (!err) err = full_forward(&n, seq, 8, l32);
  for (int i = 0; i < 8 * 30; i++) w[i] = (float)l64[i];
  CHECK(!err, "fp64 gpt forward with per-token logits%s%s", err ? ": " : "", err ? mt_error_message() : "");
  CHECK_ERR(tu_rel_err_f(l32, w, 8 * 30), FULL_TOL, "per-token logits: float vs double model");
  mt_error_clear();
  /* a decoder of the fp64 model (its table, float parameters): the float
   * model's tokens */
  mt_gpt_gen *g64 = NULL;
  int32_t a[4] = {0}, b[4] = {1};
  const mt_gen_opts go = {.max_new_tokens = 4};
  int e2 = m ? mt_gpt_gen_create(m, &g64) : 1;
  if (!e2) e2 = mt_gpt_generate(g64, n.p, seq, 4, &go, a, NULL);
  if (!e2) e2 = mt_gpt_generate(n.g, n.p, seq, 4, &go, b, NULL);
  CHECK(!e2 && !memcmp(a, b, sizeof(a)), "a decoder of the fp64 model on float parameters");
  mt_gpt_gen_destroy(&g64);
  mt_error_clear();
  /* rows of another length are refused, as before (no per-sample logits) */
  mt_batch bt = {.n = 1, .tokens = win, .tokens_len = 9};
  mt_batch_stats st = {0};
  st.logits = l32, st.logits_len = 30;
  expect_err(n.m->ops->forward(n.m, n.p, &bt, NULL, &st), MT_ERR_ARG,
             "offers no per-sample logits (token data), only per-token ones in rows of T*V = 240",
             "logits rows of V");
  free(p), free(l64), free(l32), free(w);
  mt_model_destroy(&m);
  unmake(&n);
}

static int gen(net *n, const int32_t *prompt, int P, int N, double temp, int k, uint64_t seed,
               int32_t *out, float *lg) {
  const mt_gen_opts o = {.max_new_tokens = N, .temperature = temp, .top_k = k, .seed = seed};
  int err = mt_gpt_generate(n->g, n->p, prompt, P, &o, out, lg);
  if (err) {
    CHECK(0, "generate (T %g, top_k %d, seed %llu): %s", temp, k, (unsigned long long)seed,
          mt_error_message());
    mt_error_clear();
  }
  return err;
}

/* (b), (c) */
static void test_sampling(void) {
  net n;
  if (make(&n, 256, 48, 2, 2, 16, 1, 5)) return;
  const int32_t prompt[3] = {'a', 'b', 'c'};
  enum { N = 40 };
  int32_t a[N], b[N], c[N], greedy[N], k1[N], k3[N];
  float *lg = calloc((size_t)N * 256, sizeof(float));
  if (gen(&n, prompt, 3, N, 1.0, 0, 7, a, NULL) || gen(&n, prompt, 3, N, 1.0, 0, 7, b, NULL) ||
      gen(&n, prompt, 3, N, 1.0, 0, 8, c, NULL) || gen(&n, prompt, 3, N, 0, 0, 7, greedy, NULL) ||
      gen(&n, prompt, 3, N, 0.7, 1, 9, k1, NULL) || gen(&n, prompt, 3, N, 2.0, 3, 7, k3, lg)) {
    free(lg);
    unmake(&n);
    return;
  }
  CHECK(!memcmp(a, b, sizeof(a)), "sampling: seed 7 twice gives the same %d tokens", N);
  CHECK(memcmp(a, c, sizeof(a)), "sampling: seeds 7 and 8 give different tokens");
  CHECK(memcmp(a, greedy, sizeof(a)), "sampling at temperature 1 is not greedy decoding");
  CHECK(!memcmp(k1, greedy, sizeof(k1)), "top_k 1 (temperature 0.7) equals greedy decoding");
  int in_top = 1, not_first = 0;
  for (int i = 0; i < N; i++) { /* k3[i] among the 3 largest of the logits it was drawn from */
    const float *row = lg + (int64_t)i * 256;
    int above = 0;
    for (int v = 0; v < 256; v++) above += row[v] > row[k3[i]];
    in_top &= above < 3;
    not_first += above > 0;
  }
  CHECK(in_top, "top_k 3: every draw among the 3 largest logits");
  CHECK(not_first > 0, "top_k 3 at temperature 2: %d of %d draws not the largest", not_first, N);
  free(lg);
  unmake(&n);
}

/* mt_gpt_pick's draws follow softmax(logits / temperature), cut to top k */
static void test_pick_distribution(void) {
  const float logits[4] = {0.0f, 1.0f, 2.0f, -1.0f};
  double scratch[8];
  for (int k = 0; k <= 2; k += 2) {
    const mt_gen_opts o = {.max_new_tokens = 1, .temperature = 0.5, .top_k = k, .seed = 3};
    int count[4] = {0}, err = 0;
    const int draws = 20000;
    for (int i = 0; i < draws && !err; i++) {
      int32_t t = -1;
      err = mt_gpt_pick(logits, 4, &o, i, scratch, &t);
      if (!err) count[t]++;
    }
    double z = 0, want[4], worst = 0;
    for (int v = 0; v < 4; v++) z += (k == 0 || v == 1 || v == 2) ? exp(2.0 * logits[v]) : 0;
    for (int v = 0; v < 4; v++) {
      want[v] = (k == 0 || v == 1 || v == 2) ? exp(2.0 * logits[v]) / z : 0;
      worst = fmax(worst, fabs((double)count[v] / draws - want[v]));
    }
    /* 5 standard deviations of a frequency near 0.5 over 20000 draws: 0.018 */
    CHECK(!err && worst < 0.018 && (k == 0 || count[0] + count[3] == 0),
          "pick, temperature 0.5, top_k %d: frequencies %.4f %.4f %.4f %.4f vs softmax %.4f %.4f "
          "%.4f %.4f", k, count[0] / (double)draws, count[1] / (double)draws,
          count[2] / (double)draws, count[3] / (double)draws, want[0], want[1], want[2], want[3]);
  }
  const float bad[3] = {0.0f, NAN, 1.0f};
  const mt_gen_opts o = {.max_new_tokens = 1};
  int32_t t;
  int err = mt_gpt_pick(bad, 3, &o, 5, scratch, &t);
  CHECK(err == MT_ERR_NUMERIC && strstr(mt_error_message(), "logit 1 of position 5"),
        "a NaN logit is refused naming it: %s", mt_error_message());
  mt_error_clear();
}

static void expect_err(int err, int code, const char *part, const char *what) {
  CHECK(err == code && strstr(mt_error_message(), part), "%s refused (%s): %s", what, part,
        mt_error_message());
  mt_error_clear();
}

/* (d) */
static void test_errors(void) {
  net n;
  if (make(&n, 200, 16, 1, 2, 8, 1, 3)) return;
  int32_t prompt[20] = {1, 2, 3, 4, 5}, out[20];
  mt_gen_opts o = {.max_new_tokens = 12, .temperature = 0, .seed = 1};
  expect_err(mt_gpt_generate(n.g, n.p, prompt, 5, &o, out, NULL), MT_ERR_OPTION,
             "option -max_new_tokens: 12 after a prompt of 5 tokens is past the block size 16",
             "prompt + max_new_tokens past the block");
  o.max_new_tokens = 11; /* exactly the block: fine */
  CHECK(!mt_gpt_generate(n.g, n.p, prompt, 5, &o, out, NULL), "prompt + max_new_tokens = block");
  expect_err(mt_gpt_generate(n.g, n.p, prompt, 16, &o, out, NULL), MT_ERR_OPTION,
             "the prompt's 16 tokens fill the block size 16", "a prompt as long as the block");
  expect_err(mt_gpt_generate(n.g, n.p, prompt, 0, &o, out, NULL), MT_ERR_OPTION,
             "the prompt is empty", "an empty prompt");
  prompt[2] = 230;
  o.max_new_tokens = 2;
  expect_err(mt_gpt_generate(n.g, n.p, prompt, 5, &o, out, NULL), MT_ERR_DATA,
             "byte 230 at position 2 is outside the model's vocabulary of 200",
             "a token outside the vocabulary");
  prompt[2] = -1;
  expect_err(mt_gpt_gen_check(n.g, prompt, 5, &o, "prompt.txt"), MT_ERR_DATA,
             "prompt.txt: byte -1 at position 2", "a negative token");
  prompt[2] = 3;
  o.max_new_tokens = 0;
  expect_err(mt_gpt_gen_check(n.g, prompt, 5, &o, "-prompt"), MT_ERR_OPTION,
             "option -max_new_tokens: 0 is not positive", "-max_new_tokens 0");
  o.max_new_tokens = 1, o.temperature = -1;
  expect_err(mt_gpt_gen_check(n.g, prompt, 5, &o, "-prompt"), MT_ERR_OPTION, "option -temperature",
             "a negative temperature");
  /* the cache refuses a position past the window */
  float lg[200];
  mt_gpt_gen_reset(n.g);
  expect_err(mt_gpt_gen_feed(n.g, n.p, prompt, 17, lg), MT_ERR_ARG, "past the window of 16",
             "17 positions fed");
  unmake(&n);
  /* not a gpt */
  const int hid[1] = {4};
  const mt_model_hparams hp = mlp_hp(hid, 1, 0);
  mt_data_spec sp = {.ndim = 1, .shape = {3}, .sample_numel = 3, .nclasses = 2};
  mt_model *m = NULL;
  mt_gpt_gen *g = NULL;
  if (!mt_model_create_hp("mlp", &hp, &sp, 1, MT_FP32, &m))
    expect_err(mt_gpt_gen_create(m, &g), MT_ERR_ARG, "generation needs a gpt model, not mlp",
               "an mlp");
  mt_gpt_gen_destroy(&g);
  mt_model_destroy(&m);
}

/* (e) */
static void test_torch(const tu_ref *r, const char *name) {
  char key[96];
#define REFT(field) (snprintf(key, sizeof(key), "%s.%s", name, field), tu_ref_get(r, key, -1))
  const double *hp = REFT("hp")->v; /* V T L NH C gelu_tanh fill_seed */
  net n;
  if (make(&n, (int)hp[0], (int)hp[1], (int)hp[2], (int)hp[3], (int)hp[4], (int)hp[5],
           (uint64_t)hp[6]))
    return;
  const tu_tensor *pr = REFT("prompt"), *gr = REFT("greedy"), *steps = REFT("logit_steps");
  const tu_tensor *lr = REFT("logits"), *smp = REFT("sample"), *sr = REFT("sampled");
  const int P = (int)pr->n, N = (int)gr->n, V = n.V;
  int32_t *prompt = calloc((size_t)P, sizeof(int32_t)), *out = calloc((size_t)N, sizeof(int32_t));
  for (int i = 0; i < P; i++) prompt[i] = (int32_t)pr->v[i];
  float *lg = calloc((size_t)N * V, sizeof(float));
  if (!gen(&n, prompt, P, N, 0, 0, 0, out, lg)) {
    int same = 1;
    for (int i = 0; i < N; i++) same &= out[i] == (int32_t)gr->v[i];
    CHECK(same, "%s: greedy tokens equal PyTorch's (%d after a prompt of %d)", name, N, P);
    double rel = 0;
    for (int s = 0; s < steps->n; s++)
      rel = fmax(rel, tu_rel_err_fd(lg + (int64_t)steps->v[s] * V, lr->v + (int64_t)s * V, (size_t)V));
    CHECK_ERR(rel, TORCH_TOL, "%s: logits of %lld steps vs PyTorch's", name, (long long)steps->n);
  }
  const int Ns = (int)sr->n;
  if (!gen(&n, prompt, P, Ns, smp->v[0], (int)smp->v[1], (uint64_t)smp->v[2], out, NULL)) {
    int same = 1;
    for (int i = 0; i < Ns; i++) same &= out[i] == (int32_t)sr->v[i];
    CHECK(same, "%s: sampled tokens (temperature %g, top_k %d, seed %d) equal the script's", name,
          smp->v[0], (int)smp->v[1], (int)smp->v[2]);
  }
#undef REFT
  free(prompt), free(out), free(lg);
  unmake(&n);
}

/* a whole file's bytes (at most cap) into buf; the count, or -1 */
static long slurp(const char *path, char *buf, long cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  long n = (long)fread(buf, 1, (size_t)cap, f);
  fclose(f);
  return n;
}

/* (f) */
static void test_mode_body(void) {
  net n;
  if (make(&n, 100, 32, 2, 2, 16, 1, 9)) return;
  char dir[] = "/tmp/test_generate.XXXXXX", sub[64], path[128], text[256], file[256];
  const char *tmpd = getenv("TMPDIR");
  char tdir[512];
  snprintf(tdir, sizeof(tdir), "%s/test_generate.XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
  char *d = mkdtemp(tmpd && *tmpd ? tdir : dir);
  CHECK(d != NULL, "a temporary folder");
  if (!d) {
    unmake(&n);
    return;
  }
  snprintf(sub, sizeof(sub), "%.40s/out", d);
  mt_generate_opts o = {.gen = {.max_new_tokens = 20, .temperature = 0, .seed = 4}};
  snprintf(o.prompt, sizeof(o.prompt), "%s", "AB=CD!");
  /* the expected text: the prompt's bytes, then greedy tokens */
  int32_t prompt[6], want[20];
  for (int i = 0; i < 6; i++) prompt[i] = (unsigned char)o.prompt[i];
  int err = gen(&n, prompt, 6, 20, 0, 0, 4, want, NULL);
  char expect[64];
  memcpy(expect, "AB=CD!", 6);
  for (int i = 0; i < 20; i++) expect[6 + i] = (char)want[i];
  expect[26] = '\n';
  FILE *out = tmpfile();
  if (!err && out) err = mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &o, sub, out);
  CHECK(!err && out, "-prompt: generated%s%s", err ? ": " : "", err ? mt_error_message() : "");
  long nt = -1, nf = -1;
  if (out) {
    rewind(out);
    nt = (long)fread(text, 1, sizeof(text), out);
    fclose(out);
  }
  snprintf(path, sizeof(path), "%s/generated.txt", sub);
  nf = slurp(path, file, sizeof(file));
  CHECK(nt == 27 && !memcmp(text, expect, 27), "printed text = prompt + %d greedy tokens + newline", 20);
  CHECK(nf == 26 && !memcmp(file, expect, 26), "generated.txt = prompt + greedy tokens (%ld bytes)", nf);
  /* the same prompt from a file, no output folder */
  snprintf(path, sizeof(path), "%.40s/prompt.txt", d);
  FILE *pf = fopen(path, "wb");
  if (pf) {
    fwrite("AB=CD!", 1, 6, pf);
    fclose(pf);
  }
  mt_generate_opts of = o;
  of.prompt[0] = '\0';
  snprintf(of.prompt_file, sizeof(of.prompt_file), "%s", path);
  out = tmpfile();
  err = out ? mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &of, NULL, out) : 1;
  nt = -1;
  if (out) {
    rewind(out);
    nt = (long)fread(text, 1, sizeof(text), out);
    fclose(out);
  }
  CHECK(!err && nt == 27 && !memcmp(text, expect, 27), "-prompt_file: the same text");
  mt_error_clear();
  /* errors, each naming its cause */
  snprintf(of.prompt_file, sizeof(of.prompt_file), "%.40s/none.txt", d);
  FILE *sink = tmpfile();
  expect_err(mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &of, NULL, sink), MT_ERR_FILE,
             "option -prompt_file: cannot read", "a missing prompt file");
  snprintf(o.prompt, sizeof(o.prompt), "%s", "abc\x80" "d");
  expect_err(mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &o, NULL, sink), MT_ERR_DATA,
             "option -prompt: byte 128 at position 3 is outside the model's vocabulary of 100",
             "a prompt byte outside the vocabulary");
  snprintf(o.prompt, sizeof(o.prompt), "%s", "ABCDEFGHIJKLM");
  expect_err(mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &o, NULL, sink), MT_ERR_OPTION,
             "option -max_new_tokens: 20 after a prompt of 13 tokens is past the block size 32",
             "-max_new_tokens past the block");
  mt_generate_opts none = {.gen = {.max_new_tokens = 2}};
  expect_err(mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &none, NULL, sink), MT_ERR_OPTION,
             "option -prompt: -mode generate needs a prompt", "no prompt");
  snprintf(none.prompt, sizeof(none.prompt), "a");
  snprintf(none.prompt_file, sizeof(none.prompt_file), "b");
  expect_err(mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &none, NULL, sink), MT_ERR_OPTION,
             "option -prompt_file: give -prompt or -prompt_file, not both", "both prompts");
  snprintf(o.prompt, sizeof(o.prompt), "%s", "AB=CD!");
  expect_err(mt_generate_text(n.m, n.p, MPI_COMM_WORLD, &o, path, sink), MT_ERR_FILE,
             "option -output_dir", "an output folder that is a file");
  if (sink) fclose(sink);
  remove(path);
  snprintf(path, sizeof(path), "%s/generated.txt", sub);
  remove(path);
  rmdir(sub);
  rmdir(d);
  unmake(&n);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  tu_ref R;
  tu_ref_load(&R, "generate.txt");
  test_greedy_vs_full(64, 24, 2, 2, 16, 1, 5);
  test_greedy_vs_full(256, 20, 3, 4, 16, 0, 1);
  test_greedy_vs_full(40, 12, 1, 1, 8, 1, 11);
  test_fp64_logits();
  test_sampling();
  test_pick_distribution();
  test_errors();
  test_torch(&R, "bytes");
  test_torch(&R, "small");
  test_mode_body();
  tu_ref_free(&R);
  const int rc = tu_finish("test_generate");
  MPI_Finalize();
  return rc;
}
