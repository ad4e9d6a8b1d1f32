// Optimizer steps, norms and clipping on the GPU, a template for REAL =
// float and double (optim.cu): the element-wise expressions of
// optim/sgd_t.h, optim/adamw_t.h and optim/clip_t.h over flat buffers with
// the parameter table's layout (params, grads and state alike).

namespace {

// SGD on element i (the CPU's four cases; mode 0: no momentum, 1: first
// step, 2: nesterov, 3: momentum)
__global__ void MT_T(sgd_k)(const mt_cuda_seg *seg, int nseg, int64_t total, REAL *p,
                            const REAL *g, REAL *buf, int mode, int nesterov, REAL mom, REAL damp,
                            REAL wd_on, int all_decay, REAL lr) {
  MT_GRID_STRIDE(i, total) {
    const int k = mt_cu_find_seg(seg, nseg, i);
    if (k < 0) continue;
    const REAL wd = (all_decay || seg[k].decay) ? wd_on : (REAL)0;
    const REAL d = g[i] + wd * p[i];
    if (mode == 0) {
      p[i] -= lr * d;
    } else if (mode == 1) {
      buf[i] = d;
      p[i] -= lr * (nesterov ? d + mom * d : d);
    } else {
      const REAL v = mom * buf[i] + damp * d;
      buf[i] = v;
      p[i] -= lr * (mode == 2 ? d + mom * v : v);
    }
  }
}

__global__ void MT_T(adamw_k)(const mt_cuda_seg *seg, int nseg, int64_t total, REAL *p,
                              const REAL *g, REAL *m, REAL *v, REAL *vmax,
                              MT_T(mt_cuda_adamw_coef) c, int all_decay) {
  MT_GRID_STRIDE(i, total) {
    const int k = mt_cu_find_seg(seg, nseg, i);
    if (k < 0) continue;
    const REAL decay = (all_decay || seg[k].decay) ? c.decay_on : (REAL)1;
    const REAL gi = g[i];
    const REAL mi = c.beta1 * m[i] + c.one_minus_beta1 * gi;
    const REAL vi = c.beta2 * v[i] + c.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    REAL vv = vi;
    if (vmax) {
      vv = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vv;
    }
    p[i] = p[i] * decay - c.step_size * (mi / (MT_SQRT(vv) / c.bc2_sqrt + c.eps));
  }
}

// pass 1 of the L2 norm: block b's sum of squares (double) into part[b]
__global__ void MT_T(sumsq_k)(double *part, const REAL *g, int64_t n) {
  double s = 0.0;
  MT_GRID_STRIDE(i, n) s += (double)g[i] * (double)g[i];
  s = mtc::block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// clip_grad_norm's scaling, decided on the device from *norm
__global__ void MT_T(clip_norm_k)(REAL *g, const double *norm, double max_norm, int64_t n) {
  const double coef = max_norm / (*norm + 1e-6);
  if (!(coef < 1.0)) return;
  const REAL c = (REAL)coef;
  MT_GRID_STRIDE(i, n) g[i] *= c;
}

// clamp_: comparisons, so a NaN stays NaN and +-inf become +-hi
__global__ void MT_T(clip_value_k)(REAL *g, REAL hi, int64_t n) {
  const REAL lo = -hi;
  MT_GRID_STRIDE(i, n) {
    const REAL x = g[i];
    g[i] = x < lo ? lo : (x > hi ? hi : x);
  }
}

} // namespace

int MT_T(mt_cuda_sgd_kernel)(const mt_cuda_table *t, REAL *params, const REAL *grads, REAL *buf,
                             int first_step, int nesterov, REAL momentum, REAL damp, REAL wd,
                             int all_decay, REAL lr, cudaStream_t s) {
  const int mode = momentum == (REAL)0 ? 0 : first_step ? 1 : nesterov ? 2 : 3;
  const int64_t total = (int64_t)t->total;
  if (t->n == 0 || total == 0) return 0;
  MT_T(sgd_k)<<<mtc::grid_for(total), mtc::kBlock, 0, s>>>(t->seg, t->n, total, params, grads,
                                                           buf, mode, nesterov, momentum, damp,
                                                           wd, all_decay, lr);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_adamw_kernel)(const mt_cuda_table *t, REAL *params, const REAL *grads,
                               REAL *exp_avg, REAL *exp_avg_sq, REAL *max_exp_avg_sq,
                               const MT_T(mt_cuda_adamw_coef) *c, int all_decay, cudaStream_t s) {
  const int64_t total = (int64_t)t->total;
  if (t->n == 0 || total == 0) return 0;
  MT_T(adamw_k)<<<mtc::grid_for(total), mtc::kBlock, 0, s>>>(
      t->seg, t->n, total, params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq, *c, all_decay);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_l2_norm)(const REAL *g, size_t n, double *norm, mt_cuda_ctx *cx) {
  const unsigned blocks = mtc::grid_for((int64_t)n); // fixed by n: a fixed order
  double *part;
  MT_CUDA_TRY(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_REDUCE, blocks * sizeof(double), (void **)&part));
  if (n > 0) {
    MT_T(sumsq_k)<<<blocks, mtc::kBlock, 0, cx->stream>>>(part, g, (int64_t)n);
    MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  }
  sum_sqrt_k<<<1, 1024, 0, cx->stream>>>(norm, part, n > 0 ? blocks : 0);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_clip_grad_norm)(REAL *g, size_t n, double max_norm, double *norm,
                                 mt_cuda_ctx *cx) {
  MT_CUDA_TRY(MT_T(mt_cuda_l2_norm)(g, n, norm, cx));
  if (n == 0) return 0;
  MT_T(clip_norm_k)<<<mtc::grid_for((int64_t)n), mtc::kBlock, 0, cx->stream>>>(g, norm, max_norm,
                                                                               (int64_t)n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_clip_grad_norm_given)(REAL *g, size_t n, double norm, double max_norm,
                                       cudaStream_t s) {
  const double coef = max_norm / (norm + 1e-6);
  if (!(coef < 1.0)) return 0;
  return MT_T(mt_cuda_scale)(g, n, (REAL)coef, s);
}

int MT_T(mt_cuda_clip_grad_value)(REAL *g, size_t n, double clip_value, cudaStream_t s) {
  MT_CUDA_ARG(clip_value > 0.0, "clip_grad_value %g: must be > 0", clip_value);
  if (n == 0) return 0;
  MT_T(clip_value_k)<<<mtc::grid_for((int64_t)n), mtc::kBlock, 0, s>>>(g, (REAL)clip_value,
                                                                       (int64_t)n);
  return MT_CUDA_LAUNCHED();
}
