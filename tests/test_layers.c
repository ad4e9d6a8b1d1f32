/* Unit tests of the CNN and GPT layers (src/nn/nn.h, second part):
 *  - every forward and backward against PyTorch references written by
 *    validation/gen_refs_layers.py (refs/l_*.txt), 1e-5 relative, on edge
 *    shapes (odd sizes, padding, stride 2, groups, dilation 2, T = 1, B = 1);
 *  - every backward against central finite differences of its forward
 *    (exact differences for layers linear in the input, 1e-5; Richardson-
 *    extrapolated ones for smooth non-linear layers, 1e-4);
 *  - backward ADDS (a second call gives twice the reference), NULL
 *    gradients, aliasing that the contracts allow, argument errors;
 *  - dropout: determinism by key, offsets, the kept fraction and scaling.
 * Prints one line per check; exits non-zero when any check fails.
 *
 * This file: the shared helpers (test_layers.h) and main; the checks are
 * in test_layers_cnn.c, _norm.c, _gpt.c and _loss.c, one layer family each. */
#include "test_layers.h"

#include <stdarg.h>

float *zeros(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* got against the reference `name` (n values), then `twice` after a second
 * backward call when given. */
void cmp(const tu_ref *r, const char *name, const float *got, int64_t n, double tol,
         const char *what) {
  if (tol == 0.0) { /* exact: against the float32 values the refs round to */
    float *t = tu_ref_floats(r, name, n);
    CHECK_CLOSE_F(got, t, (size_t)n, 0.0, "%s %s (exact)", what, name);
    free(t);
    return;
  }
  const tu_tensor *t = tu_ref_get(r, name, n);
  CHECK_CLOSE_REF(got, t, tol, "%s %s", what, name);
}

void cmp2(const tu_ref *r, const char *name, const float *got, int64_t n, const char *what) {
  const tu_tensor *t = tu_ref_get(r, name, n);
  double *w = malloc((size_t)n * sizeof(double));
  for (int64_t i = 0; i < n; i++) w[i] = 2 * t->v[i];
  CHECK_ERR(tu_rel_err_fd(got, w, (size_t)n), REF_TOL, "%s backward adds: %s", what, name);
  free(w);
}

int cfg_int(const tu_ref *r, int i) { return (int)tu_ref_get(r, "cfg", -1)->v[i]; }

/* Loads refs/<file> and names its checks <what>: two formats of the same
 * arguments. */
void open_ref(tu_ref *r, char *what, size_t wn, const char *what_fmt, const char *file_fmt, ...) {
  char file[128];
  va_list ap, ap2;
  va_start(ap, file_fmt);
  va_copy(ap2, ap);
  vsnprintf(file, sizeof(file), file_fmt, ap);
  vsnprintf(what, wn, what_fmt, ap2);
  va_end(ap2);
  va_end(ap);
  tu_ref_load(r, file);
}

/* ------------------------------------------------------ finite differences */

/* Central differences of loss() in x[0..n-1]; the step is the difference of
 * the two rounded float inputs. rich: Richardson-extrapolated from h, h/2. */
static void fd_grad(double *g, float *x, int64_t n, float h, int rich, loss_fn loss, void *ctx) {
  for (int64_t i = 0; i < n; i++) {
    const float x0 = x[i];
    double est[2];
    for (int k = 0; k < 1 + rich; k++) {
      const float hk = k ? h / 2 : h, xp = x0 + hk, xm = x0 - hk;
      x[i] = xp;
      const double lp = loss(ctx);
      x[i] = xm;
      const double lm = loss(ctx);
      est[k] = (lp - lm) / ((double)xp - (double)xm);
    }
    x[i] = x0;
    g[i] = rich ? (4 * est[1] - est[0]) / 3 : est[0];
  }
}

/* grad against the differences of loss() in x; the rest names the check */
void fd_check(const float *grad, float *x, int64_t n, float h, int rich, loss_fn loss, void *ctx,
              const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  double *g = malloc((size_t)n * sizeof(double));
  fd_grad(g, x, n, h, rich, loss, ctx);
  CHECK_ERR(tu_rel_err_fd(grad, g, (size_t)n), rich ? FD_TOL : FD_LIN_TOL,
            "%s vs finite differences", what);
  free(g);
}

double wsum(const float *out, const float *R, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += (double)out[i] * R[i];
  return s;
}

float *rnd(int64_t n, uint64_t *rng, float scale) {
  float *x = zeros(n);
  tu_fill(x, (size_t)n, rng, scale);
  return x;
}

int tu_nchecks, tu_nfailed; /* the program's tally (testutil.h) */

int main(void) {
  test_layers_cnn();
  test_layers_norm();
  test_layers_gpt();
  test_layers_loss();
  return tu_finish("test_layers");
}
