/* The max-pool's two passes at the CNN's shapes, alone: the forward
 * (output and argmax) and the backward written whole through the fused
 * ReLU (mt_maxpool2d_backward_ex, MT_POOL_SET_DINP), in the layouts the
 * CNN runs them in (the input in the convolution's blocked layout, nChw8c
 * or nChw16c; the first pool's output in the same, for the second
 * convolution; the second's NCHW, for the linear layer).
 *
 *   make bench/pool_bench
 *   OMP_NUM_THREADS=1 bench/pool_bench [-reps N] [-batch B] [-block CB]
 *
 * Before each timed call its input is touched (a read and write of each
 * line), as a convolution leaves it just written. Prints, per pool and
 * pass, the best and the median of the reps in ms and the bytes moved per
 * second of the best; `RESULT` lines carry the best ms, for a script
 * that runs two builds alternately (bench/README.md, "The max-pool in
 * row order"). */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void touch(float *x, size_t n) {
  for (size_t i = 0; i < n; i += 16) ((volatile float *)x)[i] += 0.0f;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int run(const char *name, int B, int C, int H, int cb, int ob, int reps) {
  mt_pool2d_shape s = {.B = B, .C = C, .H = H, .W = H, .KH = 2, .KW = 2, .stride_h = 2,
                       .stride_w = 2, .cblock = cb, .oblock = ob};
  MT_CALL(mt_pool2d_shape_init(&s));
  const size_t ni = (size_t)B * C * H * H, no = (size_t)B * C * s.OH * s.OW;
  float *x = NULL, *dx = NULL, *y = NULL, *dy = NULL;
  int32_t *am = NULL;
  double *tf = NULL, *tb = NULL;
  int rc = mt_calloc(&x, ni, sizeof(float), "input");
  if (!rc) rc = mt_calloc(&dx, ni, sizeof(float), "input gradient");
  if (!rc) rc = mt_calloc(&y, no, sizeof(float), "output");
  if (!rc) rc = mt_calloc(&dy, no, sizeof(float), "output gradient");
  if (!rc) rc = mt_calloc(&am, no, sizeof(int32_t), "argmax");
  if (!rc) rc = mt_calloc(&tf, (size_t)reps, sizeof(double), "times");
  if (!rc) rc = mt_calloc(&tb, (size_t)reps, sizeof(double), "times");
  if (!rc) {
    for (size_t i = 0; i < ni; i++) x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < no; i++) dy[i] = (float)((i * 40503u) % 1001) / 1000.0f - 0.3f;
    for (int r = 0; r < reps; r++) {
      touch(x, ni);
      double t0 = now();
      mt_maxpool2d_forward(y, am, x, &s);
      tf[r] = now() - t0;
      touch(dy, no);
      t0 = now();
      mt_maxpool2d_backward_ex(dx, dy, am, y, &s, MT_POOL_SET_DINP);
      tb[r] = now() - t0;
    }
    qsort(tf, (size_t)reps, sizeof(double), cmp);
    qsort(tb, (size_t)reps, sizeof(double), cmp);
    const double bf = (double)(ni + 2 * no) * 4, bb = (double)(ni + 3 * no) * 4;
    printf("%s %dx%dx%dx%d nChw%dc -> %s: forward %.3f ms (median %.3f, %.1f GB/s), backward "
           "%.3f ms (median %.3f, %.1f GB/s)\n",
           name, B, C, H, H, cb, ob ? "blocked" : "NCHW", tf[0] * 1e3, tf[reps / 2] * 1e3,
           bf / tf[0] / 1e9, tb[0] * 1e3, tb[reps / 2] * 1e3, bb / tb[0] / 1e9);
    printf("RESULT %s forward_ms=%.4f backward_ms=%.4f\n", name, tf[0] * 1e3, tb[0] * 1e3);
  }
  mt_free(&x), mt_free(&dx), mt_free(&y), mt_free(&dy), mt_free(&am), mt_free(&tf),
      mt_free(&tb);
  return rc;
}

int main(int argc, char **argv) {
  int reps = 30, B = 128, cb = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-batch")) B = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-block")) cb = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "pool_bench: unknown option %s (-reps N, -batch B, -block CB)\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || B < 1 || (cb != 8 && cb != 16)) {
    fprintf(stderr, "pool_bench: -reps and -batch must be >= 1, -block 8 or 16\n");
    return 2;
  }
  /* the CNN's (32 and 64 channels after 28 x 28 and 14 x 14) */
  int rc = run("pool1", B, 32, 28, cb, cb, reps);
  if (!rc) rc = run("pool2", B, 64, 14, cb, 0, reps);
  if (rc) fprintf(stderr, "pool_bench: %s\n", mt_error_message());
  return rc ? 1 : 0;
}
