/* Token and position embeddings (llm.c's encoder) for float and double (the
 * template embed_t.h). */
#include "nn/nn.h"
#include "mpitrain/mpitrain.h"

#define MT_TEMPLATE "nn/embed_t.h"
#include "core/real_t.h"
