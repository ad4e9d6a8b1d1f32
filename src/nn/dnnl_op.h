/* The oneDNN operations behind the convolutions (conv.c): a primitive with
 * its arguments, each the user's plain buffer or an internal one in the
 * primitive's own layout with the reorder between them, placed in one
 * arena. Split out of conv.c, which makes the sets of operations. */
#ifndef MT_NN_DNNL_OP_H
#define MT_NN_DNNL_OP_H

#include "mpitrain/mpitrain.h"

#include <dnnl.h>
#include <stddef.h>

#define DNNL_CALL(expr)                                                                     \
  do {                                                                                      \
    dnnl_status_t dnnl_s_ = (expr);                                                         \
    MT_CHECK(dnnl_s_ == dnnl_success, MT_ERR_LIB, "%s failed with oneDNN status %d", #expr, \
             (int)dnnl_s_);                                                                 \
  } while (0)

enum { ARG_IN, ARG_OUT, ARG_OUT_ADD }; /* data direction of an argument */
#define CV_MAX_ARGS 4

/* One argument of a primitive. */
typedef struct {
  int arg;                  /* DNNL_ARG_*                                    */
  int dir;                  /* ARG_IN, ARG_OUT or ARG_OUT_ADD                */
  dnnl_memory_t user;       /* the caller's layout; handle set per call      */
  dnnl_memory_t mem;        /* what the primitive sees: user or internal     */
  dnnl_primitive_t reorder; /* user <-> internal, NULL when mem is user      */
  size_t off;               /* internal buffer: its offset in the arena      */
  int skip;                 /* this call: leave the user's buffer alone      */
  int borrowed;             /* mem belongs to another operation's argument   */
  /* ARG_OUT_ADD already in the user's layout (fp32): the internal buffer is
   * added into the user's by a loop, not by a reorder with a sum post-op
   * (oneDNN 2.6 runs that one as its scalar reference reorder) */
  size_t add_n;
} cv_arg;

typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t scratchpad; /* NULL when the primitive needs none          */
  size_t scratch_off;
  int nargs;
  cv_arg a[CV_MAX_ARGS];
} cv_op;


/* An attribute with the user scratchpad mode and, if accumulate, a sum
 * post-op (dst = op(src) + dst), if relu a ReLU post-op (dst = max(op, 0)). */
int cv_make_attr(dnnl_primitive_attr_t *attr, int accumulate, int relu);

/* A primitive from its descriptor, with its scratchpad placed in the set's
 * arena layout (*bytes grows); the primitive descriptor is released here.
 * scratchpad NULL: the primitive must need none (reorders). */
int cv_make_prim(dnnl_primitive_t *prim, dnnl_memory_t *scratchpad, size_t *scratch_off,
                 size_t *bytes, dnnl_primitive_desc_t pd, dnnl_engine_t eng);

/* Adds argument `arg` to op: the user's md and the md the primitive
 * wants; places an internal buffer in the set's arena layout and creates the
 * reorder when they differ (ARG_OUT_ADD always has the internal buffer:
 * the reorder carries the sum post-op, or with the same fp32 layout a loop
 * adds it). */
int cv_add_arg(cv_op *op, size_t *bytes, int arg, int dir, const dnnl_memory_desc_t *user_md,
               const dnnl_memory_desc_t *want_md, dnnl_engine_t eng);

void cv_op_free(cv_op *op);

/* Points the internal buffers and the scratchpad of op into the arena. */
int cv_op_place(cv_op *op, char *arena);

/* Points argument `arg` of op at the user's buffer p. */
int cv_op_bind(cv_op *op, int arg, const void *p);

/* Copies the user's buffer of an input argument into its internal one. */
int cv_arg_reorder_in(cv_arg *a, dnnl_stream_t stream);

/* Reorders inputs in, runs the primitive, reorders outputs out. */
int cv_op_run(cv_op *op, dnnl_stream_t stream);

/* Memory descriptor of a tensor in a fixed plain layout or "any". */
int cv_md_init(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
               dnnl_format_tag_t tag, dnnl_data_type_t dt);

#endif
