/* 2-d convolution through oneDNN's convolution primitives.
 *
 * Why oneDNN primitives and not im2col + mt_gemm: on one core (AVX-512) the
 * blocked-format JIT kernels ran the Fashion-MNIST CNN's 32->64 3x3 layer at
 * ~165-190 GFLOP/s against ~100 for im2col + sgemm, reorders included
 * (numbers and the 1->32 layer in validation/README.md).
 *
 * An mt_conv2d holds "sets" of primitives, one per batch size of a ladder:
 * the maximum batch B and every power of two below it. A call with n <= B
 * images runs the set for B when n == B, else splits n into powers of two
 * (at most log2(B) chunks). A set has three operations (forward,
 * backward-data, backward-weights); each is a oneDNN primitive plus, for
 * every argument, the user's plain PyTorch-layout memory (NCHW, OIHW/GOIHW,
 * X) and, when the primitive prefers another format, an internal buffer
 * with a reorder between the two. Gradients are always produced in an
 * internal buffer and reordered into the user's buffer with a sum post-op
 * (added by a loop when the layouts agree: dnnl_op.h), so the backward
 * ADDS as every layer does. With dst_any (mt_conv2d_shape)
 * the user's output and output gradient are in the blocked layout oneDNN
 * picks for the forward's output (layout_probe: nChw8c with AVX2, nChw16c
 * with AVX-512) and the primitives read and write them in place: the CNN
 * keeps its activations in it from the convolution through the ReLU (a
 * post-op, shape.relu) to the pool, instead of two reorders of the
 * largest tensors each way per step. With src_any the same holds for the
 * input and its gradient (src_block): the pool before writes the layout
 * the forward picks for its input, the forward and backward-weights read
 * it as it is, and the input gradient, still made in an internal buffer
 * and added, is added without a change of layout.
 *
 * The internal buffers and scratchpads of a set are laid out in one arena;
 * sets run one at a time, so they all share it (its size is the largest
 * set's). Every internal input is written by a reorder and every internal
 * output by its primitive within the same call, so what another set left
 * there never matters. mt_conv2d_init allocates everything; a call only sets
 * data handles and executes.
 *
 * Threads: a oneDNN primitive is built for the OpenMP thread count in
 * effect when it is made, and inside a parallel region oneDNN runs the
 * threads' shares one after the other, so a primitive built for two threads
 * spins forever at its first internal barrier there. The ladder is
 * therefore made twice when omp_get_max_threads() > 1 at init: for one
 * thread (used inside a parallel region, e.g. by the trainer's per-thread
 * models) and for that many threads (used outside one); a call sets the
 * OpenMP thread count to the one its primitives were made for, and restores
 * it.
 *
 * Precision (nn/lowp.h, the policy given to mt_conv2d_init, fixed when the
 * convolution is made, as are its primitives): under bf16
 * the primitives take bf16 src, weights and diff_dst (the reorders from the
 * user's fp32 buffers convert) and write fp32 dst, diff_src and
 * diff_weights (the user's layouts, blocked or not, as in fp32; a first
 * layer's weight gradient by conv_first_bwd_w in fp32 on rounded copies);
 * under fp16 the user's inputs are rounded to fp16 into fp32
 * scratch copies and the fp32 primitives run on them. Under O2 (the
 * policy's round_outputs, also kept when made) the outputs and the
 * gradients are rounded to the low precision after each call. */
#include "nn/conv_first.h"
#include "nn/dnnl_op.h"
#include "nn/gemm_log.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <dnnl.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdlib.h>
#include <string.h>

#define CV_MAX_SETS 32

typedef struct {
  int B; /* images per call of this set */
  cv_op fwd, bwd_data, bwd_w;
  /* both backward operations read diff_dst in the same internal format:
   * backward-weights borrows backward-data's copy (one reorder, not two) */
  int ddst_shared;
  size_t bytes; /* arena bytes the set's internal buffers take */
} cv_set;

struct mt_conv2d_impl {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  int nvar;    /* thread variants: 1, or 2 when nthr[1] > 1           */
  int nthr[2]; /* OpenMP threads each variant's primitives are made for */
  int nsets;   /* sets per variant                                    */
  mt_precision prec; /* compute precision when made (the policy's)     */
  int round_outputs; /* O2: outputs and gradients rounded to prec       */
  /* fp32 kernels on operands rounded to prec: fp16 always, bf16 where
   * oneDNN has no bf16 kernels (a CPU without AVX-512: mt_gemm_bf16_native) */
  int emulate;
  /* the weight gradient by conv_first_bwd_w, not oneDNN (few input
   * channels, blocked output, fp32: see conv_first.c) */
  int first_bw;
  cv_set set[2][CV_MAX_SETS];
  void *arena;
};

/* OpenMP's thread-count setting (what omp_set_num_threads sets). */
static int omp_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* The threads a parallel region would really get: oneDNN assumes it gets
 * omp_get_max_threads() and hangs with fewer (OMP_THREAD_LIMIT). */
static int omp_threads_real(void) {
#ifdef _OPENMP
  const int n = omp_get_max_threads(), l = omp_get_thread_limit();
  return n < l ? n : l;
#else
  return 1;
#endif
}

static void omp_threads_set(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

/* The variant for the calling context; sets the OpenMP thread count to the
 * variant's, the old count going to *saved (0: nothing to restore). */
static int var_enter(const mt_conv2d_impl *m, int *saved) {
  const int cur = omp_threads();
#ifdef _OPENMP
  const int in_par = omp_in_parallel();
#else
  const int in_par = 1;
#endif
  const int v = (!in_par && m->nvar == 2 && omp_threads_real() >= m->nthr[1]) ? 1 : 0;
  *saved = 0;
  if (cur != m->nthr[v]) {
    *saved = cur;
    omp_threads_set(m->nthr[v]);
  }
  return v;
}

static void var_leave(int saved) {
  if (saved) omp_threads_set(saved);
}

int mt_conv2d_shape_init(mt_conv2d_shape *s) {
  MT_CHECK(
      s->B >= 1 && s->IC >= 1 && s->H >= 1 && s->W >= 1 && s->OC >= 1 && s->KH >= 1 && s->KW >= 1,
      MT_ERR_ARG, "conv2d: sizes must be >= 1 (B=%d IC=%d H=%d W=%d OC=%d K=%dx%d)", s->B, s->IC,
      s->H, s->W, s->OC, s->KH, s->KW);
  MT_CHECK(s->stride_h >= 1 && s->stride_w >= 1 && s->dil_h >= 1 && s->dil_w >= 1 &&
               s->pad_h >= 0 && s->pad_w >= 0,
           MT_ERR_ARG, "conv2d: stride and dilation must be >= 1, padding >= 0");
  MT_CHECK(s->groups >= 1 && s->IC % s->groups == 0 && s->OC % s->groups == 0, MT_ERR_ARG,
           "conv2d: groups=%d must divide IC=%d and OC=%d", s->groups, s->IC, s->OC);
  long eh = (long)s->dil_h * (s->KH - 1) + 1, ew = (long)s->dil_w * (s->KW - 1) + 1;
  long ph = (long)s->H + 2L * s->pad_h, pw = (long)s->W + 2L * s->pad_w;
  MT_CHECK(eh <= ph && ew <= pw, MT_ERR_ARG,
           "conv2d: kernel extent %ldx%ld exceeds padded input %ldx%ld", eh, ew, ph, pw);
  s->OH = (int)((ph - eh) / s->stride_h + 1);
  s->OW = (int)((pw - ew) / s->stride_w + 1);
  return 0;
}

/* Whether forward and backward-data keep the activations in plain NCHW
 * (oneDNN then runs its im2col + GEMM kernel): with very few input
 * channels the blocked kernels save less than the reorders of the
 * activations cost (1->32 3x3 on 28x28, 128 images, one core: forward
 * ~1.4 ms plain against ~2.1 ms blocked, backward-data ~1.5 against ~6.5).
 * Backward-weights is always blocked (~1.3 ms against ~3.5 plain). */
static int act_plain(const mt_conv2d_shape *s) { return s->IC <= 4; }

/* The oneDNN memory format of an output in layout block (0: NCHW). */
static dnnl_format_tag_t dst_tag(int block) {
  return block == 8 ? dnnl_aBcd8b : block == 16 ? dnnl_aBcd16b : dnnl_nchw;
}

/* A convolution's dims at batch B as oneDNN reads them (dnnl_dims_t:
 * DNNL_MAX_NDIMS entries each), for the layout probe and every set. */
typedef struct {
  dnnl_dims_t src, dst, w, bias, strides, dil, pl, pr;
  int wn; /* the weights' dims: 5 with groups (goihw), else 4 (oihw) */
} cv_geom;

static void geom_init(cv_geom *g, const mt_conv2d_shape *s, int B) {
  const int G = s->groups;
  memset(g, 0, sizeof(*g));
  g->src[0] = g->dst[0] = B;
  g->src[1] = s->IC, g->src[2] = s->H, g->src[3] = s->W;
  g->dst[1] = s->OC, g->dst[2] = s->OH, g->dst[3] = s->OW;
  g->wn = G > 1 ? 5 : 4;
  const dnnl_dims_t wg = {G, s->OC / G, s->IC / G, s->KH, s->KW},
                    w1 = {s->OC, s->IC, s->KH, s->KW};
  memcpy(g->w, G > 1 ? wg : w1, sizeof(g->w));
  g->bias[0] = s->OC;
  g->strides[0] = s->stride_h, g->strides[1] = s->stride_w;
  g->dil[0] = s->dil_h - 1, g->dil[1] = s->dil_w - 1; /* oneDNN: 0 = none */
  g->pl[0] = s->pad_h, g->pl[1] = s->pad_w;
  /* right padding that gives exactly OH, OW (PyTorch's floor mode) */
  g->pr[0] = (dnnl_dim_t)(s->OH - 1) * s->stride_h + (dnnl_dim_t)s->dil_h * (s->KH - 1) + 1 - s->H -
             s->pad_h;
  g->pr[1] = (dnnl_dim_t)(s->OW - 1) * s->stride_w + (dnnl_dim_t)s->dil_w * (s->KW - 1) + 1 - s->W -
             s->pad_w;
}

/* The blocked layout b (8 or 16) that the primitive descriptor pd keeps
 * argument `what` (its src or dst md, dims dims, C channels; of either
 * type) in, or 0
 * (NCHW or a layout the caller's buffers cannot hold: C no multiple of b
 * would pad channels). */
static int md_block(dnnl_primitive_desc_t pd, dnnl_query_t what, const dnnl_dims_t dims, int C) {
  const dnnl_memory_desc_t *got = dnnl_primitive_desc_query_md(pd, what, 0);
  dnnl_memory_desc_t blk;
  int block = 0;
  for (int b = 16; b >= 8 && got; b /= 2)
    if (C % b == 0 && cv_md_init(&blk, 4, dims, dst_tag(b), got->data_type) == 0 &&
        dnnl_memory_desc_equal(got, &blk))
      block = b;
  return block;
}

/* The layouts of a convolution made with dst_any or src_any (mt_conv2d
 * dst_block, src_block): what oneDNN's forward picks for its output and
 * input given "any" for both (the input NCHW when act_plain), kept when it
 * is nChw8c or nChw16c with the channels a multiple of the block, else
 * NCHW; *dblk only when want_dst, *sblk only when want_src. Asked once,
 * for the largest batch: every set of the ladder then uses them, so a
 * call's chunks and the caller agree. */
static int layout_probe(dnnl_engine_t eng, const mt_conv2d_shape *s, int has_bias,
                        mt_precision prec, int want_dst, int want_src, int *dblk, int *sblk) {
  const dnnl_data_type_t L = prec == MT_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
  cv_geom g;
  geom_init(&g, s, s->B);
  dnnl_memory_desc_t src, w, b, dst;
  MT_CALL(cv_md_init(&src, 4, g.src, act_plain(s) ? dnnl_nchw : dnnl_format_tag_any, L));
  MT_CALL(cv_md_init(&w, g.wn, g.w, dnnl_format_tag_any, L));
  MT_CALL(cv_md_init(&b, 1, g.bias, dnnl_x, dnnl_f32));
  MT_CALL(cv_md_init(&dst, 4, g.dst, dnnl_format_tag_any, dnnl_f32));
  dnnl_convolution_desc_t d;
  DNNL_CALL(dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training,
                                                       dnnl_convolution_direct, &src, &w,
                                                       has_bias ? &b : NULL, &dst, g.strides,
                                                       g.dil, g.pl, g.pr));
  dnnl_primitive_desc_t pd;
  DNNL_CALL(dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL));
  *dblk = want_dst ? md_block(pd, dnnl_query_dst_md, g.dst, s->OC) : 0;
  /* under bf16 the primitives read a bf16 copy of the input (a converting
   * reorder): the caller's fp32 input in the block the bf16 one has, so
   * that the reorder only converts (no transposition), and the pool before
   * and its backward stay blocked */
  *sblk = want_src ? md_block(pd, dnnl_query_src_md, g.src, s->IC) : 0;
  dnnl_primitive_desc_destroy(pd);
  return 0;
}

/* The primitives of one set: the shape s with batch B. */
static int set_create(cv_set *set, dnnl_engine_t eng, const mt_conv2d_shape *s, int B,
                      int has_bias, mt_precision prec, int blk, int sblk) {
  /* what the primitives read (src, weights, diff_dst): bf16 under bf16 */
  const dnnl_data_type_t F = dnnl_f32, L = prec == MT_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
  const int G = s->groups;
  set->B = B;
  cv_geom g;
  geom_init(&g, s, B);
  const dnnl_dim_t *sd = g.src, *dd = g.dst, *wdims = g.w, *bd = g.bias;
  const dnnl_dim_t *strides = g.strides, *dil = g.dil, *pl = g.pl, *pr = g.pr;
  const int wn = g.wn;
  dnnl_memory_desc_t src_md, dst_md, w_md, b_md, src_any, dst_any, w_any;
  dnnl_memory_desc_t src_pl, dsrc_any, ddst_pl, ddst_any, dw_any; /* by precision */
  MT_CALL(cv_md_init(&src_md, 4, sd, dst_tag(sblk), F)); /* the caller's inp and dinp */
  MT_CALL(cv_md_init(&dst_md, 4, dd, dst_tag(blk), F)); /* the caller's out and dout */
  MT_CALL(cv_md_init(&w_md, wn, wdims, G > 1 ? dnnl_goihw : dnnl_oihw, F));
  MT_CALL(cv_md_init(&b_md, 1, bd, dnnl_x, F));
  MT_CALL(cv_md_init(&src_any, 4, sd, dnnl_format_tag_any, L));
  MT_CALL(cv_md_init(&dst_any, 4, dd, dnnl_format_tag_any, F));
  MT_CALL(cv_md_init(&w_any, wn, wdims, dnnl_format_tag_any, L));
  MT_CALL(cv_md_init(&src_pl, 4, sd, dnnl_nchw, L));
  MT_CALL(cv_md_init(&dsrc_any, 4, sd, dnnl_format_tag_any, F));
  MT_CALL(cv_md_init(&ddst_pl, 4, dd, dnnl_nchw, L));
  dnnl_memory_desc_t ddst_blk;
  MT_CALL(cv_md_init(&ddst_blk, 4, dd, dst_tag(blk), L));
  MT_CALL(cv_md_init(&ddst_any, 4, dd, dnnl_format_tag_any, L));
  MT_CALL(cv_md_init(&dw_any, wn, wdims, dnnl_format_tag_any, F));
  /* with a blocked output (blk) the primitives read and write the caller's
   * buffers in it, with a blocked input (sblk) likewise (under bf16 the
   * input through a converting reorder into the primitives' bf16 one);
   * backward-data on plain activations (act_plain) still wants NCHW and
   * reorders diff_dst */
  const int src_user = sblk && L == F; /* the primitives read the caller's input */
  const dnnl_memory_desc_t *src_f = act_plain(s) ? &src_pl : src_user ? &src_md : &src_any;
  const dnnl_memory_desc_t *dst_f = act_plain(s) || blk ? &dst_md : &dst_any;
  const dnnl_memory_desc_t *dsrc_f = act_plain(s) || sblk ? &src_md : &dsrc_any;
  const dnnl_memory_desc_t *ddst_f = act_plain(s) ? &ddst_pl : blk ? &ddst_blk : &ddst_any;
  const dnnl_memory_desc_t *ddst_wf = blk ? &ddst_blk : &ddst_any;
  const dnnl_memory_desc_t *bias = has_bias ? &b_md : NULL;
  size_t *bytes = &set->bytes;

  /* forward */
  dnnl_convolution_desc_t d;
  DNNL_CALL(dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training,
                                                       dnnl_convolution_direct, src_f, &w_any, bias,
                                                       dst_f, strides, dil, pl, pr));
  dnnl_primitive_attr_t attr, fattr;
  MT_CALL(cv_make_attr(&fattr, 0, s->relu));
  dnnl_primitive_desc_t fpd, pd;
  dnnl_status_t st = dnnl_primitive_desc_create(&fpd, &d, fattr, eng, NULL);
  dnnl_primitive_attr_destroy(fattr);
  if (st == dnnl_success && cv_make_attr(&attr, 0, 0)) {
    dnnl_primitive_desc_destroy(fpd);
    return MT_ERR(MT_ERR_LIB, "conv2d: no primitive attribute");
  }
  MT_CHECK(st == dnnl_success, MT_ERR_LIB, "conv2d: no forward implementation (status %d)",
           (int)st);
#define Q(pd, what, i) dnnl_primitive_desc_query_md((pd), (what), (i))
  cv_op *f = &set->fwd;
  int rc = cv_add_arg(f, bytes, DNNL_ARG_SRC, ARG_IN, &src_md, Q(fpd, dnnl_query_src_md, 0), eng);
  if (!rc)
    rc = cv_add_arg(f, bytes, DNNL_ARG_WEIGHTS, ARG_IN, &w_md, Q(fpd, dnnl_query_weights_md, 0),
                    eng);
  if (!rc && has_bias) rc = cv_add_arg(f, bytes, DNNL_ARG_BIAS, ARG_IN, &b_md, &b_md, eng);
  if (!rc)
    rc = cv_add_arg(f, bytes, DNNL_ARG_DST, ARG_OUT, &dst_md, Q(fpd, dnnl_query_dst_md, 0), eng);

  /* backward data: diff_src = conv^T(diff_dst, w); fpd is the hint */
  cv_op *bdo = &set->bwd_data;
  if (!rc) {
    st = dnnl_dilated_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, dsrc_f,
                                                          &w_any, ddst_f, strides, dil, pl, pr);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &d, attr, eng, fpd);
    if (st != dnnl_success)
      rc = MT_ERR(MT_ERR_LIB, "conv2d: no backward-data implementation (status %d)", (int)st);
    else {
      rc = cv_add_arg(bdo, bytes, DNNL_ARG_DIFF_DST, ARG_IN, &dst_md,
                      Q(pd, dnnl_query_diff_dst_md, 0), eng);
      if (!rc)
        rc = cv_add_arg(bdo, bytes, DNNL_ARG_WEIGHTS, ARG_IN, &w_md,
                        Q(pd, dnnl_query_weights_md, 0), eng);
      if (!rc)
        rc = cv_add_arg(bdo, bytes, DNNL_ARG_DIFF_SRC, ARG_OUT_ADD, &src_md,
                        Q(pd, dnnl_query_diff_src_md, 0), eng);
      if (!rc)
        rc = cv_make_prim(&bdo->prim, &bdo->scratchpad, &bdo->scratch_off, bytes, pd, eng);
      else
        dnnl_primitive_desc_destroy(pd);
    }
  }

  /* backward weights: diff_w = corr(src, diff_dst), diff_b = sum diff_dst */
  cv_op *bwo = &set->bwd_w;
  if (!rc) {
    st = dnnl_dilated_convolution_backward_weights_desc_init(
        &d, dnnl_convolution_direct, src_user ? &src_md : &src_any, &dw_any, bias, ddst_wf, strides,
        dil, pl, pr);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &d, attr, eng, fpd);
    if (st != dnnl_success)
      rc = MT_ERR(MT_ERR_LIB, "conv2d: no backward-weights implementation (status %d)", (int)st);
    else {
      rc = cv_add_arg(bwo, bytes, DNNL_ARG_SRC, ARG_IN, &src_md, Q(pd, dnnl_query_src_md, 0), eng);
      if (!rc)
        rc = cv_add_arg(bwo, bytes, DNNL_ARG_DIFF_DST, ARG_IN, &dst_md,
                        Q(pd, dnnl_query_diff_dst_md, 0), eng);
      if (!rc)
        rc = cv_add_arg(bwo, bytes, DNNL_ARG_DIFF_WEIGHTS, ARG_OUT_ADD, &w_md,
                        Q(pd, dnnl_query_diff_weights_md, 0), eng);
      if (!rc && has_bias) /* the bias gradient is diff_weights number 1 */
        rc = cv_add_arg(bwo, bytes, DNNL_ARG_DIFF_BIAS, ARG_OUT_ADD, &b_md,
                        Q(pd, dnnl_query_diff_weights_md, 1), eng);
      if (!rc)
        rc = cv_make_prim(&bwo->prim, &bwo->scratchpad, &bwo->scratch_off, bytes, pd, eng);
      else
        dnnl_primitive_desc_destroy(pd);
    }
  }
#undef Q
  dnnl_primitive_attr_destroy(attr);
  if (rc) {
    dnnl_primitive_desc_destroy(fpd);
    return rc;
  }
  MT_CALL(cv_make_prim(&f->prim, &f->scratchpad, &f->scratch_off, bytes, fpd, eng));

  cv_arg *dd_d = &bdo->a[0], *dd_w = &bwo->a[1]; /* DIFF_DST of each */
  const dnnl_memory_desc_t *md_d = NULL, *md_w = NULL;
  if (dd_d->reorder && dd_w->reorder &&
      dnnl_memory_get_memory_desc(dd_d->mem, &md_d) == dnnl_success &&
      dnnl_memory_get_memory_desc(dd_w->mem, &md_w) == dnnl_success &&
      dnnl_memory_desc_equal(md_d, md_w)) {
    dnnl_primitive_destroy(dd_w->reorder);
    dnnl_memory_destroy(dd_w->mem);
    dd_w->reorder = NULL;
    dd_w->mem = dd_d->mem;
    dd_w->borrowed = 1;
    set->ddst_shared = 1; /* its arena bytes stay reserved: harmless */
  }
  return 0;
}

/* The ladder of one thread variant: B, then every power of two below it. */
static int ladder_create(mt_conv2d_impl *m, int v, const mt_conv2d_shape *s, int has_bias,
                         int blk, int sblk) {
  const mt_precision prec = m->emulate ? MT_PREC_FP32 : m->prec;
  int p = 1;
  while (p * 2 < s->B) p *= 2;
  int n = 0;
  for (int b = s->B; b >= 1; b = (b == s->B && b != p) ? p : b / 2) {
    MT_CHECK(n < CV_MAX_SETS, MT_ERR_STATE, "conv2d: batch ladder too long");
    MT_CALL(set_create(&m->set[v][n++], m->eng, s, b, has_bias, prec, blk, sblk));
  }
  m->nsets = n;
  return 0;
}

static int conv_create(mt_conv2d_impl *m, const mt_conv2d_shape *s, int has_bias, int *blk,
                       int *sblk) {
  const int setting = omp_threads(), outer = omp_threads_real();
  *blk = *sblk = 0;
  /* with few input channels a blocked output needs conv_first_bwd_w: oneDNN
   * 2.6's backward-weights on it (jit:avx2, input padded to the block) gave
   * a wrong CNN curve (1% off PyTorch by step 47, tests/test_torch_curves.sh)
   * where its results from the same blocked gradient reordered out of NCHW
   * had been right (cause not found) */
  /* (its kernel is fp32: on low-precision values rounded first, whether the
   * other passes are oneDNN's bf16 kernels or emulated) */
  const int first_ok = conv_first_fits(s);
  const int want_dst = s->dst_any && (!act_plain(s) || first_ok);
  const int want_src = s->src_any && !act_plain(s);
  if (want_dst || want_src)
    MT_CALL(layout_probe(m->eng, s, has_bias, m->emulate ? MT_PREC_FP32 : m->prec, want_dst,
                         want_src, blk, sblk));
  m->nthr[0] = 1;
  m->nthr[1] = outer;
  m->nvar = outer > 1 ? 2 : 1;
  for (int v = 0; v < m->nvar; v++) {
    omp_threads_set(m->nthr[v]); /* oneDNN sizes its kernels from this */
    int rc = ladder_create(m, v, s, has_bias, *blk, *sblk);
    omp_threads_set(setting);
    MT_CALL(rc);
  }
  size_t bytes = 64;
  for (int v = 0; v < m->nvar; v++)
    for (int i = 0; i < m->nsets; i++)
      if (m->set[v][i].bytes > bytes) bytes = m->set[v][i].bytes;
  MT_CALL(mt_calloc(&m->arena, bytes, 1, "conv2d internal buffers"));
  for (int v = 0; v < m->nvar; v++)
    for (int i = 0; i < m->nsets; i++) {
      MT_CALL(cv_op_place(&m->set[v][i].fwd, m->arena));
      MT_CALL(cv_op_place(&m->set[v][i].bwd_data, m->arena));
      MT_CALL(cv_op_place(&m->set[v][i].bwd_w, m->arena));
    }
  return 0;
}

int mt_conv2d_init(mt_conv2d *c, const mt_conv2d_shape *s, int has_bias,
                   const mt_nn_policy *pol) {
  memset(c, 0, sizeof(*c));
  c->s = *s;
  MT_CALL(mt_conv2d_shape_init(&c->s));
  c->has_bias = has_bias ? 1 : 0;
  mt_conv2d_impl *m = calloc(1, sizeof(*m));
  MT_CHECK(m, MT_ERR_MEM, "conv2d: out of memory");
  c->impl = m;
  m->prec = mt_nn_compute(pol);
  m->round_outputs = mt_nn_rounds(pol);
  m->emulate = m->prec == MT_PREC_FP16 || (m->prec == MT_PREC_BF16 && !mt_gemm_bf16_native());
  int rc = 0;
  if (dnnl_engine_create(&m->eng, dnnl_cpu, 0) != dnnl_success)
    rc = MT_ERR(MT_ERR_LIB, "conv2d: cannot create the oneDNN CPU engine");
  else if (dnnl_stream_create(&m->stream, m->eng, dnnl_stream_default_flags) != dnnl_success)
    rc = MT_ERR(MT_ERR_LIB, "conv2d: cannot create a oneDNN stream");
  if (!rc) rc = conv_create(m, &c->s, c->has_bias, &c->dst_block, &c->src_block);
  m->first_bw = c->dst_block && act_plain(&c->s);
  if (rc) {
    mt_error_push(__FILE__, __LINE__, __func__, rc);
    mt_conv2d_free(c);
  }
  return rc;
}

void mt_conv2d_free(mt_conv2d *c) {
  if (!c || !c->impl) return;
  mt_conv2d_impl *m = c->impl;
  for (int v = 0; v < 2; v++)
    for (int i = 0; i < CV_MAX_SETS; i++) {
      cv_op_free(&m->set[v][i].fwd);
      cv_op_free(&m->set[v][i].bwd_data);
      cv_op_free(&m->set[v][i].bwd_w);
    }
  if (m->stream) dnnl_stream_destroy(m->stream);
  if (m->eng) dnnl_engine_destroy(m->eng);
  mt_free(&m->arena);
  free(m);
  c->impl = NULL;
}

/* ------------------------------------------------------------------ calls */

/* -log_gemm_shapes: the passes a call runs on B images, as the GEMMs of an
 * im2col convolution (nn/gemm_log.h), in the precision the kernels compute
 * in (fp32 when low precision is emulated on rounded values). */
static void log_conv(const mt_conv2d *c, int B, int fwd, int data, int weights) {
  const mt_conv2d_shape *s = &c->s;
  const int64_t G = s->groups, rows = (int64_t)B * s->OH * s->OW, oc = s->OC / G;
  const int64_t ck = (int64_t)(s->IC / G) * s->KH * s->KW;
  const mt_precision p = c->impl->emulate ? MT_PREC_FP32 : c->impl->prec;
  if (fwd) mt_gemm_log_record(MT_GEMM_LOG_CONV_FWD, 'N', 'T', rows, oc, ck, 0, p, G);
  if (data) mt_gemm_log_record(MT_GEMM_LOG_CONV_BWD_DATA, 'N', 'N', rows, ck, oc, 0, p, G);
  if (weights) mt_gemm_log_record(MT_GEMM_LOG_CONV_BWD_W, 'T', 'N', oc, ck, rows, 1, p, G);
}

/* The set for the next chunk of n images: all of them when n is the
 * maximum batch, else the largest power of two <= n. */
static cv_set *pick(mt_conv2d_impl *m, int v, int n) {
  cv_set *set = m->set[v];
  if (n == set[0].B) return &set[0];
  for (int i = 1; i < m->nsets; i++)
    if (set[i].B <= n) return &set[i];
  return &set[m->nsets - 1];
}

static int forward_chunk(float *out, const float *inp, const float *w, const float *b, cv_set *set,
                         dnnl_stream_t stream) {
  MT_CALL(cv_op_bind(&set->fwd, DNNL_ARG_SRC, inp));
  MT_CALL(cv_op_bind(&set->fwd, DNNL_ARG_WEIGHTS, w));
  if (b) MT_CALL(cv_op_bind(&set->fwd, DNNL_ARG_BIAS, b));
  MT_CALL(cv_op_bind(&set->fwd, DNNL_ARG_DST, out));
  return cv_op_run(&set->fwd, stream);
}

int mt_conv2d_forward(float *out, const float *inp, const float *w, const float *b, int B,
                      mt_conv2d *c) {
  // inp is (B,IC,H,W), w is (OC,IC/groups,KH,KW), b is (OC), out is (B,OC,OH,OW)
  MT_CHECK(c && c->impl, MT_ERR_ARG, "conv2d: not initialised");
  MT_CHECK(B >= 0 && B <= c->s.B, MT_ERR_ARG, "conv2d: batch %d outside [0, %d]", B, c->s.B);
  MT_CHECK(!b == !c->has_bias, MT_ERR_ARG, "conv2d: bias given %s, made %s", b ? "yes" : "no",
           c->has_bias ? "with bias" : "without");
  const mt_conv2d_shape *s = &c->s;
  const int64_t in1 = (int64_t)s->IC * s->H * s->W, out1 = (int64_t)s->OC * s->OH * s->OW;
  const int64_t wn = (int64_t)s->OC * (s->IC / s->groups) * s->KH * s->KW;
  const mt_precision p = c->impl->prec;
  if (mt_gemm_log_active() && B > 0) log_conv(c, B, 1, 0, 0);
  if (c->impl->emulate) { /* low-precision values, fp32 kernels */
    MT_CALL(mt_nn_rounded_copy(p, 2, inp, (size_t)(B * in1), &inp));
    MT_CALL(mt_nn_rounded_copy(p, 3, w, (size_t)wn, &w));
  }
  int saved, rc = 0;
  const int v = var_enter(c->impl, &saved);
  for (int b0 = 0; b0 < B && !rc;) {
    cv_set *set = pick(c->impl, v, B - b0);
    rc = forward_chunk(out + b0 * out1, inp + b0 * in1, w, b, set, c->impl->stream);
    b0 += set->B;
  }
  var_leave(saved);
  MT_CALL(rc);
  if (c->impl->round_outputs) mt_round_to(c->impl->prec, out, (size_t)(B * out1));
  return 0;
}

/* The backward passes of one chunk (one set). */
static int backward_chunk(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, cv_set *set, dnnl_stream_t stream, int has_bias) {
  if (dinp) {
    MT_CALL(cv_op_bind(&set->bwd_data, DNNL_ARG_DIFF_DST, dout));
    MT_CALL(cv_op_bind(&set->bwd_data, DNNL_ARG_WEIGHTS, w));
    MT_CALL(cv_op_bind(&set->bwd_data, DNNL_ARG_DIFF_SRC, dinp));
    MT_CALL(cv_op_run(&set->bwd_data, stream));
  }
  if (!dw) return 0;
  if (set->ddst_shared && !dinp) { /* fill the borrowed diff_dst copy */
    MT_CALL(cv_op_bind(&set->bwd_data, DNNL_ARG_DIFF_DST, dout));
    MT_CALL(cv_arg_reorder_in(&set->bwd_data.a[0], stream));
  }
  MT_CALL(cv_op_bind(&set->bwd_w, DNNL_ARG_SRC, inp));
  MT_CALL(cv_op_bind(&set->bwd_w, DNNL_ARG_DIFF_DST, dout));
  MT_CALL(cv_op_bind(&set->bwd_w, DNNL_ARG_DIFF_WEIGHTS, dw));
  if (!has_bias) return cv_op_run(&set->bwd_w, stream);
  /* the bias gradient comes with the weights' (into db, or nowhere) */
  cv_arg *a = &set->bwd_w.a[set->bwd_w.nargs - 1];
  if (db)
    MT_CALL(cv_op_bind(&set->bwd_w, DNNL_ARG_DIFF_BIAS, db));
  else
    a->skip = 1; /* computed into the internal buffer, not copied out */
  int rc = cv_op_run(&set->bwd_w, stream);
  a->skip = 0;
  return rc;
}

int mt_conv2d_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int B, mt_conv2d *c) {
  // dout is (B,OC,OH,OW); dinp (B,IC,H,W), dw (OC,IC/groups,KH,KW), db (OC) += ...
  MT_CHECK(c && c->impl, MT_ERR_ARG, "conv2d: not initialised");
  MT_CHECK(B >= 0 && B <= c->s.B, MT_ERR_ARG, "conv2d: batch %d outside [0, %d]", B, c->s.B);
  MT_CHECK(!db || c->has_bias, MT_ERR_ARG, "conv2d: db given for a convolution without bias");
  const mt_conv2d_shape *s = &c->s;
  const int64_t in1 = (int64_t)s->IC * s->H * s->W, out1 = (int64_t)s->OC * s->OH * s->OW;
  const int64_t wn = (int64_t)s->OC * (s->IC / s->groups) * s->KH * s->KW;
  const mt_precision p = c->impl->prec;
  if (mt_gemm_log_active() && B > 0) log_conv(c, B, 0, dinp != NULL, dw != NULL);
  const int first = dw && c->impl->first_bw;
  /* fp32 kernels on low-precision values: every pass when emulated, else
   * conv_first_bwd_w's weight gradient (no-ops in fp32) */
  if (c->impl->emulate ? dinp || dw : first) {
    MT_CALL(mt_nn_rounded_copy(p, 2, dout, (size_t)(B * out1), &dout));
    if (dw) MT_CALL(mt_nn_rounded_copy(p, 3, inp, (size_t)(B * in1), &inp));
    if (dinp && c->impl->emulate) MT_CALL(mt_nn_rounded_copy(p, 4, w, (size_t)wn, &w));
  }
  if (dinp || (dw && !first)) {
    int saved, rc = 0;
    const int v = var_enter(c->impl, &saved);
    for (int b0 = 0; b0 < B && !rc;) {
      cv_set *set = pick(c->impl, v, B - b0);
      rc = backward_chunk(dinp ? dinp + b0 * in1 : NULL, first ? NULL : dw, first ? NULL : db,
                          dout + b0 * out1, inp + b0 * in1, w, set, c->impl->stream, c->has_bias);
      b0 += set->B;
    }
    var_leave(saved);
    MT_CALL(rc);
  }
  if (first) {
    MT_CALL(conv_first_bwd_w(dw, db, dout, inp, B, c));
  } else if (!dinp && !dw && db) {
    const int64_t hw = (int64_t)s->OH * s->OW, cb = c->dst_block ? c->dst_block : 1;
    for (int o = 0; o < s->OC; o++) {
      double acc = 0.0;
      for (int bi = 0; bi < B; bi++) { /* plane o of image bi: NCHW when cb is 1 */
        const float *d = dout + ((int64_t)bi * s->OC + o / cb * cb) * hw + o % cb;
        for (int64_t i = 0; i < hw; i++) acc += d[i * cb];
      }
      db[o] += (float)acc;
    }
  }
  if (c->impl->round_outputs) { /* O2: gradients held in low precision */
    if (dinp) mt_round_to(c->impl->prec, dinp, (size_t)(B * in1));
    if (dw) mt_round_to(c->impl->prec, dw, (size_t)wn);
    if (db) mt_round_to(c->impl->prec, db, (size_t)s->OC);
  }
  return 0;
}
