/* Attention under a bf16 policy with dense head operands (src/nn/
 * attention_t.h, "dense head operands"; mt_attention_dense_heads):
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
 *  - odd shapes: T not a multiple of 16, hs 3 and 8, one head, one sample.
 * Prints one line per check; exits non-zero when any check fails. */
#define MT_NN_GENERIC
#include "core/core.h"
#include "nn/gemm_matmul.h"
#include "nn/lowp.h"
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
  mt_gemm_bf16_emulate(0);
  free_outputs(&dense), free_outputs(&strided), free_outputs(&fp);
  free(f.inp), free(f.dout);
}

int main(void) {
  static const int shapes[][4] = {{2, 16, 32, 2}, {3, 13, 24, 3}, {1, 37, 8, 1},
                                  {2, 20, 12, 4}, {2, 64, 128, 4}};
  printf("info oneDNN bf16 kernels on this CPU: %s\n", mt_gemm_bf16_native() ? "yes" : "no");
  for (int native = 0; native <= 1; native++)
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
      test_shape(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], native);
  mt_sgemm_matmul_free();
  return tu_finish("test_attn_bf16");
}
