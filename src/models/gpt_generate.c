/* Text generation with the built-in gpt and a key/value cache (see
 * gpt_generate.h). The arithmetic is gpt_t.h's forward for the rows fed:
 * the same layer functions (embedding, layer norm, linear through the
 * project's GEMM, GELU, residual) on those rows only, and its attention
 * (q k^T scaled, a max-subtracted softmax, att v) for each fed row against
 * the cached keys and values of every position up to its own, so the
 * logits equal a full forward's at each position to rounding (the order of
 * the sums differs from the GEMM's). */
#include "models/gpt_generate.h"

#include "models/models.h"
#include "nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS 1e-5f /* gpt_t.h's */

/* offsets of a block's tensors in the flat parameters, in gpt.c's order */
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, NPER };
static const char *const block_names[NPER] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

struct mt_gpt_gen {
  int L, NH, C, T, V, pos;
  mt_gelu_kind gelu;
  size_t wte, wpe, lnfw, lnfb;
  size_t (*off)[NPER]; /* (L) each block's tensors                         */
  float *kc, *vc;      /* (L, T, C): keys and values of positions [0, pos)  */
  /* scratch for up to T rows fed together */
  float *x, *ln, *qkv, *y, *h, *hg, *mean, *rstd, *att, *logits;
  double *pick;        /* (2V) mt_gpt_pick's                                 */
};

static int find(const mt_model *m, const char *name, size_t numel, size_t *off) {
  const mt_param *q = mt_param_table_find(&m->params, name);
  MT_CHECK(q && q->numel == numel, MT_ERR_ARG,
           "gpt generation: the model has no tensor %s of %zu values", name, numel);
  *off = q->offset;
  return 0;
}

int mt_gpt_gen_create(const mt_model *m, mt_gpt_gen **out) {
  *out = NULL;
  const mt_gpt_hparams *hp = mt_gpt_hparams_of(m);
  MT_CHECK(hp, MT_ERR_ARG, "generation needs a gpt model, not %s", m && m->ops ? m->ops->name : "none");
  /* m's table only: the parameters are float whatever m->dtype (the
   * caller rounds an fp64 model's) */
  mt_gpt_gen *g;
  MT_CALL(mt_calloc(&g, 1, sizeof(*g), "gpt generation"));
  *out = g;
  g->L = hp->layers, g->NH = hp->heads, g->C = hp->embd;
  g->T = (int)m->spec.sample_numel, g->V = m->spec.nclasses;
  g->gelu = hp->gelu_tanh ? MT_GELU_TANH : MT_GELU_ERF;
  const size_t C = (size_t)g->C, T = (size_t)g->T, V = (size_t)g->V;
  MT_CALL(find(m, "transformer.wte.weight", V * C, &g->wte));
  MT_CALL(find(m, "transformer.wpe.weight", T * C, &g->wpe));
  MT_CALL(find(m, "transformer.ln_f.weight", C, &g->lnfw));
  MT_CALL(find(m, "transformer.ln_f.bias", C, &g->lnfb));
  MT_CALL(mt_calloc(&g->off, (size_t)g->L, sizeof(*g->off), "gpt generation"));
  const size_t numel[NPER] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  char name[MT_NAME_MAX];
  for (int l = 0; l < g->L; l++)
    for (int k = 0; k < NPER; k++) {
      snprintf(name, sizeof(name), "transformer.h.%d.%s", l, block_names[k]);
      MT_CALL(find(m, name, numel[k], &g->off[l][k]));
    }
  const size_t cache = (size_t)g->L * T * C;
  float **f[] = {&g->kc, &g->vc, &g->x, &g->ln, &g->qkv, &g->y, &g->h, &g->hg, &g->mean,
                 &g->rstd, &g->att, &g->logits};
  const size_t n[] = {cache, cache, T * C, T * C, 3 * T * C, T * C, 4 * T * C, 4 * T * C, T, T,
                      (size_t)g->NH * T, V};
  for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++)
    MT_CALL(mt_calloc(f[i], n[i], sizeof(float), "gpt generation cache"));
  MT_CALL(mt_calloc(&g->pick, 2 * V, sizeof(double), "gpt generation"));
  return 0;
}

void mt_gpt_gen_destroy(mt_gpt_gen **pg) {
  mt_gpt_gen *g = *pg;
  if (!g) return;
  float **f[] = {&g->kc, &g->vc, &g->x, &g->ln, &g->qkv, &g->y, &g->h, &g->hg, &g->mean,
                 &g->rstd, &g->att, &g->logits};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) mt_free(f[i]);
  mt_free(&g->pick);
  mt_free(&g->off);
  mt_free(pg);
}

int mt_gpt_gen_block(const mt_gpt_gen *g) { return g->T; }
int mt_gpt_gen_vocab(const mt_gpt_gen *g) { return g->V; }
void mt_gpt_gen_reset(mt_gpt_gen *g) { g->pos = 0; }
int mt_gpt_gen_pos(const mt_gpt_gen *g) { return g->pos; }

/* Rows [p0, p0 + n) of one block's attention: y (n, C) from q in qkv
 * (n, 3C) and the cached keys and values kc, vc (T, C) of positions up to
 * each row's own. Heads are independent (their own att row), so the result
 * does not depend on the thread count. */
static void attend(const mt_gpt_gen *g, float *y, const float *qkv, const float *kc,
                   const float *vc, int p0, int n) {
  const int C = g->C, NH = g->NH, hs = C / NH, T = g->T;
  const float scale = 1.0f / sqrtf((float)hs);
  for (int t = 0; t < n; t++) {
    const int npos = p0 + t + 1;
#pragma omp parallel for schedule(static) if (NH > 1 && (int64_t)npos * C >= (1 << 15))
    for (int h = 0; h < NH; h++) {
      const float *q = qkv + (int64_t)t * 3 * C + h * hs;
      float *a = g->att + (int64_t)h * T; /* a row per head */
      float *out = y + (int64_t)t * C + h * hs;
      float mx = -INFINITY;
      for (int j = 0; j < npos; j++) {
        const float *k = kc + (int64_t)j * C + h * hs;
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < hs; d++) s += q[d] * k[d];
        a[j] = scale * s;
        mx = a[j] > mx ? a[j] : mx;
      }
      float sum = 0;
      for (int j = 0; j < npos; j++) {
        a[j] = expf(a[j] - mx);
        sum += a[j];
      }
      const float inv = 1.0f / sum;
      for (int d = 0; d < hs; d++) out[d] = 0;
      for (int j = 0; j < npos; j++) {
        const float w = a[j] * inv;
        const float *v = vc + (int64_t)j * C + h * hs;
        for (int d = 0; d < hs; d++) out[d] += w * v[d];
      }
    }
  }
}

int mt_gpt_gen_feed(mt_gpt_gen *g, const float *params, const int32_t *tokens, int n,
                    float *logits) {
  MT_CHECK(n >= 1 && g->pos + n <= g->T, MT_ERR_ARG,
           "gpt generation: %d tokens at position %d are past the window of %d", n, g->pos, g->T);
  const int C = g->C, p0 = g->pos;
  const int64_t nC = (int64_t)n * C;
#define W(k) (params + (k))
  /* wpe from row p0: the embedding of rows [p0, p0 + n) */
  MT_CALL(mt_embedding_forward(g->x, tokens, W(g->wte), W(g->wpe) + (int64_t)p0 * C, 1, n, C, g->V));
  for (int l = 0; l < g->L; l++) {
    const size_t *o = g->off[l];
    float *kc = g->kc + (int64_t)l * g->T * C, *vc = g->vc + (int64_t)l * g->T * C;
    mt_layernorm_forward(g->ln, g->mean, g->rstd, g->x, W(o[LN1W]), W(o[LN1B]), n, C, LN_EPS);
    MT_CALL(mt_linear_forward(g->qkv, g->ln, W(o[QKVW]), W(o[QKVB]), n, C, 3 * C, NULL));
    for (int t = 0; t < n; t++) { /* the new rows' keys and values into the cache */
      memcpy(kc + (int64_t)(p0 + t) * C, g->qkv + (int64_t)t * 3 * C + C, (size_t)C * sizeof(float));
      memcpy(vc + (int64_t)(p0 + t) * C, g->qkv + (int64_t)t * 3 * C + 2 * C, (size_t)C * sizeof(float));
    }
    attend(g, g->y, g->qkv, kc, vc, p0, n);
    MT_CALL(mt_linear_forward(g->h, g->y, W(o[PROJW]), W(o[PROJB]), n, C, C, NULL));
    mt_residual_forward(g->x, g->x, g->h, nC);
    mt_layernorm_forward(g->ln, g->mean, g->rstd, g->x, W(o[LN2W]), W(o[LN2B]), n, C, LN_EPS);
    MT_CALL(mt_linear_forward(g->h, g->ln, W(o[FCW]), W(o[FCB]), n, C, 4 * C, NULL));
    mt_gelu_forward(g->hg, g->h, 4 * nC, g->gelu);
    MT_CALL(mt_linear_forward(g->y, g->hg, W(o[FCPW]), W(o[FCPB]), n, 4 * C, C, NULL));
    mt_residual_forward(g->x, g->x, g->y, nC);
  }
  /* only the last row's logits are wanted: the final norm and the tied
   * head on that row */
  const float *last = g->x + (int64_t)(n - 1) * C;
  mt_layernorm_forward(g->ln, g->mean, g->rstd, last, W(g->lnfw), W(g->lnfb), 1, C, LN_EPS);
  MT_CALL(mt_linear_forward(logits, g->ln, W(g->wte), NULL, 1, C, g->V, NULL));
#undef W
  g->pos += n;
  return 0;
}

static int desc(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

int mt_gpt_pick(const float *logits, int V, const mt_gen_opts *o, int64_t pos, double *scratch,
                int32_t *token) {
  int best = 0;
  for (int i = 0; i < V; i++) {
    MT_CHECK(isfinite(logits[i]), MT_ERR_NUMERIC,
             "generation: logit %d of position %lld is %g (the model's parameters are not finite?)",
             i, (long long)pos, (double)logits[i]);
    if (logits[i] > logits[best]) best = i;
  }
  if (o->temperature == 0 || o->top_k == 1) { /* greedy: the first of equal maxima */
    *token = best;
    return 0;
  }
  double *z = scratch, *s = scratch + V;
  for (int i = 0; i < V; i++) z[i] = (double)logits[i] / o->temperature;
  double kth = -INFINITY; /* the k-th largest: values below it are cut */
  if (o->top_k > 0 && o->top_k < V) {
    memcpy(s, z, (size_t)V * sizeof(double));
    qsort(s, (size_t)V, sizeof(double), desc);
    kth = s[o->top_k - 1];
  }
  const double mx = z[best];
  double sum = 0;
  for (int i = 0; i < V; i++) {
    s[i] = z[i] >= kth ? exp(z[i] - mx) : 0;
    sum += s[i];
  }
  /* one uniform draw in [0, 1) with 53 bits, keyed by (seed, position) */
  const uint64_t key = mt_key(o->seed, MT_PURPOSE_GENERATE, 0);
  const double u = (double)(mt_rand64(key, (uint64_t)pos) >> 11) * (1.0 / 9007199254740992.0);
  const double target = u * sum;
  double cum = 0;
  int pick = best; /* rounding may leave target at the very top: the max stays possible */
  for (int i = 0; i < V; i++) {
    if (s[i] == 0) continue;
    cum += s[i];
    pick = i;
    if (cum > target) break;
  }
  *token = pick;
  return 0;
}

int mt_gpt_gen_check(const mt_gpt_gen *g, const int32_t *prompt, int P, const mt_gen_opts *o,
                     const char *what) {
  MT_CHECK(P >= 1, MT_ERR_OPTION, "%s: the prompt is empty (generation starts from a token)", what);
  for (int i = 0; i < P; i++)
    MT_CHECK(prompt[i] >= 0 && prompt[i] < g->V, MT_ERR_DATA,
             "%s: byte %d at position %d is outside the model's vocabulary of %d tokens", what,
             (int)prompt[i], i, g->V);
  MT_CHECK(P < g->T, MT_ERR_OPTION,
           "%s: the prompt's %d tokens fill the block size %d (-gpt_block): no room for a new one",
           what, P, g->T);
  MT_CHECK(o->max_new_tokens >= 1, MT_ERR_OPTION, "option -max_new_tokens: %d is not positive",
           o->max_new_tokens);
  MT_CHECK((int64_t)P + o->max_new_tokens <= g->T, MT_ERR_OPTION,
           "option -max_new_tokens: %d after a prompt of %d tokens is past the block size %d "
           "(-gpt_block); at most %d", o->max_new_tokens, P, g->T, g->T - P);
  MT_CHECK(isfinite(o->temperature) && o->temperature >= 0, MT_ERR_OPTION,
           "option -temperature: %g is not a finite value >= 0", o->temperature);
  MT_CHECK(o->top_k >= 0, MT_ERR_OPTION, "option -top_k: %d is negative", o->top_k);
  return 0;
}

int mt_gpt_generate(mt_gpt_gen *g, const float *params, const int32_t *prompt, int P,
                    const mt_gen_opts *o, int32_t *out, float *logits) {
  MT_CALL(mt_gpt_gen_check(g, prompt, P, o, "-prompt"));
  const int V = g->V;
  mt_gpt_gen_reset(g);
  MT_CALL(mt_gpt_gen_feed(g, params, prompt, P, g->logits)); /* the prefill: one pass */
  for (int i = 0; i < o->max_new_tokens; i++) {
    if (logits) memcpy(logits + (int64_t)i * V, g->logits, (size_t)V * sizeof(float));
    MT_CALL(mt_gpt_pick(g->logits, V, o, P + i, g->pick, &out[i]));
    if (i + 1 < o->max_new_tokens) MT_CALL(mt_gpt_gen_feed(g, params, &out[i], 1, g->logits));
  }
  return 0;
}
