/* Tiny header-only helpers shared by the C unit tests.
 *
 *  - a reader for the reference files written by validation/gen_refs.py:
 *    a sequence of tensors, each a header line "name ndim d0 d1 ..." and
 *    then prod(d) whitespace-separated values; '#' starts a comment line.
 *    Files are found under $top_srcdir (exported by `make check`), else ".".
 *    Nothing is ever written into the source tree.
 *  - max relative error ||a - b||_inf / max(||b||_inf, 1e-30);
 *  - CHECK macros: each prints one line ("ok" or "FAIL") and counts
 *    failures; tu_finish() prints a summary and gives the exit status.
 *
 * A test that cannot read its references fails at once (exit 1): a missing
 * reference must never look like a pass. */
#ifndef MT_TESTUTIL_H
#define MT_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TU_MAX_DIMS 4

typedef struct {
  char name[64];
  int ndim;
  int64_t dims[TU_MAX_DIMS];
  int64_t n;  /* number of values (1 for a scalar) */
  double *v;
} tu_tensor;

typedef struct {
  char path[1024];
  int n;
  tu_tensor *t;
} tu_ref;

/* One tally per program. A program of several files defines
 * TU_SHARED_COUNTS before including this header in each of them, and one
 * file (the one with main) defines the two counters; a one-file program
 * keeps them static. */
#ifdef TU_SHARED_COUNTS
extern int tu_nchecks;
extern int tu_nfailed;
#else
static int tu_nchecks __attribute__((unused));
static int tu_nfailed __attribute__((unused));
#endif

static inline void tu_fatal(const char *what, const char *path) {
  printf("FAIL %s: %s\n", what, path);
  fflush(stdout);
  exit(1);
}

static inline void *tu_xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) tu_fatal("out of memory", "");
  return p;
}

/* Reads validation/refs/<file> (relative to $top_srcdir). Exits on error. */
static inline void tu_ref_load(tu_ref *r, const char *file) {
  const char *top = getenv("top_srcdir");
  if (!top || !*top) top = ".";
  memset(r, 0, sizeof(*r));
  int len = snprintf(r->path, sizeof(r->path), "%s/validation/refs/%s", top, file);
  if (len < 0 || (size_t)len >= sizeof(r->path)) tu_fatal("reference path too long", file);
  FILE *f = fopen(r->path, "r");
  if (!f) tu_fatal("cannot open reference file (is top_srcdir set?)", r->path);
  int cap = 0;
  for (;;) {
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
    if (c == EOF) break;
    if (c == '#') {
      while ((c = fgetc(f)) != '\n' && c != EOF) {}
      continue;
    }
    ungetc(c, f);
    if (r->n == cap) {
      cap = cap ? 2 * cap : 16;
      tu_tensor *t = realloc(r->t, (size_t)cap * sizeof(*t));
      if (!t) tu_fatal("out of memory", r->path);
      r->t = t;
    }
    tu_tensor *t = &r->t[r->n];
    memset(t, 0, sizeof(*t));
    if (fscanf(f, "%63s %d", t->name, &t->ndim) != 2 || t->ndim < 0 || t->ndim > TU_MAX_DIMS)
      tu_fatal("bad tensor header in", r->path);
    t->n = 1;
    for (int d = 0; d < t->ndim; d++) {
      long long dim;
      if (fscanf(f, "%lld", &dim) != 1 || dim < 0) tu_fatal("bad tensor shape in", r->path);
      t->dims[d] = dim;
      t->n *= dim;
    }
    t->v = tu_xmalloc((size_t)t->n * sizeof(double));
    for (int64_t i = 0; i < t->n; i++)
      if (fscanf(f, "%lf", &t->v[i]) != 1) tu_fatal("truncated tensor in", r->path);
    r->n++;
  }
  fclose(f);
}

static inline void tu_ref_free(tu_ref *r) {
  for (int i = 0; i < r->n; i++) free(r->t[i].v);
  free(r->t);
  memset(r, 0, sizeof(*r));
}

/* The tensor called name; exits when it is missing. When n is not NULL it
 * must match the tensor's size (a guard against a stale reference file). */
static inline const tu_tensor *tu_ref_get(const tu_ref *r, const char *name, int64_t n) {
  for (int i = 0; i < r->n; i++) {
    if (strcmp(r->t[i].name, name)) continue;
    if (n >= 0 && r->t[i].n != n) {
      printf("FAIL tensor %s has %lld values, expected %lld\n", name, (long long)r->t[i].n,
             (long long)n);
      tu_fatal("stale reference file", r->path);
    }
    return &r->t[i];
  }
  printf("FAIL no tensor %s\n", name);
  tu_fatal("incomplete reference file", r->path);
  return NULL;
}

/* A freshly allocated float copy of a tensor (free() it); n < 0: any size. */
static inline float *tu_ref_floats(const tu_ref *r, const char *name, int64_t n) {
  const tu_tensor *t = tu_ref_get(r, name, n);
  float *out = tu_xmalloc((size_t)t->n * sizeof(float));
  for (int64_t i = 0; i < t->n; i++) out[i] = (float)t->v[i];
  return out;
}

static inline double tu_ref_scalar(const tu_ref *r, const char *name) {
  return tu_ref_get(r, name, 1)->v[0];
}

/* ||a - b||_inf / max(||b||_inf, 1e-30); NaN anywhere gives +inf. */
static inline double tu_rel_err_f(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d != d) return INFINITY;
    if (d > num) num = d;
    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
  }
  return num / (den > 1e-30 ? den : 1e-30);
}

static inline double tu_rel_err_d(const double *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(a[i] - b[i]);
    if (d != d) return INFINITY;
    if (d > num) num = d;
    if (fabs(b[i]) > den) den = fabs(b[i]);
  }
  return num / (den > 1e-30 ? den : 1e-30);
}

/* Same as tu_rel_err_f with b given in double (e.g. straight from a ref). */
static inline double tu_rel_err_fd(const float *a, const double *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d != d) return INFINITY;
    if (d > num) num = d;
    if (fabs(b[i]) > den) den = fabs(b[i]);
  }
  return num / (den > 1e-30 ? den : 1e-30);
}

static inline void tu_report(int ok, const char *file, int line, const char *msg) {
  tu_nchecks++;
  if (!ok) tu_nfailed++;
  printf("%s %s", ok ? "ok  " : "FAIL", msg);
  if (!ok) printf("  [%s:%d]", file, line);
  printf("\n");
  fflush(stdout);
}

/* CHECK(cond, fmt, ...): one line naming the check. */
#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    char tu_msg_[512];                                                       \
    snprintf(tu_msg_, sizeof(tu_msg_), __VA_ARGS__);                         \
    tu_report(!!(cond), __FILE__, __LINE__, tu_msg_);                        \
  } while (0)

/* Relative-error checks; err is printed with the tolerance. */
#define CHECK_ERR(err, tol, ...)                                             \
  do {                                                                       \
    char tu_msg_[512], tu_what_[400];                                        \
    double tu_err_ = (err), tu_tol_ = (tol);                                 \
    snprintf(tu_what_, sizeof(tu_what_), __VA_ARGS__);                       \
    snprintf(tu_msg_, sizeof(tu_msg_), "%s: rel err %.3g (tol %.3g)",         \
             tu_what_, tu_err_, tu_tol_);                                    \
    tu_report(tu_err_ <= tu_tol_, __FILE__, __LINE__, tu_msg_);              \
  } while (0)

#define CHECK_CLOSE_F(a, b, n, tol, ...) CHECK_ERR(tu_rel_err_f((a), (b), (n)), (tol), __VA_ARGS__)
#define CHECK_CLOSE_D(a, b, n, tol, ...) CHECK_ERR(tu_rel_err_d((a), (b), (n)), (tol), __VA_ARGS__)
/* float results against a reference tensor (double values) of n elements */
#define CHECK_CLOSE_REF(a, t, tol, ...)                                      \
  CHECK_ERR(tu_rel_err_fd((a), (t)->v, (size_t)(t)->n), (tol), __VA_ARGS__)

/* Prints the summary; returns the exit status for main(). */
static inline int tu_finish(const char *prog) {
  printf("%s: %d checks, %d failed\n", prog, tu_nchecks, tu_nfailed);
  return tu_nfailed ? 1 : (tu_nchecks ? 0 : 1);
}

/* Deterministic test inputs: splitmix64 -> uniform in [-1, 1). */
static inline double tu_uniform(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static inline void tu_fill(float *x, size_t n, uint64_t *state, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * (float)tu_uniform(state);
}

#endif
