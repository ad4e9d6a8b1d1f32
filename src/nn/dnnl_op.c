/* The oneDNN operations behind the convolutions (nn/dnnl_op.h). */
#include "nn/dnnl_op.h"

#include <stdint.h>
#include <string.h>

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* An attribute with the user scratchpad mode and, if accumulate, a sum
 * post-op (dst = op(src) + dst), if relu a ReLU post-op (dst = max(op, 0)). */
int cv_make_attr(dnnl_primitive_attr_t *attr, int accumulate, int relu) {
  DNNL_CALL(dnnl_primitive_attr_create(attr));
  dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success && (accumulate || relu)) {
    dnnl_post_ops_t po;
    st = dnnl_post_ops_create(&po);
    if (st == dnnl_success) {
      if (accumulate) st = dnnl_post_ops_append_sum(po, 1.0f);
      if (st == dnnl_success && relu)
        st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
      if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(*attr, po);
      dnnl_post_ops_destroy(po);
    }
  }
  if (st != dnnl_success) {
    dnnl_primitive_attr_destroy(*attr);
    *attr = NULL;
  }
  MT_CHECK(st == dnnl_success, MT_ERR_LIB, "conv2d: setting primitive attributes failed (%d)",
           (int)st);
  return 0;
}

/* A primitive from its descriptor, with its scratchpad placed in the set's
 * arena layout (*bytes grows); the primitive descriptor is released here.
 * scratchpad NULL: the primitive must need none (reorders). */
int cv_make_prim(dnnl_primitive_t *prim, dnnl_memory_t *scratchpad, size_t *scratch_off,
                 size_t *bytes, dnnl_primitive_desc_t pd, dnnl_engine_t eng) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  const size_t sz = md ? dnnl_memory_desc_get_size(md) : 0;
  int rc = 0;
  if (sz > 0 && !scratchpad) {
    rc = MT_ERR(MT_ERR_LIB, "conv2d: a reorder asks for a scratchpad");
  } else if (sz > 0) {
    if (dnnl_memory_create(scratchpad, md, eng, DNNL_MEMORY_NONE) != dnnl_success)
      rc = MT_ERR(MT_ERR_LIB, "conv2d: cannot create a scratchpad memory");
    *scratch_off = *bytes;
    *bytes += round64(sz);
  }
  if (!rc && dnnl_primitive_create(prim, pd) != dnnl_success)
    rc = MT_ERR(MT_ERR_LIB, "conv2d: dnnl_primitive_create failed");
  dnnl_primitive_desc_destroy(pd);
  return rc;
}

/* Adds argument `arg` to op: the user's plain md and the md the primitive
 * wants; places an internal buffer in the set's arena layout and creates the
 * reorder when they differ (always for ARG_OUT_ADD, whose reorder carries
 * the sum post-op). */
int cv_add_arg(cv_op *op, size_t *bytes, int arg, int dir, const dnnl_memory_desc_t *user_md,
               const dnnl_memory_desc_t *want_md, dnnl_engine_t eng) {
  MT_CHECK(op->nargs < CV_MAX_ARGS, MT_ERR_STATE, "conv2d: too many primitive arguments");
  MT_CHECK(want_md, MT_ERR_LIB, "conv2d: no memory descriptor for argument %d", arg);
  cv_arg *a = &op->a[op->nargs++];
  memset(a, 0, sizeof(*a));
  a->arg = arg;
  a->dir = dir;
  DNNL_CALL(dnnl_memory_create(&a->user, user_md, eng, DNNL_MEMORY_NONE));
  if (dir != ARG_OUT_ADD && dnnl_memory_desc_equal(user_md, want_md)) {
    a->mem = a->user;
    return 0;
  }
  DNNL_CALL(dnnl_memory_create(&a->mem, want_md, eng, DNNL_MEMORY_NONE));
  a->off = *bytes;
  *bytes += round64(dnnl_memory_desc_get_size(want_md));
  if (dnnl_memory_desc_equal(user_md, want_md) && user_md->data_type == dnnl_f32) {
    a->add_n = dnnl_memory_desc_get_size(want_md) / sizeof(float);
    return 0;
  }
  dnnl_primitive_attr_t attr;
  MT_CALL(cv_make_attr(&attr, dir == ARG_OUT_ADD, 0));
  dnnl_primitive_desc_t pd;
  dnnl_status_t st =
      dir == ARG_IN ? dnnl_reorder_primitive_desc_create(&pd, user_md, eng, want_md, eng, attr)
                    : dnnl_reorder_primitive_desc_create(&pd, want_md, eng, user_md, eng, attr);
  dnnl_primitive_attr_destroy(attr);
  MT_CHECK(st == dnnl_success, MT_ERR_LIB, "conv2d: no reorder for argument %d (status %d)", arg,
           (int)st);
  return cv_make_prim(&a->reorder, NULL, NULL, bytes, pd, eng);
}

void cv_op_free(cv_op *op) {
  for (int i = 0; i < op->nargs; i++) {
    cv_arg *a = &op->a[i];
    if (a->reorder) dnnl_primitive_destroy(a->reorder);
    if (a->mem && a->mem != a->user && !a->borrowed) dnnl_memory_destroy(a->mem);
    if (a->user) dnnl_memory_destroy(a->user);
  }
  if (op->prim) dnnl_primitive_destroy(op->prim);
  if (op->scratchpad) dnnl_memory_destroy(op->scratchpad);
  memset(op, 0, sizeof(*op));
}

/* Points the internal buffers and the scratchpad of op into the arena. */
int cv_op_place(cv_op *op, char *arena) {
  for (int i = 0; i < op->nargs; i++) {
    cv_arg *a = &op->a[i];
    if (a->mem != a->user && !a->borrowed)
      DNNL_CALL(dnnl_memory_set_data_handle(a->mem, arena + a->off));
  }
  if (op->scratchpad)
    DNNL_CALL(dnnl_memory_set_data_handle(op->scratchpad, arena + op->scratch_off));
  return 0;
}

/* Points argument `arg` of op at the user's buffer p. */
int cv_op_bind(cv_op *op, int arg, const void *p) {
  for (int i = 0; i < op->nargs; i++)
    if (op->a[i].arg == arg) {
      DNNL_CALL(dnnl_memory_set_data_handle(op->a[i].user, (void *)p));
      return 0;
    }
  return MT_ERR(MT_ERR_STATE, "conv2d: argument %d not bound", arg);
}

/* Copies the user's buffer of an input argument into its internal one. */
int cv_arg_reorder_in(cv_arg *a, dnnl_stream_t stream) {
  dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->mem}};
  DNNL_CALL(dnnl_primitive_execute(a->reorder, stream, 2, r));
  return 0;
}

/* Reorders inputs in, runs the primitive, reorders outputs out. */
int cv_op_run(cv_op *op, dnnl_stream_t stream) {
  dnnl_exec_arg_t args[CV_MAX_ARGS + 1];
  int n = 0;
  for (int i = 0; i < op->nargs; i++) {
    cv_arg *a = &op->a[i];
    if (a->reorder && !a->skip && a->dir == ARG_IN) MT_CALL(cv_arg_reorder_in(a, stream));
    args[n].arg = a->arg;
    args[n++].memory = a->mem;
  }
  if (op->scratchpad) {
    args[n].arg = DNNL_ARG_SCRATCHPAD;
    args[n++].memory = op->scratchpad;
  }
  DNNL_CALL(dnnl_primitive_execute(op->prim, stream, n, args));
  for (int i = 0; i < op->nargs; i++) {
    cv_arg *a = &op->a[i];
    if (a->reorder && !a->skip && a->dir != ARG_IN) {
      dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->mem}, {DNNL_ARG_TO, a->user}};
      DNNL_CALL(dnnl_primitive_execute(a->reorder, stream, 2, r));
    }
  }
  DNNL_CALL(dnnl_stream_wait(stream));
  for (int i = 0; i < op->nargs; i++) {
    cv_arg *a = &op->a[i];
    if (!a->add_n || a->skip) continue;
    void *u, *t;
    DNNL_CALL(dnnl_memory_get_data_handle(a->user, &u));
    DNNL_CALL(dnnl_memory_get_data_handle(a->mem, &t));
    float *restrict dst = u;
    const float *restrict src = t;
    const int64_t len = (int64_t)a->add_n;
#pragma omp parallel for simd schedule(static) if (parallel : len > 65536)
    for (int64_t k = 0; k < len; k++) dst[k] += src[k];
  }
  return 0;
}

/* Memory descriptor of a tensor in a fixed plain layout or "any". */
int cv_md_init(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
               dnnl_format_tag_t tag, dnnl_data_type_t dt) {
  DNNL_CALL(dnnl_memory_desc_init_by_tag(md, ndims, dims, dt, tag));
  return 0;
}
