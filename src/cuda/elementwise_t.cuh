// Element-wise layers on the GPU, a template for REAL = float and double
// (elementwise.cu, through core/real_t.h): the CPU's expressions of
// nn/activation_t.h, nn/elementwise_t.h and models/registry_t.h, one thread
// per element in grid-stride loops (64-bit indices). Every array is flat
// (n elements) unless a comment gives a shape.

#define GELU_KAPPA ((REAL)0.044715)
#define GELU_BETA ((REAL)0.7978845608028654) /* sqrt(2/pi) */
#define INV_SQRT2 ((REAL)0.7071067811865476)
#define INV_SQRT_2PI ((REAL)0.3989422804014327)
#if MT_F64
#define MT_TANH tanh
#else
#define MT_TANH tanhf
#endif

namespace {

__global__ void MT_T(relu_fwd_k)(REAL *out, const REAL *inp, int64_t n) {
  MT_GRID_STRIDE(i, n) out[i] = inp[i] < (REAL)0 ? (REAL)0 : inp[i]; // NaN passes
}

// overwrite: dinp is dout (the CPU's in-place case)
__global__ void MT_T(relu_bwd_k)(REAL *dinp, const REAL *dout, const REAL *out, int64_t n,
                                 int overwrite) {
  MT_GRID_STRIDE(i, n) {
    const REAL g = out[i] > (REAL)0 ? dout[i] : (REAL)0;
    dinp[i] = overwrite ? g : dinp[i] + g;
  }
}

__global__ void MT_T(gelu_fwd_k)(REAL *out, const REAL *inp, int64_t n, int tanh_form) {
  MT_GRID_STRIDE(i, n) {
    const REAL x = inp[i];
    out[i] = tanh_form
                 ? (REAL)0.5 * x * ((REAL)1 + MT_TANH(GELU_BETA * (x + GELU_KAPPA * x * x * x)))
                 : (REAL)0.5 * x * ((REAL)1 + MT_ERF(x * INV_SQRT2));
  }
}

__global__ void MT_T(gelu_bwd_k)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                                 int tanh_form) {
  MT_GRID_STRIDE(i, n) {
    const REAL x = inp[i];
    REAL d;
    if (tanh_form) {
      const REAL th = MT_TANH(GELU_BETA * (x + GELU_KAPPA * x * x * x));
      const REAL dinner = GELU_BETA * ((REAL)1 + (REAL)3 * GELU_KAPPA * x * x);
      d = (REAL)0.5 * ((REAL)1 + th) + (REAL)0.5 * x * ((REAL)1 - th * th) * dinner;
    } else {
      const REAL cdf = (REAL)0.5 * ((REAL)1 + MT_ERF(x * INV_SQRT2));
      const REAL pdf = INV_SQRT_2PI * MT_EXP((REAL)-0.5 * x * x);
      d = cdf + x * pdf;
    }
    dinp[i] += dout[i] * d;
  }
}

__global__ void MT_T(add_k)(REAL *out, const REAL *a, const REAL *b, int64_t n) {
  MT_GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

// da += dout and db += dout (either NULL)
__global__ void MT_T(add_to2_k)(REAL *da, REAL *db, const REAL *dout, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const REAL g = dout[i];
    if (da) da[i] += g;
    if (db) db[i] += g;
  }
}

// kept when mt_randu(key, offset + i) >= p (the CPU's draw and comparison)
__global__ void MT_T(dropout_fwd_k)(REAL *out, uint8_t *mask, const REAL *inp, REAL p,
                                    REAL scale, uint64_t key, uint64_t offset, int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const uint8_t keep = mt_cu_randu(key, offset + (uint64_t)i) >= p;
    mask[i] = keep;
    out[i] = keep ? inp[i] * scale : (REAL)0;
  }
}

// mask NULL: dinp += dout (eval)
__global__ void MT_T(dropout_bwd_k)(REAL *dinp, const REAL *dout, const uint8_t *mask,
                                    REAL scale, int64_t n) {
  MT_GRID_STRIDE(i, n) dinp[i] += mask ? (mask[i] ? dout[i] * scale : (REAL)0) : dout[i];
}

// x (rows, row_len) in place; row r keyed mt_key(key, layer1, id of r)
__global__ void MT_T(model_dropout_k)(REAL *x, uint8_t *mask, REAL p, REAL scale, uint64_t key,
                                      uint64_t layer1, const int64_t *ids, int64_t row_len,
                                      int64_t n) {
  MT_GRID_STRIDE(i, n) {
    const int64_t r = i / row_len, c = i - r * row_len;
    const uint64_t k = mt_cu_key(key, layer1, ids ? (uint64_t)ids[r] : (uint64_t)r);
    const uint8_t keep = mt_cu_randu(k, (uint64_t)c) >= p;
    mask[i] = keep;
    x[i] = keep ? x[i] * scale : (REAL)0;
  }
}

__global__ void MT_T(mask_scale_k)(REAL *d, const uint8_t *mask, REAL scale, int64_t n) {
  MT_GRID_STRIDE(i, n) d[i] = mask[i] ? d[i] * scale : (REAL)0;
}

// out (rows, cols) += b (cols) on every row
__global__ void MT_T(bias_add_k)(REAL *out, const REAL *b, int64_t cols, int64_t n) {
  MT_GRID_STRIDE(i, n) out[i] += b[i % cols];
}

__global__ void MT_T(scale_k)(REAL *x, REAL a, int64_t n) {
  MT_GRID_STRIDE(i, n) x[i] *= a;
}

// the plain column-sum loader of mt_cuda_sum_rows
struct MT_T(RowsLoad) {
  const REAL *src;
  int64_t cols;
  __device__ double operator()(int64_t r, int64_t j) const { return (double)src[r * cols + j]; }
};

} // namespace

#define LAUNCH(kernel, n, ...)                                            \
  do {                                                                    \
    if ((n) <= 0) return 0;                                               \
    kernel<<<mtc::grid_for(n), mtc::kBlock, 0, s>>>(__VA_ARGS__);         \
    return MT_CUDA_LAUNCHED();                                            \
  } while (0)

int MT_T(mt_cuda_relu_forward)(REAL *out, const REAL *inp, int64_t n, cudaStream_t s) {
  LAUNCH(MT_T(relu_fwd_k), n, out, inp, n);
}

int MT_T(mt_cuda_relu_backward)(REAL *dinp, const REAL *dout, const REAL *out, int64_t n,
                                cudaStream_t s) {
  LAUNCH(MT_T(relu_bwd_k), n, dinp, dout, out, n, dinp == dout);
}

int MT_T(mt_cuda_gelu_forward)(REAL *out, const REAL *inp, int64_t n, mt_gelu_kind kind,
                               cudaStream_t s) {
  LAUNCH(MT_T(gelu_fwd_k), n, out, inp, n, kind == MT_GELU_TANH);
}

int MT_T(mt_cuda_gelu_backward)(REAL *dinp, const REAL *dout, const REAL *inp, int64_t n,
                                mt_gelu_kind kind, cudaStream_t s) {
  LAUNCH(MT_T(gelu_bwd_k), n, dinp, dout, inp, n, kind == MT_GELU_TANH);
}

int MT_T(mt_cuda_residual_forward)(REAL *out, const REAL *a, const REAL *b, int64_t n,
                                   cudaStream_t s) {
  LAUNCH(MT_T(add_k), n, out, a, b, n);
}

int MT_T(mt_cuda_residual_backward)(REAL *da, REAL *db, const REAL *dout, int64_t n,
                                    cudaStream_t s) {
  if (!da && !db) return 0;
  LAUNCH(MT_T(add_to2_k), n, da, db, dout, n);
}

int MT_T(mt_cuda_dropout_forward)(REAL *out, uint8_t *mask, const REAL *inp, REAL p,
                                  uint64_t key, uint64_t offset, int training, int64_t n,
                                  cudaStream_t s) {
  // out, mask and inp are (n); out may equal inp
  if (n <= 0) return 0;
  const size_t bytes = (size_t)n * sizeof(REAL);
  if (!training || p <= (REAL)0) {
    if (out != inp) MT_CUDA_RT(cudaMemcpyAsync(out, inp, bytes, cudaMemcpyDeviceToDevice, s));
    if (mask) MT_CUDA_RT(cudaMemsetAsync(mask, 1, (size_t)n, s));
    return 0;
  }
  if (p >= (REAL)1) { /* PyTorch: everything dropped */
    MT_CUDA_RT(cudaMemsetAsync(out, 0, bytes, s));
    MT_CUDA_RT(cudaMemsetAsync(mask, 0, (size_t)n, s));
    return 0;
  }
  const REAL scale = (REAL)1 / ((REAL)1 - p);
  LAUNCH(MT_T(dropout_fwd_k), n, out, mask, inp, p, scale, key, offset, n);
}

int MT_T(mt_cuda_dropout_backward)(REAL *dinp, const REAL *dout, const uint8_t *mask, REAL p,
                                   int64_t n, cudaStream_t s) {
  if (mask && p >= (REAL)1) return 0;
  const int eval = !mask || p <= (REAL)0;
  const REAL scale = eval ? (REAL)1 : (REAL)1 / ((REAL)1 - p);
  LAUNCH(MT_T(dropout_bwd_k), n, dinp, dout, eval ? NULL : mask, scale, n);
}

int MT_T(mt_cuda_model_dropout)(REAL *x, uint8_t *mask, REAL p, uint64_t key,
                                const int64_t *ids, int n, int layer, int64_t row_len,
                                cudaStream_t s) {
  // x and mask are (n, row_len); ids is (n) or NULL
  if (p <= (REAL)0 || n <= 0 || row_len <= 0) return 0;
  const int64_t total = (int64_t)n * row_len;
  if (p >= (REAL)1) {
    MT_CUDA_RT(cudaMemsetAsync(x, 0, (size_t)total * sizeof(REAL), s));
    MT_CUDA_RT(cudaMemsetAsync(mask, 0, (size_t)total, s));
    return 0;
  }
  const REAL scale = (REAL)1 / ((REAL)1 - p);
  LAUNCH(MT_T(model_dropout_k), total, x, mask, p, scale, key, (uint64_t)layer + 1, ids, row_len,
         total);
}

int MT_T(mt_cuda_model_dropout_backward)(REAL *d, const uint8_t *mask, REAL p, int64_t n,
                                         cudaStream_t s) {
  if (p <= (REAL)0) return 0;
  const REAL scale = p < (REAL)1 ? (REAL)1 / ((REAL)1 - p) : (REAL)0;
  LAUNCH(MT_T(mask_scale_k), n, d, mask, scale, n);
}

int MT_T(mt_cuda_bias_add)(REAL *out, const REAL *b, int64_t rows, int64_t cols, cudaStream_t s) {
  LAUNCH(MT_T(bias_add_k), rows * cols, out, b, cols, rows * cols);
}

int MT_T(mt_cuda_scale)(REAL *x, size_t n, REAL a, cudaStream_t s) {
  LAUNCH(MT_T(scale_k), (int64_t)n, x, a, (int64_t)n);
}

int MT_T(mt_cuda_sum_rows)(REAL *dst, const REAL *src, int64_t rows, int64_t cols,
                           mt_cuda_ctx *cx) {
  // src is (rows, cols); dst is (cols)
  if (rows <= 0 || cols <= 0) return 0;
  double *part;
  MT_CUDA_TRY(mt_cuda_scratch(cx, MT_CUDA_SCRATCH_REDUCE,
                              (size_t)(mtc::colsum_chunks(rows) * cols) * sizeof(double),
                              (void **)&part));
  const MT_T(RowsLoad) load = {src, cols};
  return mt_cuda_status(__FILE__, __LINE__, __func__,
                        (int)mtc::colsum(dst, part, load, rows, cols, cx->stream));
}

#undef LAUNCH
#undef GELU_KAPPA
#undef GELU_BETA
#undef INV_SQRT2
#undef INV_SQRT_2PI
#undef MT_TANH
