/* test_layers, the GPT block's other layers: GELU (tanh and erf), the
 * residual add, dropout (determinism by key, offsets, kept fraction), the
 * token and position embedding and causal self-attention. */
#include "test_layers.h"

/* ------------------------------------------------- GELU, residual, dropout */

typedef struct {
  float *out, *inp, *R;
  int64_t n;
  mt_gelu_kind kind;
} gelu_ctx;

static double gelu_loss(void *p) {
  gelu_ctx *x = p;
  mt_gelu_forward(x->out, x->inp, x->n, x->kind);
  return wsum(x->out, x->R, x->n);
}

static void test_gelu(mt_gelu_kind kind) {
  char what[64];
  tu_ref r; /* PyTorch's names: approximate='tanh' or 'none' (erf) */
  open_ref(&r, what, sizeof(what), "gelu %s", "l_gelu_%s.txt",
           kind == MT_GELU_TANH ? "tanh" : "none");
  const int64_t n = tu_ref_get(&r, "inp", -1)->n;
  float *inp = tu_ref_floats(&r, "inp", n), *dout = tu_ref_floats(&r, "dout", n);
  float *out = zeros(n), *dinp = zeros(n);
  mt_gelu_forward(out, inp, n, kind);
  cmp(&r, "out", out, n, REF_TOL, what);
  mt_gelu_backward(dinp, dout, inp, n, kind);
  cmp(&r, "dinp", dinp, n, REF_TOL, what);
  mt_gelu_backward(dinp, dout, inp, n, kind);
  cmp2(&r, "dinp", dinp, n, what);
  /* MT_GELU_SET_DINP writes dinp whole without reading it (NaN before),
   * in place too */
  for (int64_t i = 0; i < n; i++) dinp[i] = NAN;
  mt_gelu_backward_ex(dinp, dout, inp, n, kind, MT_GELU_SET_DINP);
  cmp(&r, "dinp", dinp, n, REF_TOL, what);
  memcpy(dinp, dout, (size_t)n * sizeof(float));
  mt_gelu_backward_ex(dinp, dinp, inp, n, kind, MT_GELU_SET_DINP);
  cmp(&r, "dinp", dinp, n, REF_TOL, what);
  /* finite differences on the first 40 inputs (tails excluded: flat) */
  gelu_ctx x = {out, inp + 3, dout, 40, kind};
  memset(dinp, 0, (size_t)n * sizeof(float));
  mt_gelu_backward(dinp, dout, inp + 3, 40, kind);
  fd_check(dinp, x.inp, 40, 0.05f, 1, gelu_loss, &x, "%s", what);
  free(inp), free(dout), free(out), free(dinp);
  tu_ref_free(&r);
}

static void test_residual(void) {
  tu_ref r;
  tu_ref_load(&r, "l_residual.txt");
  const int64_t n = 21;
  float *a = tu_ref_floats(&r, "a", n), *b = tu_ref_floats(&r, "b", n);
  float *dout = tu_ref_floats(&r, "dout", n), *out = zeros(n), *da = zeros(n), *db = zeros(n);
  mt_residual_forward(out, a, b, n);
  cmp(&r, "out", out, n, 0.0, "residual");
  mt_residual_backward(da, db, dout, n);
  cmp(&r, "da", da, n, 0.0, "residual");
  mt_residual_backward(da, NULL, dout, n);
  cmp2(&r, "da", da, n, "residual");
  cmp(&r, "db", db, n, 0.0, "residual (db untouched when NULL)");
  mt_residual_forward(a, a, b, n); /* in place */
  cmp(&r, "out", a, n, 0.0, "residual in place (out == a)");
  free(a), free(b), free(dout), free(out), free(da), free(db);
  tu_ref_free(&r);
}

static void test_dropout(void) {
  const int64_t n = 100000;
  const float p = 0.3f, scale = 1.0f / (1.0f - p);
  uint64_t rng = 77;
  float *inp = rnd(n, &rng, 1), *out = zeros(n), *out2 = zeros(n), *dinp = zeros(n);
  uint8_t *mask = calloc((size_t)n, 1), *mask2 = calloc((size_t)n, 1);
  const uint64_t key = mt_dropout_key(42, 7, 1, 3);
  mt_dropout_forward(out, mask, inp, p, key, 0, 1, n);
  int64_t kept = 0;
  int exact = 1;
  for (int64_t i = 0; i < n; i++) {
    kept += mask[i];
    exact &= mask[i] ? out[i] == inp[i] * scale : out[i] == 0.0f;
  }
  /* binomial: the kept fraction is within 5 standard deviations of 1 - p */
  const double frac = (double)kept / n, sd = sqrt(p * (1 - p) / n);
  CHECK(fabs(frac - (1 - p)) < 5 * sd, "dropout p=0.3 keeps %.4f of %lld", frac, (long long)n);
  CHECK(exact, "dropout scales kept values by 1/(1-p), zeroes the rest");
  mt_dropout_forward(out2, mask2, inp, p, key, 0, 1, n);
  CHECK(!memcmp(mask, mask2, (size_t)n), "dropout: same key, same mask (a resume reproduces it)");
  int64_t diff[3] = {0, 0, 0};
  const uint64_t other[3] = {mt_dropout_key(42, 8, 1, 3), mt_dropout_key(42, 7, 0, 3),
                             mt_dropout_key(42, 7, 1, 4)};
  for (int k = 0; k < 3; k++) {
    mt_dropout_forward(out2, mask2, inp, p, other[k], 0, 1, n);
    for (int64_t i = 0; i < n; i++) diff[k] += mask[i] != mask2[i];
  }
  /* independent masks differ in 2p(1-p) = 42% of the elements */
  CHECK(diff[0] > n / 3 && diff[1] > n / 3 && diff[2] > n / 3,
        "dropout: another step, rank or layer gives another mask (%lld %lld %lld differ)",
        (long long)diff[0], (long long)diff[1], (long long)diff[2]);
  mt_dropout_forward(out2, mask2, inp + 1000, p, key, 1000, 1, n - 1000);
  CHECK(!memcmp(mask + 1000, mask2, (size_t)(n - 1000)),
        "dropout: offset k draws the mask elements from k on");
  mt_dropout_backward(dinp, inp, mask, p, n);
  mt_dropout_backward(dinp, inp, mask, p, n);
  exact = 1;
  for (int64_t i = 0; i < n; i++) exact &= dinp[i] == 2 * out[i];
  CHECK(exact, "dropout backward = mask * scale * dout, and adds");
  mt_dropout_forward(out2, mask2, inp, p, key, 0, 0, n);
  exact = !memcmp(out2, inp, (size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) exact &= mask2[i] == 1;
  memset(dinp, 0, (size_t)n * sizeof(float));
  mt_dropout_backward(dinp, inp, NULL, p, n);
  exact &= !memcmp(dinp, inp, (size_t)n * sizeof(float));
  CHECK(exact, "dropout eval is the identity (forward, backward with mask NULL)");
  mt_dropout_forward(out2, mask2, inp, 1.0f, key, 0, 1, n);
  exact = 1;
  for (int64_t i = 0; i < n; i++) exact &= out2[i] == 0.0f && mask2[i] == 0;
  CHECK(exact, "dropout p=1 drops everything");
  memcpy(out2, inp, (size_t)n * sizeof(float));
  mt_dropout_forward(out2, mask2, out2, p, key, 0, 1, n);
  CHECK(!memcmp(out2, out, (size_t)n * sizeof(float)), "dropout in place (out == inp)");
  free(inp), free(out), free(out2), free(dinp), free(mask), free(mask2);
}

/* ------------------------------------------------------ embedding, attention */

typedef struct {
  float *out, *wte, *wpe, *R;
  int32_t *tok;
  int B, T, C, V;
} emb_ctx;

static double emb_loss(void *p) {
  emb_ctx *x = p;
  mt_embedding_forward(x->out, x->tok, x->wte, x->wpe, x->B, x->T, x->C, x->V);
  return wsum(x->out, x->R, (int64_t)x->B * x->T * x->C);
}

static void test_embedding(int B, int T, int C, int V) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "embedding B=%d T=%d C=%d V=%d", "l_embedding_%d_%d_%d_%d.txt",
           B, T, C, V);
  const int maxT = cfg_int(&r, 4);
  const int64_t no = (int64_t)B * T * C;
  const tu_tensor *rt = tu_ref_get(&r, "tokens", (int64_t)B * T);
  int32_t *tok = malloc((size_t)(B * T) * sizeof(int32_t));
  for (int i = 0; i < B * T; i++) tok[i] = (int32_t)rt->v[i];
  float *wte = tu_ref_floats(&r, "wte", (int64_t)V * C),
        *wpe = tu_ref_floats(&r, "wpe", (int64_t)maxT * C);
  float *dout = tu_ref_floats(&r, "dout", no), *out = zeros(no);
  float *dwte = zeros((int64_t)V * C), *dwpe = zeros((int64_t)maxT * C);
  CHECK(mt_embedding_forward(out, tok, wte, wpe, B, T, C, V) == 0, "%s forward returns 0", what);
  cmp(&r, "out", out, no, REF_TOL, what);
  mt_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
  cmp(&r, "dwte", dwte, (int64_t)V * C, REF_TOL, what);
  cmp(&r, "dwpe", dwpe, (int64_t)maxT * C, REF_TOL, what);
  mt_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
  cmp2(&r, "dwte", dwte, (int64_t)V * C, what);
  cmp2(&r, "dwpe", dwpe, (int64_t)maxT * C, what);
  emb_ctx x = {out, wte, wpe, dout, tok, B, T, C, V};
  memset(dwte, 0, (size_t)(V * C) * sizeof(float));
  memset(dwpe, 0, (size_t)(maxT * C) * sizeof(float));
  mt_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
  fd_check(dwte, wte, (int64_t)V * C, 0.25f, 0, emb_loss, &x, "%s: dwte", what);
  fd_check(dwpe, wpe, (int64_t)maxT * C, 0.25f, 0, emb_loss, &x, "%s: dwpe", what);
  tok[B * T - 1] = V;
  CHECK(mt_embedding_forward(out, tok, wte, wpe, B, T, C, V) == MT_ERR_DATA,
        "%s refuses token %d (outside the vocabulary)", what, V);
  mt_error_clear();
  free(tok), free(wte), free(wpe), free(dout), free(out), free(dwte), free(dwpe);
  tu_ref_free(&r);
}

typedef struct {
  float *out, *pre, *att, *inp, *R;
  int B, T, C, NH;
} att_ctx;

static double att_loss(void *p) {
  att_ctx *x = p;
  mt_attention_forward(x->out, x->pre, x->att, x->inp, x->B, x->T, x->C, x->NH, NULL);
  return wsum(x->out, x->R, (int64_t)x->B * x->T * x->C);
}

static void test_attention(int B, int T, int C, int NH) {
  char what[128];
  tu_ref r;
  open_ref(&r, what, sizeof(what), "attention B=%d T=%d C=%d NH=%d", "l_attention_%d_%d_%d_%d.txt",
           B, T, C, NH);
  const int64_t ni = (int64_t)B * T * 3 * C, no = (int64_t)B * T * C, na = (int64_t)B * NH * T * T;
  float *inp = tu_ref_floats(&r, "inp", ni), *dout = tu_ref_floats(&r, "dout", no);
  float *out = zeros(no), *pre = zeros(na), *att = zeros(na), *dinp = zeros(ni);
  /* the forward writes all of out, preatt and att (NaN before) */
  for (int64_t i = 0; i < na; i++) pre[i] = att[i] = NAN;
  for (int64_t i = 0; i < no; i++) out[i] = NAN;
  CHECK(mt_attention_forward(out, pre, att, inp, B, T, C, NH, NULL) == 0, "%s forward returns 0",
        what);
  cmp(&r, "out", out, no, REF_TOL, what);
  cmp(&r, "preatt", pre, na, REF_TOL, what);
  cmp(&r, "att", att, na, REF_TOL, what);
  /* the forward's preatt serves as the scratch */
  CHECK(mt_attention_backward(dinp, pre, dout, inp, att, B, T, C, NH, NULL) == 0,
        "%s backward returns 0", what);
  cmp(&r, "dinp", dinp, ni, REF_TOL, what);
  mt_attention_backward(dinp, pre, dout, inp, att, B, T, C, NH, NULL);
  cmp2(&r, "dinp", dinp, ni, what);
  /* MT_ATTN_SET_DINP writes dinp whole without reading it (NaN before) */
  for (int64_t i = 0; i < ni; i++) dinp[i] = NAN;
  CHECK(mt_attention_backward_ex(dinp, pre, dout, inp, att, B, T, C, NH, MT_ATTN_SET_DINP, NULL) ==
            0, "%s backward, set, returns 0", what);
  cmp(&r, "dinp", dinp, ni, REF_TOL, what);
  att_ctx x = {out, pre, att, inp, dout, B, T, C, NH};
  memset(dinp, 0, (size_t)ni * sizeof(float));
  att_loss(&x);
  mt_attention_backward(dinp, pre, dout, inp, att, B, T, C, NH, NULL);
  fd_check(dinp, inp, ni, 0.05f, 1, att_loss, &x, "%s: dinp", what);
  CHECK(
      mt_attention_forward(out, pre, att, inp, B, T, C, NH + 1 + (C % (NH + 1) == 0), NULL) ==
          MT_ERR_ARG,
      "%s refuses C not divisible by NH", what);
  mt_error_clear();
  free(inp), free(dout), free(out), free(pre), free(att), free(dinp);
  tu_ref_free(&r);
}

/* Scores up to ~3600 (an exponential overflows unless each row's true
 * maximum is subtracted) on rows longer than a vector: att against a
 * softmax in double, 0 above the diagonal in att and preatt. */
static void test_attention_large(int T) {
  enum { C = 16 };
  const int64_t ni = (int64_t)T * 3 * C, na = (int64_t)T * T;
  float *inp = zeros(ni), *out = zeros((int64_t)T * C), *pre = zeros(na), *att = zeros(na);
  double *s = calloc((size_t)T, sizeof(double));
  for (int64_t i = 0; i < ni; i++) inp[i] = (float)((i * 37 + 11) % 61 - 30);
  for (int64_t i = 0; i < na; i++) pre[i] = att[i] = NAN;
  CHECK(mt_attention_forward(out, pre, att, inp, 1, T, C, 1, NULL) == 0,
        "attention T=%d, large scores: forward returns 0", T);
  double err = 0;
  int upper = 1;
  for (int t = 0; t < T; t++) {
    double mx = -INFINITY, z = 0;
    for (int t2 = 0; t2 <= t; t2++) {
      double d = 0;
      const float *q = inp + (int64_t)t * 3 * C, *k = inp + (int64_t)t2 * 3 * C + C;
      for (int c = 0; c < C; c++) d += (double)q[c] * k[c];
      s[t2] = d / 4.0; /* 1 / sqrt(hs), hs = 16 */
      mx = s[t2] > mx ? s[t2] : mx;
    }
    for (int t2 = 0; t2 <= t; t2++) z += exp(s[t2] - mx);
    for (int t2 = 0; t2 <= t; t2++) {
      const double e = fabs(att[(int64_t)t * T + t2] - exp(s[t2] - mx) / z);
      err = e > err || e != e ? e : err; /* a NaN is the worst */
    }
    for (int t2 = t + 1; t2 < T; t2++)
      upper &= att[(int64_t)t * T + t2] == 0 && pre[(int64_t)t * T + t2] == 0;
  }
  CHECK(err <= 1e-5, "attention T=%d, large scores: att within %.3g of a double softmax (1e-5)", T,
        err);
  CHECK(upper, "attention T=%d: att and preatt are 0 above the diagonal", T);
  free(inp), free(out), free(pre), free(att), free(s);
}

/* in main's order (test_layers.c) */
void test_layers_gpt(void) {
  test_gelu(MT_GELU_TANH);
  test_gelu(MT_GELU_ERF);
  test_residual();
  test_dropout();

  test_embedding(2, 5, 6, 7);
  test_embedding(1, 1, 4, 3);
  test_attention(2, 5, 8, 2);
  test_attention(1, 1, 4, 1);
  test_attention(3, 7, 12, 3);
  test_attention(1, 9, 4, 4);
  /* rows longer than a vector of 16: whole and masked blocks, rows shorter
   * than T past their last block */
  test_attention(1, 21, 8, 2);
  test_attention(1, 35, 4, 1);
  test_attention_large(7);
  test_attention_large(40);
  test_attention_large(64);
}
