/* Typed helpers of the CUDA tests, a template for REAL = float and double
 * (cudatest.h includes it through core/real_t.h). TY names the type in
 * check lines; TOLR(f32, f64) picks a tolerance by the type. */
#define TY (MT_F64 ? "f64" : "f32")
#define TOLR(f32, f64) (MT_F64 ? (f64) : (f32))

/* n values uniform in [-scale, scale) */
static inline REAL *MT_T(cu_rand)(size_t n, uint64_t *st, double scale) {
  REAL *x = tu_xmalloc(n * sizeof(REAL));
  for (size_t i = 0; i < n; i++) x[i] = (REAL)(scale * tu_uniform(st));
  return x;
}

static inline REAL *MT_T(cu_copy)(const REAL *x, size_t n) {
  REAL *y = tu_xmalloc(n * sizeof(REAL));
  memcpy(y, x, n * sizeof(REAL));
  return y;
}

/* ||a - b||_inf / ||b||_inf (NaN: inf), as testutil.h's */
static inline double MT_T(cu_err)(const REAL *a, const REAL *b, size_t n) {
#if MT_F64
  return tu_rel_err_d(a, b, n);
#else
  return tu_rel_err_f(a, b, n);
#endif
}

/* The device's n values against the CPU's within tol (relative to the
 * largest CPU value); prints one check line. */
static inline void MT_T(cu_close)(const REAL *dev, const REAL *cpu, size_t n, double tol,
                                  const char *what) {
  REAL *h = tu_xmalloc(n * sizeof(REAL));
  cu_get(h, dev, n * sizeof(REAL));
  CHECK_ERR(MT_T(cu_err)(h, cpu, n), tol, "%s %s (%zu values)", what, TY, n);
  free(h);
}

/* The device's n values are the CPU's bits; two NaNs count as the same:
 * the GPU's fp32 arithmetic returns its one canonical NaN, not the
 * operand's payload (seen on an H100: NaN * 0.375). */
static inline void MT_T(cu_exact)(const REAL *dev, const REAL *cpu, size_t n, const char *what) {
  REAL *h = tu_xmalloc(n * sizeof(REAL));
  cu_get(h, dev, n * sizeof(REAL));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += memcmp(&h[i], &cpu[i], sizeof(REAL)) != 0 && !(isnan(h[i]) && isnan(cpu[i]));
  CHECK(bad == 0, "%s %s: the CPU's bits (%zu values, %zu differ)", what, TY, n, bad);
  free(h);
}
