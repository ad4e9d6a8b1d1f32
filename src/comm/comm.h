/* The distributed environment: world and node communicators. */
#ifndef MT_COMM_H
#define MT_COMM_H

#include "mpitrain/mpitrain.h"

typedef struct {
  MPI_Comm world; /* a duplicate of MPI_COMM_WORLD owned by mpitrain        */
  MPI_Comm node;  /* ranks sharing memory with this one                    */
  int rank, size;
  int local_rank, local_size; /* within the node                           */
  int nnodes, node_id;
  int node_cores;             /* online cores of this node                 */
} mt_comm;

/* Collective over MPI_COMM_WORLD. */
int mt_comm_create(mt_comm *c);
void mt_comm_destroy(mt_comm *c);
/* Threads per rank: requested if > 0, else the node's cores / its ranks. */
int mt_comm_default_threads(const mt_comm *c, int requested);

/* ------------------------------------------------ small per-rank values */

/* One small value of a rank (sync.c): a count, a time, a host name. Make
 * them with the constructors below. */
typedef enum { MT_VALUE_I64 = 1, MT_VALUE_F64, MT_VALUE_STR } mt_value_type;

#define MT_VALUE_STR_MAX 64 /* string bytes with the NUL; longer is cut   */

typedef struct {
  int type; /* mt_value_type                                               */
  int64_t i;
  double f;
  char s[MT_VALUE_STR_MAX];
} mt_value;

mt_value mt_value_i64(int64_t v);
mt_value mt_value_f64(double v);
mt_value mt_value_str(const char *v); /* NULL is ""; cut to MT_VALUE_STR_MAX-1 */

/* Gathers n values of every rank of comm to every rank (the counterpart of
 * aitoolbox's mp_sync): all[r * n + k] receives rank r's mine[k]; all has
 * room for size * n values and is written on every rank. Collective, one
 * small all-reduce and one all-gather of a derived MPI datatype (so it
 * holds across architectures). Every rank passes the same n and the same
 * types in the same order: anything else fails on every rank with
 * MT_ERR_ARG naming the first rank and position at fault (never a hang).
 * Meant for metrics and summaries, not for bulk data. */
int mt_allgather_values(MPI_Comm comm, const mt_value *mine, int n, mt_value *all);

#endif
