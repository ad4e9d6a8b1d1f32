/* The CNN (cnn.c), a template for REAL = float and double: its state,
 * setup, forward, backward, flops and destroy. */

typedef struct {
  mt_cnn_hparams hp; /* what it was set up with (mt_cnn_hparams_of)          */
  const mt_nn_policy *pol; /* how its layers compute (nn/lowp.h; NULL: fp32) */
  int nb, C0, H0, W0, flat, hidden, classes, bn, pcls;
  int pconv[MAX_BLOCKS], pbn[MAX_BLOCKS]; /* parameter indices               */
  mt_conv2d conv[MAX_BLOCKS];
  mt_pool2d_shape pool[MAX_BLOCKS];
  REAL *z[MAX_BLOCKS], *dz[MAX_BLOCKS];  /* conv outputs before batch norm   */
  REAL *mean[MAX_BLOCKS], *rstd[MAX_BLOCKS];
  REAL *a[MAX_BLOCKS], *da[MAX_BLOCKS];  /* block activations after ReLU     */
  REAL *p[MAX_BLOCKS], *dp[MAX_BLOCKS];  /* pooled (B,C,H/2,W/2), pool oblock */
  int32_t *arg[MAX_BLOCKS];
  REAL *h, *dh, *logits, *dlogits, *probs;
  REAL *xin;                             /* double: the inputs widened       */
  REAL *cgrad; /* DP-SGD's batched clipping: a sample's convolution gradients */
  uint8_t *mask;
  REAL drop;
  const REAL *x;
  const int32_t *y;
  int B, train, dropped;
} MT_T(cnn);

static int MT_T(cnn_setup)(mt_model *m, const mt_cnn_hparams *hp, const mt_data_spec *spec,
                           int max_batch, const mt_nn_policy *pol) {
  MT_T(cnn) *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "cnn"));
  m->data = s;
  MT_CHECK(!spec->tokens && spec->nclasses >= 2, MT_ERR_DATA,
           "model cnn needs images /x and class labels /y (this data set holds %s)",
           spec->tokens ? "/tokens" : "no class labels");
  MT_CHECK(spec->ndim == 2 || spec->ndim == 3, MT_ERR_DATA,
           "model cnn needs samples of shape (C,H,W) or (H,W); the data has %d dimensions",
           spec->ndim);
  s->C0 = spec->ndim == 3 ? (int)spec->shape[0] : 1;
  s->H0 = (int)spec->shape[spec->ndim - 2];
  s->W0 = (int)spec->shape[spec->ndim - 1];
  s->hp = *hp;
  s->pol = pol;
  s->nb = hp->nblocks;
  s->hidden = hp->hidden;
  s->classes = spec->nclasses;
  s->bn = hp->batchnorm;
  s->drop = (REAL)hp->dropout;
  const int kernel = hp->kernel;
  const int step = s->bn ? 4 : 3; /* modules per block in features */
  int C = s->C0, H = s->H0, W = s->W0;
  char name[MT_NAME_MAX];
  for (int l = 0; l < s->nb; l++) {
    mt_conv2d_shape cs = {.B = max_batch, .IC = C, .H = H, .W = W, .OC = hp->channels[l],
                          .KH = kernel, .KW = kernel, .stride_h = 1, .stride_w = 1,
                          .pad_h = kernel / 2, .pad_w = kernel / 2, .dil_h = 1, .dil_w = 1,
                          .groups = 1};
    /* without batch norm the ReLU runs inside the convolution and its
     * output stays in the convolution's layout (nChw8c with AVX2) for the
     * pool, which reads it: no reorder and no ReLU pass; the pool before a
     * convolution writes that convolution's input layout (src_block), the
     * last one NCHW for the linear layer (PyTorch's flatten order). With
     * batch norm (it reads NCHW) everything stays NCHW. */
    cs.relu = cs.dst_any = !s->bn;
    cs.src_any = l > 0 && !s->bn; /* the data's images are NCHW */
    MT_CALL(MT_T(mt_conv2d_init)(&s->conv[l], &cs, 1, pol)); /* its precision fixed now */
    if (l > 0) {
      s->pool[l - 1].oblock = s->conv[l].src_block;
      MT_CALL(mt_pool2d_shape_init(&s->pool[l - 1]));
    }
    int64_t w[4] = {hp->channels[l], C, kernel, kernel}, b[1] = {hp->channels[l]};
    s->pconv[l] = m->params.n;
    snprintf(name, sizeof(name), "features.%d.weight", step * l);
    MT_CALL(mt_param_table_add(&m->params, name, 4, w, l));
    snprintf(name, sizeof(name), "features.%d.bias", step * l);
    MT_CALL(mt_param_table_add(&m->params, name, 1, b, l));
    C = hp->channels[l];
    mt_pool2d_shape ps = {.B = max_batch, .C = C, .H = H, .W = W, .KH = 2, .KW = 2,
                          .stride_h = 2, .stride_w = 2, .cblock = s->conv[l].dst_block};
    MT_CHECK(H >= 2 && W >= 2, MT_ERR_DATA, "model cnn: block %d gets %dx%d, too small to pool",
             l + 1, H, W);
    MT_CALL(mt_pool2d_shape_init(&ps));
    s->pool[l] = ps;
    size_t in = numel(&ps, 0) * (size_t)max_batch, out = numel(&ps, 1) * (size_t)max_batch;
    if (s->bn) {
      static const char *const pn[2] = {"weight", "bias"}, *const bn[2] = {"running_mean", "running_var"};
      s->pbn[l] = m->params.n;
      for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof(name), "features.%d.%s", step * l + 1, pn[k]);
        MT_CALL(mt_param_table_add(&m->params, name, 1, b, l));
      }
      for (int k = 0; k < 2; k++) {
        snprintf(name, sizeof(name), "features.%d.%s", step * l + 1, bn[k]);
        MT_CALL(mt_param_table_add(&m->buffers, name, 1, b, l));
      }
      MT_CALL(mt_calloc(&s->z[l], in, sizeof(REAL), "conv outputs"));
      MT_CALL(mt_calloc(&s->dz[l], in, sizeof(REAL), "conv output gradients"));
      MT_CALL(mt_calloc(&s->mean[l], (size_t)C, sizeof(REAL), "batch norm means"));
      MT_CALL(mt_calloc(&s->rstd[l], (size_t)C, sizeof(REAL), "batch norm deviations"));
    }
    MT_CALL(mt_calloc(&s->a[l], in, sizeof(REAL), "conv activations"));
    MT_CALL(mt_calloc(&s->da[l], in, sizeof(REAL), "conv activation gradients"));
    MT_CALL(mt_calloc(&s->p[l], out, sizeof(REAL), "pooled activations"));
    MT_CALL(mt_calloc(&s->dp[l], out, sizeof(REAL), "pooled activation gradients"));
    MT_CALL(mt_calloc(&s->arg[l], out, sizeof(int32_t), "pooling indices"));
    H = ps.OH;
    W = ps.OW;
  }
  s->flat = C * H * W;
  int64_t w1[2] = {s->hidden, s->flat}, b1[1] = {s->hidden}, w2[2] = {s->classes, s->hidden},
          b2[1] = {s->classes};
  s->pcls = m->params.n;
  MT_CALL(mt_param_table_add(&m->params, "classifier.1.weight", 2, w1, s->nb));
  MT_CALL(mt_param_table_add(&m->params, "classifier.1.bias", 1, b1, s->nb));
  MT_CALL(mt_param_table_add(&m->params, "classifier.3.weight", 2, w2, s->nb + 1));
  MT_CALL(mt_param_table_add(&m->params, "classifier.3.bias", 1, b2, s->nb + 1));
  size_t B = (size_t)max_batch;
  MT_CALL(mt_calloc(&s->h, B * s->hidden, sizeof(REAL), "hidden"));
  MT_CALL(mt_calloc(&s->dh, B * s->hidden, sizeof(REAL), "hidden gradients"));
  if (s->drop > 0) MT_CALL(mt_calloc(&s->mask, B * s->hidden, 1, "dropout masks"));
  MT_CALL(mt_calloc(&s->logits, B * s->classes, sizeof(REAL), "logits"));
  MT_CALL(mt_calloc(&s->dlogits, B * s->classes, sizeof(REAL), "logit gradients"));
  MT_CALL(mt_calloc(&s->probs, B * s->classes, sizeof(REAL), "probabilities"));
  if (MT_F64)
    MT_CALL(mt_calloc(&s->xin, B * (size_t)s->C0 * s->H0 * s->W0, sizeof(REAL), "inputs in double"));
  else /* the convolutions' parameters lead the layout */
    MT_CALL(mt_calloc(&s->cgrad, m->params.p[s->pcls].offset, sizeof(REAL),
                      "per-sample convolution gradients"));
  return 0;
}

/* Batch norm's initial weight 1, bias 0, running mean 0 and variance 1, in
 * the float parameters and m->buf the init op fills (cnn_init). */
static void MT_T(cnn_init_bn)(mt_model *m, float *params) {
  const MT_T(cnn) *s = m->data;
  for (int l = 0; s->bn && l < s->nb; l++) {
    const mt_param *w = &m->params.p[s->pbn[l]], *b = &m->params.p[s->pbn[l] + 1];
    const mt_param *rm = &m->buffers.p[2 * l], *rv = &m->buffers.p[2 * l + 1];
    for (size_t i = 0; i < w->numel; i++) {
      params[w->offset + i] = 1.0f;
      params[b->offset + i] = 0.0f;
      m->buf[rm->offset + i] = 0.0f;
      m->buf[rv->offset + i] = 1.0f;
    }
  }
}

static const REAL *MT_T(P)(const mt_model *m, const REAL *params, int k) {
  return params + m->params.p[k].offset;
}

static REAL *MT_T(G)(const mt_model *m, REAL *grads, int k) { return grads + m->params.p[k].offset; }

static int MT_T(cnn_forward)(mt_model *m, const REAL *params, const mt_batch *bt, REAL *losses,
                             mt_batch_stats *st) {
  MT_T(cnn) *s = m->data;
  const int B = bt->n;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "cnn: forward of another precision than set up");
  MT_CHECK(bt->x && bt->labels, MT_ERR_DATA, "model cnn needs inputs /x and class labels /y");
  MT_CHECK(B <= m->max_batch, MT_ERR_ARG, "batch %d exceeds %d", B, m->max_batch);
  s->x = MT_T(mt_model_input)(s->xin, bt->x, (int64_t)B * s->C0 * s->H0 * s->W0);
  s->y = bt->labels;
  s->B = B;
  s->train = bt->train;
  s->dropped = bt->train && s->drop > 0;
  if (B == 0) return 0;
  const REAL *in = s->x;
  for (int l = 0; l < s->nb; l++) {
    mt_pool2d_shape ps = s->pool[l];
    ps.B = B;
    const int64_t na = (int64_t)B * (int64_t)numel(&ps, 0);
    const int k = s->pconv[l];
    MT_CALL(mt_model_unit_use(m, l, 0));
    MT_CALL(mt_conv2d_forward(s->bn ? s->z[l] : s->a[l], in, MT_T(P)(m, params, k),
                              MT_T(P)(m, params, k + 1), B, &s->conv[l]));
    if (s->bn) {
      const int kb = s->pbn[l];
      REAL *buf = MT_T(mt_model_buf)(m);
      MT_CALL(mt_batchnorm2d_forward(s->a[l], s->mean[l], s->rstd[l],
                                     buf + m->buffers.p[2 * l].offset,
                                     buf + m->buffers.p[2 * l + 1].offset, s->z[l],
                                     MT_T(P)(m, params, kb), MT_T(P)(m, params, kb + 1), B, ps.C,
                                     ps.H * ps.W, (REAL)BN_EPS, (REAL)BN_MOMENTUM, s->train));
      mt_relu_forward(s->a[l], s->a[l], na); /* else inside the convolution */
    }
    mt_maxpool2d_forward(s->p[l], s->arg[l], s->a[l], &ps);
    in = s->p[l];
  }
  const int k = s->pcls;
  MT_CALL(mt_model_unit_use(m, s->nb, 0));
  MT_CALL(mt_linear_forward(s->h, in, MT_T(P)(m, params, k), MT_T(P)(m, params, k + 1), B, s->flat,
                            s->hidden, s->pol));
  mt_relu_forward(s->h, s->h, (int64_t)B * s->hidden);
  if (s->dropped) MT_T(mt_model_dropout)(s->h, s->mask, s->drop, bt, DROPOUT_LAYER, s->hidden);
  MT_CALL(mt_model_unit_use(m, s->nb + 1, 0));
  MT_CALL(mt_linear_forward(s->logits, s->h, MT_T(P)(m, params, k + 2), MT_T(P)(m, params, k + 3),
                            B, s->hidden, s->classes, s->pol));
  int64_t correct = 0;
  double sum = mt_softmax_xent_forward(s->probs, losses, &correct, s->logits, s->y, B, s->classes);
  st->loss_sum += sum;
  st->correct += (double)correct;
  MT_CALL(MT_T(mt_model_put_outputs)("cnn", st, s->logits, B, s->classes));
  return 0;
}

/* Block l's gradient da[l] before its ReLU (the convolution's or batch
 * norm's output gradient) from the pooled one dp[l], in the layout of
 * a[l]; its length. */
static int64_t MT_T(block_backward)(MT_T(cnn) *s, int l, int B) {
  mt_pool2d_shape ps = s->pool[l];
  ps.B = B;
  const int64_t na = (int64_t)B * (int64_t)numel(&ps, 0);
  mt_maxpool2d_backward_ex(s->da[l], s->dp[l], s->arg[l], s->p[l], &ps, MT_POOL_SET_DINP);
  return na;
}

static int MT_T(cnn_backward)(mt_model *m, const REAL *params, REAL *grads, REAL scale, int B) {
  MT_T(cnn) *s = m->data;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "cnn: backward of another precision than set up");
  MT_CHECK(B == s->B, MT_ERR_STATE, "cnn backward of %d samples after a forward of %d", B, s->B);
  if (B == 0) return 0;
  const int k = s->pcls;
  memset(s->dlogits, 0, (size_t)B * s->classes * sizeof(REAL));
  mt_softmax_xent_backward(s->dlogits, s->probs, s->y, scale, B, s->classes);
  MT_CALL(mt_model_unit_use(m, s->nb + 1, 1));
  const REAL *last = s->p[s->nb - 1];
  REAL *dlast = s->dp[s->nb - 1];
  /* the input gradients dh and dlast written by their GEMMs: no zeroing */
  MT_CALL(mt_linear_backward_ex(s->dh, MT_T(G)(m, grads, k + 2), MT_T(G)(m, grads, k + 3),
                                s->dlogits, NULL, s->h, MT_T(P)(m, params, k + 2), B, s->hidden,
                                s->classes, MT_LINEAR_SET_DINP, s->pol));
  mt_model_unit_done(m, s->nb + 1);
  /* h is after ReLU and dropout: positive exactly where both kept it */
  if (s->dropped) MT_T(mt_model_dropout_backward)(s->dh, s->mask, s->drop, (int64_t)B * s->hidden);
  mt_relu_backward(s->dh, s->dh, s->h, (int64_t)B * s->hidden);
  MT_CALL(mt_model_unit_use(m, s->nb, 1));
  MT_CALL(mt_linear_backward_ex(dlast, MT_T(G)(m, grads, k), MT_T(G)(m, grads, k + 1), s->dh, NULL,
                                last, MT_T(P)(m, params, k), B, s->flat, s->hidden,
                                MT_LINEAR_SET_DINP, s->pol));
  mt_model_unit_done(m, s->nb);
  for (int l = s->nb - 1; l >= 0; l--) {
    mt_pool2d_shape ps = s->pool[l];
    ps.B = B;
    const int64_t na = MT_T(block_backward)(s, l, B);
    const REAL *dconv = s->da[l];
    MT_CALL(mt_model_unit_use(m, l, 1));
    if (s->bn) {
      const int kb = s->pbn[l];
      memset(s->dz[l], 0, (size_t)na * sizeof(REAL));
      mt_batchnorm2d_backward(s->dz[l], MT_T(G)(m, grads, kb), MT_T(G)(m, grads, kb + 1), s->da[l],
                              s->z[l], MT_T(P)(m, params, kb), s->mean[l], s->rstd[l], B, ps.C,
                              ps.H * ps.W, s->train);
      dconv = s->dz[l];
    }
    REAL *dinp = NULL;
    if (l > 0) {
      dinp = s->dp[l - 1];
      memset(dinp, 0, (size_t)B * numel(&s->pool[l - 1], 1) * sizeof(REAL));
    }
    const REAL *in = l ? s->p[l - 1] : s->x;
    const int kc = s->pconv[l];
    MT_CALL(mt_conv2d_backward(dinp, MT_T(G)(m, grads, kc), MT_T(G)(m, grads, kc + 1), dconv, in,
                               MT_T(P)(m, params, kc), B, &s->conv[l]));
    mt_model_unit_done(m, l);
  }
  return 0;
}

#if !MT_F64
/* DP-SGD's batched clipping (mt_model_ops.backward_clipped), without batch
 * norm (refused under DP): the activations' gradients in one batched
 * backward; the two linear layers' per-sample norms from their inputs and
 * output gradients (as the mlp's); a convolution's per-sample gradient has
 * no such shortcut (its weights see every position), so the convolutions'
 * weight gradients are made one sample at a time into a scratch of their
 * parameters, whose norm completes the sample's, then added scaled by its
 * clip factor; the linear layers' weight gradients last, in one batched
 * pass over the output gradients scaled row by row. */
static int MT_T(cnn_backward_clipped)(mt_model *m, const REAL *params, REAL *grads,
                                      double max_norm, int B, double *norms) {
  MT_T(cnn) *s = m->data;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "cnn: backward of another precision than set up");
  MT_CHECK(B == s->B, MT_ERR_STATE, "cnn backward of %d samples after a forward of %d", B, s->B);
  MT_CHECK(!s->bn, MT_ERR_STATE, "cnn: per-sample clipping with batch norm");
  MT_CHECK(max_norm > 0, MT_ERR_ARG, "cnn: clipping norm %g must be > 0", max_norm);
  if (B == 0) return 0;
  const int k = s->pcls;
  const REAL *last = s->p[s->nb - 1];
  REAL *dlast = s->dp[s->nb - 1];
  memset(s->dlogits, 0, (size_t)B * s->classes * sizeof(REAL));
  memset(s->dh, 0, (size_t)B * s->hidden * sizeof(REAL));
  mt_softmax_xent_backward(s->dlogits, s->probs, s->y, (REAL)1, B, s->classes);
  for (int i = 0; i < B; i++) norms[i] = 0;
  mt_dp_linear_norms2(norms, s->dlogits, s->classes, s->h, s->hidden, B);
  MT_CALL(mt_gemm('N', 'N', B, s->hidden, s->classes, (REAL)1, s->dlogits, s->classes,
                  MT_T(P)(m, params, k + 2), s->hidden, (REAL)1, s->dh, s->hidden, s->pol));
  if (s->dropped) MT_T(mt_model_dropout_backward)(s->dh, s->mask, s->drop, (int64_t)B * s->hidden);
  mt_relu_backward(s->dh, s->dh, s->h, (int64_t)B * s->hidden);
  mt_dp_linear_norms2(norms, s->dh, s->hidden, last, s->flat, B);
  memset(dlast, 0, (size_t)B * s->flat * sizeof(REAL));
  MT_CALL(mt_gemm('N', 'N', B, s->flat, s->hidden, (REAL)1, s->dh, s->hidden,
                  MT_T(P)(m, params, k), s->flat, (REAL)1, dlast, s->flat, s->pol));
  for (int l = s->nb - 1; l >= 0; l--) { /* the convolutions' output gradients */
    MT_T(block_backward)(s, l, B);
    if (l == 0) break;
    REAL *dinp = s->dp[l - 1];
    memset(dinp, 0, (size_t)B * numel(&s->pool[l - 1], 1) * sizeof(REAL));
    MT_CALL(mt_conv2d_backward(dinp, NULL, NULL, s->da[l], s->p[l - 1],
                               MT_T(P)(m, params, s->pconv[l]), B, &s->conv[l]));
  }
  const size_t nc = m->params.p[k].offset; /* the convolutions' parameters */
  for (int i = 0; i < B; i++) {
    memset(s->cgrad, 0, nc * sizeof(REAL));
    for (int l = 0; l < s->nb; l++) {
      const int kc = s->pconv[l];
      const int64_t out1 = (int64_t)numel(&s->pool[l], 0);
      const int64_t in1 = l ? (int64_t)numel(&s->pool[l - 1], 1) : (int64_t)s->C0 * s->H0 * s->W0;
      const REAL *in = (l ? s->p[l - 1] : s->x) + i * in1;
      MT_CALL(mt_conv2d_backward(NULL, MT_T(G)(m, s->cgrad, kc), MT_T(G)(m, s->cgrad, kc + 1),
                                 s->da[l] + i * out1, in, MT_T(P)(m, params, kc), 1, &s->conv[l]));
    }
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (size_t j = 0; j < nc; j++) ss += (double)s->cgrad[j] * (double)s->cgrad[j];
    norms[i] = sqrt(norms[i] + ss);
    const double f = max_norm / (norms[i] + MT_DP_NORM_EPS);
    const REAL c = f < 1.0 ? (REAL)f : (REAL)1;
#pragma omp simd
    for (size_t j = 0; j < nc; j++) grads[j] += c * s->cgrad[j];
    if (f >= 1.0) continue;
    REAL *dl = s->dlogits + (size_t)i * s->classes, *dhi = s->dh + (size_t)i * s->hidden;
    for (int j = 0; j < s->classes; j++) dl[j] *= c;
    for (int j = 0; j < s->hidden; j++) dhi[j] *= c;
  }
  MT_CALL(mt_linear_backward(NULL, MT_T(G)(m, grads, k + 2), MT_T(G)(m, grads, k + 3), s->dlogits,
                             s->h, MT_T(P)(m, params, k + 2), B, s->hidden, s->classes, s->pol));
  MT_CALL(mt_linear_backward(NULL, MT_T(G)(m, grads, k), MT_T(G)(m, grads, k + 1), s->dh, last,
                             MT_T(P)(m, params, k), B, s->flat, s->hidden, s->pol));
  return 0;
}
#endif

/* The convolutions' and GEMMs' FLOPs of one sample: forward into *fwd;
 * the result is forward plus backward. */
static double MT_T(cnn_flops)(const mt_model *m, double *fwd) {
  const MT_T(cnn) *s = m->data;
  double f = 0, f0 = 0;
  for (int l = 0; l < s->nb; l++) {
    const mt_conv2d_shape *c = &s->conv[l].s;
    double fl = 2.0 * c->OC * c->OH * c->OW * (double)c->IC * c->KH * c->KW;
    f0 += fl;
    f += fl * (l ? 3 : 2); /* the first layer needs no input gradient */
  }
  const double lin = 2.0 * s->flat * s->hidden + 2.0 * s->hidden * s->classes;
  if (fwd) *fwd = f0 + lin;
  return f + 3 * lin;
}

static void MT_T(cnn_destroy)(mt_model *m) {
  MT_T(cnn) *s = m->data;
  if (!s) return;
  for (int l = 0; l < MAX_BLOCKS; l++) {
    mt_conv2d_free(&s->conv[l]);
    mt_free(&s->a[l]);
    mt_free(&s->da[l]);
    mt_free(&s->p[l]);
    mt_free(&s->dp[l]);
    mt_free(&s->arg[l]);
    mt_free(&s->z[l]);
    mt_free(&s->dz[l]);
    mt_free(&s->mean[l]);
    mt_free(&s->rstd[l]);
  }
  mt_free(&s->mask);
  mt_free(&s->h);
  mt_free(&s->dh);
  mt_free(&s->logits);
  mt_free(&s->dlogits);
  mt_free(&s->probs);
  mt_free(&s->xin);
  mt_free(&s->cgrad);
  mt_free(&m->data);
}

