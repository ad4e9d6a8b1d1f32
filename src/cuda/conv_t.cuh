// 2-d convolution on the GPU by im2col and cuBLAS, a template for REAL =
// float and double (conv.cu). Layouts: inp, dinp (B,IC,H,W); w, dw
// (OC,IC/G,KH,KW); b, db (OC); out, dout (B,OC,OH,OW). With K = IC*KH*KW,
// Kg = K/G, OHW = OH*OW, the columns of one image are col (K,OHW):
// col[(ic*KH + kh)*KW + kw][oh*OW + ow] = inp[ic][oh*sh - ph + kh*dh]
// [ow*sw - pw + kw*dw] (0 outside the input), so group g's rows are the
// contiguous block [g*Kg, (g+1)*Kg) and
//   out_g (OCg,OHW) = w_g (OCg,Kg) col_g (Kg,OHW)
//   dw_g (OCg,Kg) += dout_g (OCg,OHW) col_g^T
//   dcol_g (Kg,OHW) = w_g^T dout_g, and dinp += col2im(dcol).
// A chunk of nb images has its columns side by side in the context's
// column scratch (nb*K*OHW values, at most cx->col_bytes or 64 MiB, at
// least one image).

namespace {

// col (nb,K,OHW) of images [0, nb) of inp (nb,IC,H,W)
__global__ void MT_T(im2col_k)(REAL *col, const REAL *inp, mt_conv2d_shape s, int64_t n) {
  const int64_t ohw = (int64_t)s.OH * s.OW, kk = (int64_t)s.KH * s.KW;
  const int64_t K = s.IC * kk;
  MT_GRID_STRIDE(i, n) {
    const int64_t img = i / (K * ohw), r = (i / ohw) % K, o = i % ohw;
    const int ic = (int)(r / kk), kh = (int)(r % kk) / s.KW, kw = (int)(r % kk) % s.KW;
    const int ih = (int)(o / s.OW) * s.stride_h - s.pad_h + kh * s.dil_h;
    const int iw = (int)(o % s.OW) * s.stride_w - s.pad_w + kw * s.dil_w;
    col[i] = ih >= 0 && ih < s.H && iw >= 0 && iw < s.W
                 ? inp[((img * s.IC + ic) * s.H + ih) * s.W + iw]
                 : (REAL)0;
  }
}

// dinp (nb,IC,H,W) += the column entries that came from each input
// element: for each (kh,kw) in order, the output (oh,ow) with
// oh*sh - ph + kh*dh = ih (when it divides and lies inside), and so for w
__global__ void MT_T(col2im_k)(REAL *dinp, const REAL *col, mt_conv2d_shape s, int64_t n) {
  const int64_t ohw = (int64_t)s.OH * s.OW, kk = (int64_t)s.KH * s.KW, hw = (int64_t)s.H * s.W;
  const int64_t K = s.IC * kk;
  MT_GRID_STRIDE(i, n) {
    const int64_t img = i / (s.IC * hw);
    const int ic = (int)((i / hw) % s.IC), ih = (int)((i % hw) / s.W), iw = (int)(i % s.W);
    const REAL *c = col + (img * K + ic * kk) * ohw;
    REAL acc = (REAL)0;
    for (int kh = 0; kh < s.KH; kh++) {
      const int oh = mt_cu_conv_out(ih, kh, s.stride_h, s.pad_h, s.dil_h, s.OH);
      if (oh < 0) continue;
      for (int kw = 0; kw < s.KW; kw++) {
        const int ow = mt_cu_conv_out(iw, kw, s.stride_w, s.pad_w, s.dil_w, s.OW);
        if (ow >= 0) acc += c[(kh * s.KW + kw) * ohw + (int64_t)oh * s.OW + ow];
      }
    }
    dinp[i] += acc;
  }
}

// out (B,OC,OHW) += b[oc]
__global__ void MT_T(conv_bias_k)(REAL *out, const REAL *b, int OC, int64_t ohw, int64_t n) {
  MT_GRID_STRIDE(i, n) out[i] += b[(i / ohw) % OC];
}

// db[oc] += the sum of dout over images and positions, one block per
// channel, in double
__global__ void MT_T(conv_dbias_k)(REAL *db, const REAL *dout, int B, int OC, int64_t ohw) {
  const int oc = blockIdx.x;
  const int64_t n = (int64_t)B * ohw;
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    acc += dout[((j / ohw) * OC + oc) * ohw + j % ohw];
  acc = mtc::block_sum(acc);
  if (threadIdx.x == 0) db[oc] += (REAL)acc;
}

} // namespace

// The chunk of images whose columns fit the scratch cap, and the scratch.
static int MT_T(conv_chunk)(const mt_conv2d_shape *s, int B, mt_cuda_ctx *cx, REAL **col,
                            int *nb) {
  const int64_t per = (int64_t)s->IC * s->KH * s->KW * s->OH * s->OW; // one image's columns
  const int64_t cap = cx->col_bytes ? (int64_t)cx->col_bytes : kColBytes;
  int64_t c = cap / (per * (int64_t)sizeof(REAL));
  c = c < 1 ? 1 : (c > B ? B : c);
  *nb = (int)c;
  return mt_cuda_scratch(cx, MT_CUDA_SCRATCH_COL, (size_t)(c * per) * sizeof(REAL), (void **)col);
}

int MT_T(mt_cuda_conv2d_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *b, int B,
                                 const mt_conv2d_shape *s, mt_cuda_ctx *cx) {
  MT_CUDA_TRY(conv_check(s, B));
  if (B == 0) return 0;
  const ConvDims d = conv_dims(s);
  const int G = d.G, OCg = d.OCg;
  const int64_t K = d.K, Kg = d.Kg, ohw = d.ohw, in_img = d.in_img, out_img = d.out_img;
  REAL *col;
  int nb;
  MT_CUDA_TRY(MT_T(conv_chunk)(s, B, cx, &col, &nb));
  for (int b0 = 0; b0 < B; b0 += nb) {
    const int m = B - b0 < nb ? B - b0 : nb;
    const int64_t n = m * K * ohw;
    MT_T(im2col_k)<<<mtc::grid_for(n), mtc::kBlock, 0, cx->stream>>>(col, inp + b0 * in_img, *s, n);
    MT_CUDA_TRY(MT_CUDA_LAUNCHED());
    for (int g = 0; g < G; g++)
      MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('N', 'N', OCg, ohw, Kg, (REAL)1, w + g * OCg * Kg, Kg, 0,
                                              col + g * Kg * ohw, ohw, K * ohw, (REAL)0,
                                              out + b0 * out_img + g * OCg * ohw, ohw, out_img, m,
                                              cx));
  }
  if (!b) return 0;
  const int64_t n = B * out_img;
  MT_T(conv_bias_k)<<<mtc::grid_for(n), mtc::kBlock, 0, cx->stream>>>(out, b, s->OC, ohw, n);
  return MT_CUDA_LAUNCHED();
}

int MT_T(mt_cuda_conv2d_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,
                                  const REAL *inp, const REAL *w, int B,
                                  const mt_conv2d_shape *s, mt_cuda_ctx *cx) {
  MT_CUDA_TRY(conv_check(s, B));
  if (B == 0) return 0;
  const ConvDims d = conv_dims(s);
  const int G = d.G, OCg = d.OCg;
  const int64_t K = d.K, Kg = d.Kg, ohw = d.ohw, in_img = d.in_img, out_img = d.out_img;
  if (db) {
    MT_T(conv_dbias_k)<<<s->OC, 512, 0, cx->stream>>>(db, dout, B, s->OC, ohw);
    MT_CUDA_TRY(MT_CUDA_LAUNCHED());
  }
  if (!dw && !dinp) return 0;
  REAL *col;
  int nb;
  MT_CUDA_TRY(MT_T(conv_chunk)(s, B, cx, &col, &nb));
  for (int b0 = 0; b0 < B; b0 += nb) {
    const int m = B - b0 < nb ? B - b0 : nb;
    const REAL *d0 = dout + b0 * out_img;
    if (dw) {
      const int64_t n = m * K * ohw;
      MT_T(im2col_k)<<<mtc::grid_for(n), mtc::kBlock, 0, cx->stream>>>(col, inp + b0 * in_img, *s,
                                                                       n);
      MT_CUDA_TRY(MT_CUDA_LAUNCHED());
      /* image after image (a fixed order), the groups of one image batched */
      for (int i = 0; i < m; i++)
        MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('N', 'T', OCg, Kg, ohw, (REAL)1, d0 + i * out_img,
                                                ohw, OCg * ohw, col + i * K * ohw, ohw, Kg * ohw,
                                                (REAL)1, dw, Kg, OCg * Kg, G, cx));
    }
    if (dinp) {
      for (int g = 0; g < G; g++)
        MT_CUDA_TRY(MT_T(mt_cuda_gemm_batched)('T', 'N', Kg, ohw, OCg, (REAL)1, w + g * OCg * Kg, Kg,
                                                0, d0 + g * OCg * ohw, ohw, out_img, (REAL)0,
                                                col + g * Kg * ohw, ohw, K * ohw, m, cx));
      const int64_t n = m * in_img;
      MT_T(col2im_k)<<<mtc::grid_for(n), mtc::kBlock, 0, cx->stream>>>(dinp + b0 * in_img, col, *s,
                                                                       n);
      MT_CUDA_TRY(MT_CUDA_LAUNCHED());
    }
  }
  return 0;
}
