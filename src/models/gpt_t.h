/* The GPT (gpt.c), a template for REAL = float and double: its state,
 * setup, forward, backward, flops and destroy. */

/* activations of one block (N = B*T rows) */
typedef struct {
  REAL *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *preatt, *att, *attproj, *res2;
  REAL *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
} MT_T(block_acts);

typedef struct {
  mt_gpt_hparams hp; /* what it was set up with (mt_gpt_hparams_of)          */
  const mt_nn_policy *pol; /* how its GEMMs compute (nn/lowp.h; NULL: fp32)  */
  int held;                 /* the last forward holds (mt_model_holds_begin) */
  mt_nn_holds holds;
  int L, NH, C, T, V, maxB;
  mt_gelu_kind gelu;
  MT_T(block_acts) a[64], d[64]; /* activations and their gradients      */
  REAL *enc, *denc, *lnf, *lnf_mean, *lnf_rstd, *dlnf, *logits, *dlogits;
  int32_t *inp, *tgt;       /* (B,T) inputs and targets                  */
  /* dropout (nanoGPT's, without the one on attention weights): masks of
   * the embedding and of each block's two projections into the stream */
  REAL drop;
  uint8_t *mask_enc, *mask_att[64], *mask_fc[64];
  int B, dropped;
} MT_T(gpt);

/* A block's activations, or (grads) their gradients: the backward keeps
 * the residual stream's in one buffer (gpt_backward), needs the
 * projections' own copies only for dropout, and no attention matrices,
 * means or 1/stds of its own. */
static int MT_T(alloc_acts)(MT_T(block_acts) *a, size_t N, size_t C, size_t att, int grads,
                            int dropout) {
  REAL **f[] = {&a->ln1, &a->qkv, &a->atty, &a->attproj, &a->res2, &a->ln2, &a->fch,
                 &a->fch_gelu, &a->fcproj, &a->res3, &a->preatt, &a->att,
                 &a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd};
  const size_t g = grads ? 0 : 1, p = !grads || dropout;
  size_t n[] = {N * C, N * 3 * C, N * C, p * N * C, g * N * C, N * C, N * 4 * C,
                N * 4 * C, p * N * C, g * N * C, g * att, g * att, g * N, g * N, g * N, g * N};
  for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++)
    MT_CALL(mt_calloc(f[i], n[i], sizeof(REAL), "gpt activations"));
  return 0;
}

static void MT_T(free_acts)(MT_T(block_acts) *a) {
  REAL **f[] = {&a->ln1, &a->qkv, &a->atty, &a->attproj, &a->res2, &a->ln2, &a->fch,
                 &a->fch_gelu, &a->fcproj, &a->res3, &a->preatt, &a->att,
                 &a->ln1_mean, &a->ln1_rstd, &a->ln2_mean, &a->ln2_rstd};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) mt_free(f[i]);
}

static int MT_T(gpt_setup)(mt_model *m, const mt_gpt_hparams *hp, const mt_data_spec *spec,
                           int max_batch, const mt_nn_policy *pol) {
  MT_T(gpt) *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "gpt"));
  m->data = s;
  MT_CHECK(spec->tokens, MT_ERR_DATA, "model gpt needs a token data set (/tokens; see mt-data text)");
  MT_CHECK(hp->layers <= 64, MT_ERR_OPTION, "option -gpt_layers: at most 64");
  s->hp = *hp;
  s->pol = pol;
  s->L = hp->layers, s->NH = hp->heads, s->C = hp->embd, s->T = (int)spec->sample_numel;
  s->V = spec->nclasses;
  s->gelu = hp->gelu_tanh ? MT_GELU_TANH : MT_GELU_ERF;
  s->maxB = max_batch;
  const int C = s->C;
  MT_CALL(add(m, "transformer.wte.weight", 2, s->V, C, 0));
  MT_CALL(add(m, "transformer.wpe.weight", 2, s->T, C, 0));
  static const char *const names[NPER] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                                          "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                                          "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
                                          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
  const int64_t d0[NPER] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
  const int64_t d1[NPER] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
  char name[MT_NAME_MAX];
  for (int l = 0; l < s->L; l++)
    for (int k = 0; k < NPER; k++) {
      snprintf(name, sizeof(name), "transformer.h.%d.%s", l, names[k]);
      MT_CALL(add(m, name, d1[k] ? 2 : 1, d0[k], d1[k], l + 1));
    }
  MT_CALL(add(m, "transformer.ln_f.weight", 1, C, 0, s->L + 1));
  MT_CALL(add(m, "transformer.ln_f.bias", 1, C, 0, s->L + 1));
  size_t N = (size_t)max_batch * s->T, att = (size_t)max_batch * s->NH * s->T * s->T;
  for (int l = 0; l < s->L; l++) {
    MT_CALL(MT_T(alloc_acts)(&s->a[l], N, C, att, 0, 0));
    MT_CALL(MT_T(alloc_acts)(&s->d[l], N, C, att, 1, hp->dropout > 0));
  }
  REAL **f[] = {&s->enc, &s->denc, &s->lnf, &s->dlnf, &s->logits, &s->dlogits, &s->lnf_mean, &s->lnf_rstd};
  size_t n[] = {N * C, N * C, N * C, N * C, N * s->V, N * s->V, N, N};
  for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++)
    MT_CALL(mt_calloc(f[i], n[i], sizeof(REAL), "gpt activations"));
  MT_CALL(mt_calloc(&s->inp, N, sizeof(int32_t), "gpt inputs"));
  MT_CALL(mt_calloc(&s->tgt, N, sizeof(int32_t), "gpt targets"));
  s->drop = (REAL)hp->dropout;
  if (s->drop > 0) {
    MT_CALL(mt_calloc(&s->mask_enc, N * C, 1, "gpt dropout masks"));
    for (int l = 0; l < s->L; l++) {
      MT_CALL(mt_calloc(&s->mask_att[l], N * C, 1, "gpt dropout masks"));
      MT_CALL(mt_calloc(&s->mask_fc[l], N * C, 1, "gpt dropout masks"));
    }
  }
  return 0;
}

static int MT_T(gpt_forward)(mt_model *m, const REAL *params, const mt_batch *bt, REAL *losses,
                             mt_batch_stats *st) {
  MT_T(gpt) *s = m->data;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "gpt: forward of another precision than set up");
  const int B = bt->n, T = s->T, C = s->C, NH = s->NH, V = s->V;
  MT_CHECK(bt->tokens && bt->tokens_len == T + 1, MT_ERR_DATA,
           "model gpt needs token windows of %d + 1 tokens", T);
  MT_CHECK(B <= s->maxB, MT_ERR_ARG, "batch %d exceeds %d", B, s->maxB);
  /* per-token logits only (text generation's tests compare against them):
   * rows of T*V, position t's V logits at t*V */
  REAL *lg = MT_T(mt_model_logits)(st);
  MT_CHECK((!st->logits && !st->logits64) || (lg && st->logits_len == T * V), MT_ERR_ARG,
           "model gpt offers no per-sample logits (token data), only per-token ones in rows of "
           "T*V = %d", T * V);
  for (int b = 0; st->pred && b < B; b++) st->pred[b] = -1; /* no class per sample */
  s->B = B;
  s->dropped = bt->train && s->drop > 0;
  /* activations feeding two GEMMs (qkv: every head's) held converted */
  s->held = mt_model_holds_begin(&s->holds, bt, s->pol);
  mt_nn_policy with;
  const mt_nn_policy *pol = mt_model_policy(s->held, s->pol, &s->holds, &with);
  if (B == 0) return 0;
  const int N = B * T;
  const int64_t row = (int64_t)T * C; /* a sample's activations */
  for (int b = 0; b < B; b++) {
    memcpy(s->inp + b * T, bt->tokens + (int64_t)b * (T + 1), (size_t)T * sizeof(int32_t));
    memcpy(s->tgt + b * T, bt->tokens + (int64_t)b * (T + 1) + 1, (size_t)T * sizeof(int32_t));
  }
  MT_CALL(mt_model_unit_use(m, 0, 0));
  MT_CALL(mt_embedding_forward(s->enc, s->inp, PW(WTE), PW(WPE), B, T, C, V));
  if (s->dropped) MT_T(mt_model_dropout)(s->enc, s->mask_enc, s->drop, bt, 0, row);
  const REAL *res = s->enc;
  for (int l = 0; l < s->L; l++) {
    MT_T(block_acts) *a = &s->a[l];
    MT_CALL(mt_model_unit_use(m, l + 1, 0));
    uint16_t *hb = MT_T(mt_model_hold_out)(s->held, &s->holds, pol, a->ln1, (int64_t)N * C);
    mt_layernorm_forward_ex(a->ln1, hb, a->ln1_mean, a->ln1_rstd, res, PW(bidx(l, LN1W)), PW(bidx(l, LN1B)), N, C, LN_EPS);
    if (!hb) MT_T(mt_model_hold)(s->held, &s->holds, pol, a->ln1, (int64_t)N * C);
    MT_CALL(mt_linear_forward(a->qkv, a->ln1, PW(bidx(l, QKVW)), PW(bidx(l, QKVB)), N, C, 3 * C,
                              pol));
    MT_T(mt_model_hold)(s->held, &s->holds, pol, a->qkv, (int64_t)N * 3 * C);
    MT_CALL(mt_attention_forward(a->atty, a->preatt, a->att, a->qkv, B, T, C, NH, pol));
    MT_T(mt_model_hold)(s->held, &s->holds, pol, a->atty, (int64_t)N * C);
    MT_CALL(mt_linear_forward(a->attproj, a->atty, PW(bidx(l, PROJW)), PW(bidx(l, PROJB)), N, C, C,
                              pol));
    if (s->dropped) MT_T(mt_model_dropout)(a->attproj, s->mask_att[l], s->drop, bt, 1 + 2 * l, row);
    mt_residual_forward(a->res2, res, a->attproj, (int64_t)N * C);
    hb = MT_T(mt_model_hold_out)(s->held, &s->holds, pol, a->ln2, (int64_t)N * C);
    mt_layernorm_forward_ex(a->ln2, hb, a->ln2_mean, a->ln2_rstd, a->res2, PW(bidx(l, LN2W)), PW(bidx(l, LN2B)), N, C, LN_EPS);
    if (!hb) MT_T(mt_model_hold)(s->held, &s->holds, pol, a->ln2, (int64_t)N * C);
    MT_CALL(mt_linear_forward(a->fch, a->ln2, PW(bidx(l, FCW)), PW(bidx(l, FCB)), N, C, 4 * C,
                              pol));
    hb = MT_T(mt_model_hold_out)(s->held, &s->holds, pol, a->fch_gelu, (int64_t)N * 4 * C);
    mt_gelu_forward_ex(a->fch_gelu, hb, a->fch, (int64_t)N * 4 * C, s->gelu);
    if (!hb) MT_T(mt_model_hold)(s->held, &s->holds, pol, a->fch_gelu, (int64_t)N * 4 * C);
    MT_CALL(mt_linear_forward(a->fcproj, a->fch_gelu, PW(bidx(l, FCPW)), PW(bidx(l, FCPB)), N,
                              4 * C, C, pol));
    if (s->dropped) MT_T(mt_model_dropout)(a->fcproj, s->mask_fc[l], s->drop, bt, 2 + 2 * l, row);
    mt_residual_forward(a->res3, a->res2, a->fcproj, (int64_t)N * C);
    res = a->res3;
  }
  MT_CALL(mt_model_unit_use(m, s->L + 1, 0));
  uint16_t *hb = MT_T(mt_model_hold_out)(s->held, &s->holds, pol, s->lnf, (int64_t)N * C);
  mt_layernorm_forward_ex(s->lnf, hb, s->lnf_mean, s->lnf_rstd, res, PW(lnf_idx(s->L, 0)), PW(lnf_idx(s->L, 1)), N, C, LN_EPS);
  if (!hb) MT_T(mt_model_hold)(s->held, &s->holds, pol, s->lnf, (int64_t)N * C);
  MT_CALL(mt_model_unit_use(m, 0, 0));
  MT_CALL(mt_linear_forward(s->logits, s->lnf, PW(WTE), NULL, N, C, V, pol)); /* tied head */
  if (lg) memcpy(lg, s->logits, (size_t)N * V * sizeof(REAL)); /* before the softmax below */
  double sum = 0;
  int64_t count = 0, hits = 0;
  /* per-token losses land in dlogits' first N values, reused by backward */
  REAL *tok_loss = losses ? s->dlogits : NULL;
  MT_CALL(mt_xent_ignore_forward(s->logits, tok_loss, &sum, &count, &hits, s->logits, s->tgt, -1, N, V));
  if (losses)
    for (int b = 0; b < B; b++) {
      double l = 0;
      for (int t = 0; t < T; t++) l += tok_loss[b * T + t];
      losses[b] = (REAL)(l / T);
    }
  st->loss_sum += sum / T;
  st->correct += (double)hits / T;
  return 0;
}

static int MT_T(gpt_backward)(mt_model *m, const REAL *params, REAL *grads, REAL scale, int B) {
  MT_T(gpt) *s = m->data;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "gpt: backward of another precision than set up");
  MT_CHECK(B == s->B, MT_ERR_STATE, "gpt backward of %d samples after a forward of %d", B, s->B);
  if (B == 0) return 0;
  const int T = s->T, C = s->C, NH = s->NH, V = s->V, N = B * T;
  mt_nn_policy with;
  const mt_nn_policy *pol = mt_model_policy(s->held, s->pol, &s->holds, &with);
  const int64_t NC = (int64_t)N * C;
  const size_t nc = (size_t)NC * sizeof(REAL);
  const REAL *last = s->L ? s->a[s->L - 1].res3 : s->enc;
  /* The residual stream's gradient lives in one buffer, denc: the final
   * layer norm's backward adds into it (zeroed first), and each block reads
   * it as the output gradient of its two projections (res3 = res2 + fcproj,
   * res2 = res + attproj: a branch gets the stream's gradient) before its
   * layer norms add their input gradients into it. So it is never copied
   * (the values and sums of a copy per branch and per block). Dropout
   * scales a branch's own copy. The GEMMs, GELU and attention set (=) the
   * other gradients; zeroed first is only the loss's (it skips ignored
   * tokens). */
  REAL *g = s->denc;
  memset(s->dlogits, 0, (size_t)N * V * sizeof(REAL));
  memset(g, 0, nc);
  enum { SET = MT_LINEAR_SET_DINP };
  /* logits held the softmax after forward (probs == logits) */
  mt_xent_ignore_backward(s->dlogits, s->logits, s->tgt, -1, scale / (REAL)T, N, V);
  MT_CALL(mt_model_unit_use(m, 0, 1));
  MT_CALL(mt_linear_backward_ex(s->dlnf, GW(WTE), NULL, s->dlogits, NULL, s->lnf, PW(WTE), N, C, V,
                                SET, pol));
  MT_CALL(mt_model_unit_use(m, s->L + 1, 1));
  mt_layernorm_backward(g, GW(lnf_idx(s->L, 0)), GW(lnf_idx(s->L, 1)), s->dlnf, last,
                        PW(lnf_idx(s->L, 0)), s->lnf_mean, s->lnf_rstd, N, C);
  mt_model_unit_done(m, s->L + 1);
  for (int l = s->L - 1; l >= 0; l--) {
    MT_T(block_acts) *a = &s->a[l], *d = &s->d[l];
    const REAL *res = l ? s->a[l - 1].res3 : s->enc;
    MT_CALL(mt_model_unit_use(m, l + 1, 1));
    REAL *dfc = g; /* read only (no MT_LINEAR_RELU) */
    if (s->dropped) {
      memcpy(d->fcproj, g, nc);
      MT_T(mt_model_dropout_backward)(d->fcproj, s->mask_fc[l], s->drop, NC);
      dfc = d->fcproj;
    }
    MT_CALL(mt_linear_backward_ex(d->fch_gelu, GW(bidx(l, FCPW)), GW(bidx(l, FCPB)), dfc, NULL,
                                  a->fch_gelu, PW(bidx(l, FCPW)), N, 4 * C, C, SET, pol));
    mt_gelu_backward_ex(d->fch, d->fch_gelu, a->fch, 4 * NC, s->gelu, MT_GELU_SET_DINP);
    MT_CALL(mt_linear_backward_ex(d->ln2, GW(bidx(l, FCW)), GW(bidx(l, FCB)), d->fch, NULL, a->ln2,
                                  PW(bidx(l, FCW)), N, C, 4 * C, SET, pol));
    mt_layernorm_backward(g, GW(bidx(l, LN2W)), GW(bidx(l, LN2B)), d->ln2, a->res2,
                          PW(bidx(l, LN2W)), a->ln2_mean, a->ln2_rstd, N, C);
    REAL *dap = g;
    if (s->dropped) {
      memcpy(d->attproj, g, nc);
      MT_T(mt_model_dropout_backward)(d->attproj, s->mask_att[l], s->drop, NC);
      dap = d->attproj;
    }
    MT_CALL(mt_linear_backward_ex(d->atty, GW(bidx(l, PROJW)), GW(bidx(l, PROJB)), dap, NULL,
                                  a->atty, PW(bidx(l, PROJW)), N, C, C, SET, pol));
    MT_CALL(mt_attention_backward_ex(d->qkv, a->preatt, d->atty, a->qkv, a->att, B, T, C, NH,
                                     MT_ATTN_SET_DINP, pol));
    MT_CALL(mt_linear_backward_ex(d->ln1, GW(bidx(l, QKVW)), GW(bidx(l, QKVB)), d->qkv, NULL, a->ln1,
                                  PW(bidx(l, QKVW)), N, C, 3 * C, SET, pol));
    mt_layernorm_backward(g, GW(bidx(l, LN1W)), GW(bidx(l, LN1B)), d->ln1, res,
                          PW(bidx(l, LN1W)), a->ln1_mean, a->ln1_rstd, N, C);
    mt_model_unit_done(m, l + 1);
  }
  if (s->dropped) MT_T(mt_model_dropout_backward)(s->denc, s->mask_enc, s->drop, (int64_t)N * C);
  mt_embedding_backward(GW(WTE), GW(WPE), s->denc, s->inp, B, T, C);
  mt_model_holds_end(&s->holds, &s->held);
  mt_model_unit_done(m, 0); /* wte: the tied head's gradient came first */
  return 0;
}

/* The GEMMs' FLOPs of one sample (T tokens): forward into *fwd; the result
 * is forward plus backward (twice the forward's). */
static double MT_T(gpt_flops)(const mt_model *m, double *fwd) {
  const MT_T(gpt) *s = m->data;
  double C = s->C, T = s->T, V = s->V;
  /* per token: 6 x (weights touched by GEMMs) + attention 2 x 2 T C per layer x 3 */
  double w = s->L * 12.0 * C * C + V * C;
  if (fwd) *fwd = T * (2.0 * w + s->L * 2.0 * T * C);
  return T * (6.0 * w + s->L * 6.0 * T * C);
}

static void MT_T(gpt_destroy)(mt_model *m) {
  MT_T(gpt) *s = m->data;
  if (!s) return;
  mt_nn_holds_free(&s->holds);
  for (int l = 0; l < 64; l++) {
    MT_T(free_acts)(&s->a[l]);
    MT_T(free_acts)(&s->d[l]);
    mt_free(&s->mask_att[l]);
    mt_free(&s->mask_fc[l]);
  }
  mt_free(&s->mask_enc);
  REAL **f[] = {&s->enc, &s->denc, &s->lnf, &s->dlnf, &s->logits, &s->dlogits, &s->lnf_mean, &s->lnf_rstd};
  for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) mt_free(f[i]);
  mt_free(&s->inp);
  mt_free(&s->tgt);
  mt_free(&m->data);
}
