/* A record of the GEMMs one training step runs, by shape (-log_gemm_shapes):
 * what bench/gemm_shapes.c times to give the step's GEMM limit. mt_gemm
 * and mt_gemm_lowp record every float GEMM they are given; the
 * convolutions (oneDNN primitives, not mt_gemm) record each pass as the
 * GEMM an im2col convolution would run, so a CNN has a limit too:
 *   forward          Y(B*OH*OW, OC/G) = col(B*OH*OW, IC/G*KH*KW) W^T   'N','T'
 *   backward data    dcol(B*OH*OW, IC/G*KH*KW) = dY(B*OH*OW, OC/G) W   'N','N'
 *   backward weights dW(OC/G, IC/G*KH*KW) += dY^T col                   'T','N'
 * each G times (G groups). Off unless mt_gemm_log_begin was called; the
 * check in the GEMMs is one relaxed atomic load. Thread-safe: the threads
 * of -thread_split batch record into the same table. */
#ifndef MT_NN_GEMM_LOG_H
#define MT_NN_GEMM_LOG_H

#include "nn/precision.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  MT_GEMM_LOG_GEMM = 0,       /* an mt_gemm / mt_gemm_lowp call             */
  MT_GEMM_LOG_CONV_FWD,       /* a convolution's forward, as im2col GEMM    */
  MT_GEMM_LOG_CONV_BWD_DATA,  /* its input gradient                         */
  MT_GEMM_LOG_CONV_BWD_W,     /* its weight gradient                        */
  MT_GEMM_LOG_NKINDS
} mt_gemm_log_kind;

extern atomic_int mt_gemm_log_on_;
static inline int mt_gemm_log_active(void) {
  return atomic_load_explicit(&mt_gemm_log_on_, memory_order_relaxed);
}

/* Adds count calls of this shape (in the kernel's precision p) to the
 * record; equal shapes share one entry, in first-seen order. Never fails:
 * an allocation failure marks the record, and mt_gemm_log_write reports it. */
void mt_gemm_log_record(mt_gemm_log_kind kind, char ta, char tb, int64_t M, int64_t N, int64_t K,
                        float beta, mt_precision p, int64_t count);

/* Empties the record and starts recording; mt_gemm_log_end stops. */
void mt_gemm_log_begin(void);
void mt_gemm_log_end(void);

/* The record as text to f: the lines of header (each given a leading "# "),
 * then one line per shape
 *   KIND TA TB M N K BETA PRECISION COUNT
 * (KIND gemm, conv_fwd, conv_bwd_data or conv_bwd_w). MT_ERR_MEM when a
 * shape could not be recorded, MT_ERR_STATE when nothing was. */
int mt_gemm_log_write(FILE *f, const char *header);

/* Entries recorded (for tests). */
int mt_gemm_log_count(void);

#endif
