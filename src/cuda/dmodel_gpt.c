/* The gpt model on a CUDA device: models/gpt_t.h's forward and backward
 * with the kernels of cuda/kernels.h, in float, the same tensors in the same
 * order (models/gpt.c names them). Sizes from the table: wte (V,C), wpe
 * (T,C), 12 tensors per block, ln_f last; heads, GELU form and dropout from
 * the options. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cuda/dmodel.h"

#include <string.h>

#define NPER 12
#define LN_EPS 1e-5f
#define MAXL 64
enum { WTE = 0, WPE = 1 };
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB };
static int bidx(int l, int k) { return 2 + l * NPER + k; }
static int lnf_idx(int L, int k) { return 2 + L * NPER + k; }

/* one block's activations (a) or their gradients (d: no att, preatt,
 * means or rstds) */
typedef struct {
  float *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj, *res3;
  float *preatt, *att, *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
} acts;

typedef struct {
  int L, NH, C, T, V;
  mt_gelu_kind gelu;
  float drop;
  acts a[MAXL], d[MAXL];
  float *enc, *denc, *lnf, *lnf_mean, *lnf_rstd, *dlnf, *logits, *dlogits;
  int32_t *inp, *tgt;
  uint8_t *mask_enc, *mask_att[MAXL], *mask_fc[MAXL];
  int B, dropped;
} dgpt;

#define NACT 10 /* the fields of acts that gradients have too */

static int alloc_acts(mt_dmodel *d, acts *a, size_t N, size_t C, size_t att, int grads) {
  float **f[] = {&a->ln1, &a->qkv, &a->atty, &a->attproj, &a->res2, &a->ln2, &a->fch,
                 &a->fch_gelu, &a->fcproj, &a->res3, &a->preatt, &a->att,
                 &a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd};
  const size_t n[] = {N * C, N * 3 * C, N * C, N * C, N * C, N * C, N * 4 * C,
                      N * 4 * C, N * C, N * C, att, att, N, N, N, N};
  const size_t k = grads ? NACT : sizeof(n) / sizeof(n[0]);
  for (size_t i = 0; i < k; i++) MT_CALL(mt_dmodel_alloc(d, f[i], n[i] * sizeof(float)));
  return 0;
}

static void free_acts(acts *a) {
  float *f[] = {a->ln1, a->qkv, a->atty, a->attproj, a->res2, a->ln2, a->fch, a->fch_gelu,
                a->fcproj, a->res3, a->preatt, a->att, a->ln1_mean, a->ln1_rstd, a->ln2_mean,
                a->ln2_rstd};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) cudaFree(f[i]);
}

static int gpt_setup(mt_dmodel *d) {
  const mt_model *m = d->host;
  const mt_gpt_hparams *hp = mt_gpt_hparams_of(m);
  dgpt *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "gpt on the device"));
  d->data = s;
  MT_CHECK(m->params.n >= 4 && (m->params.n - 4) % NPER == 0 && (m->params.n - 4) / NPER <= MAXL,
           MT_ERR_STATE, "gpt on the device: %d tensors", m->params.n);
  MT_CHECK(hp, MT_ERR_STATE, "gpt on the device: the CPU model is not the built-in gpt");
  s->L = (m->params.n - 4) / NPER;
  s->V = (int)m->params.p[WTE].shape[0];
  s->C = (int)m->params.p[WTE].shape[1];
  s->T = (int)m->params.p[WPE].shape[0];
  s->NH = hp->heads;
  MT_CHECK(s->NH > 0 && s->C % s->NH == 0, MT_ERR_OPTION,
           "option -gpt_heads: %d does not divide the width %d", s->NH, s->C);
  s->gelu = hp->gelu_tanh ? MT_GELU_TANH : MT_GELU_ERF;
  s->drop = (float)hp->dropout;
  d->losses_per_sample = s->T; /* per token */
  const size_t N = (size_t)d->max_batch * s->T, C = (size_t)s->C;
  const size_t att = (size_t)d->max_batch * s->NH * s->T * s->T;
  for (int l = 0; l < s->L; l++) {
    MT_CALL(alloc_acts(d, &s->a[l], N, C, att, 0));
    MT_CALL(alloc_acts(d, &s->d[l], N, C, att, 1));
  }
  float **f[] = {&s->enc, &s->denc, &s->lnf, &s->dlnf, &s->logits, &s->dlogits, &s->lnf_mean,
                 &s->lnf_rstd};
  const size_t n[] = {N * C, N * C, N * C, N * C, N * s->V, N * s->V, N, N};
  for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++)
    MT_CALL(mt_dmodel_alloc(d, f[i], n[i] * sizeof(float)));
  MT_CALL(mt_dmodel_alloc(d, &s->inp, N * sizeof(int32_t)));
  MT_CALL(mt_dmodel_alloc(d, &s->tgt, N * sizeof(int32_t)));
  if (s->drop > 0) {
    MT_CALL(mt_dmodel_alloc(d, &s->mask_enc, N * C));
    for (int l = 0; l < s->L; l++) {
      MT_CALL(mt_dmodel_alloc(d, &s->mask_att[l], N * C));
      MT_CALL(mt_dmodel_alloc(d, &s->mask_fc[l], N * C));
    }
  }
  return 0;
}

#define PW(k) ((const float *)mt_dmodel_at(d, params, 0, (k)))
#define GW(k) mt_dmodel_at(d, grads, 1, (k))

static int gpt_forward(mt_dmodel *d, const float *params, const mt_dbatch *b, const mt_dsums *sum) {
  dgpt *s = d->data;
  mt_cuda_ctx *cx = d->cx;
  cudaStream_t st = cx->stream;
  const int B = b->n, T = s->T, C = s->C, NH = s->NH, V = s->V;
  MT_CHECK(b->tokens && b->tokens_len == T + 1, MT_ERR_DATA,
           "model gpt needs token windows of %d + 1 tokens", T);
  MT_CHECK(B <= d->max_batch, MT_ERR_ARG, "batch %d exceeds %d", B, d->max_batch);
  s->B = B;
  s->dropped = b->train && s->drop > 0;
  if (B == 0) {
    MT_CUDA_RT(cudaMemsetAsync(sum->loss_sum, 0, sizeof(double), st));
    if (sum->count) MT_CUDA_RT(cudaMemsetAsync(sum->count, 0, sizeof(int64_t), st));
    return 0;
  }
  const int N = B * T;
  const int64_t row = (int64_t)T * C;
  /* the windows' inputs [0,T) and targets [1,T] as (B,T) arrays */
  const size_t w = (size_t)(T + 1) * sizeof(int32_t), tb = (size_t)T * sizeof(int32_t);
  MT_CUDA_RT(cudaMemcpy2DAsync(s->inp, tb, b->tokens, w, tb, (size_t)B, cudaMemcpyDeviceToDevice, st));
  MT_CUDA_RT(cudaMemcpy2DAsync(s->tgt, tb, b->tokens + 1, w, tb, (size_t)B, cudaMemcpyDeviceToDevice,
                               st));
  MT_CALL(mt_dmodel_unit_use(d, 0, 0));
  MT_CALL(mt_cuda_embedding_forward(s->enc, s->inp, PW(WTE), PW(WPE), B, T, C, V, cx));
  if (s->dropped)
    MT_CALL(mt_cuda_model_dropout(s->enc, s->mask_enc, s->drop, b->key, b->ids, B, 0, row, st));
  const float *res = s->enc;
  for (int l = 0; l < s->L; l++) {
    acts *a = &s->a[l];
    const int64_t NC = (int64_t)N * C;
    MT_CALL(mt_dmodel_unit_use(d, l + 1, 0));
    MT_CALL(mt_cuda_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, res, PW(bidx(l, LN1W)),
                                      PW(bidx(l, LN1B)), N, C, LN_EPS, st));
    MT_CALL(mt_cuda_linear_forward(a->qkv, a->ln1, PW(bidx(l, QKVW)), PW(bidx(l, QKVB)), N, C,
                                   3 * C, cx));
    MT_CALL(mt_cuda_attention_forward(a->atty, a->preatt, a->att, a->qkv, B, T, C, NH, cx));
    MT_CALL(mt_cuda_linear_forward(a->attproj, a->atty, PW(bidx(l, PROJW)), PW(bidx(l, PROJB)), N,
                                   C, C, cx));
    if (s->dropped)
      MT_CALL(mt_cuda_model_dropout(a->attproj, s->mask_att[l], s->drop, b->key, b->ids, B,
                                    1 + 2 * l, row, st));
    MT_CALL(mt_cuda_residual_forward(a->res2, res, a->attproj, NC, st));
    MT_CALL(mt_cuda_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                      PW(bidx(l, LN2W)), PW(bidx(l, LN2B)), N, C, LN_EPS, st));
    MT_CALL(mt_cuda_linear_forward(a->fch, a->ln2, PW(bidx(l, FCW)), PW(bidx(l, FCB)), N, C,
                                   4 * C, cx));
    MT_CALL(mt_cuda_gelu_forward(a->fch_gelu, a->fch, 4 * NC, s->gelu, st));
    MT_CALL(mt_cuda_linear_forward(a->fcproj, a->fch_gelu, PW(bidx(l, FCPW)), PW(bidx(l, FCPB)),
                                   N, 4 * C, C, cx));
    if (s->dropped)
      MT_CALL(mt_cuda_model_dropout(a->fcproj, s->mask_fc[l], s->drop, b->key, b->ids, B,
                                    2 + 2 * l, row, st));
    MT_CALL(mt_cuda_residual_forward(a->res3, a->res2, a->fcproj, NC, st));
    res = a->res3;
  }
  MT_CALL(mt_dmodel_unit_use(d, s->L + 1, 0));
  MT_CALL(mt_cuda_layernorm_forward(s->lnf, s->lnf_mean, s->lnf_rstd, res, PW(lnf_idx(s->L, 0)),
                                    PW(lnf_idx(s->L, 1)), N, C, LN_EPS, st));
  MT_CALL(mt_dmodel_unit_use(d, 0, 0));
  MT_CALL(mt_cuda_linear_forward(s->logits, s->lnf, PW(WTE), NULL, N, C, V, cx)); /* tied head */
  /* the softmax replaces the logits, as on the CPU */
  return mt_cuda_xent_ignore_forward(s->logits, sum->losses, sum->loss_sum, sum->count,
                                     sum->correct, s->logits, s->tgt, -1, N, V, cx);
}

static int gpt_backward(mt_dmodel *d, const float *params, float *grads, float scale, int B) {
  dgpt *s = d->data;
  mt_cuda_ctx *cx = d->cx;
  cudaStream_t st = cx->stream;
  MT_CHECK(B == s->B, MT_ERR_STATE, "gpt backward of %d samples after a forward of %d", B, s->B);
  if (B == 0) return 0;
  const int T = s->T, C = s->C, NH = s->NH, V = s->V, N = B * T;
  const size_t NC = (size_t)N * C * sizeof(float);
  MT_CUDA_RT(cudaMemsetAsync(s->dlogits, 0, (size_t)N * V * sizeof(float), st));
  MT_CUDA_RT(cudaMemsetAsync(s->dlnf, 0, NC, st));
  MT_CUDA_RT(cudaMemsetAsync(s->denc, 0, NC, st));
  for (int l = 0; l < s->L; l++) {
    acts *g = &s->d[l];
    float *f[NACT] = {g->ln1, g->qkv, g->atty, g->attproj, g->res2, g->ln2, g->fch, g->fch_gelu,
                      g->fcproj, g->res3};
    const size_t k[NACT] = {1, 3, 1, 1, 1, 1, 4, 4, 1, 1};
    for (int i = 0; i < NACT; i++) MT_CUDA_RT(cudaMemsetAsync(f[i], 0, NC * k[i], st));
  }
  MT_CALL(mt_cuda_xent_ignore_backward(s->dlogits, s->logits, s->tgt, -1, scale / (float)T, N, V,
                                       st));
  MT_CALL(mt_dmodel_unit_use(d, 0, 1));
  MT_CALL(mt_cuda_linear_backward(s->dlnf, GW(WTE), NULL, s->dlogits, s->lnf, PW(WTE), N, C, V,
                                  cx));
  const float *last = s->L ? s->a[s->L - 1].res3 : s->enc;
  float *dlast = s->L ? s->d[s->L - 1].res3 : s->denc;
  MT_CALL(mt_dmodel_unit_use(d, s->L + 1, 1));
  MT_CALL(mt_cuda_layernorm_backward(dlast, GW(lnf_idx(s->L, 0)), GW(lnf_idx(s->L, 1)), s->dlnf,
                                     last, PW(lnf_idx(s->L, 0)), s->lnf_mean, s->lnf_rstd, N, C,
                                     cx));
  mt_dmodel_unit_done(d, s->L + 1);
  for (int l = s->L - 1; l >= 0; l--) {
    acts *a = &s->a[l], *g = &s->d[l];
    const float *res = l ? s->a[l - 1].res3 : s->enc;
    float *dres = l ? s->d[l - 1].res3 : s->denc;
    const int64_t n = (int64_t)N * C;
    MT_CALL(mt_dmodel_unit_use(d, l + 1, 1));
    MT_CALL(mt_cuda_residual_backward(g->res2, g->fcproj, g->res3, n, st));
    if (s->dropped)
      MT_CALL(mt_cuda_model_dropout_backward(g->fcproj, s->mask_fc[l], s->drop, n, st));
    MT_CALL(mt_cuda_linear_backward(g->fch_gelu, GW(bidx(l, FCPW)), GW(bidx(l, FCPB)), g->fcproj,
                                    a->fch_gelu, PW(bidx(l, FCPW)), N, 4 * C, C, cx));
    MT_CALL(mt_cuda_gelu_backward(g->fch, g->fch_gelu, a->fch, 4 * n, s->gelu, st));
    MT_CALL(mt_cuda_linear_backward(g->ln2, GW(bidx(l, FCW)), GW(bidx(l, FCB)), g->fch, a->ln2,
                                    PW(bidx(l, FCW)), N, C, 4 * C, cx));
    MT_CALL(mt_cuda_layernorm_backward(g->res2, GW(bidx(l, LN2W)), GW(bidx(l, LN2B)), g->ln2,
                                       a->res2, PW(bidx(l, LN2W)), a->ln2_mean, a->ln2_rstd, N,
                                       C, cx));
    MT_CALL(mt_cuda_residual_backward(dres, g->attproj, g->res2, n, st));
    if (s->dropped)
      MT_CALL(mt_cuda_model_dropout_backward(g->attproj, s->mask_att[l], s->drop, n, st));
    MT_CALL(mt_cuda_linear_backward(g->atty, GW(bidx(l, PROJW)), GW(bidx(l, PROJB)), g->attproj,
                                    a->atty, PW(bidx(l, PROJW)), N, C, C, cx));
    MT_CALL(mt_cuda_attention_backward(g->qkv, a->preatt, g->atty, a->qkv, a->att, B, T, C, NH,
                                       cx));
    MT_CALL(mt_cuda_linear_backward(g->ln1, GW(bidx(l, QKVW)), GW(bidx(l, QKVB)), g->qkv, a->ln1,
                                    PW(bidx(l, QKVW)), N, C, 3 * C, cx));
    MT_CALL(mt_cuda_layernorm_backward(dres, GW(bidx(l, LN1W)), GW(bidx(l, LN1B)), g->ln1, res,
                                       PW(bidx(l, LN1W)), a->ln1_mean, a->ln1_rstd, N, C, cx));
    mt_dmodel_unit_done(d, l + 1);
  }
  if (s->dropped)
    MT_CALL(mt_cuda_model_dropout_backward(s->denc, s->mask_enc, s->drop, (int64_t)N * C, st));
  MT_CALL(mt_cuda_embedding_backward(GW(WTE), GW(WPE), s->denc, s->inp, B, T, C, cx));
  mt_dmodel_unit_done(d, 0); /* wte: the tied head's gradient came first */
  return 0;
}

static void gpt_destroy(mt_dmodel *d) {
  dgpt *s = d->data;
  if (!s) return;
  for (int l = 0; l < MAXL; l++) {
    free_acts(&s->a[l]);
    free_acts(&s->d[l]);
    cudaFree(s->mask_att[l]);
    cudaFree(s->mask_fc[l]);
  }
  float *f[] = {s->enc, s->denc, s->lnf, s->dlnf, s->logits, s->dlogits, s->lnf_mean, s->lnf_rstd};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) cudaFree(f[i]);
  cudaFree(s->mask_enc);
  cudaFree(s->inp);
  cudaFree(s->tgt);
  mt_free(&d->data);
}

static int gpt_per_sample(const mt_dmodel *d) { return ((const dgpt *)d->data)->T; }

static const float *gpt_outputs(const mt_dmodel *d, int *len) {
  (void)d;
  *len = 0;
  return NULL; /* token data: no per-sample outputs */
}

const mt_dmodel_ops mt_dmodel_gpt = {"gpt",       gpt_setup,      gpt_forward, gpt_backward,
                                     gpt_destroy, gpt_per_sample, gpt_outputs};
