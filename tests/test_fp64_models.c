/* Unit tests of the models and optimizers in double (-precision fp64):
 *  - mlp, cnn with batch norm and gpt made for MT_FP64 against PyTorch
 *    float64 (validation/gen_refs_fp64.py, refs/f64_models.txt): the loss and
 *    every gradient of a batch, 1e-12 relative to the gradient's largest
 *    element, then the parameters (and batch norm's running statistics)
 *    after AdamW or SGD steps on that batch, 1e-12;
 *  - SGD (momentum, dampening, weight decay; Nesterov), AdamW (amsgrad,
 *    weight decay) over three steps and clipping by norm and by value, in
 *    double, against PyTorch float64, 1e-12;
 *  - whole-model gradients (mlp with class labels and with regression
 *    targets, cnn with batch norm, gpt with both GELU forms) against central
 *    finite differences of the mean loss, 1e-10: Richardson-extrapolated
 *    differences with steps 1e-3 and 5e-4, at points chosen away from the
 *    kinks of relu and max-pooling (each hidden unit's bias, and batch
 *    norm's shift per channel, put the batch's values around the middle of
 *    their widest gap; the cnn's inputs are drawn until every pooling
 *    window's two largest values are apart: the margins are printed and
 *    checked);
 *  - a model without fp64 operations is refused by mt_model_create_as;
 *    mt_model_init widens the float initialisation.
 * Prints one line per check; exits non-zero when any check fails. */
#define MT_NN_GENERIC
#include "core/core.h"
#include "models/models.h"
#include "model_hparams.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "testutil.h"

#include <math.h>

#define REF_TOL 1e-12
#define FD_TOL 1e-10
#define FD_H 1e-3
#define MARGIN 0.02 /* distance from a kink, 20 steps: no difference crosses one */

static tu_ref R; /* refs/f64_models.txt */

static double *zeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static mt_model *make(const char *name, const mt_model_hparams *hp, const mt_data_spec *sp, int B) {
  mt_model *m = NULL;
  if (mt_model_create_hp(name, hp, sp, B, MT_FP64, &m)) {
    CHECK(0, "%s: made for fp64: %s", name, mt_error_message());
    mt_error_clear();
    mt_model_destroy(&m);
  }
  return m;
}

static const double *refv(const char *prefix, const char *name, int64_t n) {
  char full[128];
  snprintf(full, sizeof(full), "%s.%s", prefix, name);
  return tu_ref_get(&R, full, n)->v;
}

/* Every tensor of table t from the references PREFIX.NAME into flat x. */
static void load(const mt_param_table *t, const char *prefix, double *x) {
  for (int i = 0; i < t->n; i++)
    memcpy(x + t->p[i].offset, refv(prefix, t->p[i].name, (int64_t)t->p[i].numel),
           t->p[i].numel * sizeof(double));
}

/* Every tensor of flat x against PREFIX.NAME, relative to the largest
 * element of the reference over the whole table (a gradient that is zero
 * in theory, as a convolution's bias before batch norm, is then compared
 * at the scale of the others) or per tensor (whole = 0). */
static void compare(const mt_param_table *t, const char *prefix, const double *x, int whole,
                    const char *what) {
  double den = 0;
  for (int i = 0; whole && i < t->n; i++) {
    const double *r = refv(prefix, t->p[i].name, (int64_t)t->p[i].numel);
    for (size_t k = 0; k < t->p[i].numel; k++) den = fmax(den, fabs(r[k]));
  }
  for (int i = 0; i < t->n; i++) {
    const mt_param *q = &t->p[i];
    const double *r = refv(prefix, q->name, (int64_t)q->numel);
    double d = 0, m = 0;
    for (size_t k = 0; k < q->numel; k++) {
      d = fmax(d, fabs(x[q->offset + k] - r[k]));
      m = fmax(m, fabs(r[k]));
    }
    const double e = d / fmax(whole ? den : m, 1e-300);
    CHECK_ERR(e != e ? INFINITY : e, REF_TOL, "%s %s vs PyTorch float64", what, q->name);
  }
}

/* A batch of the references' tag.x (float32 values) and tag.y, or tokens. */
typedef struct {
  float *x;
  int32_t *y;
  mt_batch b;
} batch;

static void ref_batch(batch *bt, const char *tag, const mt_data_spec *sp, int B) {
  memset(bt, 0, sizeof(*bt));
  bt->b.n = B;
  bt->b.train = 1;
  if (sp->tokens) {
    const int64_t len = sp->sample_numel + 1;
    const double *t = refv(tag, "tokens", B * len);
    bt->y = calloc((size_t)(B * len), sizeof(int32_t));
    for (int64_t i = 0; i < B * len; i++) bt->y[i] = (int32_t)t[i];
    bt->b.tokens = bt->y;
    bt->b.tokens_len = len;
    return;
  }
  const double *x = refv(tag, "x", B * sp->sample_numel), *y = refv(tag, "y", B);
  bt->x = calloc((size_t)(B * sp->sample_numel), sizeof(float));
  bt->y = calloc((size_t)B, sizeof(int32_t));
  int exact = 1;
  for (int64_t i = 0; i < B * sp->sample_numel; i++) {
    bt->x[i] = (float)x[i];
    exact &= (double)bt->x[i] == x[i];
  }
  CHECK(exact, "%s: the reference inputs are float32 numbers (as a data file holds)", tag);
  for (int i = 0; i < B; i++) bt->y[i] = (int32_t)y[i];
  bt->b.x = bt->x;
  bt->b.x_len = sp->sample_numel;
  bt->b.labels = bt->y;
}

typedef enum { OPT_ADAMW, OPT_SGD_NESTEROV } opt_kind;

/* The reference case tag: loss and gradients at p0, parameters and
 * buffers after `steps` optimizer steps on the batch. */
static void test_ref_model(const char *tag, const mt_model_hparams *hp, const mt_data_spec *sp, int B,
                           int steps, opt_kind ok) {
  mt_model *m = make(tag, hp, sp, B);
  if (!m) return;
  const mt_param_table *t = &m->params;
  double *p = zeros(t->total), *g = zeros(t->total), *mom = zeros(t->total);
  char pre[32];
  snprintf(pre, sizeof(pre), "%s.p0", tag);
  load(t, pre, p);
  snprintf(pre, sizeof(pre), "%s.b0", tag);
  if (m->buffers.n) load(&m->buffers, pre, m->buf64);
  batch bt;
  ref_batch(&bt, tag, sp, B);
  mt_adamw_state_f64 as;
  mt_adamw_hparams ah = mt_adamw_defaults();
  ah.weight_decay = 0.01;
  mt_adamw_state_init_f64(&as, t->total, 0);
  const mt_sgd_hparams sh = {0.9, 0, 1e-3, 1};
  int err = 0;
  for (int s = 0; s < steps && !err; s++) {
    mt_batch_stats st = {0};
    memset(g, 0, t->total * sizeof(double));
    err = m->ops->forward64(m, p, &bt.b, NULL, &st);
    if (!err) err = m->ops->backward64(m, p, g, 1.0 / B, B);
    CHECK(!err, "%s: forward64 and backward64 of step %d (%s)", tag, s, err ? mt_error_message() : "");
    if (err) break;
    if (s == 0) {
      const double loss = st.loss_sum / B;
      char key[32];
      snprintf(key, sizeof(key), "%s.loss", tag);
      const double ref_loss = tu_ref_scalar(&R, key);
      CHECK(fabs(loss - ref_loss) <= REF_TOL * fabs(ref_loss), "%s: mean loss %.17g (PyTorch %.17g)",
            tag, loss, ref_loss);
      snprintf(pre, sizeof(pre), "%s.g", tag);
      compare(t, pre, g, 1, tag);
    }
    if (ok == OPT_SGD_NESTEROV)
      err = mt_sgd_step_f64(t, p, g, mom, s == 0, &sh, 1, 0.05);
    else
      err = mt_adamw_step_f64(t, p, g, &as, &ah, 1, 0.01);
  }
  snprintf(pre, sizeof(pre), "%s.p%d", tag, steps);
  char what[64];
  snprintf(what, sizeof(what), "%s after %d %s step%s", tag, steps,
           ok == OPT_SGD_NESTEROV ? "SGD" : "AdamW", steps > 1 ? "s" : "");
  compare(t, pre, p, 0, what);
  if (m->buffers.n) {
    snprintf(pre, sizeof(pre), "%s.b%d", tag, steps);
    compare(&m->buffers, pre, m->buf64, 0, what);
  }
  mt_adamw_state_free_f64(&as);
  free(p), free(g), free(mom), free(bt.x), free(bt.y);
  mt_model_destroy(&m);
}

/* ------------------------------------------------------------ optimizers */

static void test_optim(void) {
  mt_param_table t = {0};
  const int64_t ws[2] = {4, 3}, bs[1] = {3};
  mt_param_table_add(&t, "w", 2, ws, 0);
  mt_param_table_add(&t, "b", 1, bs, 0);
  const size_t n = t.total, ow = t.p[0].offset, ob = t.p[1].offset;
  double *p = zeros(n), *g = zeros(n), *buf = zeros(n);
  static const char *const tags[3] = {"sgd", "nesterov", "adamw"};
  for (int c = 0; c < 3; c++) {
    memset(p, 0, n * sizeof(double));
    memset(buf, 0, n * sizeof(double));
    memcpy(p + ow, refv("opt", "w0", 12), 12 * sizeof(double));
    memcpy(p + ob, refv("opt", "b0", 3), 3 * sizeof(double));
    const mt_sgd_hparams sg = c == 0 ? (mt_sgd_hparams){0.9, 0.2, 0.01, 0}
                                     : (mt_sgd_hparams){0.8, 0, 0, 1};
    mt_adamw_hparams ah = {0.8, 0.99, 1e-6, 0.05, 1};
    mt_adamw_state_f64 as;
    mt_adamw_state_init_f64(&as, n, 1);
    int err = 0;
    for (int k = 0; k < 3 && !err; k++) {
      char nw[8], nb[8];
      snprintf(nw, sizeof(nw), "gw%d", k);
      snprintf(nb, sizeof(nb), "gb%d", k);
      memcpy(g + ow, refv("opt", nw, 12), 12 * sizeof(double));
      memcpy(g + ob, refv("opt", nb, 3), 3 * sizeof(double));
      err = c < 2 ? mt_sgd_step_f64(&t, p, g, buf, k == 0, &sg, 1, 0.1)
                  : mt_adamw_step_f64(&t, p, g, &as, &ah, 1, 0.02);
    }
    char key[32];
    snprintf(key, sizeof(key), "opt.%s", tags[c]);
    CHECK(!err, "%s: three steps ran", tags[c]);
    CHECK_CLOSE_D(p + ow, refv(key, "w", 12), 12, REF_TOL, "%s in double: weight after 3 steps vs PyTorch",
                  tags[c]);
    CHECK_CLOSE_D(p + ob, refv(key, "b", 3), 3, REF_TOL, "%s in double: bias after 3 steps vs PyTorch",
                  tags[c]);
    mt_adamw_state_free_f64(&as);
  }
  memset(g, 0, n * sizeof(double));
  memcpy(g + ow, refv("opt", "gw0", 12), 12 * sizeof(double));
  memcpy(g + ob, refv("opt", "gb0", 3), 3 * sizeof(double));
  const double norm = mt_clip_grad_norm_f64(g, n, 0.7), want = tu_ref_scalar(&R, "opt.norm");
  CHECK(fabs(norm - want) <= REF_TOL * want, "clip_grad_norm in double: norm %.17g (PyTorch %.17g)",
        norm, want);
  CHECK_CLOSE_D(g + ow, refv("opt.clipn", "w", 12), 12, REF_TOL, "clip_grad_norm in double: weight");
  CHECK_CLOSE_D(g + ob, refv("opt.clipn", "b", 3), 3, REF_TOL, "clip_grad_norm in double: bias");
  memcpy(g + ow, refv("opt", "gw1", 12), 12 * sizeof(double));
  memcpy(g + ob, refv("opt", "gb1", 3), 3 * sizeof(double));
  CHECK(mt_clip_grad_value_f64(g, n, 0.3) == 0, "clip_grad_value in double runs");
  CHECK_CLOSE_D(g + ow, refv("opt.clipv", "w", 12), 12, 0.0, "clip_grad_value in double: weight");
  CHECK_CLOSE_D(g + ob, refv("opt.clipv", "b", 3), 3, 0.0, "clip_grad_value in double: bias");
  free(p), free(g), free(buf);
  mt_param_table_free(&t);
}

/* ---------------------------------------------------- finite differences */

typedef struct {
  mt_model *m;
  double *p;
  mt_batch *b;
} fd_ctx;

static double model_loss(fd_ctx *c) {
  mt_batch_stats st = {0};
  if (c->m->ops->forward64(c->m, c->p, c->b, NULL, &st)) return NAN;
  return st.loss_sum / c->b->n;
}

/* backward64's gradient of the mean loss against central differences of
 * the loss in every parameter, relative to the gradient's largest element;
 * the worst tensor is named. */
static void fd_model(const char *what, mt_model *m, double *p, mt_batch *b) {
  const size_t n = m->params.total;
  double *g = zeros(n), *fd = zeros(n);
  fd_ctx c = {m, p, b};
  mt_batch_stats st = {0};
  int err = m->ops->forward64(m, p, b, NULL, &st);
  if (!err) err = m->ops->backward64(m, p, g, 1.0 / b->n, b->n);
  CHECK(!err, "%s: forward64 and backward64 (%s)", what, err ? mt_error_message() : "");
  for (size_t i = 0; i < n; i++) {
    const double x0 = p[i];
    double est[2];
    for (int k = 0; k < 2; k++) {
      const double h = k ? FD_H / 2 : FD_H;
      p[i] = x0 + h;
      const double lp = model_loss(&c);
      p[i] = x0 - h;
      const double lm = model_loss(&c);
      est[k] = (lp - lm) / (2 * h);
    }
    p[i] = x0;
    fd[i] = (4 * est[1] - est[0]) / 3;
  }
  double den = 0, worst = -1;
  const char *where = "";
  for (size_t i = 0; i < n; i++) den = fmax(den, fabs(fd[i]));
  for (int k = 0; k < m->params.n; k++) {
    const mt_param *q = &m->params.p[k];
    for (size_t i = q->offset; i < q->offset + q->numel; i++) {
      double e = fabs(g[i] - fd[i]) / fmax(den, 1e-300);
      if (e != e) e = INFINITY;
      if (e > worst) worst = e, where = q->name;
    }
  }
  CHECK_ERR(worst, FD_TOL, "%s: every gradient vs finite differences of the loss (largest at %s; "
            "%zu parameters)", what, where, n);
  free(g), free(fd);
}

/* Shifts each of the C values bias[c] so that the values v(i, c) (for
 * i < rows, at v[i * stride_i + c * stride_c + j], j < inner) lie around the
 * middle of their widest interior gap; returns the smallest distance of a
 * shifted value from 0 (the relu kink) and shifts v too. */
static double center_gaps(double *v, double *bias, int rows, int C, int inner, int64_t stride_i,
                          int64_t stride_c) {
  double margin = INFINITY;
  const int n = rows * inner;
  double *s = zeros((size_t)n);
  for (int c = 0; c < C; c++) {
    int k = 0;
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < inner; j++) s[k++] = v[i * stride_i + c * stride_c + j];
    for (int a = 1; a < n; a++) /* insertion sort: small n */
      for (int b = a; b > 0 && s[b - 1] > s[b]; b--) {
        const double x = s[b];
        s[b] = s[b - 1], s[b - 1] = x;
      }
    int best = 0;
    for (int a = 1; a + 1 < n; a++)
      if (s[a + 1] - s[a] > s[best + 1] - s[best]) best = a;
    const double mid = 0.5 * (s[best] + s[best + 1]), d = -mid;
    bias[c] += d;
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < inner; j++) v[i * stride_i + c * stride_c + j] += d;
    margin = fmin(margin, 0.5 * (s[best + 1] - s[best]));
  }
  free(s);
  return margin;
}

static double *param(const mt_model *m, double *p, const char *name) {
  const mt_param *q = mt_param_table_find(&m->params, name);
  return q ? p + q->offset : NULL;
}

/* MLP: each hidden layer's pre-activations of the batch centred around the
 * widest gap by its biases; the smallest distance from 0. */
static double mlp_away_from_kinks(const mt_model *m, double *p, const float *x, int B, int D,
                                  const int *hid, int nh) {
  double *a = zeros((size_t)B * D), margin = INFINITY;
  for (int i = 0; i < B * D; i++) a[i] = x[i];
  int in = D;
  for (int l = 0; l < nh; l++) {
    char wn[32], bn[32];
    snprintf(wn, sizeof(wn), "layers.%d.weight", 2 * l);
    snprintf(bn, sizeof(bn), "layers.%d.bias", 2 * l);
    double *z = zeros((size_t)B * hid[l]), *bias = param(m, p, bn);
    mt_linear_forward(z, a, param(m, p, wn), bias, B, in, hid[l], NULL);
    margin = fmin(margin, center_gaps(z, bias, B, hid[l], 1, hid[l], 1));
    mt_relu_forward(z, z, (int64_t)B * hid[l]);
    free(a);
    a = z;
    in = hid[l];
  }
  free(a);
  return margin;
}

static void fill(double *p, size_t n, uint64_t *rng, double scale) {
  for (size_t i = 0; i < n; i++) p[i] = scale * tu_uniform(rng);
}

static void test_fd_mlp(int regression) {
  const int B = 6, D = 7, K = 3, hid[2] = {9, 5};
  const mt_model_hparams hp = mlp_hp(hid, 2, 0);
  mt_data_spec sp = {.ndim = 1, .shape = {D}, .sample_numel = D,
                     .nclasses = regression ? 0 : K, .ntargets = regression ? K : 0};
  mt_model *m = make("mlp", &hp, &sp, B);
  if (!m) return;
  uint64_t rng = regression ? 31 : 17;
  double *p = zeros(m->params.total);
  float x[6 * 7], tg[6 * 3];
  int32_t y[6];
  fill(p, m->params.total, &rng, 0.6);
  for (int i = 0; i < B * D; i++) x[i] = (float)tu_uniform(&rng);
  for (int i = 0; i < B * K; i++) tg[i] = (float)tu_uniform(&rng);
  for (int i = 0; i < B; i++) y[i] = i % K;
  mt_batch b = {.n = B, .x = x, .x_len = D, .train = 1};
  if (regression)
    b.targets = tg, b.targets_len = K;
  else
    b.labels = y;
  const double margin = mlp_away_from_kinks(m, p, x, B, D, hid, 2);
  const char *what = regression ? "mlp regression (MSE)" : "mlp";
  CHECK(margin >= MARGIN, "%s: every pre-activation %.3g or more from relu's kink", what, margin);
  fd_model(what, m, p, &b);
  free(p);
  mt_model_destroy(&m);
}

/* CNN (1,6,6) -> 2 channels -> pool 3x3 -> 3 channels -> pool 1x1 -> 4 ->
 * 3 with batch norm: each block's normalised values centred by batch
 * norm's shift (bias), the hidden layer's by its bias; returns the smallest
 * distance from a relu kink or between a pooling window's two largest
 * values (windows whose largest value is 0 pass no gradient). */
static double cnn_away_from_kinks(const mt_model *m, double *p, const float *xf, int B) {
  const int ch[2] = {2, 3};
  int C = 1, H = 6, W = 6;
  double *x = zeros((size_t)B * 36), margin = INFINITY;
  for (int i = 0; i < B * 36; i++) x[i] = xf[i];
  for (int l = 0; l < 2; l++) {
    char n1[48], n2[48], n3[48], n4[48];
    snprintf(n1, sizeof(n1), "features.%d.weight", 4 * l);
    snprintf(n2, sizeof(n2), "features.%d.bias", 4 * l);
    snprintf(n3, sizeof(n3), "features.%d.weight", 4 * l + 1);
    snprintf(n4, sizeof(n4), "features.%d.bias", 4 * l + 1);
    mt_conv2d_shape cs = {B, C, H, W, ch[l], 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};
    mt_conv2d cv;
    mt_conv2d_init_f64(&cv, &cs, 1, NULL);
    const int HW = H * W, O = ch[l];
    double *z = zeros((size_t)B * O * HW), *v = zeros((size_t)B * O * HW);
    double mean[3], rstd[3], rm[3] = {0}, rv[3] = {1, 1, 1};
    mt_conv2d_forward(z, x, param(m, p, n1), param(m, p, n2), B, &cv);
    mt_batchnorm2d_forward(v, mean, rstd, rm, rv, z, param(m, p, n3), param(m, p, n4), B, O, HW,
                           1e-5, 0.1, 1);
    margin = fmin(margin, center_gaps(v, param(m, p, n4), B, O, HW, (int64_t)O * HW, HW));
    mt_relu_forward(v, v, (int64_t)B * O * HW);
    mt_pool2d_shape ps = {B, O, H, W, 2, 2, 2, 2, 0, 0, 1, 0, 0, 0, 0};
    mt_pool2d_shape_init(&ps);
    for (int pl = 0; pl < B * O; pl++) /* the windows' two largest values */
      for (int oh = 0; oh < ps.OH; oh++)
        for (int ow = 0; ow < ps.OW; ow++) {
          double a = -1, s = -1;
          for (int k = 0; k < 4; k++) {
            const double u = v[pl * HW + (2 * oh + k / 2) * W + 2 * ow + k % 2];
            if (u > a) s = a, a = u;
            else if (u > s) s = u;
          }
          if (a > 0) margin = fmin(margin, a - s);
        }
    free(x);
    x = zeros((size_t)B * O * ps.OH * ps.OW);
    int32_t *am = calloc((size_t)B * O * ps.OH * ps.OW, sizeof(int32_t));
    mt_maxpool2d_forward(x, am, v, &ps);
    free(am), free(z), free(v);
    mt_conv2d_free(&cv);
    C = O, H = ps.OH, W = ps.OW;
  }
  double *h = zeros((size_t)B * 4), *bias = param(m, p, "classifier.1.bias");
  mt_linear_forward(h, x, param(m, p, "classifier.1.weight"), bias, B, C * H * W, 4, NULL);
  margin = fmin(margin, center_gaps(h, bias, B, 4, 1, 4, 1));
  free(h), free(x);
  return margin;
}

static void test_fd_cnn(void) {
  const int B = 3, ch[2] = {2, 3};
  const mt_model_hparams hp = cnn_hp(ch, 2, 3, 4, 1, 0);
  mt_data_spec sp = {.ndim = 3, .shape = {1, 6, 6}, .sample_numel = 36, .nclasses = 3};
  mt_model *m = make("cnn", &hp, &sp, B);
  if (!m) return;
  double *p = zeros(m->params.total), margin = 0;
  float x[3 * 36];
  int32_t y[3] = {2, 0, 1};
  int seed = 0;
  /* the first draw whose pooling windows are apart (relu's margins are made) */
  while (margin < MARGIN && ++seed <= 100) {
    uint64_t rng = 1000 + (uint64_t)seed;
    fill(p, m->params.total, &rng, 0.6);
    for (int i = 0; i < B * 36; i++) x[i] = (float)tu_uniform(&rng);
    for (int l = 0; l < 2; l++) { /* batch norm's scale near 1 */
      char nm[32];
      snprintf(nm, sizeof(nm), "features.%d.weight", 4 * l + 1);
      double *gw = param(m, p, nm);
      for (int c = 0; c < ch[l]; c++) gw[c] = 1.0 + 0.2 * gw[c];
    }
    margin = cnn_away_from_kinks(m, p, x, B);
  }
  CHECK(margin >= MARGIN,
        "cnn: draw %d has every relu input and pooling window %.3g or more from a kink", seed,
        margin);
  mt_batch b = {.n = B, .x = x, .x_len = 36, .labels = y, .train = 1};
  fd_model("cnn with batch norm (training statistics)", m, p, &b);
  free(p);
  mt_model_destroy(&m);
}

static void test_fd_gpt(int tanh_gelu) {
  const int B = 2, T = 4, V = 6;
  const mt_model_hparams hp = gpt_hp(2, 2, 8, T, tanh_gelu, 0);
  mt_data_spec sp = {.ndim = 1, .shape = {T}, .sample_numel = T, .nclasses = V, .tokens = 1};
  mt_model *m = make("gpt", &hp, &sp, B);
  if (!m) return;
  uint64_t rng = tanh_gelu ? 5 : 6;
  double *p = zeros(m->params.total);
  fill(p, m->params.total, &rng, 0.5);
  int32_t tok[2 * 5];
  for (int i = 0; i < B * (T + 1); i++) tok[i] = (int32_t)(0.5 * (tu_uniform(&rng) + 1) * V) % V;
  mt_batch b = {.n = B, .tokens = tok, .tokens_len = T + 1, .train = 1};
  fd_model(tanh_gelu ? "gpt (GELU tanh)" : "gpt (GELU erf)", m, p, &b);
  free(p);
  mt_model_destroy(&m);
}

/* ------------------------------------------------------ creation, init */

static int no_setup(mt_model *m, const mt_data_spec *sp, int B) {
  (void)m, (void)sp, (void)B;
  return 0;
}
static int no_init(mt_model *m, float *p, uint64_t s) {
  (void)m, (void)p, (void)s;
  return 0;
}
static int no_fwd(mt_model *m, const float *p, const mt_batch *b, float *l, mt_batch_stats *st) {
  (void)m, (void)p, (void)b, (void)l, (void)st;
  return 0;
}
static int no_bwd(mt_model *m, const float *p, float *g, float s, int B) {
  (void)m, (void)p, (void)g, (void)s, (void)B;
  return 0;
}

static void test_create_init(void) {
  static const mt_model_ops f32_only = {.name = "f32_only", .setup = no_setup, .init = no_init,
                                        .forward = no_fwd, .backward = no_bwd};
  mt_model_register(&f32_only);
  mt_data_spec sp = {.ndim = 1, .shape = {4}, .sample_numel = 4, .nclasses = 2};
  mt_model *m = NULL;
  CHECK(mt_model_create_as("f32_only", &sp, 2, MT_FP64, &m) == MT_ERR_OPTION && !m &&
            strstr(mt_error_message(), "-precision fp64"),
        "a model without forward64/backward64 is refused for fp64, naming -precision");
  mt_error_clear();
  /* mt_model_init: the float initialisation, widened; buffers too */
  const int ch[1] = {2};
  const mt_model_hparams hp = cnn_hp(ch, 1, 3, 4, 1, 0);
  mt_data_spec img = {.ndim = 3, .shape = {1, 4, 4}, .sample_numel = 16, .nclasses = 2};
  mt_model *f = NULL, *d = NULL;
  int err = mt_model_create_hp("cnn", &hp, &img, 2, MT_FP32, &f);
  if (!err) err = mt_model_create_hp("cnn", &hp, &img, 2, MT_FP64, &d);
  CHECK(!err && d->dtype == MT_FP64 && d->buf64 && d->params.total == f->params.total,
        "cnn made for fp32 and fp64: the same layout, double buffers");
  if (!err) {
    const size_t n = f->params.total;
    float *pf = calloc(n, sizeof(float));
    double *pd = zeros(n);
    err = mt_model_init(f, pf, 7);
    if (!err) err = mt_model_init(d, pd, 7);
    int same = !err, bufs = !err;
    for (size_t i = 0; same && i < n; i++) same = pd[i] == (double)pf[i];
    for (size_t i = 0; bufs && i < f->buffers.total; i++) bufs = d->buf64[i] == (double)f->buf[i];
    CHECK(same && bufs, "mt_model_init for fp64 = the float initialisation widened (%zu "
          "parameters, %zu buffer values)", n, f->buffers.total);
    free(pf), free(pd);
  }
  mt_error_clear();
  mt_model_destroy(&f);
  mt_model_destroy(&d);
}

int main(void) {
  tu_ref_load(&R, "f64_models.txt");
  const int hid[2] = {8, 6}, ch[2] = {3, 4};
  const mt_model_hparams mhp = mlp_hp(hid, 2, 0);
  mt_data_spec flat = {.ndim = 1, .shape = {10}, .sample_numel = 10, .nclasses = 3};
  test_ref_model("mlp", &mhp, &flat, 5, 2, OPT_ADAMW);
  const mt_model_hparams chp = cnn_hp(ch, 2, 3, 6, 1, 0);
  mt_data_spec img = {.ndim = 3, .shape = {1, 8, 8}, .sample_numel = 64, .nclasses = 3};
  test_ref_model("cnn", &chp, &img, 3, 2, OPT_SGD_NESTEROV);
  const mt_model_hparams ghp = gpt_hp(2, 2, 4, 4, 1, 0);
  mt_data_spec tok = {.ndim = 1, .shape = {4}, .sample_numel = 4, .nclasses = 7, .tokens = 1};
  test_ref_model("gpt", &ghp, &tok, 3, 2, OPT_SGD_NESTEROV);
  test_optim();
  test_fd_mlp(0);
  test_fd_mlp(1);
  test_fd_cnn();
  test_fd_gpt(1);
  test_fd_gpt(0);
  test_create_init();
  tu_ref_free(&R);
  return tu_finish("test_fp64_models");
}
