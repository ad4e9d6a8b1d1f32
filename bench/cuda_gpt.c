/* Tokens per second of the gpt's layer stack on one GPU, and its model-FLOP
 * utilisation against the device's dense bf16 peak (built only with CUDA:
 * `make bench/cuda_gpt` in a CUDA build; it needs a GPU to run).
 *
 *   bench/cuda_gpt [-B 8] [-T 1024] [-C 768] [-L 12] [-NH 12] [-V 50304]
 *                  [-prec fp32|bf16|fp16] [-steps 20] [-warmup 3]
 *                  [-adamw 1] [-peak TFLOPS] [-tf32 0]
 *
 * One step is what src/models/gpt_t.h does for a batch, with the CUDA
 * kernels of src/cuda on device buffers: the embedding, L blocks (layernorm,
 * qkv linear, causal attention, projection, residual, layernorm, fc linear,
 * GELU tanh, projection, residual), the final layernorm, the tied head, the
 * cross-entropy; then the whole backward (activation gradients zeroed
 * first, as the CPU model does) and, with -adamw 1, an AdamW step over the
 * flat buffer. -prec bf16/fp16 runs the linear layers' GEMMs with 16-bit
 * operands (the context's policy; attention's products stay fp32); -tf32 1
 * lets the fp32 GEMMs use TF32. No dropout.
 *
 * Model FLOPs per token are the project's (gpt_flops in gpt_t.h):
 * 6 (12 L C^2 + V C) + 6 L T C (the causal half of the attention products).
 * MFU = FLOPs per token x tokens/s / peak; the peak is -peak (TFLOP/s), or
 * the dense bf16 figure of a known device (H100/H200 SXM 989, H100 PCIe
 * 756, A100 312, L40S 362), else MFU is not printed. Prints the setting,
 * then `RESULT cuda_gpt tokens_per_s=... ms_per_step=... fwd_bwd_ms=...
 * adamw_ms=... mfu=...`. Times are CUDA events over the steps after the
 * warm-up. */
#include "cuda/cuda_optim.h"
#include "cuda/kernels.h"
#include "nn/precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                           \
  do {                                                                                  \
    if (x) {                                                                            \
      fprintf(stderr, "cuda_gpt: %s failed: %s\n%s", #x, mt_error_message(),            \
              mt_error_traceback());                                                    \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)
#define RT(x)                                                                           \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "cuda_gpt: %s: %s\n", #x, cudaGetErrorString(e_));                \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, NPER };

/* one block's activations (forward) */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *preatt, *att, *attproj, *res2;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
} acts;

static float *dalloc(size_t n) {
  float *p;
  RT(cudaMalloc((void **)&p, n * sizeof(float)));
  RT(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

static double peak_of(const char *name) {
  if (strstr(name, "H100") && strstr(name, "PCIe")) return 756e12;
  if (strstr(name, "H100") || strstr(name, "H200") || strstr(name, "GH200")) return 989e12;
  if (strstr(name, "A100")) return 312e12;
  if (strstr(name, "L40S")) return 362e12;
  return 0;
}

int main(int argc, char **argv) {
  int B = 8, T = 1024, C = 768, L = 12, NH = 12, V = 50304, steps = 20, warmup = 3, adamw = 1, tf32 = 0;
  double peak = 0;
  const char *prec_name = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "-B")) B = atoi(v);
    else if (!strcmp(k, "-T")) T = atoi(v);
    else if (!strcmp(k, "-C")) C = atoi(v);
    else if (!strcmp(k, "-L")) L = atoi(v);
    else if (!strcmp(k, "-NH")) NH = atoi(v);
    else if (!strcmp(k, "-V")) V = atoi(v);
    else if (!strcmp(k, "-steps")) steps = atoi(v);
    else if (!strcmp(k, "-warmup")) warmup = atoi(v);
    else if (!strcmp(k, "-adamw")) adamw = atoi(v);
    else if (!strcmp(k, "-tf32")) tf32 = atoi(v);
    else if (!strcmp(k, "-peak")) peak = atof(v) * 1e12;
    else if (!strcmp(k, "-prec")) prec_name = v;
    else {
      fprintf(stderr, "cuda_gpt: unknown option %s\n", k);
      return 2;
    }
  }
  mt_precision prec;
  CK(mt_precision_parse(prec_name, "-prec", &prec));
  if (B < 1 || T < 1 || L < 1 || NH < 1 || C % NH || V < 1 || steps < 1 || warmup < 0) {
    fprintf(stderr, "cuda_gpt: bad sizes (C must be a multiple of NH)\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("cuda_gpt: no CUDA device\n");
    return 77;
  }
  struct cudaDeviceProp dp;
  RT(cudaGetDeviceProperties(&dp, 0));
  if (peak <= 0) peak = peak_of(dp.name);

  /* the parameter table of gpt.c (same names, shapes, units) */
  mt_param_table t = {0};
  const int64_t d0[NPER] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
  const int64_t d1[NPER] = {0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0};
  int64_t sh[2] = {V, C};
  CK(mt_param_table_add(&t, "wte", 2, sh, 0));
  sh[0] = T;
  CK(mt_param_table_add(&t, "wpe", 2, sh, 0));
  char name[64];
  for (int l = 0; l < L; l++)
    for (int k = 0; k < NPER; k++) {
      snprintf(name, sizeof(name), "h.%d.%d", l, k);
      const int64_t s2[2] = {d0[k], d1[k]};
      CK(mt_param_table_add(&t, name, d1[k] ? 2 : 1, s2, l + 1));
    }
  sh[0] = C;
  CK(mt_param_table_add(&t, "lnf.w", 1, sh, L + 1));
  CK(mt_param_table_add(&t, "lnf.b", 1, sh, L + 1));

  mt_cuda_ctx cx;
  CK(mt_cuda_ctx_create(&cx, 0));
  cx.prec = prec;
  cx.check = 0; /* no waits inside a step */
  if (tf32) CK(mt_cuda_ctx_allow_tf32(&cx, 1));
  const size_t N = (size_t)B * T, att = (size_t)B * NH * T * T;
  /* parameters: small uniform values, layernorm weights 1 */
  float *hp = malloc(t.total * sizeof(float));
  uint32_t seed = 12345;
  for (size_t i = 0; i < t.total; i++) {
    seed = seed * 1664525u + 1013904223u;
    hp[i] = 0.04f * ((float)(seed >> 8) / 16777216.0f - 0.5f);
  }
#define BI(l, k) (2 + (l) * NPER + (k)) /* block l's tensor k in the table */
  const int LNF = 2 + L * NPER;           /* the final layernorm's weight */
  for (int k = 0; k < t.n; k++)
    if (k == LNF || (k >= 2 && k < LNF && ((k - 2) % NPER == LN1W || (k - 2) % NPER == LN2W)))
      for (size_t i = 0; i < t.p[k].numel; i++) hp[t.p[k].offset + i] = 1.0f;
  float *params = dalloc(t.total), *grads = dalloc(t.total);
  RT(cudaMemcpy(params, hp, t.total * sizeof(float), cudaMemcpyHostToDevice));
  free(hp);
#define P(k) (params + t.p[k].offset)
#define G(k) (grads + t.p[k].offset)

  acts *a = calloc((size_t)L, sizeof(acts));
  for (int l = 0; l < L; l++) {
    float **f[] = {&a[l].ln1, &a[l].qkv, &a[l].atty, &a[l].attproj, &a[l].res2, &a[l].ln2,
                   &a[l].fch, &a[l].fch_gelu, &a[l].fcproj, &a[l].res3, &a[l].preatt, &a[l].att,
                   &a[l].ln1_mean, &a[l].ln1_rstd, &a[l].ln2_mean, &a[l].ln2_rstd};
    const size_t n[] = {N * C, 3 * N * C, N * C, N * C, N * C, N * C, 4 * N * C, 4 * N * C,
                        N * C, N * C, att, att, N, N, N, N};
    for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) *f[i] = dalloc(n[i]);
  }
  /* activation gradients of one block at a time, reused down the stack */
  float *d_res2 = dalloc(N * C), *d_fcproj = dalloc(N * C), *d_fchg = dalloc(4 * N * C);
  float *d_fch = dalloc(4 * N * C), *d_ln2 = dalloc(N * C), *d_attproj = dalloc(N * C);
  float *d_atty = dalloc(N * C), *d_qkv = dalloc(3 * N * C), *d_ln1 = dalloc(N * C);
  float *d_res[2] = {dalloc(N * C), dalloc(N * C)};
  float *enc = dalloc(N * C), *lnf = dalloc(N * C), *lnf_mean = dalloc(N), *lnf_rstd = dalloc(N);
  float *logits = dalloc(N * (size_t)V), *dlogits = dalloc(N * (size_t)V), *dlnf = dalloc(N * C);
  double *loss = NULL;
  RT(cudaMalloc((void **)&loss, sizeof(double)));
  int32_t *tok = malloc(N * 4), *tgt = malloc(N * 4), *tokd, *tgtd;
  for (size_t i = 0; i < N; i++) {
    seed = seed * 1664525u + 1013904223u;
    tok[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    seed = seed * 1664525u + 1013904223u;
    tgt[i] = (int32_t)((seed >> 8) % (uint32_t)V);
  }
  RT(cudaMalloc((void **)&tokd, N * 4));
  RT(cudaMalloc((void **)&tgtd, N * 4));
  RT(cudaMemcpy(tokd, tok, N * 4, cudaMemcpyHostToDevice));
  RT(cudaMemcpy(tgtd, tgt, N * 4, cudaMemcpyHostToDevice));
  mt_cuda_table dt;
  mt_cuda_adamw_state st;
  mt_adamw_hparams h = mt_adamw_defaults();
  CK(mt_cuda_table_create(&dt, &t));
  CK(mt_cuda_adamw_state_init(&st, t.total, 0));

  cudaEvent_t e0, e1, e2;
  RT(cudaEventCreate(&e0));
  RT(cudaEventCreate(&e1));
  RT(cudaEventCreate(&e2));
  float fb_ms = 0, opt_ms = 0;
  const int n = (int)N;
  for (int s = 0; s < warmup + steps; s++) {
    RT(cudaEventRecord(e0, 0));
    /* forward */
    CK(mt_cuda_embedding_forward(enc, tokd, P(0), P(1), B, T, C, V, &cx));
    const float *res = enc;
    for (int l = 0; l < L; l++) {
      acts *x = &a[l];
      CK(mt_cuda_layernorm_forward(x->ln1, x->ln1_mean, x->ln1_rstd, res, P(BI(l, LN1W)), P(BI(l, LN1B)), n, C, 1e-5f, 0));
      CK(mt_cuda_linear_forward(x->qkv, x->ln1, P(BI(l, QKVW)), P(BI(l, QKVB)), n, C, 3 * C, &cx));
      CK(mt_cuda_attention_forward(x->atty, x->preatt, x->att, x->qkv, B, T, C, NH, &cx));
      CK(mt_cuda_linear_forward(x->attproj, x->atty, P(BI(l, PROJW)), P(BI(l, PROJB)), n, C, C, &cx));
      CK(mt_cuda_residual_forward(x->res2, res, x->attproj, (int64_t)n * C, 0));
      CK(mt_cuda_layernorm_forward(x->ln2, x->ln2_mean, x->ln2_rstd, x->res2, P(BI(l, LN2W)), P(BI(l, LN2B)), n, C, 1e-5f, 0));
      CK(mt_cuda_linear_forward(x->fch, x->ln2, P(BI(l, FCW)), P(BI(l, FCB)), n, C, 4 * C, &cx));
      CK(mt_cuda_gelu_forward(x->fch_gelu, x->fch, (int64_t)n * 4 * C, MT_GELU_TANH, 0));
      CK(mt_cuda_linear_forward(x->fcproj, x->fch_gelu, P(BI(l, FCPW)), P(BI(l, FCPB)), n, 4 * C, C, &cx));
      CK(mt_cuda_residual_forward(x->res3, x->res2, x->fcproj, (int64_t)n * C, 0));
      res = x->res3;
    }
    CK(mt_cuda_layernorm_forward(lnf, lnf_mean, lnf_rstd, res, P(LNF), P(LNF + 1), n, C, 1e-5f, 0));
    CK(mt_cuda_linear_forward(logits, lnf, P(0), NULL, n, C, V, &cx));
    CK(mt_cuda_xent_ignore_forward(logits, NULL, loss, NULL, NULL, logits, tgtd, -1, n, V, &cx));
    /* backward */
    RT(cudaMemsetAsync(grads, 0, t.total * sizeof(float), 0));
    RT(cudaMemsetAsync(dlogits, 0, N * (size_t)V * sizeof(float), 0));
    RT(cudaMemsetAsync(dlnf, 0, N * C * sizeof(float), 0));
    CK(mt_cuda_xent_ignore_backward(dlogits, logits, tgtd, -1, 1.0f / (float)n, n, V, 0));
    CK(mt_cuda_linear_backward(dlnf, G(0), NULL, dlogits, lnf, P(0), n, C, V, &cx));
    float *dout = d_res[0];
    RT(cudaMemsetAsync(dout, 0, N * C * sizeof(float), 0));
    CK(mt_cuda_layernorm_backward(dout, G(LNF), G(LNF + 1), dlnf, res, P(LNF), lnf_mean, lnf_rstd, n, C, &cx));
    for (int l = L - 1; l >= 0; l--) {
      acts *x = &a[l];
      const float *in = l ? a[l - 1].res3 : enc;
      float *din = d_res[(L - l) & 1];
      float *zero[] = {d_res2, d_fcproj, d_fchg, d_fch, d_ln2, d_attproj, d_atty, d_qkv, d_ln1, din};
      const size_t zn[] = {1, 1, 4, 4, 1, 1, 1, 3, 1, 1};
      for (int i = 0; i < 10; i++) RT(cudaMemsetAsync(zero[i], 0, zn[i] * N * C * sizeof(float), 0));
      CK(mt_cuda_residual_backward(d_res2, d_fcproj, dout, (int64_t)n * C, 0));
      CK(mt_cuda_linear_backward(d_fchg, G(BI(l, FCPW)), G(BI(l, FCPB)), d_fcproj, x->fch_gelu, P(BI(l, FCPW)), n, 4 * C, C, &cx));
      CK(mt_cuda_gelu_backward(d_fch, d_fchg, x->fch, (int64_t)n * 4 * C, MT_GELU_TANH, 0));
      CK(mt_cuda_linear_backward(d_ln2, G(BI(l, FCW)), G(BI(l, FCB)), d_fch, x->ln2, P(BI(l, FCW)), n, C, 4 * C, &cx));
      CK(mt_cuda_layernorm_backward(d_res2, G(BI(l, LN2W)), G(BI(l, LN2B)), d_ln2, x->res2, P(BI(l, LN2W)), x->ln2_mean, x->ln2_rstd, n, C, &cx));
      CK(mt_cuda_residual_backward(din, d_attproj, d_res2, (int64_t)n * C, 0));
      CK(mt_cuda_linear_backward(d_atty, G(BI(l, PROJW)), G(BI(l, PROJB)), d_attproj, x->atty, P(BI(l, PROJW)), n, C, C, &cx));
      CK(mt_cuda_attention_backward(d_qkv, x->preatt, d_atty, x->qkv, x->att, B, T, C, NH, &cx));
      CK(mt_cuda_linear_backward(d_ln1, G(BI(l, QKVW)), G(BI(l, QKVB)), d_qkv, x->ln1, P(BI(l, QKVW)), n, C, 3 * C, &cx));
      CK(mt_cuda_layernorm_backward(din, G(BI(l, LN1W)), G(BI(l, LN1B)), d_ln1, in, P(BI(l, LN1W)), x->ln1_mean, x->ln1_rstd, n, C, &cx));
      dout = din;
    }
    CK(mt_cuda_embedding_backward(G(0), G(1), dout, tokd, B, T, C, &cx));
    RT(cudaEventRecord(e1, 0));
    if (adamw) CK(mt_cuda_adamw_step(&dt, params, grads, &st, &h, 0, 1e-4, 0));
    RT(cudaEventRecord(e2, 0));
    RT(cudaEventSynchronize(e2));
    if (s >= warmup) {
      float m1, m2;
      RT(cudaEventElapsedTime(&m1, e0, e1));
      RT(cudaEventElapsedTime(&m2, e1, e2));
      fb_ms += m1, opt_ms += m2;
    }
  }
  double l0;
  RT(cudaMemcpy(&l0, loss, sizeof(double), cudaMemcpyDeviceToHost));
  fb_ms /= (float)steps, opt_ms /= (float)steps;
  const double step_s = (fb_ms + opt_ms) * 1e-3, tps = (double)N / step_s;
  const double flops_tok = 6.0 * (12.0 * L * (double)C * C + (double)V * C) + 6.0 * L * (double)T * C;
  printf("# %s (cc %d.%d, %zu MiB); B=%d T=%d C=%d L=%d NH=%d V=%d; %s linear GEMMs%s; "
         "%zu parameters; last loss %.4f\n",
         dp.name, dp.major, dp.minor, (size_t)(dp.totalGlobalMem >> 20), B, T, C, L, NH, V, prec_name,
         tf32 ? ", TF32 allowed" : "", t.total, l0 / (double)N);
  printf("# model FLOPs per token %.4g; peak %s\n", flops_tok,
         peak > 0 ? "given or known" : "unknown (give -peak TFLOPS for MFU)");
  printf("RESULT cuda_gpt tokens_per_s=%.1f ms_per_step=%.3f fwd_bwd_ms=%.3f adamw_ms=%.3f", tps,
         step_s * 1e3, fb_ms, opt_ms);
  if (peak > 0) printf(" mfu=%.4f peak_tflops=%.1f", flops_tok * tps / peak, peak * 1e-12);
  printf("\n");
  mt_cuda_adamw_state_free(&st);
  mt_cuda_table_destroy(&dt);
  mt_cuda_ctx_destroy(&cx);
  mt_param_table_free(&t);
  return 0;
}
