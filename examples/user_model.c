/* A user's own model, backend and optimizer, plugged into mpitrain through the public
 * header only: no mpitrain source is changed. Build against libmpitrain and
 * run like mpitrain itself:
 *
 *   mpirun -np 2 ./user_model -model softmax_tanh -softmax_tanh_hidden 32 \
 *       -backend ddp-reduce-bcast -data_train train.h5 -data_val val.h5
 *
 * The model: one tanh hidden layer and a softmax output,
 *   h = tanh(x W1^T + b1),  logits = h W2^T + b2,  loss = cross-entropy,
 * with parameters named like torch.nn.Sequential(Linear, Tanh, Linear).
 * Its forward also fills the per-sample outputs that -outputs asks for
 * through mt_batch_stats (prediction, logits), and counts the samples it
 * evaluates; its metrics op combines every rank's count and host name with
 * mt_allgather_values into two columns of curve.csv: metric.val_samples
 * (the samples evaluated since the last report, over all ranks and
 * threads: the validation set's size; with -outputs train the training
 * set's evaluation pass counts in the next epoch's first report) and
 * metric.hosts (the distinct hosts the ranks ran on).
 * The backend: data parallel like ddp, but summing gradients with
 * MPI_Reduce to rank 0 and MPI_Bcast back (a deliberately different
 * algorithm that must give the same model).
 * The optimizer: heavy-ball momentum (-optimizer heavy_ball), which must
 * give the built-in sgd's model for the same momentum. */
#include <mpitrain/mpitrain.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- the model */

static long hidden_ = 16;
/* 1: report this rank's own count, uncombined: the trainer refuses metrics
 * that differ between ranks (shown by tests/test_example.sh) */
static long local_metrics_ = 0;

typedef struct {
  int D, H, C;
  float *h, *p;       /* (B,H) tanh outputs, (B,C) softmax                  */
  float *dh;          /* (B,H)                                              */
  const float *x;
  const int32_t *y;
  int B;
  int64_t evaluated;  /* samples of evaluation forwards since the last report */
} net;

static int net_options(void) {
  MT_CALL(mt_option_int("-softmax_tanh_hidden", "softmax_tanh: hidden units", 16, 1, 1 << 16,
                        &hidden_));
  return mt_option_int("-softmax_tanh_local_metrics",
                       "softmax_tanh: 1 reports each rank's own count (refused on several ranks)",
                       0, 0, 1, &local_metrics_);
}

static int net_setup(mt_model *m, const mt_data_spec *spec, int max_batch) {
  net *s;
  MT_CALL(mt_calloc(&s, 1, sizeof(*s), "softmax_tanh"));
  m->data = s;
  s->D = (int)spec->sample_numel;
  s->H = (int)hidden_;
  s->C = spec->nclasses;
  int64_t w1[2] = {s->H, s->D}, b1[1] = {s->H}, w2[2] = {s->C, s->H}, b2[1] = {s->C};
  MT_CALL(mt_param_table_add(&m->params, "layers.0.weight", 2, w1, 0));
  MT_CALL(mt_param_table_add(&m->params, "layers.0.bias", 1, b1, 0));
  MT_CALL(mt_param_table_add(&m->params, "layers.2.weight", 2, w2, 1));
  MT_CALL(mt_param_table_add(&m->params, "layers.2.bias", 1, b2, 1));
  MT_CALL(mt_calloc(&s->h, (size_t)max_batch * s->H, sizeof(float), "hidden"));
  MT_CALL(mt_calloc(&s->dh, (size_t)max_batch * s->H, sizeof(float), "hidden gradient"));
  MT_CALL(mt_calloc(&s->p, (size_t)max_batch * s->C, sizeof(float), "softmax"));
  return 0;
}

/* uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) from a small counter-based hash */
static float draw(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + i * 0xbf58476d1ce4e5b9ULL + 1;
  z = (z ^ (z >> 31)) * 0x94d049bb133111ebULL;
  z ^= z >> 29;
  return (float)(z >> 40) / 16777216.0f * 2.0f - 1.0f;
}

static int net_init(mt_model *m, float *params, uint64_t seed) {
  for (int k = 0; k < m->params.n; k++) {
    const mt_param *q = &m->params.p[k];
    int64_t fan_in = q->ndim == 2 ? q->shape[1] : m->params.p[k - 1].shape[1];
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t i = 0; i < q->numel; i++) params[q->offset + i] = bound * draw(seed + 7 * k, i);
  }
  return 0;
}

static const float *P(const mt_model *m, const float *params, int k) {
  return params + m->params.p[k].offset;
}

static int net_forward(mt_model *m, const float *params, const mt_batch *bt, float *losses,
                       mt_batch_stats *st) {
  net *s = m->data;
  const float *x = bt->x;
  const int32_t *y = bt->labels;
  const int B = bt->n;
  MT_CHECK(x && y, MT_ERR_DATA, "softmax_tanh needs inputs and class labels");
  const float *w1 = P(m, params, 0), *b1 = P(m, params, 1), *w2 = P(m, params, 2),
              *b2 = P(m, params, 3);
  s->x = x, s->y = y, s->B = B;
  /* optional per-sample outputs: the trainer asks for them with -outputs */
  MT_CHECK(!st->logits || st->logits_len == s->C, MT_ERR_ARG,
           "softmax_tanh: logits rows of %d asked for, it has %d classes", st->logits_len, s->C);
  for (int b = 0; b < B; b++) {
    for (int j = 0; j < s->H; j++) {
      float a = b1[j];
      for (int i = 0; i < s->D; i++) a += x[(size_t)b * s->D + i] * w1[(size_t)j * s->D + i];
      s->h[(size_t)b * s->H + j] = tanhf(a);
    }
    float *p = s->p + (size_t)b * s->C, mx = -INFINITY;
    int arg = 0; /* the prediction: the first of the largest logits */
    for (int c = 0; c < s->C; c++) {
      float a = b2[c];
      for (int j = 0; j < s->H; j++) a += s->h[(size_t)b * s->H + j] * w2[(size_t)c * s->H + j];
      p[c] = a;
      if (st->logits) st->logits[(size_t)b * s->C + c] = a;
      if (a > mx) mx = a, arg = c;
    }
    double z = 0;
    for (int c = 0; c < s->C; c++) {
      p[c] = expf(p[c] - mx);
      z += p[c];
    }
    for (int c = 0; c < s->C; c++) p[c] = (float)(p[c] / z);
    double loss = -log((double)p[y[b]] > 1e-30 ? (double)p[y[b]] : 1e-30);
    if (losses) losses[b] = (float)loss;
    if (st->pred) st->pred[b] = arg;
    st->loss_sum += loss;
    st->correct += arg == y[b];
  }
  if (!bt->train) s->evaluated += B;
  return 0;
}

static int net_backward(mt_model *m, const float *params, float *grads, float scale, int B) {
  net *s = m->data;
  MT_CHECK(B == s->B, MT_ERR_STATE, "softmax_tanh: backward of %d rows after forward of %d", B, s->B);
  const float *w2 = P(m, params, 2);
  float *dw1 = grads + m->params.p[0].offset, *db1 = grads + m->params.p[1].offset,
        *dw2 = grads + m->params.p[2].offset, *db2 = grads + m->params.p[3].offset;
  memset(s->dh, 0, (size_t)B * s->H * sizeof(float));
  for (int b = 0; b < B; b++) {
    const float *h = s->h + (size_t)b * s->H;
    float *dh = s->dh + (size_t)b * s->H;
    for (int c = 0; c < s->C; c++) {
      float d = scale * (s->p[(size_t)b * s->C + c] - (c == s->y[b] ? 1.0f : 0.0f));
      db2[c] += d;
      for (int j = 0; j < s->H; j++) {
        dw2[(size_t)c * s->H + j] += d * h[j];
        dh[j] += d * w2[(size_t)c * s->H + j];
      }
    }
    for (int j = 0; j < s->H; j++) {
      float d = dh[j] * (1.0f - h[j] * h[j]);
      db1[j] += d;
      for (int i = 0; i < s->D; i++) dw1[(size_t)j * s->D + i] += d * s->x[(size_t)b * s->D + i];
    }
  }
  return 0;
}

static void net_destroy(mt_model *m) {
  net *s = m->data;
  if (!s) return;
  mt_free(&s->h);
  mt_free(&s->dh);
  mt_free(&s->p);
  mt_free(&m->data);
}

/* The trainer calls this on every rank after each validation pass: the
 * rank's threads' counts summed, then every rank's count and host gathered
 * (a mixed-type all-gather) and combined the same way on every rank. */
static int net_metrics(mt_model *const *models, int nmodels, MPI_Comm comm, int set,
                       mt_metric *out, int max, int *n) {
  (void)set;
  MT_CHECK(max >= 2, MT_ERR_ARG, "softmax_tanh: room for %d metrics, it reports 2", max);
  int64_t mine = 0;
  for (int i = 0; i < nmodels; i++) {
    net *s = models[i]->data;
    mine += s->evaluated;
    s->evaluated = 0;
  }
  char host[MT_VALUE_STR_MAX] = "";
  if (gethostname(host, sizeof(host) - 1) != 0) snprintf(host, sizeof(host), "?");
  int size;
  MT_MPI(MPI_Comm_size(comm, &size));
  mt_value v[2] = {mt_value_i64(mine), mt_value_str(host)}, *all = NULL;
  /* a rank that cannot allocate must not leave the others in the all-gather */
  int err = mt_calloc(&all, (size_t)size * 2, sizeof(mt_value), "per-rank metrics"), bad = !!err;
  MT_MPI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, comm));
  if (bad) {
    mt_free(&all);
    return err ? err : MT_ERR(MT_ERR_MEM, "softmax_tanh: another rank could not allocate");
  }
  err = mt_allgather_values(comm, v, 2, all);
  int64_t total = local_metrics_ ? mine : 0;
  int hosts = 0;
  for (int r = 0; !err && r < size; r++) {
    if (!local_metrics_) total += all[2 * r].i;
    int seen = 0; /* a host counts at its first rank */
    for (int q = 0; q < r && !seen; q++) seen = strcmp(all[2 * q + 1].s, all[2 * r + 1].s) == 0;
    hosts += !seen;
  }
  mt_free(&all);
  MT_CALL(err);
  out[0] = (mt_metric){.name = "val_samples", .value = (double)total};
  out[1] = (mt_metric){.name = "hosts", .value = hosts};
  *n = 2;
  return 0;
}

static const mt_model_ops softmax_tanh = {
    .name = "softmax_tanh",
    .options = net_options,
    .setup = net_setup,
    .init = net_init,
    .forward = net_forward,
    .backward = net_backward,
    .destroy = net_destroy,
    .metrics = net_metrics,
};

/* ----------------------------------------------------------- the backend */

static int rb_sync(mt_backend *b, float *params, size_t n) {
  MT_MPI(MPI_Bcast(params, (int)n, MPI_FLOAT, 0, b->comm));
  return 0;
}

static int rb_reduce(mt_backend *b, float *grads, size_t n) {
  double t0 = MPI_Wtime();
  if (b->rank == 0)
    MT_MPI(MPI_Reduce(MPI_IN_PLACE, grads, (int)n, MPI_FLOAT, MPI_SUM, 0, b->comm));
  else
    MT_MPI(MPI_Reduce(grads, NULL, (int)n, MPI_FLOAT, MPI_SUM, 0, b->comm));
  MT_MPI(MPI_Bcast(grads, (int)n, MPI_FLOAT, 0, b->comm));
  b->comm_seconds += MPI_Wtime() - t0;
  b->comm_bytes += 2.0 * (double)n * sizeof(float);
  return 0;
}

/* Its traits: the -amp policy composes with it (-backend ddp-reduce-bcast-amp);
 * DP-SGD and O2 do not, and are refused naming the strategies that have them. */
static const mt_backend_ops reduce_bcast = {.name = "ddp-reduce-bcast",
                                            .traits = MT_TRAIT_AMP,
                                            .sync_params = rb_sync,
                                            .reduce_grads = rb_reduce};

/* --------------------------------------------------------- the optimizer */

/* Heavy-ball momentum, PyTorch's SGD rule without dampening, nesterov or
 * weight decay: buf = g on the first step, else momentum * buf + g; p -=
 * lr * buf. Its one state buffer is saved in checkpoints under its name. */
static int hb_setup(mt_optimizer *o) {
  if (o->dtype != MT_FP32) return MT_ERR(MT_ERR_OPTION, "option -optimizer heavy_ball: fp32 only");
  if (o->hp.weight_decay != 0 || o->hp.dampening != 0 || o->hp.nesterov)
    return MT_ERR(MT_ERR_OPTION, "option -optimizer heavy_ball: no -weight_decay, -dampening "
                  "or -nesterov");
  return mt_calloc(&o->data, o->n, sizeof(float), "heavy_ball buffer");
}

static int hb_step(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
                   size_t lo, double lr, long step, int all_decay) {
  (void)all_decay;
  float *p = params, *buf = (float *)o->data + lo;
  const float *g = grads, mu = (float)o->hp.momentum, a = (float)lr;
  for (int i = 0; i < tab->n; i++) /* the tensors (the padding between them stays) */
    for (size_t k = tab->p[i].offset; k < tab->p[i].offset + tab->p[i].numel; k++) {
      buf[k] = step == 0 ? g[k] : mu * buf[k] + g[k];
      p[k] -= a * buf[k];
    }
  return 0;
}

static int hb_state(mt_optimizer *o, int k, const char **name, void **data) {
  if (k != 0) return 0;
  *name = "momentum_buffer";
  *data = o->data;
  return 1;
}

static void hb_destroy(mt_optimizer *o) { mt_free(&o->data); }

static const mt_optimizer_ops heavy_ball = {.name = "heavy_ball",
                                            .setup = hb_setup,
                                            .step = hb_step,
                                            .state = hb_state,
                                            .destroy = hb_destroy};

int main(int argc, char **argv) {
  if (mt_model_register(&softmax_tanh) || mt_backend_register(&reduce_bcast) ||
      mt_optimizer_register(&heavy_ball)) {
    fprintf(stderr, "user_model: %s\n", mt_error_message());
    return 1;
  }
  return mt_main(argc, argv);
}
