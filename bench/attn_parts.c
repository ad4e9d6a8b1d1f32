/* Where one causal self-attention layer's time goes, fp32 against bf16, on
 * one thread: the layer's forward and backward as the gpt runs them, and
 * their parts alone (the per-head products, the conversions of the
 * attention matrices). Written for the CPUs with bf16 instructions lent
 * with GPU nodes, which have no profiler (scripts/gpu_run.sh ... attn):
 * there the gpt's bf16 attention took twice its fp32 time while its
 * per-head GEMMs, timed alone by gemm_shapes, added up to a fifth of it
 * (bench/README.md, "bf16 GEMMs as matmul primitives under AMX").
 *
 *   make bench/attn_parts
 *   OMP_NUM_THREADS=1 bench/attn_parts [-B 32] [-T 64] [-C 128] [-NH 4] [-reps 9]
 *
 * Rows (ms a layer call, the median of reps, interleaved), in five
 * columns: fp32; bf16 with q, k, v and the output gradient held (the
 * gpt's way) and each head's operands laid out dense (the default); the
 * same with the strided per-head calls (mt_attention_dense_heads(0), as
 * before); the dense path with its products widened to fp32 (as on a CPU
 * without bf16 instructions: mt_gemm_bf16_emulate), to tell whether the
 * tiny per-head products pay in bf16; bf16 dense, converting instead of
 * holding:
 *   layer fwd / bwd        mt_attention_forward / _backward (a forward
 *                          counts the hold of q, k, v, which the gpt's
 *                          forward makes for the attention alone)
 *   layer fwd+bwd          the two medians' sum: a step's attention
 *   products               the six per-head products of a forward and
 *                          backward alone: strided q, k, v through mt_gemm
 *                          (fp32, strided), or dense bf16 operands through
 *                          mt_gemm_bf16_ops (dense)
 *   att conversions        the four T x T conversions a head's products
 *                          made before (att twice, its gradient twice)
 * The bf16 layer's outputs are checked against fp32's (relative 2e-2): a
 * wrong one exits 1. */
#define _POSIX_C_SOURCE 200809L
#define MT_NN_GENERIC
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float *buf(size_t n, unsigned seed) {
  float *p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "attn_parts: out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 2.0f;
  }
  return p;
}

static double rel(const float *a, const float *b, size_t n) {
  double e = 0, m = 0;
  for (size_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
  return e / (m > 0 ? m : 1);
}

static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { FP32, HELD, STRIDED, WIDENED, CONVERTED, NPOL };
static const char *pol_name[NPOL] = {"fp32", "bf16 dense", "bf16 strided", "bf16 widened",
                                     "bf16 converted"};
enum { FWD, BWD, PROD, CONV, NPART };
static const char *part_name[NPART] = {"layer fwd", "layer bwd", "products", "att conversions"};

typedef struct {
  int B, T, C, NH;
  float *inp, *dout, *out, *pre, *att, *dinp, *scratch;
  uint16_t *bf; /* conversion target; dense (T, hs) q, k, v, dout and a (T, T) */
} layer;

/* one call of part under pol, its seconds in *secs: a forward counts the
 * hold of q, k, v (the gpt's forward makes it for the attention alone), a
 * backward and the products alone find it made */
static int run(layer *L, int pol, int part, double *secs) {
  const mt_nn_policy bf16 = mt_nn_policy_make(MT_PREC_BF16, 0);
  const mt_nn_policy *p = pol == FP32 ? NULL : &bf16;
  mt_nn_policy with;
  mt_nn_holds *t = mt_nn_holds_local();
  const int n0 = t->n, B = L->B, T = L->T, C = L->C, NH = L->NH, hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  const float scale = 1.0f / sqrtf((float)hs);
  int rc = 0;
  mt_attention_dense_heads(pol != STRIDED);
  if (pol == WIDENED) mt_gemm_bf16_emulate(1);
  double t0 = now();
  if (pol != FP32 && pol != CONVERTED) { /* the gpt holds qkv */
    mt_nn_hold(t, p, L->inp, (size_t)B * T * C3);
    p = mt_nn_with_holds(p, t, &with);
  }
  if (part != FWD) t0 = now();
  switch (part) {
    case FWD:
      rc = mt_attention_forward(L->out, L->pre, L->att, L->inp, B, T, C, NH, p);
      break;
    case BWD:
      rc = mt_attention_backward_ex(L->dinp, L->scratch, L->dout, L->inp, L->att, B, T, C, NH,
                                    MT_ATTN_SET_DINP, p);
      break;
    case PROD:
      for (int h = 0; h < B * NH && !rc && (pol == HELD || pol == WIDENED); h++) {
        const uint16_t *q = L->bf + TT, *k = q + T * hs, *v = k + T * hs, *d = v + T * hs;
        float *s = L->scratch + h * TT, *o = L->out + (int64_t)(h / NH) * T * C + (h % NH) * hs;
        float *dq = L->dinp + (int64_t)(h / NH) * T * C3 + (int64_t)(h % NH) * hs;
        rc |= mt_gemm_bf16_ops('N', 'T', T, T, hs, scale, q, hs, k, hs, 0.0f, s, T, p);
        rc |= mt_gemm_bf16_ops('N', 'N', T, hs, T, 1.0f, L->bf, T, v, hs, 0.0f, o, C, p);
        rc |= mt_gemm_bf16_ops('N', 'T', T, T, hs, 1.0f, d, hs, v, hs, 0.0f, s, T, p);
        rc |= mt_gemm_bf16_ops('T', 'N', T, hs, T, 1.0f, L->bf, T, d, hs, 0.0f, dq + 2 * C, C3, p);
        rc |= mt_gemm_bf16_ops('N', 'N', T, hs, T, scale, L->bf, T, k, hs, 0.0f, dq, C3, p);
        rc |= mt_gemm_bf16_ops('T', 'N', T, hs, T, scale, L->bf, T, q, hs, 0.0f, dq + C, C3, p);
      }
      for (int h = 0; h < B * NH && !rc && pol != HELD && pol != WIDENED; h++) {
        const int64_t off = (int64_t)(h / NH) * T * C3 + (int64_t)(h % NH) * hs;
        const float *q = L->inp + off, *k = q + C, *v = q + 2 * (int64_t)C;
        const float *d = L->dout + (int64_t)(h / NH) * T * C + (h % NH) * hs;
        float *a = L->att + h * TT, *s = L->scratch + h * TT, *o = L->out + (int64_t)(h / NH) * T * C;
        float *dq = L->dinp + off;
        rc |= mt_gemm('N', 'T', T, T, hs, scale, q, C3, k, C3, 0.0f, s, T, p);
        rc |= mt_gemm('N', 'N', T, hs, T, 1.0f, a, T, v, C3, 0.0f, o + (h % NH) * hs, C, p);
        rc |= mt_gemm('N', 'T', T, T, hs, 1.0f, d, C, v, C3, 0.0f, s, T, p);
        rc |= mt_gemm('T', 'N', T, hs, T, 1.0f, a, T, d, C, 0.0f, dq + 2 * (int64_t)C, C3, p);
        rc |= mt_gemm('N', 'N', T, hs, T, scale, s, T, k, C3, 0.0f, dq, C3, p);
        rc |= mt_gemm('T', 'N', T, hs, T, scale, s, T, q, C3, 0.0f, dq + C, C3, p);
      }
      break;
    case CONV:
      for (int h = 0; h < B * NH; h++)
        for (int r = 0; r < 4; r++) mt_f32_to_bf16(L->bf, L->att + h * TT, (size_t)TT);
      break;
  }
  *secs = now() - t0;
  mt_nn_holds_clear(t, n0);
  mt_attention_dense_heads(-1);
  if (pol == WIDENED) mt_gemm_bf16_emulate(0);
  return rc;
}

int main(int argc, char **argv) {
  layer L = {32, 64, 128, 4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  int reps = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int v = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-B")) L.B = v;
    else if (!strcmp(argv[i], "-T")) L.T = v;
    else if (!strcmp(argv[i], "-C")) L.C = v;
    else if (!strcmp(argv[i], "-NH")) L.NH = v;
    else if (!strcmp(argv[i], "-reps")) reps = v;
    else {
      fprintf(stderr, "attn_parts: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if ((argc - 1) % 2 || L.B < 1 || L.T < 1 || L.NH < 1 || L.C < L.NH || L.C % L.NH || reps < 1) {
    fprintf(stderr, "usage: attn_parts [-B 32] [-T 64] [-C 128] [-NH 4] [-reps 9] "
                    "(C a multiple of NH)\n");
    return 2;
  }
  const size_t nin = (size_t)L.B * L.T * 3 * L.C, nout = (size_t)L.B * L.T * L.C;
  const size_t natt = (size_t)L.B * L.NH * L.T * L.T;
  L.inp = buf(nin, 1), L.dout = buf(nout, 2), L.out = buf(nout, 3), L.pre = buf(natt, 4);
  L.att = buf(natt, 5), L.dinp = buf(nin, 6), L.scratch = buf(natt, 7);
  L.bf = calloc((size_t)L.T * L.T + 4 * (size_t)L.T * (L.C / L.NH), sizeof(uint16_t));
  float *out32 = buf(nout, 8), *dinp32 = buf(nin, 9);
  /* the check: bf16 (held) against fp32, forward and backward */
  double dummy;
  int bad = run(&L, FP32, FWD, &dummy) || run(&L, FP32, BWD, &dummy);
  memcpy(out32, L.out, nout * sizeof(float));
  memcpy(dinp32, L.dinp, nin * sizeof(float));
  bad = bad || run(&L, STRIDED, FWD, &dummy) || run(&L, STRIDED, BWD, &dummy);
  const double so = rel(L.out, out32, nout), sd = rel(L.dinp, dinp32, nin);
  bad = bad || run(&L, HELD, FWD, &dummy) || run(&L, HELD, BWD, &dummy);
  const double eo = fmax(so, rel(L.out, out32, nout)), ed = fmax(sd, rel(L.dinp, dinp32, nin));
  printf("# attention B=%d T=%d C=%d NH=%d, one thread; oneDNN ISA %s, bf16 %s; "
         "bf16 against fp32: out %.2e, dinp %.2e\n",
         L.B, L.T, L.C, L.NH, mt_dnnl_isa_name(),
         mt_gemm_bf16_native() ? "native" : "emulated (no bf16 instructions)", eo, ed);
  if (bad || !(eo < 2e-2) || !(ed < 2e-2)) {
    fprintf(stderr, "attn_parts: %s\n", bad ? mt_error_message() : "bf16 far from fp32");
    return 1;
  }
  double *t = calloc((size_t)NPOL * NPART * reps, sizeof(double));
  for (int r = 0; r < reps; r++) /* interleaved */
    for (int part = 0; part < NPART; part++)
      for (int pol = 0; pol < NPOL; pol++) {
        if (part == CONV && pol != CONVERTED) continue;
        if (run(&L, pol, part, &t[((size_t)part * NPOL + pol) * reps + r])) {
          fprintf(stderr, "attn_parts: %s\n", mt_error_message());
          return 1;
        }
      }
  printf("%-16s %12s %12s %12s %12s %16s   (ms a layer call, median of %d)\n", "",
         pol_name[0], pol_name[1], pol_name[2], pol_name[3], pol_name[4], reps);
  double med[NPART][NPOL];
  for (int part = 0; part < NPART; part++) {
    printf("%-16s", part_name[part]);
    for (int pol = 0; pol < NPOL; pol++) {
      double *x = t + ((size_t)part * NPOL + pol) * reps;
      qsort(x, (size_t)reps, sizeof(double), cmpd);
      med[part][pol] = x[reps / 2];
      if (part == CONV && pol != CONVERTED)
        printf(" %12s", "-");
      else
        printf(pol == CONVERTED ? " %16.3f" : " %12.3f", 1e3 * x[reps / 2]);
    }
    printf("\n");
    if (part == BWD) { /* a training step's attention: the sum of the two medians */
      printf("%-16s", "layer fwd+bwd");
      for (int pol = 0; pol < NPOL; pol++)
        printf(pol == CONVERTED ? " %16.3f" : " %12.3f", 1e3 * (med[FWD][pol] + med[BWD][pol]));
      printf("\n");
    }
  }
  free(t), free(L.inp), free(L.dout), free(L.out), free(L.pre), free(L.att), free(L.dinp);
  free(L.scratch), free(L.bf), free(out32), free(dinp32);
  return 0;
}
