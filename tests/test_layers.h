/* Shared by the files of test_layers (test_layers*.c): the tolerances, the
 * helpers that compare against the PyTorch references and against finite
 * differences (defined in test_layers.c), and each layer family's entry,
 * which runs that family's checks in a fixed order. */
#ifndef MT_TEST_LAYERS_H
#define MT_TEST_LAYERS_H

#define TU_SHARED_COUNTS /* one tally for all the files (testutil.h) */
#include "core/core.h"
#include "nn/nn.h"
#include "testutil.h"

#define REF_TOL 1e-5
#define FD_LIN_TOL 1e-5 /* affine / piecewise linear: only rounding left */
#define FD_TOL 1e-4     /* smooth: Richardson-extrapolated differences   */

/* n zeroed floats (at least one); free() them */
float *zeros(int64_t n);
/* got against the reference `name` (n values); tol 0: exact against the
 * float32 values the reference rounds to */
void cmp(const tu_ref *r, const char *name, const float *got, int64_t n, double tol,
         const char *what);
/* got against twice the reference `name`: a second backward call adds */
void cmp2(const tu_ref *r, const char *name, const float *got, int64_t n, const char *what);
/* element i of the reference's "cfg" tensor */
int cfg_int(const tu_ref *r, int i);
/* Loads refs/<file> and names its checks <what>: two formats of the same
 * arguments. */
void open_ref(tu_ref *r, char *what, size_t wn, const char *what_fmt, const char *file_fmt, ...)
    __attribute__((format(printf, 5, 6)));

typedef double (*loss_fn)(void *ctx);
/* grad against central differences of loss() in x[0..n-1] (rich:
 * Richardson-extrapolated, tolerance FD_TOL; else FD_LIN_TOL); the rest
 * names the check */
void fd_check(const float *grad, float *x, int64_t n, float h, int rich, loss_fn loss, void *ctx,
              const char *fmt, ...) __attribute__((format(printf, 8, 9)));
/* sum_i out[i] R[i]: the scalar loss whose gradient is R */
double wsum(const float *out, const float *R, int64_t n);
/* n values uniform in [-scale, scale) from rng; free() them */
float *rnd(int64_t n, uint64_t *rng, float scale);

/* the families, each in its file, called by main in this order */
void test_layers_cnn(void);  /* conv2d, pooling (test_layers_cnn.c)             */
void test_layers_norm(void); /* layernorm, batchnorm2d (test_layers_norm.c)      */
void test_layers_gpt(void);  /* GELU, residual, dropout, embedding, attention    */
void test_layers_loss(void); /* cross-entropy with ignore index, MSE             */

#endif
