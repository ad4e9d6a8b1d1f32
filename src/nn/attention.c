/* Causal multi-head self-attention in llm.c's layout, with the per-head
 * products through mt_gemm: q, k, v of head h are (T,hs) matrices with
 * leading dimension 3C inside inp, so no copy is needed. The full (T,T)
 * score matrix is formed (twice the causal work) because one GEMM beats a
 * triangle of scalar dot products by far; the masked half is then zeroed.
 * The (b,h) pairs run in parallel; oneDNN's GEMM runs single-threaded
 * inside a parallel region, and every pair writes its own slices. For
 * float and double (the template attention_t.h; double's products through
 * the BLAS's dgemm). Under a bf16 policy every head's operands are laid out
 * dense in bf16 first (attention_t.h, "dense head operands"). */
#include "nn/fastmath.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MT_TEMPLATE "nn/attention_t.h"
#include "core/real_t.h"
