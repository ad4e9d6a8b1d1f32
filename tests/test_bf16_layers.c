/* Layers under a bf16 policy (src/nn/lowp.h):
 * Attention with dense head operands (src/nn/attention_t.h, "dense head
 * operands"; mt_attention_dense_heads):
 *  - emulated bf16 (no bf16 instructions, or forced): the dense path gives
 *    the bits of the strided per-head calls (the same bf16 values widened
 *    into the same fp32 GEMMs): out, preatt, att; dinp set (=) and added
 *    (+=); with q, k, v held (the gpt's way) and converted; O2 too;
 *  - each T x T matrix is converted once: a forward converts B NH T T
 *    elements (q, k, v held), a backward the output gradient and two
 *    matrices a head, B T C + 2 B NH T T (the strided calls: 3 a head);
 *  - native (oneDNN's bf16 kernels; forced on any AVX-512 CPU, skipped
 *    without): the dense path within bf16 rounding of the strided one;
 *  - both within bf16 rounding of fp32 (2e-2 relative);
 *  - by default (mt_attention_dense_heads(-1)) the dense path where the
 *    bf16 kernels are native, the strided one where bf16 is emulated;
 *  - odd shapes: T not a multiple of 16, hs 3 and 8, one head, one sample.
 * Outputs written as bf16 (mt_layernorm_forward_ex, mt_gelu_forward_ex,
 * mt_nn_hold_out):
 *  - the bf16 output is the fp32 output converted (mt_f32_to_bf16), bit
 *    for bit, and the fp32 output is left unwritten: layer norm with and
 *    without weight and bias, C below, at and above a piece (256), one and
 *    several threads; GELU tanh and erf, n below and above the size where
 *    it goes parallel; the double layers round through float;
 *  - the linear backward converts dout in its pass over it (the bias
 *    gradient, the ReLU's mask): the bits of holding it, B OC fewer
 *    elements converted at the hold;
 *  - mt_nn_hold_out holds under bf16 only (not fp32, fp16, MT_NN_NO_HOLDS'
 *    answer is the environment's), and a GEMM then reads the copy written
 *    into it: the bits of holding the fp32 values.
 * Prints one line per check; exits non-zero when any check fails. */
#define MT_NN_GENERIC
#include "core/core.h"
#include "nn/gemm_matmul.h"
#include "nn/lowp.h"
#include "nn/precision.h"
#include "nn/nn.h"
#include "testutil.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
  int B, T, C, NH;
  int64_t ni, no, na;
  float *inp, *dout;
  /* outputs of one run: out, preatt, att, dinp (set) and dinp (added) */
  float *out, *pre, *att, *dset, *dadd;
} att_case;

static float *rnd(int64_t n, uint64_t *rng, float scale) {
  float *p = tu_xmalloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = ((float)(*rng >> 40) / 16777216.0f - 0.5f) * 2.0f * scale;
  }
  return p;
}

static void outputs(att_case *c) {
  c->out = tu_xmalloc((size_t)c->no * sizeof(float));
  c->pre = tu_xmalloc((size_t)c->na * sizeof(float));
  c->att = tu_xmalloc((size_t)c->na * sizeof(float));
  c->dset = tu_xmalloc((size_t)c->ni * sizeof(float));
  c->dadd = tu_xmalloc((size_t)c->ni * sizeof(float));
}

static void free_outputs(att_case *c) {
  free(c->out), free(c->pre), free(c->att), free(c->dset), free(c->dadd);
}

/* forward and both backwards of c's inputs under pol (q, k, v held when
 * hold); the conversions of the forward and of the set backward in cf, cb
 * (then on one thread: the counter is the calling thread's) */
static int run(att_case *c, const mt_nn_policy *pol, int hold, uint64_t *cf, uint64_t *cb) {
#ifdef _OPENMP
  const int nt = omp_get_max_threads();
  if (cf) omp_set_num_threads(1);
#endif
  mt_nn_holds t = {0};
  mt_nn_policy with;
  const mt_nn_policy *p = pol ? mt_nn_with_holds(pol, &t, &with) : NULL;
  if (hold) mt_nn_hold(&t, pol, c->inp, (size_t)c->ni);
  const uint64_t c0 = mt_nn_converted();
  int rc = mt_attention_forward(c->out, c->pre, c->att, c->inp, c->B, c->T, c->C, c->NH, p);
  const uint64_t c1 = mt_nn_converted();
  float *scratch = tu_xmalloc((size_t)c->na * sizeof(float));
  for (int64_t i = 0; i < c->ni; i++) c->dset[i] = NAN; /* set (=) overwrites */
  rc |= mt_attention_backward_ex(c->dset, scratch, c->dout, c->inp, c->att, c->B, c->T, c->C,
                                 c->NH, MT_ATTN_SET_DINP, p);
  const uint64_t c2 = mt_nn_converted();
  for (int64_t i = 0; i < c->ni; i++) c->dadd[i] = 0.25f;
  rc |= mt_attention_backward(c->dadd, scratch, c->dout, c->inp, c->att, c->B, c->T, c->C, c->NH,
                              p);
  free(scratch);
  mt_nn_holds_free(&t);
  if (cf) *cf = c1 - c0;
  if (cb) *cb = c2 - c1;
#ifdef _OPENMP
  omp_set_num_threads(nt);
#endif
  return rc;
}

static int same_bits(const float *a, const float *b, int64_t n) {
  return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void compare(const char *what, att_case *x, att_case *y, double tol) {
  if (tol == 0) {
    CHECK(same_bits(x->out, y->out, x->no) && same_bits(x->pre, y->pre, x->na) &&
              same_bits(x->att, y->att, x->na),
          "%s: forward, the same bits", what);
    CHECK(same_bits(x->dset, y->dset, x->ni) && same_bits(x->dadd, y->dadd, x->ni),
          "%s: backward (set and added), the same bits", what);
    return;
  }
  CHECK_CLOSE_F(x->out, y->out, (size_t)x->no, tol, "%s: out", what);
  CHECK_CLOSE_F(x->att, y->att, (size_t)x->na, tol, "%s: att", what);
  CHECK_CLOSE_F(x->dset, y->dset, (size_t)x->ni, tol, "%s: dinp (set)", what);
  CHECK_CLOSE_F(x->dadd, y->dadd, (size_t)x->ni, tol, "%s: dinp (added)", what);
}

static void test_shape(int B, int T, int C, int NH, int native) {
  char what[160];
  snprintf(what, sizeof(what), "B=%d T=%d C=%d NH=%d %s", B, T, C, NH,
           native ? "native" : "emulated");
  uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(B * 1000 + T * 10 + C + NH);
  att_case f = {.B = B, .T = T, .C = C, .NH = NH};
  f.ni = (int64_t)B * T * 3 * C, f.no = (int64_t)B * T * C, f.na = (int64_t)B * NH * T * T;
  f.inp = rnd(f.ni, &rng, 1.5f);
  f.dout = rnd(f.no, &rng, 1.0f);
  att_case dense = f, strided = f, fp = f;
  outputs(&dense), outputs(&strided), outputs(&fp);
  const mt_nn_policy bf = mt_nn_policy_make(MT_PREC_BF16, 0);
  const mt_nn_policy o2 = mt_nn_policy_make(MT_PREC_BF16, 1);
  if (native ? !mt_gemm_bf16_force_native() : (mt_gemm_bf16_emulate(1), 0)) {
    printf("skip %s: oneDNN has no bf16 kernels on this CPU\n", what);
    goto out;
  }
  CHECK(run(&fp, NULL, 0, NULL, NULL) == 0, "%s: fp32 runs", what);
  for (int hold = 1; hold >= 0; hold--) {
    char w2[200];
    snprintf(w2, sizeof(w2), "%s, q k v %s", what, hold ? "held" : "converted");
    uint64_t df, db, sf, sb;
    mt_attention_dense_heads(1);
    int rc = run(&dense, &bf, hold, &df, &db);
    mt_attention_dense_heads(0);
    rc |= run(&strided, &bf, hold, &sf, &sb);
    mt_attention_dense_heads(1);
    compare("one thread", &dense, &strided, native ? 1e-2 : 0);
    rc |= run(&dense, &bf, hold, NULL, NULL); /* the threads' (b, h) pairs */
    mt_attention_dense_heads(0);
    rc |= run(&strided, &bf, hold, NULL, NULL);
    mt_attention_dense_heads(1);
    CHECK(rc == 0, "%s: both paths run", w2);
    compare(w2, &dense, &strided, native ? 1e-2 : 0);
    compare(w2, &dense, &fp, 2e-2);
    if (hold) {
      const uint64_t TT = (uint64_t)B * NH * T * T, BTC = (uint64_t)B * T * C;
      CHECK(df == TT && sf == TT, "%s: a forward converts att once (%llu, strided %llu; %llu)", w2,
            (unsigned long long)df, (unsigned long long)sf, (unsigned long long)TT);
      CHECK(db == BTC + 2 * TT && sb == BTC + 3 * TT,
            "%s: a backward converts dout and two matrices a head (%llu; strided %llu)", w2,
            (unsigned long long)db, (unsigned long long)sb);
      /* by default the dense path runs where the bf16 kernels are native */
      uint64_t af, ab;
      mt_attention_dense_heads(-1);
      rc = run(&dense, &bf, hold, &af, &ab);
      mt_attention_dense_heads(1);
      CHECK(!rc && ab == (native ? db : sb), "%s: by default the %s path (%llu)", w2,
            native ? "dense" : "strided", (unsigned long long)ab);
    }
  }
  if (!native) { /* O2: every product's output rounded */
    int rc = run(&dense, &o2, 1, NULL, NULL);
    mt_attention_dense_heads(0);
    rc |= run(&strided, &o2, 1, NULL, NULL);
    mt_attention_dense_heads(1);
    CHECK(rc == 0, "%s O2: both paths run", what);
    compare("O2", &dense, &strided, 0);
  }
out:
  mt_attention_dense_heads(-1);
  mt_gemm_bf16_emulate(0);
  free_outputs(&dense), free_outputs(&strided), free_outputs(&fp);
  free(f.inp), free(f.dout);
}

static int nan_left(const float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (x[i] == x[i]) return 0;
  return 1;
}

static void fill_nan(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

static void test_layernorm_out(int N, int C, int affine) {
  uint64_t rng = 77 + (uint64_t)(N * 1000 + C);
  const int64_t n = (int64_t)N * C;
  float *x = rnd(n, &rng, 3.0f), *w = rnd(C, &rng, 1.0f), *b = rnd(C, &rng, 0.5f);
  float *o = tu_xmalloc((size_t)n * sizeof(float)), *o2 = tu_xmalloc((size_t)n * sizeof(float));
  float m[2][4096], r[2][4096];
  uint16_t *want = tu_xmalloc((size_t)n * 2), *got = tu_xmalloc((size_t)n * 2);
  mt_layernorm_forward(o, m[0], r[0], x, affine ? w : NULL, affine ? b : NULL, N, C, 1e-5f);
  mt_f32_to_bf16(want, o, (size_t)n);
  fill_nan(o2, n);
  mt_layernorm_forward_ex(o2, got, m[1], r[1], x, affine ? w : NULL, affine ? b : NULL, N, C,
                          1e-5f);
  CHECK(!memcmp(want, got, (size_t)n * 2) && !memcmp(m[0], m[1], (size_t)N * sizeof(float)) &&
            !memcmp(r[0], r[1], (size_t)N * sizeof(float)) && nan_left(o2, n),
        "layer norm N=%d C=%d%s as bf16: the fp32 output's bits converted, mean and rstd "
        "the same, the fp32 output unwritten", N, C, affine ? "" : " (no weight, bias)");
  free(x), free(w), free(b), free(o), free(o2), free(want), free(got);
}

static void test_gelu_out(int64_t n, mt_gelu_kind kind) {
  uint64_t rng = 99 + (uint64_t)n;
  float *x = rnd(n, &rng, 6.0f), *o = tu_xmalloc((size_t)n * sizeof(float));
  uint16_t *want = tu_xmalloc((size_t)n * 2), *got = tu_xmalloc((size_t)n * 2);
  mt_gelu_forward(o, x, n, kind);
  mt_f32_to_bf16(want, o, (size_t)n);
  fill_nan(o, n);
  mt_gelu_forward_ex(o, got, x, n, kind);
  CHECK(!memcmp(want, got, (size_t)n * 2) && nan_left(o, n),
        "GELU %s n=%lld as bf16: the fp32 output's bits converted, the fp32 output unwritten",
        kind == MT_GELU_TANH ? "tanh" : "erf", (long long)n);
  /* double: through float */
  double *xd = tu_xmalloc((size_t)n * sizeof(double)), *od = tu_xmalloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) xd[i] = x[i];
  mt_gelu_forward(od, xd, n, kind);
  for (int64_t i = 0; i < n; i++) want[i] = mt_bf16_from_float((float)od[i]);
  mt_gelu_forward_ex(od, got, xd, n, kind);
  CHECK(!memcmp(want, got, (size_t)n * 2), "GELU %s n=%lld, double, as bf16: through float",
        kind == MT_GELU_TANH ? "tanh" : "erf", (long long)n);
  free(x), free(o), free(want), free(got), free(xd), free(od);
}

static void test_hold_out(void) {
  enum { R = 7, L = 12, N = 5 };
  float X[R * L], W[L * N], C0[R * N], C1[R * N];
  uint64_t rng = 5;
  float *x = rnd(R * L, &rng, 2.0f), *w = rnd(L * N, &rng, 1.0f);
  memcpy(X, x, sizeof(X)), memcpy(W, w, sizeof(W));
  free(x), free(w);
  const mt_nn_policy f32 = mt_nn_policy_make(MT_PREC_FP32, 0);
  const mt_nn_policy f16 = mt_nn_policy_make(MT_PREC_FP16, 0);
  const mt_nn_policy bf = mt_nn_policy_make(MT_PREC_BF16, 0);
  mt_nn_holds t = {0};
  const char *off = getenv("MT_NN_NO_HOLDS");
  const int holding = !(off && *off && strcmp(off, "0"));
  CHECK(!mt_nn_hold_out(&t, &f32, X, R * L) && !mt_nn_hold_out(&t, &f16, X, R * L) &&
            !mt_nn_hold_out(&t, NULL, X, R * L) && t.n == 0,
        "mt_nn_hold_out: nothing held under fp32, fp16, no policy");
  uint16_t *cp = mt_nn_hold_out(&t, &bf, X, R * L);
  CHECK(holding ? cp && t.n == 1 : !cp && t.n == 0, "mt_nn_hold_out under bf16: %s",
        holding ? "held" : "nothing held (MT_NN_NO_HOLDS)");
  if (cp) {
    mt_f32_to_bf16(cp, X, R * L);
    mt_nn_policy with;
    const mt_nn_policy *hp = mt_nn_with_holds(&bf, &t, &with);
    float Y[R * L];
    memcpy(Y, X, sizeof(Y));
    int err = mt_gemm_lowp('N', 'N', R, N, L, 1.0f, X, L, W, N, 0.0f, C0, N, &bf);
    fill_nan(X, R * L); /* the GEMM must read the copy, not X */
    err |= mt_gemm_lowp('N', 'N', R, N, L, 1.0f, X, L, W, N, 0.0f, C1, N, hp);
    CHECK(!err && !memcmp(C0, C1, sizeof(C0)),
          "a GEMM reads the copy its producer wrote: the bits of converting at the GEMM");
    memcpy(X, Y, sizeof(Y));
  }
  mt_nn_holds_free(&t);
}

/* The linear backward under bf16 converts dout in its pass over it (the
 * bias gradient's, and the ReLU's mask): the bits of holding it after the
 * pass (no bias gradient: no pass), B OC elements fewer converted at the
 * hold, one thread and several */
static void test_linear_bwd(int B, int IC, int OC, int relu, int count) {
  uint64_t rng = 31 + (uint64_t)(B + IC + OC);
  float *inp = rnd((int64_t)B * IC, &rng, 1.0f), *w = rnd((int64_t)OC * IC, &rng, 0.5f);
  float *out = rnd((int64_t)B * OC, &rng, 1.0f), *d0 = rnd((int64_t)B * OC, &rng, 1.0f);
  float *d1 = tu_xmalloc((size_t)B * OC * sizeof(float));
  float *di[2], *dw[2], db[2][512];
  const mt_nn_policy bf = mt_nn_policy_make(MT_PREC_BF16, 0);
  uint64_t conv[2];
  for (int k = 0; k < 2; k++) { /* k 0: with the bias gradient (the pass), 1: without */
    di[k] = tu_xmalloc((size_t)B * IC * sizeof(float));
    dw[k] = tu_xmalloc((size_t)OC * IC * sizeof(float));
    memcpy(d1, d0, (size_t)B * OC * sizeof(float));
    if (relu) /* the mask applied by hand for the run without a pass */
      for (int64_t i = 0; k == 1 && i < (int64_t)B * OC; i++) d1[i] = out[i] > 0 ? d1[i] : 0.0f;
    const uint64_t c0 = mt_nn_converted();
    int rc = mt_linear_backward_ex(di[k], dw[k], k == 0 ? db[0] : NULL, d1, out, inp, w, B, IC,
                                   OC, MT_LINEAR_SET_GRADS | MT_LINEAR_SET_DINP |
                                       (relu && k == 0 ? MT_LINEAR_RELU : 0), &bf);
    conv[k] = mt_nn_converted() - c0;
    CHECK(rc == 0, "linear backward B=%d IC=%d OC=%d%s runs", B, IC, OC, relu ? " relu" : "");
  }
  CHECK(!memcmp(di[0], di[1], (size_t)B * IC * sizeof(float)) &&
            !memcmp(dw[0], dw[1], (size_t)OC * IC * sizeof(float)),
        "linear backward B=%d IC=%d OC=%d%s, bf16: dout converted in the bias gradient's pass, "
        "the bits of holding it", B, IC, OC, relu ? " with the ReLU's mask" : "");
  if (count)
    CHECK(conv[1] - conv[0] == (uint64_t)B * OC,
          "linear backward B=%d IC=%d OC=%d: %llu fewer converted at the hold (%d)", B, IC, OC,
          (unsigned long long)(conv[1] - conv[0]), B * OC);
  free(inp), free(w), free(out), free(d0), free(d1);
  for (int k = 0; k < 2; k++) free(di[k]), free(dw[k]);
}

int main(void) {
  static const int ln[][2] = {{5, 64}, {3, 256}, {4, 300}, {150, 384}, {2, 1}};
  for (size_t i = 0; i < sizeof(ln) / sizeof(ln[0]); i++)
    for (int affine = 0; affine <= 1; affine++) test_layernorm_out(ln[i][0], ln[i][1], affine);
  static const int64_t gn[] = {1, 255, 257, 4096 + 3, 262144 * 2 + 17};
  for (size_t i = 0; i < sizeof(gn) / sizeof(gn[0]); i++) {
    test_gelu_out(gn[i], MT_GELU_TANH);
    test_gelu_out(gn[i], MT_GELU_ERF);
  }
  test_hold_out();
#ifdef _OPENMP
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1); /* the conversion counter is the calling thread's */
#endif
  test_linear_bwd(7, 24, 300, 0, 1);
  test_linear_bwd(64, 32, 48, 1, 1);
  test_linear_bwd(200, 40, 400, 0, 1);
#ifdef _OPENMP
  omp_set_num_threads(nt);
#endif
  test_linear_bwd(200, 40, 400, 1, 0); /* B OC > 65536: the pass on the threads */
  static const int shapes[][4] = {{2, 16, 32, 2}, {3, 13, 24, 3}, {1, 37, 8, 1},
                                  {2, 20, 12, 4}, {2, 64, 128, 4}};
  printf("info oneDNN bf16 kernels on this CPU: %s\n", mt_gemm_bf16_native() ? "yes" : "no");
  for (int native = 0; native <= 1; native++)
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
      test_shape(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], native);
  mt_sgemm_matmul_free();
  return tu_finish("test_bf16_layers");
}
