/* The MLP (mlp.c), a template for REAL = float and double: its state,
 * setup, forward, backward, flops and destroy. */

typedef struct {
  mt_mlp_hparams hp;       /* what it was set up with (mt_mlp_hparams_of)    */
  const mt_nn_policy *pol; /* how its GEMMs compute (nn/lowp.h; NULL: fp32)  */
  int nl;                  /* linear layers                                  */
  int dim[MT_MAX_HIDDEN + 2]; /* dim[0] input, dim[l+1] output of layer l    */
  REAL *act[MT_MAX_HIDDEN + 1];  /* (B, dim[l+1]) outputs (post-ReLU)          */
  REAL *dact[MT_MAX_HIDDEN + 1]; /* their gradients                           */
  uint8_t *mask[MT_MAX_HIDDEN]; /* dropout masks of the hidden layers         */
  REAL *probs;
  REAL *xin, *tin;         /* double: the batch's inputs and targets widened */
  REAL p;                  /* dropout probability                            */
  int regression;          /* MSE over dim[nl] targets                       */
  const REAL *x;           /* input of the last forward                      */
  const int32_t *y;
  const REAL *target;
  int B, dropped;          /* dropped: the last forward applied dropout      */
  int held;                /* it holds its layers' inputs (models.h)          */
  mt_nn_holds holds;
} MT_T(mlp);

static int MT_T(mlp_setup)(mt_model *m, const mt_mlp_hparams *hp, const mt_data_spec *spec,
                           int max_batch, const mt_nn_policy *pol) {
  MT_T(mlp) *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "mlp"));
  m->data = s;
  MT_CHECK(!spec->tokens && (spec->nclasses >= 2 || spec->ntargets > 0), MT_ERR_DATA,
           "model mlp needs inputs /x and class labels or float targets /y (this data set "
           "holds %s)", spec->tokens ? "/tokens" : "neither");
  s->hp = *hp;
  s->pol = pol;
  s->nl = hp->nhidden + 1;
  s->p = (REAL)hp->dropout;
  s->regression = spec->ntargets > 0;
  s->dim[0] = (int)spec->sample_numel;
  for (int i = 0; i < hp->nhidden; i++) s->dim[i + 1] = hp->hidden[i];
  s->dim[s->nl] = s->regression ? spec->ntargets : spec->nclasses;
  for (int l = 0; l < s->nl; l++) {
    char name[MT_NAME_MAX];
    int64_t wshape[2] = {s->dim[l + 1], s->dim[l]}, bshape[1] = {s->dim[l + 1]};
    snprintf(name, sizeof(name), "layers.%d.weight", 2 * l);
    MT_CALL(mt_param_table_add(&m->params, name, 2, wshape, l));
    snprintf(name, sizeof(name), "layers.%d.bias", 2 * l);
    MT_CALL(mt_param_table_add(&m->params, name, 1, bshape, l));
    MT_CALL(mt_calloc(&s->act[l], (size_t)max_batch * s->dim[l + 1], sizeof(REAL), "activations"));
    MT_CALL(mt_calloc(&s->dact[l], (size_t)max_batch * s->dim[l + 1], sizeof(REAL), "activation gradients"));
    if (s->p > 0 && l < s->nl - 1)
      MT_CALL(mt_calloc(&s->mask[l], (size_t)max_batch * s->dim[l + 1], 1, "dropout masks"));
  }
  MT_CALL(mt_calloc(&s->probs, (size_t)max_batch * s->dim[s->nl], sizeof(REAL), "probabilities"));
  if (MT_F64) {
    MT_CALL(mt_calloc(&s->xin, (size_t)max_batch * s->dim[0], sizeof(REAL), "inputs in double"));
    if (s->regression)
      MT_CALL(mt_calloc(&s->tin, (size_t)max_batch * s->dim[s->nl], sizeof(REAL), "targets in double"));
  }
  return 0;
}

static const REAL *MT_T(W)(const mt_model *m, const REAL *params, int l) {
  return params + m->params.p[2 * l].offset;
}

static int MT_T(mlp_forward)(mt_model *m, const REAL *params, const mt_batch *bt, REAL *losses,
                             mt_batch_stats *st) {
  MT_T(mlp) *s = m->data;
  const int B = bt->n;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "mlp: forward of another precision than set up");
  MT_CHECK(bt->x && (s->regression ? bt->targets != NULL : bt->labels != NULL), MT_ERR_DATA,
           "model mlp needs inputs /x and %s /y", s->regression ? "float targets" : "class labels");
  MT_CHECK(!s->regression || bt->targets_len == s->dim[s->nl], MT_ERR_DATA,
           "model mlp was set up for %d targets per sample, the batch has %lld", s->dim[s->nl],
           (long long)bt->targets_len);
  MT_CHECK(B <= m->max_batch, MT_ERR_ARG, "batch %d exceeds %d", B, m->max_batch);
  const REAL *x = MT_T(mt_model_input)(s->xin, bt->x, (int64_t)B * s->dim[0]);
  s->x = x;
  s->y = bt->labels;
  s->target = s->regression ? MT_T(mt_model_input)(s->tin, bt->targets, (int64_t)B * s->dim[s->nl])
                            : NULL;
  s->B = B;
  s->dropped = bt->train && s->p > 0;
  /* each layer's input feeds its forward and its weight gradient */
  s->held = mt_model_holds_begin(&s->holds, bt, s->pol);
  mt_nn_policy with;
  const mt_nn_policy *pol = mt_model_policy(s->held, s->pol, &s->holds, &with);
  const REAL *in = x;
  for (int l = 0; l < s->nl; l++) {
    MT_CALL(mt_model_unit_use(m, l, 0));
    MT_T(mt_model_hold)(s->held, &s->holds, pol, in, (int64_t)B * s->dim[l]);
    const REAL *b = params + m->params.p[2 * l + 1].offset;
    const int hidden = l < s->nl - 1; /* ReLU (and dropout) after it */
    MT_CALL(mt_linear_forward_ex(s->act[l], in, MT_T(W)(m, params, l), b, B, s->dim[l],
                                 s->dim[l + 1], hidden ? MT_LINEAR_RELU : 0u, pol));
    if (hidden && s->dropped) MT_T(mt_model_dropout)(s->act[l], s->mask[l], s->p, bt, l, s->dim[l + 1]);
    in = s->act[l];
  }
  const REAL *out = s->act[s->nl - 1];
  const int K = s->dim[s->nl];
  if (s->regression) {
    double sse = mt_mse_forward(losses, out, s->target, B, K);
    if (st) {
      st->loss_sum += sse / K;
      REAL *lg = MT_T(mt_model_logits)(st);
      if (lg) {
        MT_CHECK(st->logits_len == K, MT_ERR_ARG, "model mlp: output rows of %d asked for, it has %d",
                 st->logits_len, K);
        memcpy(lg, out, (size_t)B * K * sizeof(REAL));
      }
      for (int i = 0; st->pred && i < B; i++) st->pred[i] = -1;
    }
    return 0;
  }
  int64_t correct = 0;
  double sum = mt_softmax_xent_forward(s->probs, losses, &correct, out, s->y, B, K);
  if (st) {
    st->loss_sum += sum;
    st->correct += (double)correct;
    MT_CALL(MT_T(mt_model_put_outputs)("mlp", st, out, B, K));
  }
  return 0;
}

static int MT_T(mlp_backward)(mt_model *m, const REAL *params, REAL *grads, REAL scale, int B) {
  MT_T(mlp) *s = m->data;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "mlp: backward of another precision than set up");
  MT_CHECK(B == s->B, MT_ERR_STATE, "mlp backward of %d samples after a forward of %d", B, s->B);
  const int K = s->dim[s->nl];
  mt_nn_policy with;
  const mt_nn_policy *pol = mt_model_policy(s->held, s->pol, &s->holds, &with);
  /* the loss adds into its gradient; every other dact is written whole by
   * the layer above (MT_LINEAR_SET_DINP) */
  memset(s->dact[s->nl - 1], 0, (size_t)B * K * sizeof(REAL));
  if (s->regression)
    mt_mse_backward(s->dact[s->nl - 1], s->act[s->nl - 1], s->target, scale / (REAL)K, B, K);
  else
    mt_softmax_xent_backward(s->dact[s->nl - 1], s->probs, s->y, scale, B, K);
  /* every parameter's gradient is one layer's (m->grads_set: written) */
  const unsigned set = (m->grads_set ? MT_LINEAR_SET_GRADS : 0u) | MT_LINEAR_SET_DINP;
  for (int l = s->nl - 1; l >= 0; l--) {
    REAL *dout = s->dact[l];
    const int hidden = l < s->nl - 1;
    /* act is after ReLU and dropout: positive exactly where both kept it,
     * the ReLU's mask (MT_LINEAR_RELU) after dropout's scaling */
    if (hidden && s->dropped)
      MT_T(mt_model_dropout_backward)(dout, s->mask[l], s->p, (int64_t)B * s->dim[l + 1]);
    const REAL *in = l ? s->act[l - 1] : s->x;
    MT_CALL(mt_model_unit_use(m, l, 1));
    REAL *dw = grads + m->params.p[2 * l].offset, *db = grads + m->params.p[2 * l + 1].offset;
    MT_CALL(mt_linear_backward_ex(l ? s->dact[l - 1] : NULL, dw, db, dout, s->act[l], in,
                                  MT_T(W)(m, params, l), B, s->dim[l], s->dim[l + 1],
                                  set | (hidden ? MT_LINEAR_RELU : 0u), pol));
    mt_model_unit_done(m, l);
  }
  mt_model_holds_end(&s->holds, &s->held);
  return 0;
}

#if !MT_F64
/* DP-SGD's fast path (mt_model_ops.backward_clipped; Opacus's ghost
 * clipping): the per-sample gradient of a linear layer is the outer
 * product of its output gradient and its input, so its squared norm is
 * ||dout_i||^2 (||in_i||^2 + 1) with the bias; the backward being linear
 * in the loss's gradient, sample i's clipped gradient is the backward of
 * its output gradients scaled by c_i. One pass for the activations'
 * gradients and the norms, then the weight gradients of the scaled
 * output gradients: a batched backward instead of B backwards of one. */
static int MT_T(mlp_backward_clipped)(mt_model *m, const REAL *params, REAL *grads,
                                      double max_norm, int B, double *norms) {
  MT_T(mlp) *s = m->data;
  MT_CHECK(m->dtype == MT_DT, MT_ERR_STATE, "mlp: backward of another precision than set up");
  MT_CHECK(B == s->B, MT_ERR_STATE, "mlp backward of %d samples after a forward of %d", B, s->B);
  MT_CHECK(max_norm > 0, MT_ERR_ARG, "mlp: clipping norm %g must be > 0", max_norm);
  for (int l = 0; l < s->nl; l++) memset(s->dact[l], 0, (size_t)B * s->dim[l + 1] * sizeof(REAL));
  const int K = s->dim[s->nl];
  mt_nn_policy with;
  const mt_nn_policy *pol = mt_model_policy(s->held, s->pol, &s->holds, &with);
  if (s->regression)
    mt_mse_backward(s->dact[s->nl - 1], s->act[s->nl - 1], s->target, (REAL)1 / (REAL)K, B, K);
  else
    mt_softmax_xent_backward(s->dact[s->nl - 1], s->probs, s->y, (REAL)1, B, K);
  for (int i = 0; i < B; i++) norms[i] = 0;
  for (int l = s->nl - 1; l >= 0; l--) {
    REAL *dout = s->dact[l];
    const int IC = s->dim[l], OC = s->dim[l + 1];
    const int64_t n = (int64_t)B * OC;
    if (l < s->nl - 1) {
      if (s->dropped) MT_T(mt_model_dropout_backward)(dout, s->mask[l], s->p, n);
      mt_relu_backward(dout, dout, s->act[l], n);
    }
    mt_dp_linear_norms2(norms, dout, OC, l ? s->act[l - 1] : s->x, IC, B);
    if (l)
      MT_CALL(mt_gemm('N', 'N', B, IC, OC, (REAL)1, dout, OC, MT_T(W)(m, params, l), IC, (REAL)1,
                      s->dact[l - 1], IC, pol));
  }
  for (int i = 0; i < B; i++) {
    norms[i] = sqrt(norms[i]);
    const double f = max_norm / (norms[i] + MT_DP_NORM_EPS);
    if (f >= 1.0) continue;
    const REAL c = (REAL)f;
    for (int l = 0; l < s->nl; l++) {
      REAL *d = s->dact[l] + (size_t)i * s->dim[l + 1];
#pragma omp simd
      for (int j = 0; j < s->dim[l + 1]; j++) d[j] *= c;
    }
  }
  for (int l = s->nl - 1; l >= 0; l--) {
    const REAL *in = l ? s->act[l - 1] : s->x;
    REAL *dw = grads + m->params.p[2 * l].offset, *db = grads + m->params.p[2 * l + 1].offset;
    MT_CALL(mt_linear_backward(NULL, dw, db, s->dact[l], in, MT_T(W)(m, params, l), B, s->dim[l],
                               s->dim[l + 1], pol));
  }
  mt_model_holds_end(&s->holds, &s->held);
  return 0;
}
#endif

/* The GEMMs' FLOPs of one sample: forward into *fwd; the result is forward
 * plus backward (twice the forward's, but the first layer needs no input
 * gradient). */
static double MT_T(mlp_flops)(const mt_model *m, double *fwd) {
  const MT_T(mlp) *s = m->data;
  double f = 0, f0 = 0;
  for (int l = 0; l < s->nl; l++) {
    f0 += 2.0 * s->dim[l] * s->dim[l + 1];
    f += 2.0 * s->dim[l] * s->dim[l + 1] * (l ? 3 : 2);
  }
  if (fwd) *fwd = f0;
  return f;
}

static void MT_T(mlp_destroy)(mt_model *m) {
  MT_T(mlp) *s = m->data;
  if (!s) return;
  mt_nn_holds_free(&s->holds);
  for (int l = 0; l < s->nl; l++) {
    mt_free(&s->act[l]);
    mt_free(&s->dact[l]);
    if (l < MT_MAX_HIDDEN) mt_free(&s->mask[l]);
  }
  mt_free(&s->probs);
  mt_free(&s->xin);
  mt_free(&s->tin);
  mt_free(&m->data);
}

