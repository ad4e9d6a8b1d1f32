/* The interfaces the training step is made of, without MPI:
 *  - the optimizer object (optim/optimizer.c): a step over ranges of the
 *    flat layout (an fsdp shard, the GPU's offloaded piece) gives the bits
 *    of a step over the whole, for sgd and adamw, float and double; its
 *    state buffers by name; its step count; errors naming -optimizer; a
 *    user's optimizer registered and found;
 *  - a -backend name parsed into a strategy and its policies
 *    (backends/registry.c): the built-ins, a refusal by traits naming the
 *    strategies that have the policy, a user's strategy composing with the
 *    policies its traits declare, the list of names. */
#include "backends/backends.h"
#include "core/core.h"
#include "optim/optim.h"
#include "testutil.h"

#include <string.h>

/* ------------------------------------------------------------- optimizer */

/* Three tensors (a weight, a bias, a weight) with the table's padding. */
static void table3(mt_param_table *t) {
  memset(t, 0, sizeof(*t));
  const int64_t w1[2] = {7, 5}, b1[1] = {7}, w2[2] = {3, 7};
  int rc = mt_param_table_add(t, "a.weight", 2, w1, 0);
  rc |= mt_param_table_add(t, "a.bias", 1, b1, 0);
  rc |= mt_param_table_add(t, "b.weight", 2, w2, 1);
  if (rc) tu_fatal("mt_param_table_add", "table3");
}

static void fill(void *x, size_t n, mt_dtype dt, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    double v = tu_uniform(&seed);
    if (dt == MT_FP64)
      ((double *)x)[i] = v;
    else
      ((float *)x)[i] = (float)v;
  }
}

/* Three steps over the whole layout against three steps over [0, cut) and
 * [cut, n) as two slices (offsets from their start, the state from lo):
 * the parameters and every state buffer must be the same bits. */
static void check_ranges(const char *name, const mt_optim_hparams *hp, mt_dtype dt, int all_decay) {
  mt_param_table t, lo_t, hi_t;
  table3(&t);
  const size_t n = t.total, esz = dt == MT_FP64 ? sizeof(double) : sizeof(float);
  const size_t cut = t.p[1].offset + 5; /* inside the bias: a tensor split */
  if (mt_param_table_slice(&t, 0, cut, &lo_t) || mt_param_table_slice(&t, cut, n, &hi_t))
    tu_fatal("mt_param_table_slice", name);
  char *pa = tu_xmalloc(n * esz), *pb = tu_xmalloc(n * esz), *g = tu_xmalloc(n * esz);
  fill(pa, n, dt, 1);
  memcpy(pb, pa, n * esz);
  mt_optimizer *a = NULL, *b = NULL;
  int err = mt_optimizer_create(name, hp, dt, n, &a) || mt_optimizer_create(name, hp, dt, n, &b);
  CHECK(!err && a && b, "%s %s: created", name, dt == MT_FP64 ? "fp64" : "fp32");
  if (err) return;
  for (int s = 0; s < 3 && !err; s++) {
    fill(g, n, dt, 100 + (uint64_t)s);
    const double lr = 0.05 / (s + 1);
    err |= mt_optimizer_step(a, &t, pa, g, 0, lr, s, all_decay);
    err |= mt_optimizer_step(b, &lo_t, pb, g, 0, lr, s, all_decay);
    err |= mt_optimizer_step(b, &hi_t, pb + cut * esz, g + cut * esz, cut, lr, s, all_decay);
  }
  CHECK(!err, "%s: steps over the whole and over two ranges", name);
  CHECK(!memcmp(pa, pb, n * esz), "%s %s: parameters stepped by ranges == stepped whole (bits)",
        name, dt == MT_FP64 ? "fp64" : "fp32");
  const char *na[4], *nb[4];
  void *da[4], *db[4];
  const int ka = mt_optimizer_state(a, na, da, 4), kb = mt_optimizer_state(b, nb, db, 4);
  CHECK(ka == kb, "%s: %d state buffers on both", name, ka);
  for (int k = 0; k < ka && k < kb; k++)
    CHECK(!strcmp(na[k], nb[k]) && !memcmp(da[k], db[k], n * esz),
          "%s: state %s stepped by ranges == stepped whole (bits)", name, na[k]);
  mt_optimizer_destroy(&a);
  mt_optimizer_destroy(&b);
  CHECK(a == NULL, "mt_optimizer_destroy NULLs the handle");
  mt_optimizer_destroy(&a); /* and accepts NULL */
  free(pa), free(pb), free(g);
  mt_param_table_free(&t), mt_param_table_free(&lo_t), mt_param_table_free(&hi_t);
}

static void check_state_names(void) {
  mt_optim_hparams hp = {.momentum = 0.9, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  const char *names[4];
  void *data[4];
  mt_optimizer *o = NULL;
  if (!mt_optimizer_create("sgd", &hp, MT_FP32, 64, &o)) {
    int k = mt_optimizer_state(o, names, data, 4);
    CHECK(k == 1 && !strcmp(names[0], "momentum_buffer"), "sgd with momentum: momentum_buffer");
    mt_optimizer_destroy(&o);
  }
  hp.momentum = 0;
  if (!mt_optimizer_create("sgd", &hp, MT_FP32, 64, &o)) {
    CHECK(mt_optimizer_state(o, names, data, 4) == 0, "sgd without momentum: no state");
    mt_optimizer_destroy(&o);
  }
  if (!mt_optimizer_create("adamw", &hp, MT_FP32, 64, &o)) {
    int k = mt_optimizer_state(o, names, data, 4);
    CHECK(k == 2 && !strcmp(names[0], "exp_avg") && !strcmp(names[1], "exp_avg_sq"),
          "adamw: exp_avg, exp_avg_sq");
    mt_optimizer_destroy(&o);
  }
  hp.amsgrad = 1;
  if (!mt_optimizer_create("adamw", &hp, MT_FP64, 64, &o)) {
    int k = mt_optimizer_state(o, names, data, 4);
    CHECK(k == 3 && !strcmp(names[2], "max_exp_avg_sq"), "adamw amsgrad: max_exp_avg_sq too");
    mt_optimizer_destroy(&o);
  }
  int err = mt_optimizer_create("lamb", &hp, MT_FP32, 64, &o);
  CHECK(err == MT_ERR_OPTION && o == NULL && strstr(mt_error_message(), "option -optimizer") &&
            strstr(mt_error_message(), "sgd, adamw"),
        "an unknown optimizer names -optimizer and the registered ones: %s", mt_error_message());
  mt_error_clear();
  hp.beta1 = 1.5;
  err = mt_optimizer_create("adamw", &hp, MT_FP32, 64, &o);
  CHECK(err == MT_ERR_OPTION && o == NULL && strstr(mt_error_message(), "-adam_beta1"),
        "adamw refuses beta1 1.5 naming the option: %s", mt_error_message());
  mt_error_clear();
}

/* A user's optimizer: plain SGD through the public header. */
static int plain_setup(mt_optimizer *o) {
  (void)o;
  return 0;
}
static int plain_step(mt_optimizer *o, const mt_param_table *tab, void *params, const void *grads,
                      size_t lo, double lr, long step, int all_decay) {
  (void)o, (void)lo, (void)step, (void)all_decay;
  float *p = params;
  const float *g = grads;
  for (int k = 0; k < tab->n; k++)
    for (size_t i = tab->p[k].offset; i < tab->p[k].offset + tab->p[k].numel; i++)
      p[i] -= (float)lr * g[i];
  return 0;
}
static const mt_optimizer_ops plain = {.name = "plain", .setup = plain_setup, .step = plain_step};

static void check_user_optimizer(void) {
  CHECK(mt_optimizer_register(&plain) == 0 && mt_optimizer_find("plain") == &plain,
        "a user's optimizer registers and is found");
  char names[128];
  mt_optimizer_names(names, sizeof(names));
  CHECK(!strcmp(names, "sgd, adamw, plain"), "the names list it: %s", names);
  static const mt_optimizer_ops bad = {.name = "bad"};
  CHECK(mt_optimizer_register(&bad) == MT_ERR_ARG, "one without setup and step is refused");
  mt_error_clear();
  static const mt_optimizer_ops dev = {.name = "dev", .setup = plain_setup, .step = plain_step,
                                       .device = MT_OPTIM_DEVICE_SGD};
  CHECK(mt_optimizer_register(&dev) == MT_ERR_ARG && !mt_optimizer_find("dev"),
        "one claiming the built-ins' device kernels is refused");
  mt_error_clear();
  mt_optim_hparams hp = {0};
  mt_optimizer *o = NULL;
  float p[16] = {1, 2, 3, 4}, g[16] = {1, 1, 1, 1};
  mt_param_table t = {0};
  const int64_t four[1] = {4};
  int err = mt_param_table_add(&t, "x", 1, four, 0) || mt_optimizer_create("plain", &hp, MT_FP32, 16, &o);
  if (!err) err = mt_optimizer_step(o, &t, p, g, 0, 0.5, 1, 1);
  CHECK(!err && p[0] == 0.5f && p[3] == 3.5f, "it steps as the built-ins do");
  err = mt_optimizer_step(o, &t, p, g, 13, 0.5, 0, 1);
  CHECK(err == MT_ERR_ARG, "a range past its state is refused: %s", mt_error_message());
  mt_error_clear();
  mt_optimizer_destroy(&o);
  mt_param_table_free(&t);
}

/* ---------------------------------------------------------------- backends */

static void check_parse(const char *name, const mt_backend_ops *ops, int amp, int dp) {
  mt_backend_spec s;
  int err = mt_backend_parse(name, &s);
  CHECK(!err && s.ops == ops && s.amp == amp && s.dp == dp, "-backend %s: strategy %s, amp %d, dp %d",
        name, ops ? ops->name : "?", amp, dp);
  if (err) mt_error_clear();
}

static void check_refused(const char *name, const char *text) {
  mt_backend_spec s;
  int err = mt_backend_parse(name, &s);
  CHECK(err == MT_ERR_OPTION && strstr(mt_error_message(), text), "-backend %s refused: %s", name,
        mt_error_message());
  mt_error_clear();
}

static int noop_reduce(mt_backend *b, float *g, size_t n) {
  (void)b, (void)g, (void)n;
  return 0;
}

static void check_backends(void) {
  check_parse("sp", &mt_sp_ops, 0, 0);
  check_parse("ddp-amp", &mt_ddp_ops, 1, 0);
  check_parse("ddp-amp-apex", &mt_ddp_ops, 2, 0);
  check_parse("sp-dp", &mt_sp_ops, 0, 1);
  check_parse("fsdp-amp", &mt_fsdp_ops, 1, 0);
  check_refused("fsdp-dp", "the DP-SGD policy (-dp) does not compose with the fsdp strategy; it "
                           "does in: sp-dp, ddp-dp");
  check_refused("fsdp-amp-apex", "it does in: sp-amp-apex, ddp-amp-apex");
  check_refused("ring-amp", "option -backend: 'ring-amp' is not one of: sp, sp-amp");
  check_refused("sp-amp-dp", "is not one of");
  /* a user's strategy: the policies its traits name, and its own name
   * even where it ends like a suffix */
  static const mt_backend_ops ring = {.name = "ring", .traits = MT_TRAIT_DP,
                                      .reduce_grads = noop_reduce};
  static const mt_backend_ops odd = {.name = "odd-amp", .reduce_grads = noop_reduce};
  CHECK(!mt_backend_register(&ring) && !mt_backend_register(&odd), "user strategies register");
  check_parse("ring", &ring, 0, 0);
  check_parse("ring-dp", &ring, 0, 1);
  check_refused("ring-amp", "the mixed precision policy (-amp) does not compose with the ring "
                            "strategy; it does in: sp-amp, ddp-amp, fsdp-amp");
  check_parse("odd-amp", &odd, 0, 0);
  static const mt_backend_ops sharded = {.name = "mine", .traits = MT_TRAIT_SHARDED,
                                         .reduce_grads = noop_reduce};
  CHECK(mt_backend_register(&sharded) == MT_ERR_ARG, "MT_TRAIT_SHARDED is the built-in fsdp's");
  mt_error_clear();
  char names[256];
  mt_backend_names(names, sizeof(names));
  CHECK(!strcmp(names, "sp, sp-amp, sp-amp-apex, sp-dp, ddp, ddp-amp, ddp-amp-apex, ddp-dp, fsdp, "
                       "fsdp-amp, ring, ring-dp, odd-amp"),
        "every name the traits allow: %s", names);
}

int main(void) {
  mt_optim_hparams sgd = {.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = 1};
  mt_optim_hparams adamw = {.weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8,
                            .amsgrad = 1};
  check_ranges("sgd", &sgd, MT_FP32, 0);
  check_ranges("sgd", &sgd, MT_FP64, 1);
  check_ranges("adamw", &adamw, MT_FP32, 1);
  check_ranges("adamw", &adamw, MT_FP64, 0);
  check_state_names();
  check_user_optimizer();
  check_backends();
  return tu_finish("test_interfaces");
}
